//! `topwaits locks`, pure: the locks that made threads wait (user mutexes, rwlocks
//! and kernel locks, by their labels), each with its contended waits, its
//! waiters' stacks, its holders (who released it: the wakers, with the stacks
//! where they did) ranked by the waiting they ended, and what the holders were
//! doing while the others waited (waiting themselves, and on what and where, or
//! running). Threads alike in name and stacks are one site, as `--by` groups
//! them (by name, process or thread). Built from a trace's every wait with its
//! waker (its events).

use std::collections::{BTreeSet, HashMap};

use crate::cli::By;
use crate::model::label::WaitsOn;
use crate::model::{Event, Frame, Record, Report, Stack, WakeKind};

/// Where threads waited or released: a thread's name and its stacks.
#[derive(Clone, Debug)]
pub struct Site {
    /// A waiter's own label, where it says more than the lock's (an rwsem's mode).
    pub mode: Option<String>,
    pub comm: Vec<u8>,
    pub kernel: Stack,
    pub user: Stack,
    /// The threads seen here, and their processes.
    pub tids: BTreeSet<u32>,
    pub pids: BTreeSet<u32>,
    pub count: u64,
    pub ns: u64,
}

/// What a holder was doing while threads waited for the lock it then released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldWhile {
    /// The holder's own wait (its label), or none while it ran or waited for a CPU.
    pub waits_on: Option<WaitsOn>,
    /// The function of the holder's program it was in (its first frame outside
    /// the C library), where known.
    pub function: Option<String>,
    /// The holder's stacks in that wait (none while it ran).
    pub kernel: Stack,
    pub user: Stack,
    /// The holders: their name, threads and processes.
    pub comm: Vec<u8>,
    pub holders: BTreeSet<u32>,
    pub pids: BTreeSet<u32>,
    /// The holder's waits that overlapped the waiting, and their whole length.
    pub count: u64,
    pub wait_ns: u64,
    /// The waiters' time that overlapped it.
    pub ns: u64,
    /// The threads that waited meanwhile.
    pub waiters: BTreeSet<u32>,
}

impl HeldWhile {
    /// The mean of the holder's waits it stands for (0 while it ran).
    pub fn mean_ns(&self) -> u64 {
        self.wait_ns / self.count.max(1)
    }
}

/// One lock and the waiting it caused.
#[derive(Clone, Debug)]
pub struct Lock {
    /// The lock (a kernel rwsem's without the mode: its readers and writers are
    /// its waiters).
    pub waits_on: WaitsOn,
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// The waiters, by thread name and stacks, most waiting first.
    pub waiters: Vec<Site>,
    /// The holders, by the stacks where they released it, most waiting ended first.
    pub holders: Vec<Site>,
    /// Waits that ended without a waker seen (a timeout, a wakeup before the trace).
    pub unreleased_ns: u64,
    /// What the holders did while the waiters waited, most first.
    pub held_while: Vec<HeldWhile>,
}

impl Lock {
    /// Threads that waited on it.
    pub fn waiter_threads(&self) -> usize {
        self.waiters.iter().flat_map(|s| s.tids.iter()).collect::<BTreeSet<_>>().len()
    }
}

/// Every lock of the report's events, most waiting first; sites grouped as `by`
/// says (by name for `comm` and `what`).
pub fn analyze(report: &Report, by: By) -> Vec<Lock> {
    let mut by_tid: HashMap<u32, Vec<&Event>> = HashMap::new();
    for e in &report.events {
        by_tid.entry(e.record.tid).or_default().push(e);
    }
    for list in by_tid.values_mut() {
        list.sort_by_key(|e| e.start_mono());
    }
    let mut locks: Vec<Lock> = Vec::new();
    let mut index: HashMap<WaitsOn, usize> = HashMap::new();
    for e in &report.events {
        let r = &e.record;
        let Some(w) = r.waits_on.as_ref().filter(|w| w.is_lock()).map(WaitsOn::lock) else { continue };
        let w = &w;
        let i = *index.entry(w.clone()).or_insert_with(|| {
            locks.push(Lock {
                waits_on: w.clone(),
                count: 0,
                total_ns: 0,
                max_ns: 0,
                waiters: Vec::new(),
                holders: Vec::new(),
                unreleased_ns: 0,
                held_while: Vec::new(),
            });
            locks.len() - 1
        });
        let lock = &mut locks[i];
        let ns = r.max_ns;
        lock.count += 1;
        lock.total_ns += ns;
        lock.max_ns = lock.max_ns.max(ns);
        let mode = match r.waits_on.as_ref() {
            Some(WaitsOn::KernelLock { mode, .. }) => mode.clone(),
            _ => None,
        };
        let waiter = Thread { comm: &r.comm, tgid: r.tgid, tid: r.tid };
        add_site(&mut lock.waiters, by, mode, waiter, &r.kernel, &r.user, ns);
        match released_by(r) {
            Some((hop, woken)) => {
                let holder = Thread { comm: &hop.comm, tgid: hop.tgid, tid: hop.tid };
                add_site(&mut lock.holders, by, None, holder, &hop.kernel, &hop.user, ns);
                let waits = by_tid.get(&hop.tid).map_or(&[][..], |v| &v[..]);
                held_while(&mut lock.held_while, by, holder, waits, w, (e.start_mono(), woken), r.tid);
            }
            None => lock.unreleased_ns += ns,
        }
    }
    for l in &mut locks {
        l.waiters.sort_by_key(|s| std::cmp::Reverse(s.ns));
        l.holders.sort_by_key(|s| std::cmp::Reverse(s.ns));
        l.held_while.sort_by_key(|h| std::cmp::Reverse(h.ns));
    }
    locks.sort_by_key(|l| std::cmp::Reverse(l.total_ns));
    locks
}

/// The thread that released the lock (woke the waiter), and when.
fn released_by(r: &Record) -> Option<(&crate::model::Hop, u64)> {
    let w = r.wake.as_ref()?;
    let hop = w.hops.first().filter(|h| w.kind == WakeKind::Woken && !h.interrupt)?;
    let start = r.max_end_mono.saturating_sub(r.max_ns);
    Some((hop, start + w.blocked_ns))
}

/// A stack as text, for grouping.
fn names(s: &Stack) -> Vec<std::borrow::Cow<'_, str>> {
    s.frames().iter().map(|f| f.name()).collect()
}

/// A thread, as a site is told apart by it.
#[derive(Clone, Copy)]
struct Thread<'a> {
    comm: &'a [u8],
    tgid: u32,
    tid: u32,
}

/// Whether a site of `comm` with these threads holds `t`'s doings, as `by`
/// groups threads.
fn same_owner(by: By, comm: &[u8], tids: &BTreeSet<u32>, pids: &BTreeSet<u32>, t: Thread) -> bool {
    comm == t.comm
        && match by {
            By::Thread => tids.contains(&t.tid),
            By::Process => pids.contains(&t.tgid),
            By::Comm | By::What | By::Cgroup => true,
        }
}

fn add_site(sites: &mut Vec<Site>, by: By, mode: Option<String>, t: Thread, kernel: &Stack, user: &Stack, ns: u64) {
    let found = sites.iter_mut().find(|s| {
        s.mode == mode && same_owner(by, &s.comm, &s.tids, &s.pids, t) && names(&s.kernel) == names(kernel) && names(&s.user) == names(user)
    });
    let site = match found {
        Some(s) => s,
        None => {
            sites.push(Site {
                mode,
                comm: t.comm.to_vec(),
                kernel: kernel.clone(),
                user: user.clone(),
                tids: BTreeSet::new(),
                pids: BTreeSet::new(),
                count: 0,
                ns: 0,
            });
            sites.last_mut().expect("just pushed")
        }
    };
    site.tids.insert(t.tid);
    site.pids.insert(t.tgid);
    site.count += 1;
    site.ns += ns;
}

/// The holder's first frame outside the C library and the loader: the function
/// of its own program it was in.
pub fn own_function(user: &Stack) -> Option<String> {
    const LIBC: &[&str] = &["libc.so", "libpthread", "ld-linux", "linux-vdso", "libc-"];
    let own = |f: &Frame| !f.module.as_deref().is_some_and(|m| LIBC.iter().any(|l| m.contains(l)));
    user.frames().iter().find(|f| own(f) && f.symbol.is_some()).map(|f| f.name().to_string())
}

/// Adds what `holder` (its waits, by start) did over `(from, to)`, while
/// thread `waiter` waited for `lock`, which the holder then released. The holder
/// held it from the end of its own last wait for it, if that came later.
fn held_while(out: &mut Vec<HeldWhile>, by: By, holder: Thread, waits: &[&Event], lock: &WaitsOn, (from, to): (u64, u64), waiter: u32) {
    let before = &waits[..waits.partition_point(|e| e.start_mono() < to)];
    let acquired =
        before.iter().rev().find(|e| e.record.waits_on.as_ref().map(WaitsOn::lock).as_ref() == Some(lock)).map_or(0, |e| e.end_mono());
    let from = from.max(acquired);
    if to <= from {
        return;
    }
    let mut covered = 0;
    let first = waits.partition_point(|e| e.end_mono() <= from);
    for e in waits[first..].iter().take_while(|e| e.start_mono() < to) {
        let overlap = e.end_mono().min(to).saturating_sub(e.start_mono().max(from));
        if overlap == 0 {
            continue;
        }
        covered += overlap;
        add_held(out, by, holder, Some(&e.record), overlap, waiter);
    }
    let running = (to - from).saturating_sub(covered);
    if running > 0 {
        add_held(out, by, holder, None, running, waiter);
    }
}

/// Adds `ns` of `waiter`'s waiting to what the holder did: its wait `wait`, or
/// running (none).
fn add_held(out: &mut Vec<HeldWhile>, by: By, holder: Thread, wait: Option<&Record>, ns: u64, waiter: u32) {
    let (waits_on, kernel, user) = match wait {
        Some(r) => (r.waits_on.clone(), r.kernel.clone(), r.user.clone()),
        None => (None, Stack::None, Stack::None),
    };
    let label = |w: &Option<WaitsOn>| w.as_ref().map(WaitsOn::short);
    let found = out.iter_mut().find(|h| {
        label(&h.waits_on) == label(&waits_on)
            && same_owner(by, &h.comm, &h.holders, &h.pids, holder)
            && names(&h.user) == names(&user)
            && names(&h.kernel) == names(&kernel)
    });
    let h = match found {
        Some(h) => h,
        None => {
            out.push(HeldWhile {
                function: own_function(&user),
                waits_on,
                kernel,
                user,
                comm: holder.comm.to_vec(),
                holders: BTreeSet::new(),
                pids: BTreeSet::new(),
                count: 0,
                wait_ns: 0,
                ns: 0,
                waiters: BTreeSet::new(),
            });
            out.last_mut().expect("just pushed")
        }
    };
    h.holders.insert(holder.tid);
    h.pids.insert(holder.tgid);
    h.ns += ns;
    h.waiters.insert(waiter);
    if let Some(r) = wait {
        h.count += 1;
        h.wait_ns += r.max_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AttachKind, Hop, TraceInfo, WakeInfo};
    use crate::util::clock::ClockPair;

    /// Frames named `names`, leaf first: those of the C library in libc.so.6.
    fn frames(names: &[&str]) -> Stack {
        let module =
            |n: &str| if ["__", "clock_", "pthread_"].iter().any(|p| n.starts_with(p)) { "/usr/lib/libc.so.6" } else { "/usr/bin/app" };
        Stack::of(
            names
                .iter()
                .enumerate()
                .map(|(i, n)| Frame { addr: 0x1000 + i as u64, symbol: Some((*n).into()), module: Some(module(n).into()), offset: Some(0) })
                .collect(),
        )
    }

    fn info() -> TraceInfo {
        TraceInfo {
            clock: ClockPair { mono_ns: 0, wall_ns: 0 },
            start_mono: 0,
            end_mono: 1000,
            attach: AttachKind::TpBtf,
            target: "PID 1".into(),
            utc_offset_s: 0,
            waker: true,
            by: crate::analysis::reduce::By::Thread,
            state_filter: None,
            on_cpu_hz: None,
            cgroup_target: false,
        }
    }

    fn hop(tid: u32, user: &[&str]) -> Hop {
        Hop { tgid: 1, tid, comm: b"holder".to_vec(), kernel: frames(&["futex_wake"]), user: frames(user), interrupt: false }
    }

    /// A wait of `tid` from `start` to `end`, on `on`, woken at `woken` by `by`.
    fn wait(tid: u32, comm: &str, start: u64, end: u64, on: WaitsOn, by: Option<(Hop, u64)>, user: &[&str]) -> Event {
        let wake = by.map(|(h, woken)| WakeInfo {
            kind: WakeKind::Woken,
            hops: vec![h],
            blocked_ns: woken - start,
            runq_ns: end - woken,
            max_blocked_ns: woken - start,
            max_runq_ns: end - woken,
        });
        let record = Record {
            tgid: 1,
            tid,
            comm: comm.as_bytes().to_vec(),
            kernel: frames(&["schedule"]),
            user: frames(user),
            count: 1,
            total_ns: end - start,
            max_ns: end - start,
            max_end_mono: end,
            wake,
            open: None,
            threads: 1,
            ns_ids: None,
            cgroup: None,
            waits_on: Some(on),
        };
        Event { record, state: 1 }
    }

    fn report(events: Vec<Event>) -> Report {
        Report { info: info(), counters: Default::default(), records: Vec::new(), objects: Default::default(), events, samples: Vec::new() }
    }

    const MUTEX: WaitsOn = WaitsOn::Mutex { addr: 0x40, pi: false };

    fn sleep() -> WaitsOn {
        WaitsOn::Sleep { requested_ns: Some(100), syscall: "nanosleep".into(), to_deadline: false }
    }

    /// The holder sleeps 100 ns with the lock held, twice; two workers wait behind
    /// it. A condition variable's waits and a sleep are no locks.
    #[test]
    fn a_holder_sleeping_with_the_lock_is_what_it_was_held_while() {
        let release = || hop(9, &["__lll_lock_wake", "pthread_mutex_unlock", "tw_holder_loop"]);
        let events = vec![
            wait(9, "holder", 10, 110, sleep(), None, &["clock_nanosleep", "tw_sleep_holding_the_lock"]),
            wait(2, "worker", 20, 120, MUTEX, Some((release(), 110)), &["__lll_lock_wait", "tw_take"]),
            wait(3, "worker", 30, 125, MUTEX, Some((release(), 110)), &["__lll_lock_wait", "tw_take"]),
            wait(9, "holder", 200, 300, sleep(), None, &["clock_nanosleep", "tw_sleep_holding_the_lock"]),
            wait(2, "worker", 210, 305, MUTEX, Some((release(), 300)), &["__lll_lock_wait", "tw_take"]),
            wait(4, "pool", 0, 400, WaitsOn::Futex { lock: "condition variable".into(), addr: 0x80 }, None, &["pthread_cond_wait"]),
        ];
        let locks = analyze(&report(events), By::Comm);
        assert_eq!(locks.len(), 1, "only the mutex is a lock: {locks:#?}");
        let l = &locks[0];
        assert_eq!((l.count, l.total_ns, l.max_ns), (3, 100 + 95 + 95, 100));
        assert_eq!(l.waiter_threads(), 2);
        assert_eq!(l.waiters.len(), 1, "one waiting site, two threads");
        assert_eq!(l.holders.len(), 1);
        assert_eq!((l.holders[0].tids.iter().copied().collect::<Vec<_>>(), l.holders[0].count), (vec![9], 3));
        assert_eq!(names(&l.holders[0].user)[2], "tw_holder_loop");
        // Waiting from 20, 30 and 210 to the releases at 110, 110 and 300: the
        // holder slept through all of it.
        let first = &l.held_while[0];
        assert_eq!(first.waits_on, Some(sleep()));
        assert_eq!(first.function.as_deref(), Some("tw_sleep_holding_the_lock"));
        assert_eq!(first.ns, 90 + 80 + 90);
        assert_eq!(first.waiters.len(), 2);
        // Its stacks and its sleeps' own length: each slept 100.
        assert_eq!(names(&first.user), ["clock_nanosleep", "tw_sleep_holding_the_lock"]);
        assert_eq!(first.mean_ns(), 100);
        assert_eq!(first.holders, BTreeSet::from([9]));
        assert_eq!(l.held_while.len(), 1, "no running time: {:?}", l.held_while);
    }

    /// Two workers hand the lock to each other: the releaser held it only from the
    /// end of its own wait for it, which is no "held while".
    #[test]
    fn a_holder_held_the_lock_from_when_it_got_it() {
        let events = vec![
            wait(2, "worker", 0, 40, MUTEX, None, &["lock"]),
            wait(3, "worker", 10, 70, MUTEX, Some((hop(2, &["unlock", "work"]), 60)), &["lock"]),
            wait(2, "worker", 45, 55, sleep(), None, &["nanosleep", "work"]),
        ];
        let l = &analyze(&report(events), By::Comm)[0];
        // Thread 3 waited 10..60; thread 2 held the lock from 40: slept 45..55,
        // ran 40..45 and 55..60.
        assert_eq!(l.held_while[0].waits_on, Some(sleep()));
        assert_eq!(l.held_while[0].ns, 10);
        assert_eq!(l.held_while[1].waits_on, None);
        assert_eq!(l.held_while[1].ns, 10);
        assert_eq!(l.held_while.len(), 2);
    }

    /// A holder that computes while holding the lock: the waiting is held while
    /// running; a wait nobody ended is counted apart.
    #[test]
    fn a_holder_that_runs_and_a_wait_without_a_release() {
        let events = vec![
            wait(2, "worker", 0, 60, MUTEX, Some((hop(9, &["unlock", "compute"]), 50)), &["lock"]),
            wait(3, "worker", 0, 40, MUTEX, None, &["lock"]),
        ];
        let l = &analyze(&report(events), By::Comm)[0];
        assert_eq!(l.held_while.len(), 1, "{:?}", l.held_while);
        let h = &l.held_while[0];
        assert_eq!(
            (&h.waits_on, &h.function, h.ns, &h.waiters, &h.holders),
            (&None, &None, 50, &BTreeSet::from([2]), &BTreeSet::from([9]))
        );
        assert_eq!((h.count, h.mean_ns(), h.user.frames().len()), (0, 0, 0), "running has no wait and no stack");
        assert_eq!(l.unreleased_ns, 40);
    }

    /// Four workers of one name take turns: one waiting site and one holder site
    /// by name; four of each by thread; by process, one (they share a process).
    #[test]
    fn waiters_and_holders_group_as_by_says() {
        let mut events = Vec::new();
        for k in 0..8u64 {
            let (holder, waiter) = (2 + (k % 4) as u32, 2 + ((k + 1) % 4) as u32);
            let t = 100 * k;
            events.push(wait(holder, "worker", t, t + 50, sleep(), None, &["clock_nanosleep", "nsleep", "work_locked"]));
            let mut release = hop(holder, &["__lll_lock_wake", "pthread_mutex_unlock", "work_locked"]);
            release.comm = b"worker".to_vec();
            events.push(wait(waiter, "worker", t + 10, t + 60, MUTEX, Some((release, t + 55)), &["__lll_lock_wait", "work_locked"]));
        }
        let of = |by| analyze(&report(events.clone()), by).remove(0);
        let (comm, thread, process) = (of(By::Comm), of(By::Thread), of(By::Process));
        // Each holder sleeps 40 of the 45 its waiter waits for it, and runs 5.
        let asleep = |l: &Lock| l.held_while.iter().filter(|h| h.waits_on.is_some()).count();
        assert_eq!((comm.waiters.len(), comm.holders.len(), asleep(&comm), comm.held_while.len()), (1, 1, 1, 2), "{comm:#?}");
        assert_eq!(comm.waiters[0].tids.len(), 4);
        assert_eq!((thread.waiters.len(), thread.holders.len(), asleep(&thread)), (4, 4, 4));
        assert_eq!((process.waiters.len(), process.holders.len()), (1, 1));
        // Held while sleeping in nsleep, called by the function that took the lock.
        assert_eq!(names(&comm.held_while[0].user), ["clock_nanosleep", "nsleep", "work_locked"]);
        assert_eq!(comm.held_while[0].ns, 8 * 40);
        assert_eq!(comm.held_while[0].mean_ns(), 50);
    }

    #[test]
    fn locks_rank_by_their_waiting_and_frames_in_libc_are_skipped() {
        let k = WaitsOn::KernelLock { lock: "rwsem".into(), mode: Some("read".into()), addr: Some(1), name: Some("mmap_lock".into()) };
        let events = vec![wait(2, "a", 0, 10, MUTEX, None, &[]), wait(3, "b", 0, 50, k.clone(), None, &[])];
        let locks = analyze(&report(events), By::Comm);
        assert_eq!(locks.iter().map(|l| l.waits_on.clone()).collect::<Vec<_>>(), vec![k.lock(), MUTEX]);
        let libc = Frame {
            addr: 1,
            symbol: Some("clock_nanosleep".into()),
            module: Some("/usr/lib/x86_64-linux-gnu/libc.so.6".into()),
            offset: None,
        };
        let main = Frame { addr: 2, symbol: Some("main".into()), module: Some("/usr/bin/app".into()), offset: None };
        assert_eq!(own_function(&Stack::of(vec![libc, main])).as_deref(), Some("main"));
    }
}
