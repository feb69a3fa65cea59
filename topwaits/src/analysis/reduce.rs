//! Merging symbolized records: records identical in everything a report shows are
//! one record, and `--by process` / `--by comm` group threads. Pure; no I/O.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::util::fasthash::{FastMap, FastSet};

use crate::model::{Frame, Hop, Record, Report, Stack, TraceInfo, WakeKind};
pub use crate::settings::By;

/// A stack as the reports print it (each frame's best name), as a 128-bit
/// fingerprint: no string per frame is built, and stacks shared by records (one
/// `Arc` per stack id) are hashed once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StackKey {
    Frames(u64, u64),
    None,
    Missing,
}

/// Fingerprints of the stacks seen so far, by the address of their frames, and
/// digests of the frames seen so far, by theirs: frames are shared between stacks,
/// so each distinct frame's name is hashed once.
#[derive(Default)]
pub struct Fingerprints {
    stacks: FastMap<usize, StackKey>,
    frames: FastMap<usize, [u64; 2]>,
}

impl Fingerprints {
    /// The stack's fingerprint: equal for stacks every view names alike.
    pub fn of(&mut self, s: &Stack) -> StackKey {
        match s {
            Stack::Frames(f) => match self.stacks.get(&(f.as_ptr() as usize)) {
                Some(&k) => k,
                None => {
                    let k = self.fingerprint(f);
                    self.stacks.insert(f.as_ptr() as usize, k);
                    k
                }
            },
            Stack::None => StackKey::None,
            Stack::Missing => StackKey::Missing,
        }
    }

    /// Hashes the frames' digests in order, twice with different seeds.
    fn fingerprint(&mut self, frames: &[Arc<Frame>]) -> StackKey {
        let mut halves = [0u64; 2].map(|_| std::collections::hash_map::DefaultHasher::new());
        for (seed, h) in halves.iter_mut().enumerate() {
            (seed, frames.len()).hash(h);
        }
        for f in frames {
            let digest =
                *self.frames.entry(Arc::as_ptr(f) as usize).or_insert_with(|| frame_digest(f));
            for (h, d) in halves.iter_mut().zip(digest) {
                h.write_u64(d);
            }
        }
        StackKey::Frames(halves[0].finish(), halves[1].finish())
    }
}

/// Hashes what [`Frame::describe`] prints, twice with different seeds.
fn frame_digest(f: &Frame) -> [u64; 2] {
    [0u8, 1].map(|seed| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        seed.hash(&mut h);
        match (&f.symbol, &f.module) {
            (Some(sym), _) => (0u8, &**sym).hash(&mut h),
            (None, Some(m)) => (1u8, &**m, f.offset).hash(&mut h),
            (None, None) => 2u8.hash(&mut h),
        }
        h.finish()
    })
}

/// A waker as the reports show it. An interrupt is named by its handler's stack
/// alone: whichever task it happened to hit is no part of it.
#[derive(Clone, PartialEq, Eq, Hash)]
struct HopKey {
    ids: Option<(u32, u32, Vec<u8>)>,
    kernel: StackKey,
    user: StackKey,
}

fn hop_key(h: &Hop, fp: &mut Fingerprints) -> HopKey {
    HopKey {
        ids: (!h.interrupt).then(|| (h.tgid, h.tid, h.comm.clone())),
        kernel: fp.of(&h.kernel),
        user: fp.of(&h.user),
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    tgid: u32,
    tid: u32,
    comm: Vec<u8>,
    kernel: StackKey,
    user: StackKey,
    wake: Option<(WakeKind, Vec<HopKey>)>,
    /// Waits still in progress stay one record each: each has its own start.
    open: Option<usize>,
    what: Option<crate::model::label::WaitsOn>,
    /// `--by what`: the label alone.
    group: Option<String>,
    /// `--by cgroup`: the cgroup, with the stacks.
    cgroup: Option<std::sync::Arc<str>>,
}

/// What `--by cgroup` groups a record under whose cgroup could not be read (its
/// process exited before topwaits saw it alive).
pub const UNKNOWN_CGROUP: &str = "[cgroup unknown]";

fn key(r: &Record, by: By, index: usize, fp: &mut Fingerprints) -> Key {
    if by == By::What {
        let group = crate::model::label::short_of(r.waits_on.as_ref());
        return Key {
            tgid: 0,
            tid: 0,
            comm: Vec::new(),
            kernel: StackKey::None,
            user: StackKey::None,
            wake: None,
            open: None,
            what: None,
            group: Some(group),
            cgroup: None,
        };
    }
    let (tgid, tid, comm) = match by {
        By::Thread => (r.tgid, r.tid, r.comm.clone()),
        By::Process => (r.tgid, 0, Vec::new()),
        By::Comm | By::What => (0, 0, r.comm.clone()),
        By::Cgroup => (0, 0, Vec::new()),
    };
    Key {
        tgid,
        tid,
        comm,
        kernel: fp.of(&r.kernel),
        user: fp.of(&r.user),
        wake: r.wake.as_ref().map(|w| (w.kind, w.hops.iter().map(|h| hop_key(h, fp)).collect())),
        open: r.open.map(|_| index),
        what: r.waits_on.clone(),
        group: None,
        cgroup: if by == By::Cgroup {
            Some(r.cgroup.clone().unwrap_or_else(|| UNKNOWN_CGROUP.into()))
        } else {
            None
        },
    }
}

/// Adds `r` into `into`: sums add, the longest wait (with its time) wins.
fn absorb(into: &mut Record, r: &Record) {
    into.count += r.count;
    into.total_ns += r.total_ns;
    if (r.max_ns, r.max_end_mono) > (into.max_ns, into.max_end_mono) {
        into.max_ns = r.max_ns;
        into.max_end_mono = r.max_end_mono;
    }
    if let (Some(a), Some(b)) = (into.wake.as_mut(), &r.wake) {
        a.blocked_ns += b.blocked_ns;
        a.runq_ns += b.runq_ns;
        a.max_blocked_ns = a.max_blocked_ns.max(b.max_blocked_ns);
        a.max_runq_ns = a.max_runq_ns.max(b.max_runq_ns);
    }
    crate::model::ran_on::join(&mut into.ran_on, &r.ran_on);
}

/// The report as `--by` shows it: its records merged per `by`, or none when `by`
/// is per thread (the report already is).
pub fn grouped(report: &Report, by: By) -> Option<Report> {
    (by != By::Thread).then(|| Report {
        info: TraceInfo { by, ..report.info.clone() },
        counters: report.counters,
        records: merge(report.records.clone(), by),
        objects: Default::default(),
        events: report.events.clone(),
        samples: report.samples.clone(),
    })
}

/// Merges records that are the same under `by`, in first-seen order. A merged
/// record keeps the ids and comm of its heaviest thread (the process's main
/// thread for `--by process`, when it is among them) and counts its threads.
pub fn merge(mut records: Vec<Record>, by: By) -> Vec<Record> {
    // Keyed by a 128-bit digest of the key, as stacks are: the keys themselves
    // (labels, comms, hop lists) took 8.7 MiB for 20,000 records. The records
    // are compacted in place, each kept one moved to the next free slot, so
    // that the input and the output are never both in memory.
    let mut slot: FastMap<u128, usize> =
        FastMap::with_capacity_and_hasher(records.len(), Default::default());
    let mut threads: Vec<Threads> = Vec::new();
    let mut weight: Vec<u64> = Vec::new();
    let mut fp = Fingerprints::default();
    let mut kept = 0;
    for i in 0..records.len() {
        let k = digest(&key(&records[i], by, i, &mut fp));
        match slot.get(&k) {
            None => {
                slot.insert(k, kept);
                threads.push(Threads::One(records[i].tid));
                weight.push(records[i].total_ns);
                records.swap(kept, i);
                kept += 1;
            }
            Some(&j) => {
                let (head, tail) = records.split_at_mut(i);
                let (into, r) = (&mut head[j], &tail[0]);
                let leads = match by {
                    By::Process => {
                        (r.tid == r.tgid, r.total_ns) > (into.tid == into.tgid, weight[j])
                    }
                    _ => r.total_ns > weight[j],
                };
                if leads {
                    weight[j] = r.total_ns;
                    (into.tgid, into.tid, into.comm) = (r.tgid, r.tid, r.comm.clone());
                    if by == By::What {
                        // The group shows its heaviest record's stacks and label.
                        (into.kernel, into.user, into.waits_on) =
                            (r.kernel.clone(), r.user.clone(), r.waits_on.clone());
                    }
                }
                threads[j].add(r.tid);
                absorb(into, r);
            }
        }
    }
    records.truncate(kept);
    for (r, t) in records.iter_mut().zip(&threads) {
        r.threads = t.len().max(r.threads as usize) as u32;
        if by == By::What {
            // A group of waits is no single wait still in progress.
            r.open = None;
        }
    }
    records
}

/// The threads a merged record stands for: most stand for one.
enum Threads {
    One(u32),
    Many(FastSet<u32>),
}

impl Threads {
    fn add(&mut self, tid: u32) {
        match self {
            Threads::One(t) if *t == tid => {}
            Threads::One(t) => *self = Threads::Many([*t, tid].into_iter().collect()),
            Threads::Many(set) => {
                set.insert(tid);
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Threads::One(_) => 1,
            Threads::Many(set) => set.len(),
        }
    }
}

/// A key's 128-bit digest, from two differently seeded hashes.
fn digest(k: &Key) -> u128 {
    let [a, b] = [0u8, 1].map(|seed| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        seed.hash(&mut h);
        k.hash(&mut h);
        h.finish()
    });
    (u128::from(a) << 64) | u128::from(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WakeInfo;
    use crate::report::fixtures::{frames, hop, report};

    /// Two records of one thread whose kernel stacks differ only in addresses
    /// (two call sites in one function) are one record.
    #[test]
    fn records_alike_in_every_printed_field_merge_keeping_sum_count_and_max() {
        let mut rs = report().records;
        let mut twin = rs[0].clone();
        twin.kernel = Stack::of(
            rs[0]
                .kernel
                .frames()
                .iter()
                .map(|f| Frame { addr: f.addr + 8, ..(**f).clone() })
                .collect(),
        );
        (twin.count, twin.total_ns, twin.max_ns, twin.max_end_mono) =
            (5, 900_000_000, 600_000_000, 4_200_000_000);
        rs.push(twin);
        let got = merge(rs, By::Thread);
        assert_eq!(got.len(), 2);
        let m = &got[0];
        assert_eq!(
            (m.count, m.total_ns, m.max_ns, m.max_end_mono),
            (15, 1_900_500_000, 600_000_000, 4_200_000_000)
        );
        assert_eq!(m.threads, 1);
    }

    #[test]
    fn by_cgroup_merges_alike_stacks_across_processes_of_one_cgroup_only() {
        let mut rs = report().records;
        let base = rs[0].clone();
        rs.clear();
        for (tgid, cg) in
            [(10, Some("/a")), (11, Some("/a")), (12, Some("/b")), (13, None), (14, None)]
        {
            rs.push(Record { tgid, tid: tgid, cgroup: cg.map(Into::into), ..base.clone() });
        }
        let got = merge(rs, By::Cgroup);
        let groups: Vec<(Option<&str>, u32, u64)> =
            got.iter().map(|r| (r.cgroup.as_deref(), r.threads, r.count)).collect();
        assert_eq!(
            groups,
            [
                (Some("/a"), 2, 2 * base.count),
                (Some("/b"), 1, base.count),
                (None, 2, 2 * base.count)
            ]
        );
    }

    #[test]
    fn different_threads_or_stacks_stay_apart_by_thread() {
        let mut rs = report().records;
        let mut other_thread = rs[0].clone();
        other_thread.tid = 102;
        let mut other_stack = rs[0].clone();
        other_stack.user = frames(&["clock_nanosleep", "elsewhere", "main"]);
        rs.push(other_thread);
        rs.push(other_stack);
        assert_eq!(merge(rs, By::Thread).len(), 4);
    }

    #[test]
    fn by_process_groups_threads_and_names_the_main_thread() {
        let base = report().records[0].clone();
        let rs: Vec<Record> = (0..50u32)
            .map(|i| {
                let mut r = base.clone();
                r.tid = 1000 + i;
                r.comm = format!("worker-{i}").into_bytes();
                r
            })
            .chain(std::iter::once(Record { tid: 100, comm: b"server".to_vec(), ..base.clone() }))
            .collect();
        let got = merge(rs.clone(), By::Process);
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].tgid, got[0].tid, got[0].comm.as_slice(), got[0].threads),
            (100, 100, &b"server"[..], 51)
        );
        assert_eq!(got[0].count, 51 * base.count);
        // By comm, the differently named threads stay apart.
        assert_eq!(merge(rs, By::Comm).len(), 51);
    }

    #[test]
    fn by_comm_groups_across_processes() {
        let base = report().records[0].clone();
        let rs: Vec<Record> =
            (0..3u32).map(|i| Record { tgid: 200 + i, tid: 200 + i, ..base.clone() }).collect();
        let got = merge(rs, By::Comm);
        assert_eq!((got.len(), got[0].threads, got[0].total_ns), (1, 3, 3 * base.total_ns));
    }

    /// Regression: an interrupt waker was told apart by the task it hit, so one
    /// sqlite3 thread gave thousands of near-identical records.
    #[test]
    fn interrupt_wakers_merge_whatever_task_they_hit() {
        let mut r = report().records[0].clone();
        let irq = |tid: u32, comm: &str| {
            let mut h = hop(
                comm,
                tid,
                &["try_to_wake_up", "hrtimer_wakeup", "asm_sysvec_apic_timer_interrupt"],
                &[],
            );
            h.interrupt = true;
            h.user = Stack::None;
            h
        };
        let wake = |h: Hop| WakeInfo {
            kind: WakeKind::Woken,
            hops: vec![h],
            blocked_ns: 10,
            runq_ns: 1,
            max_blocked_ns: 10,
            max_runq_ns: 1,
        };
        r.wake = Some(wake(irq(0, "swapper/0")));
        let mut hit_task = r.clone();
        hit_task.wake = Some(wake(irq(4242, "stress-ng")));
        let mut task_waker = r.clone();
        task_waker.wake = Some(wake(hop("writer", 7, &["try_to_wake_up"], &[])));
        let got = merge(vec![r, hit_task, task_waker], By::Thread);
        assert_eq!(got.len(), 2, "one interrupt record, one task-waker record");
        let w = got[0].wake.as_ref().unwrap();
        assert_eq!((w.blocked_ns, w.runq_ns, w.max_blocked_ns), (20, 2, 10));
    }

    #[test]
    fn open_waits_are_never_merged() {
        let mut r = report().records[0].clone();
        r.open = Some(crate::model::OpenSince::BeforeTrace);
        assert_eq!(merge(vec![r.clone(), r], By::Comm).len(), 2);
    }
}
