//! The goroutines parked right now in the Go processes of `topwaits blocked`'s
//! target, grouped by what they wait on and where: a Go program's threads only
//! sleep in its scheduler, and what its code waits for is in its goroutines.

use std::collections::{BTreeMap, BTreeSet};

use crate::analysis::what::goroutine;
use crate::model::{Frame, Stack};
use crate::stacks::golang::parked::{self, Parked};
use crate::stacks::symbolize::{frame_at, lookup_addr, Symbolizer};
use crate::sys::memory::ProcessMemory;

/// Goroutines parked alike: the same wait, at the same stack.
#[derive(Clone, Debug)]
pub struct Group {
    pub tgid: u32,
    /// What they wait on (`sync.Mutex`, `chan receive`, `sleep`, ...).
    pub waits_on: String,
    pub goids: Vec<u64>,
    pub user: Stack,
}

/// One Go process's goroutines at the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoProcess {
    pub tgid: u32,
    pub comm: Vec<u8>,
    pub version: Option<String>,
    /// Goroutines the runtime lists, dead ones included.
    pub listed: usize,
    pub parked: usize,
    /// Of them, the runtime's own (every frame in `runtime.`), not grouped.
    pub runtime_own: usize,
}

/// The parked goroutines of each process in `tgids` that is a Go program,
/// grouped, the most goroutines first; a process that cannot be read says why
/// in `warnings`.
pub fn collect(
    tgids: &BTreeSet<u32>,
    sym: &mut dyn Symbolizer,
    warnings: &mut Vec<String>,
) -> (Vec<GoProcess>, Vec<Group>) {
    let mut procs = Vec::new();
    let mut groups = Vec::new();
    for &tgid in tgids {
        let read = parked::read(tgid, &ProcessMemory { pid: tgid });
        let gs = match read {
            Ok(Some(gs)) => gs,
            Ok(None) => continue,
            Err(e) => {
                let e = crate::util::stderr::error_line(&e);
                warnings.push(format!("pid {tgid}'s goroutines could not be read: {e}"));
                continue;
            }
        };
        let comm = crate::sys::thread::stat(tgid, tgid).map(|s| s.comm).unwrap_or_default();
        let (mine, own) = grouped(tgid, &gs.parked, sym);
        procs.push(GoProcess {
            tgid,
            comm,
            version: gs.version,
            listed: gs.listed,
            parked: gs.parked.len(),
            runtime_own: own,
        });
        groups.extend(mine);
    }
    groups.sort_by_key(|g| (std::cmp::Reverse(g.goids.len()), g.tgid, g.goids[0]));
    (procs, groups)
}

/// One process's parked goroutines named and grouped, and how many were the
/// runtime's own.
fn grouped(tgid: u32, parked: &[Parked], sym: &mut dyn Symbolizer) -> (Vec<Group>, usize) {
    let mut addrs: Vec<u64> = parked
        .iter()
        .flat_map(|p| p.pcs.iter().enumerate().map(|(i, &a)| lookup_addr(i, a)))
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    let named: BTreeMap<u64, Frame> =
        sym.user(tgid, &addrs).into_iter().map(|f| (f.addr, f)).collect();
    let mut groups: BTreeMap<(String, Vec<String>), Group> = BTreeMap::new();
    let mut own = 0;
    for p in parked {
        let frames: Vec<Frame> = p
            .pcs
            .iter()
            .enumerate()
            .map(|(i, &a)| frame_at(i, a, named.get(&lookup_addr(i, a))))
            .collect();
        let names: Vec<String> = frames.iter().map(|f| f.name().into_owned()).collect();
        if names.iter().all(|n| n.starts_with("runtime.")) {
            own += 1;
            continue;
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let waits_on = goroutine(&p.reason, &refs).short();
        groups
            .entry((waits_on.clone(), names))
            .or_insert_with(|| Group { tgid, waits_on, goids: Vec::new(), user: Stack::of(frames) })
            .goids
            .push(p.goid);
    }
    let mut groups: Vec<Group> = groups.into_values().collect();
    for g in &mut groups {
        g.goids.sort_unstable();
    }
    (groups, own)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names each address by a table.
    struct Table(Vec<(u64, &'static str)>);

    impl Symbolizer for Table {
        fn kernel(&mut self, addrs: &[u64]) -> Vec<Frame> {
            addrs.iter().map(|&a| Frame::unknown(a)).collect()
        }
        fn user(&mut self, _tgid: u32, addrs: &[u64]) -> Vec<Frame> {
            addrs
                .iter()
                .map(|&a| match self.0.iter().find(|(x, _)| *x == a) {
                    Some((_, n)) => Frame { symbol: Some((*n).into()), ..Frame::unknown(a) },
                    None => Frame::unknown(a),
                })
                .collect()
        }
    }

    #[test]
    fn goroutines_group_by_wait_and_stack_and_the_runtimes_own_are_counted_apart() {
        // Return addresses are named at the address before them.
        let mut sym = Table(vec![
            (0x10, "runtime.gopark"),
            (0x1f, "runtime.semacquire1"),
            (0x2f, "sync.(*Mutex).lockSlow"),
            (0x3f, "main.handle"),
            (0x4f, "runtime.chanrecv"),
            (0x5f, "runtime.bgsweep"),
        ]);
        let p = |goid, reason: &str, pcs: &[u64]| Parked {
            goid,
            reason: reason.to_string(),
            pcs: pcs.to_vec(),
        };
        let parked = [
            p(7, "semacquire", &[0x10, 0x20, 0x30, 0x40]),
            p(9, "semacquire", &[0x10, 0x20, 0x30, 0x40]),
            p(8, "chan receive", &[0x10, 0x50, 0x40]),
            p(2, "GC sweep wait", &[0x10, 0x60]),
        ];
        let (groups, own) = grouped(42, &parked, &mut sym);
        assert_eq!(own, 1);
        let mutex = groups.iter().find(|g| g.waits_on == "sync.Mutex").expect("a mutex group");
        assert_eq!(mutex.goids, vec![7, 9]);
        assert_eq!(mutex.user.frames()[2].name(), "sync.(*Mutex).lockSlow");
        let chan = groups.iter().find(|g| g.waits_on == "chan receive").expect("a channel group");
        assert_eq!(chan.goids, vec![8]);
        assert_eq!(groups.len(), 2);
    }
}
