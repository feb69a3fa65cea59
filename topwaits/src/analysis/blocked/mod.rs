//! `topwaits blocked`: the threads blocked right now, read from `/proc` without
//! stopping or tracing anything: for each, how long it has waited (estimated),
//! where (kernel and user stacks), in what syscall, and on what (see
//! [`classify`]); then the wait-for graph of lock owners with its chains and
//! deadlocks (see [`crate::analysis::waitfor`]); and a Go program's parked
//! goroutines (see [`goroutines`]).

pub mod classify;
pub mod goroutines;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::Result;

use crate::analysis::snapshot::{RegsReader, Snapshot, Snapshotter};
use crate::analysis::waitfor::{self, Edge, Graph};
use crate::model::{Frame, Stack};
use crate::settings::BlockedConfig;
use crate::stacks::frame_scan::Memory as _;
use crate::stacks::hotspot::monitors::MonitorWait;
use crate::stacks::symbolize::{cut_frame, frame_at, lookup_addr, BlazeSymbolizer, Symbolizer};
use crate::sys::memory::ProcessMemory;
use crate::sys::procfs;
use crate::sys::thread::{self, Syscall, SyscallState};
use crate::util::clock::{monotonic_now, ClockPair};
use classify::{SyscallInfo, WaitOn};
use topwaits_common::is_runtime_frame;

/// One blocked thread, symbolized and classified.
#[derive(Clone, Debug)]
pub struct Blocked {
    pub snap: Snapshot,
    pub kernel: Stack,
    pub user: Stack,
    /// The syscall, with its name where known.
    pub syscall: Option<(Option<SyscallInfo>, Syscall)>,
    pub wait: WaitOn,
}

impl Blocked {
    /// How long it has been blocked at `now`, where the start could be estimated.
    pub fn blocked_ns(&self, now: u64) -> Option<u64> {
        self.snap.since.map(|s| now.saturating_sub(s))
    }
}

/// A thread named in the graph that is not listed as blocked: an owner that runs,
/// or lives outside the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Other {
    pub tgid: u32,
    pub tid: u32,
    pub comm: Vec<u8>,
    pub state: char,
}

/// Everything `topwaits blocked` reports.
#[derive(Clone, Debug)]
pub struct Report {
    pub clock: ClockPair,
    pub taken_mono: u64,
    pub utc_offset_s: i32,
    pub target: String,
    pub threads: Vec<Blocked>,
    /// Owners that are not in `threads`, by tid.
    pub others: BTreeMap<u32, Other>,
    pub edges: Vec<Edge>,
    pub graph: Graph,
    /// The Go programs of the target (with `-S`, as with `-p`/`-t`), and
    /// their goroutines parked now, grouped.
    pub go: Vec<goroutines::GoProcess>,
    pub goroutines: Vec<goroutines::Group>,
    pub warnings: Vec<String>,
}

impl Report {
    /// A listed thread by tid.
    pub fn thread(&self, tid: u32) -> Option<&Blocked> {
        self.threads.iter().find(|t| t.snap.tid == tid)
    }

    /// What a thread is doing, for the root of a chain.
    pub fn doing(&self, tid: u32) -> String {
        if let Some(t) = self.thread(tid) {
            return format!("blocked ({}) on {}", t.snap.state, t.wait.describe());
        }
        match self.others.get(&tid) {
            Some(o) if o.state == 'R' => "running".to_string(),
            Some(o) => format!("in state {}", o.state),
            None => "gone".to_string(),
        }
    }

    /// `comm` of any thread the report knows.
    pub fn comm(&self, tid: u32) -> Vec<u8> {
        self.thread(tid)
            .map(|t| t.snap.comm.clone())
            .or_else(|| self.others.get(&tid).map(|o| o.comm.clone()))
            .unwrap_or_default()
    }
}

/// Symbolizes the user stacks of the snapshots, one batch per process (and one
/// for its Python frames).
fn user_stacks(snaps: &[Snapshot], sym: &mut dyn Symbolizer) -> Vec<Stack> {
    let mut per_proc: BTreeMap<u32, (Vec<u64>, Vec<u64>)> = BTreeMap::new();
    for s in snaps {
        let batch = per_proc.entry(s.tgid).or_default();
        for (i, &a) in s.user.iter().enumerate().filter(|(_, &a)| cut_frame(a).is_none()) {
            match is_runtime_frame(a) {
                true => batch.1.push(a),
                false => batch.0.push(lookup_addr(i, a)),
            }
        }
    }
    let mut frames: HashMap<(u32, u64), Frame> = HashMap::new();
    for (tgid, (mut addrs, mut words)) in per_proc {
        for list in [&mut addrs, &mut words] {
            list.sort_unstable();
            list.dedup();
        }
        if !addrs.is_empty() {
            frames.extend(sym.user(tgid, &addrs).into_iter().map(|f| ((tgid, f.addr), f)));
        }
        if !words.is_empty() {
            frames.extend(
                words.iter().copied().zip(sym.python(tgid, &words)).map(|(w, f)| ((tgid, w), f)),
            );
        }
    }
    snaps
        .iter()
        .map(|s| {
            if s.user.is_empty() {
                return Stack::None;
            }
            // The walk's cut mark, if any, is its last word: shown as the
            // frame that says why. A Python frame's word is named as it is.
            let frame = |(i, &a): (usize, &u64)| {
                cut_frame(a).unwrap_or_else(|| match is_runtime_frame(a) {
                    true => frames.get(&(s.tgid, a)).cloned().unwrap_or_else(|| Frame::unknown(a)),
                    false => frame_at(i, a, frames.get(&(s.tgid, lookup_addr(i, a)))),
                })
            };
            Stack::of(s.user.iter().enumerate().map(frame).collect())
        })
        .collect()
}

/// Adds what each socket is (protocol, addresses, state, or path) to the fd targets
/// of the waits, from each network namespace's tables, read once per namespace
/// and only as far as needed: each read of a TCP table walks the kernel's whole
/// TCP hash, milliseconds on a machine with much memory.
fn annotate_sockets(threads: &mut [Blocked]) {
    let mut sockets = crate::sys::net::ByNamespace::default();
    for t in threads {
        let tgid = t.snap.tgid;
        let targets: Vec<&mut String> = match &mut t.wait {
            WaitOn::Fd { target, .. } => vec![target],
            WaitOn::Poll { fds, .. } => fds.iter_mut().map(|(_, target)| target).collect(),
            _ => continue,
        };
        for target in targets {
            let Some(("socket", inode)) = thread::special_inode(target) else { continue };
            if let Some(what) = sockets.describe(tgid, inode) {
                target.push_str(&format!(" {what}"));
            }
        }
    }
}

/// A wait on several fds, each named by what it is.
fn poll_wait(tgid: u32, via: &'static str, fds: Vec<u64>) -> WaitOn {
    let more = fds.len().saturating_sub(classify::MAX_POLL_FDS);
    let fds = fds
        .into_iter()
        .take(classify::MAX_POLL_FDS)
        .map(|fd| (fd, thread::fd_target(tgid, fd).unwrap_or_else(|| "closed".to_string())))
        .collect();
    WaitOn::Poll { via, fds, more }
}

/// Classifies one thread's wait.
fn classify_wait(s: &Snapshot, user: &Stack) -> (Option<(Option<SyscallInfo>, Syscall)>, WaitOn) {
    let call = match &s.syscall {
        Ok(SyscallState::In(c)) => c.clone(),
        Ok(SyscallState::Running) => return (None, WaitOn::NoSyscall("running".into())),
        Ok(SyscallState::Blocked { .. }) => {
            let at = s.kernel.as_ref().ok().and_then(|k| k.first()).map(|f| f.name().to_string());
            return (
                None,
                WaitOn::NoSyscall(format!(
                    "not in a syscall (in the kernel at {})",
                    at.as_deref().unwrap_or("?")
                )),
            );
        }
        Err(e) => return (None, WaitOn::NoSyscall(format!("syscall unknown: {e}"))),
    };
    let info = classify::syscall_info(call.nr);
    let wait = match info {
        Some(i) if i.name == "futex" => {
            let names: Vec<&str> =
                user.frames().iter().filter_map(|f| f.symbol.as_deref()).collect();
            let mem = ProcessMemory { pid: s.tgid };
            let read_u32 = |addr: u64| {
                let mut b = [0u8; 4];
                (mem.read(addr, &mut b) == 4).then(|| u32::from_ne_bytes(b))
            };
            let live = |tid: u32| std::path::Path::new(&format!("/proc/{tid}")).exists();
            let sibling =
                |tid: u32| std::path::Path::new(&format!("/proc/{}/task/{tid}", s.tgid)).exists();
            classify::futex(
                &call,
                s.tid,
                &names,
                &read_u32,
                &classify::Threads { live: &live, sibling: &sibling },
            )
        }
        Some(SyscallInfo { fd_arg: Some(a), name }) => {
            let fd = call.args[a];
            match thread::fd_target(s.tgid, fd) {
                Some(t) if t == "anon_inode:[eventpoll]" => {
                    let set = std::fs::read_to_string(format!("/proc/{}/fdinfo/{fd}", s.tgid))
                        .unwrap_or_default();
                    poll_wait(s.tgid, name, classify::epoll_fds(&set))
                }
                Some(target) => WaitOn::Fd { fd, target, holders: Vec::new() },
                None => classify::by_syscall(info, call.nr),
            }
        }
        _ => match classify::by_syscall(info, call.nr) {
            WaitOn::Poll { via, .. } => {
                // poll(fds, nfds, ...): read the pollfd array.
                let n = (call.args[1] as usize).min(classify::MAX_POLL_FDS * 4);
                let mut bytes = vec![0u8; n * 8];
                let got = ProcessMemory { pid: s.tgid }.read(call.args[0], &mut bytes);
                bytes.truncate(got);
                poll_wait(s.tgid, via, classify::pollfds(&bytes))
            }
            other => other,
        },
    };
    // In D state outside an fd, the kernel function it sleeps in says more (I/O,
    // a filesystem lock, ...) than the syscall alone.
    let wait = match wait {
        WaitOn::Other(what) if s.state == 'D' => {
            match s.kernel.as_ref().ok().and_then(|k| k.first()) {
                Some(f) => WaitOn::Other(format!("{what}, in the kernel at {}", f.name())),
                None => WaitOn::Other(what),
            }
        }
        other => other,
    };
    (Some((info, call)), wait)
}

/// The monitor each Java thread of the JVMs among `tgids` waits for, read
/// right after the snapshots so that owners match what the stacks show.
fn java_monitors(tgids: &BTreeSet<u32>) -> HashMap<u32, MonitorWait> {
    let mut jvms = crate::stacks::hotspot::Jvms::default();
    let mut out = HashMap::new();
    for &tgid in tgids {
        if let Some(waits) = jvms.monitor_waits(tgid, &procfs::maps_of(tgid)) {
            out.extend(waits);
        }
    }
    out
}

/// Pipes and sockets: who else holds them (other processes than the waiter's).
fn add_holders(threads: &mut [Blocked]) {
    let inodes: BTreeSet<u64> = threads
        .iter()
        .filter_map(|t| match &t.wait {
            WaitOn::Fd { target, .. } => thread::special_inode(target).map(|(_, i)| i),
            _ => None,
        })
        .collect();
    let holders = thread::holders_of(&inodes);
    for t in threads {
        if let WaitOn::Fd { target, holders: h, .. } = &mut t.wait {
            if let Some((_, inode)) = thread::special_inode(target) {
                *h = holders
                    .get(&inode)
                    .map(|v| v.iter().filter(|(p, ..)| *p != t.snap.tgid).cloned().collect())
                    .unwrap_or_default();
            }
        }
    }
}

/// The owners of the locks waited on that are not listed themselves (running,
/// or in a state not asked for).
fn unlisted_owners(edges: &[Edge], listed: &BTreeSet<u32>) -> BTreeMap<u32, Other> {
    let mut others = BTreeMap::new();
    for e in edges {
        if listed.contains(&e.owner) || others.contains_key(&e.owner) {
            continue;
        }
        if let Some(tgid) = procfs::tgid_of(e.owner) {
            if let Some(st) = thread::stat(tgid, e.owner) {
                others
                    .insert(e.owner, Other { tgid, tid: e.owner, comm: st.comm, state: st.state });
            }
        }
    }
    others
}

/// Takes the snapshot the options ask for; `regs` reads the threads'
/// registers (their frame pointers) with the task iterator, where it can.
pub fn collect(
    config: &BlockedConfig,
    target: String,
    regs: Option<RegsReader>,
    cache: Option<crate::stacks::cfi::cache::Cache>,
) -> Result<Report> {
    let clock = ClockPair::sample();
    let me = std::process::id();
    let mut snapper = Snapshotter::default();
    if let Some(read) = regs {
        snapper.set_regs_reader(read);
    }
    snapper.set_cache(cache);
    let mut warnings = Vec::new();
    let mut snaps = Vec::new();
    let mut tgids = BTreeSet::new();
    for (tgid, tid) in crate::analysis::snapshot::candidates(&config.threads) {
        if tgid == me {
            continue;
        }
        tgids.insert(tgid);
        let wanted = |st: char| st == 'D' || (config.sleeping && st == 'S');
        if !thread::stat(tgid, tid).is_some_and(|st| wanted(st.state)) {
            continue;
        }
        // Threads that exit in between are simply gone.
        if let Some(s) = snapper.take(tgid, tid).filter(|s| wanted(s.state)) {
            snaps.push(s);
        }
    }
    let taken_mono = monotonic_now();
    let monitors = java_monitors(&tgids);
    if snaps.iter().any(|s| s.kernel.is_err()) {
        warnings
            .push("some kernel stacks could not be read (/proc/TID/stack needs root)".to_string());
    }
    let mut sym = BlazeSymbolizer::default();
    let users = user_stacks(&snaps, &mut sym);
    let (go, goroutines) = if config.sleeping {
        goroutines::collect(&tgids, &mut sym, &mut warnings)
    } else {
        Default::default()
    };
    let mut threads: Vec<Blocked> = snaps
        .into_iter()
        .zip(users)
        .map(|(snap, user)| {
            let (syscall, wait) = classify_wait(&snap, &user);
            let kernel = match &snap.kernel {
                Ok(f) => Stack::of(f.clone()),
                Err(_) => Stack::Missing,
            };
            Blocked { snap, kernel, user, syscall, wait }
        })
        .collect();
    add_holders(&mut threads);
    // JVM threads waiting on a monitor: which monitor, and who owns it, so
    // that a Java deadlock is found as a C one is.
    for t in threads.iter_mut() {
        if let Some(m) = monitors.get(&t.snap.tid) {
            classify::java_monitor(&mut t.wait, m);
        }
    }
    annotate_sockets(&mut threads);
    // Owner edges, and the owners that are not listed.
    let edges: Vec<Edge> = threads
        .iter()
        .filter_map(|t| match &t.wait {
            WaitOn::Futex { owner: Some(o), .. } => {
                Some(Edge { waiter: t.snap.tid, owner: *o, lock: t.wait.lock_name() })
            }
            _ => None,
        })
        .collect();
    let listed: BTreeSet<u32> = threads.iter().map(|t| t.snap.tid).collect();
    let others = unlisted_owners(&edges, &listed);
    let alive: BTreeSet<u32> = listed.iter().chain(others.keys()).copied().collect();
    let graph = waitfor::analyze(&edges, &alive);
    threads.sort_by_key(|t| (t.snap.since.unwrap_or(u64::MAX), t.snap.tid));
    Ok(Report {
        clock,
        taken_mono,
        utc_offset_s: crate::util::clock::local_offset_s(clock.wall(taken_mono)),
        target,
        threads,
        others,
        edges,
        graph,
        go,
        goroutines,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_d_state_wait_names_the_kernel_function_it_sleeps_in() {
        let nr = classify::syscall_info_by_name("fsync").expect("fsync is in the table");
        let snap = Snapshot {
            tgid: u32::MAX - 1, // no such process: its fd cannot be read
            tid: u32::MAX - 1,
            comm: b"db".to_vec(),
            state: 'D',
            flags: 0,
            since: None,
            cpu: 0,
            kernel: Ok(vec![Frame {
                addr: 0,
                symbol: Some("folio_wait_bit_common".into()),
                module: None,
                offset: Some(0x1c),
            }]),
            user: vec![],
            syscall: Ok(SyscallState::In(Syscall { nr, args: [9, 0, 0, 0, 0, 0], sp: 0, pc: 0 })),
        };
        let (call, wait) = classify_wait(&snap, &Stack::None);
        assert_eq!(call.and_then(|(i, _)| i).map(|i| i.name), Some("fsync"));
        assert_eq!(wait, WaitOn::Other("in fsync, in the kernel at folio_wait_bit_common".into()));
        let sleeping = Snapshot { state: 'S', ..snap };
        assert_eq!(classify_wait(&sleeping, &Stack::None).1, WaitOn::Other("in fsync".into()));
    }
}
