//! `topwaits locks`, pure: the locks that made threads wait, each with its
//! contended waits, its waiters' stacks, its holders (who released it: the
//! wakers, with the stacks where they did) ranked by the waiting they ended,
//! and what the holders were doing while the others waited (waiting
//! themselves, and on what and where, or running). A lock is a place where
//! threads wait until another thread's release wakes them, whatever the
//! primitive: a mutex or rwlock, a kernel lock, and also what a program builds
//! itself on a semaphore, a condition variable, a futex, a pipe, or a latch in
//! an event loop that a signal sets ([`LockId`]). Threads alike in name and
//! stacks are one site, as `--by` groups them (by name, process or thread).
//! Built from a trace's every wait with its waker (its events).

use std::collections::{BTreeSet, HashMap};

use crate::model::label::WaitsOn;
use crate::model::{Event, Frame, Record, Report, Stack, WakeKind};
use crate::settings::By;

/// Locks that programs build for themselves, known by the function their
/// waiters wait in (the innermost frame of the waiter's user stack that names
/// one): the kind, and those functions.
const KNOWN_LOCKS: &[(&str, &[&str])] = &[
    ("PostgreSQL heavyweight lock", &["ProcSleep"]),
    ("PostgreSQL LWLock", &["LWLockAcquire", "LWLockAcquireOrWait", "LWLockWaitForVar"]),
    ("PostgreSQL buffer pin", &["LockBufferForCleanup"]),
    (
        "Java monitor (synchronized)",
        &["ObjectMonitor::EnterI(JavaThread*)", "ObjectMonitor::enter_internal(JavaThread*)"],
    ),
];

/// Functions that send a signal: a releaser that woke its waiter from one set
/// a latch (a flag the waiter's event loop watches, and a signal to wake it).
const SIGNAL_SENDS: &[&str] = &[
    "kill",
    "tgkill",
    "tkill",
    "pthread_kill",
    "raise",
    "sigqueue",
    "__pthread_kill_implementation",
];

/// What a lock is known by.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LockId {
    /// Its label names it: a mutex, an rwlock, a kernel lock.
    Label(WaitsOn),
    /// A lock a program builds itself, of a kind its waiters' function names
    /// (see [`KNOWN_LOCKS`]), waited for on `primitive`.
    Known { kind: &'static str, function: String, primitive: String },
    /// A primitive with an address another thread's release ended the waits
    /// on: a semaphore, a condition variable or another futex, or a pipe
    /// (its inode).
    Primitive(WaitsOn),
    /// A latch: an event loop's wait that another thread ended with a signal,
    /// known by where its waiters waited and where its holders released it.
    Latch { waiter: String, releaser: String },
}

impl LockId {
    /// The lock in a few words, as each view heads it.
    pub fn short(&self) -> String {
        match self {
            LockId::Label(w) | LockId::Primitive(w) => match w {
                WaitsOn::Pipe { inode: Some(i), .. } => format!("pipe inode {i}"),
                w => w.short(),
            },
            LockId::Known { kind, function, .. } => format!("{kind} (waited for in {function})"),
            LockId::Latch { waiter, releaser } => {
                format!("latch set by a signal (waited for in {waiter}, set in {releaser})")
            }
        }
    }

    /// The kind's name, as JSON's `kind` spells it.
    pub fn kind(&self) -> String {
        match self {
            LockId::Label(w) | LockId::Primitive(w) => match w {
                WaitsOn::Futex { lock, .. } => lock.clone(),
                w => w.kind().to_string(),
            },
            LockId::Known { kind, .. } => kind.to_string(),
            LockId::Latch { .. } => "latch".into(),
        }
    }

    /// What its waiters waited on, where one label says it.
    pub fn waits_on(&self) -> Option<&WaitsOn> {
        match self {
            LockId::Label(w) | LockId::Primitive(w) => Some(w),
            _ => None,
        }
    }
}

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
    pub id: LockId,
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

/// Waits that another thread's wakeup ended but that are no lock topwaits can
/// tell (a socket's data, an event loop's work, a child's exit): by what they
/// were for, so that a view never says no wait was on a lock while some may be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unclassified {
    /// Their label's kind (`socket`, `poll`, ...), `not labelled` without one.
    pub kind: String,
    pub count: u64,
    pub ns: u64,
}

/// The locks of a trace, and what could not be told to be one.
#[derive(Clone, Debug, Default)]
pub struct Analysis {
    /// Most waiting first.
    pub locks: Vec<Lock>,
    /// Most waiting first.
    pub unclassified: Vec<Unclassified>,
}

/// The first function of `user` (leaf first) that `names` lists.
fn calls<'a>(user: &'a Stack, names: &[&str]) -> Option<&'a Frame> {
    user.frames()
        .iter()
        .map(|f| &**f)
        .find(|f| f.symbol.as_deref().is_some_and(|s| names.contains(&s)))
}

/// The lock a wait was on, if it was one (see [`LockId`]). `released`: the
/// thread that ended it, if another did.
pub fn lock_of(r: &Record, released: Option<&crate::model::Hop>) -> Option<LockId> {
    let label = r.waits_on.as_ref();
    if let Some(w) = label.filter(|w| w.is_lock()) {
        return Some(LockId::Label(w.lock()));
    }
    // A thread preempted, or faulting, in a lock's code waits for no lock.
    let blocking = !matches!(
        label,
        Some(WaitsOn::RunQueue { .. } | WaitsOn::Running | WaitsOn::PageFault { .. })
    );
    // The innermost lock function names it: an LWLock taken inside ProcSleep
    // is an LWLock.
    let known = || {
        r.user.frames().iter().find_map(|f| {
            let name = f.symbol.as_deref()?;
            KNOWN_LOCKS
                .iter()
                .find(|(_, names)| names.contains(&name))
                .map(|(kind, _)| (*kind, &**f))
        })
    };
    if let Some((kind, f)) = known().filter(|_| blocking) {
        let primitive = label.map_or_else(|| "not labelled".to_string(), |w| w.kind().to_string());
        return Some(LockId::Known { kind, function: f.name().into_owned(), primitive });
    }
    let hop = released?;
    match label? {
        // glibc's condition variable waits on one of two words side by side
        // (its groups' signals, 8-aligned): one variable, one lock.
        WaitsOn::Futex { lock, addr } if lock == "condition variable" => {
            Some(LockId::Primitive(WaitsOn::Futex { lock: lock.clone(), addr: addr & !7 }))
        }
        WaitsOn::Futex { lock, .. } if ["semaphore", "futex"].contains(&lock.as_str()) => {
            Some(LockId::Primitive(label?.clone()))
        }
        WaitsOn::Pipe { inode: Some(inode), .. } => Some(LockId::Primitive(WaitsOn::Pipe {
            fd: 0,
            inode: Some(*inode),
            holders: Vec::new(),
            syscall: String::new(),
        })),
        WaitsOn::Poll { .. } | WaitsOn::Signal { .. }
            if calls(&hop.user, SIGNAL_SENDS).is_some() =>
        {
            Some(LockId::Latch {
                waiter: own_function(&r.user).unwrap_or_else(|| "[unknown]".into()),
                releaser: own_function(&hop.user).unwrap_or_else(|| "[unknown]".into()),
            })
        }
        _ => None,
    }
}

/// Every lock of the report's events, most waiting first; sites grouped as `by`
/// says (by name for `comm` and `what`); and what another thread's wakeup
/// ended that is no lock.
pub fn analyze(report: &Report, by: By) -> Analysis {
    let mut by_tid: HashMap<u32, Vec<&Event>> = HashMap::new();
    for e in &report.events {
        by_tid.entry(e.record.tid).or_default().push(e);
    }
    for list in by_tid.values_mut() {
        list.sort_by_key(|e| e.start_mono());
    }
    let mut locks: Vec<Lock> = Vec::new();
    let mut index: HashMap<LockId, usize> = HashMap::new();
    let mut unclassified: Vec<Unclassified> = Vec::new();
    for e in &report.events {
        let r = &e.record;
        let released = released_by(r);
        let Some(id) = lock_of(r, released.map(|(h, _)| h)) else {
            if released.is_some()
                && !matches!(r.waits_on, Some(WaitsOn::RunQueue { .. }) | Some(WaitsOn::Running))
            {
                let kind = r.waits_on.as_ref().map_or("not labelled", WaitsOn::kind).to_string();
                match unclassified.iter_mut().find(|u| u.kind == kind) {
                    Some(u) => (u.count, u.ns) = (u.count + 1, u.ns + r.max_ns),
                    None => unclassified.push(Unclassified { kind, count: 1, ns: r.max_ns }),
                }
            }
            continue;
        };
        let i = *index.entry(id.clone()).or_insert_with(|| {
            locks.push(Lock {
                id: id.clone(),
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
        match released {
            Some((hop, woken)) => {
                let holder = Thread { comm: &hop.comm, tgid: hop.tgid, tid: hop.tid };
                add_site(&mut lock.holders, by, None, holder, &hop.kernel, &hop.user, ns);
                let waits = by_tid.get(&hop.tid).map_or(&[][..], |v| &v[..]);
                held_while(
                    &mut lock.held_while,
                    by,
                    holder,
                    waits,
                    &id,
                    (e.start_mono(), woken),
                    r.tid,
                );
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
    unclassified.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.kind.cmp(&b.kind)));
    Analysis { locks, unclassified }
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

fn add_site(
    sites: &mut Vec<Site>,
    by: By,
    mode: Option<String>,
    t: Thread,
    kernel: &Stack,
    user: &Stack,
    ns: u64,
) {
    let found = sites.iter_mut().find(|s| {
        s.mode == mode
            && same_owner(by, &s.comm, &s.tids, &s.pids, t)
            && names(&s.kernel) == names(kernel)
            && names(&s.user) == names(user)
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
fn held_while(
    out: &mut Vec<HeldWhile>,
    by: By,
    holder: Thread,
    waits: &[&Event],
    lock: &LockId,
    (from, to): (u64, u64),
    waiter: u32,
) {
    let before = &waits[..waits.partition_point(|e| e.start_mono() < to)];
    let acquired = before
        .iter()
        .rev()
        .find(|e| lock_of(&e.record, released_by(&e.record).map(|(h, _)| h)).as_ref() == Some(lock))
        .map_or(0, |e| e.end_mono());
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
fn add_held(
    out: &mut Vec<HeldWhile>,
    by: By,
    holder: Thread,
    wait: Option<&Record>,
    ns: u64,
    waiter: u32,
) {
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
        const LIBC: &[&str] =
            &["__", "clock_", "pthread_", "epoll_", "kill", "sem_", "send", "read"];
        let module = |n: &str| {
            if LIBC.iter().any(|p| n.starts_with(p)) {
                "/usr/lib/libc.so.6"
            } else {
                "/usr/bin/app"
            }
        };
        Stack::of(
            names
                .iter()
                .enumerate()
                .map(|(i, n)| Frame {
                    addr: 0x1000 + i as u64,
                    symbol: Some((*n).into()),
                    module: Some(module(n).into()),
                    offset: Some(0),
                })
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
            goroutines: None,
        }
    }

    fn hop(tid: u32, user: &[&str]) -> Hop {
        Hop {
            tgid: 1,
            tid,
            comm: b"holder".to_vec(),
            kernel: frames(&["futex_wake"]),
            user: frames(user),
            interrupt: false,
        }
    }

    /// A wait of `tid` from `start` to `end`, on `on`, woken at `woken` by `by`.
    fn wait(
        tid: u32,
        comm: &str,
        start: u64,
        end: u64,
        on: WaitsOn,
        by: Option<(Hop, u64)>,
        user: &[&str],
    ) -> Event {
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
            ran_on: Vec::new(),
            cgroup: None,
            waits_on: Some(on),
        };
        Event { record, state: 1 }
    }

    fn report(events: Vec<Event>) -> Report {
        Report {
            info: info(),
            counters: Default::default(),
            records: Vec::new(),
            objects: Default::default(),
            events,
            samples: Vec::new(),
        }
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
            wait(
                9,
                "holder",
                10,
                110,
                sleep(),
                None,
                &["clock_nanosleep", "tw_sleep_holding_the_lock"],
            ),
            wait(
                2,
                "worker",
                20,
                120,
                MUTEX,
                Some((release(), 110)),
                &["__lll_lock_wait", "tw_take"],
            ),
            wait(
                3,
                "worker",
                30,
                125,
                MUTEX,
                Some((release(), 110)),
                &["__lll_lock_wait", "tw_take"],
            ),
            wait(
                9,
                "holder",
                200,
                300,
                sleep(),
                None,
                &["clock_nanosleep", "tw_sleep_holding_the_lock"],
            ),
            wait(
                2,
                "worker",
                210,
                305,
                MUTEX,
                Some((release(), 300)),
                &["__lll_lock_wait", "tw_take"],
            ),
            wait(
                4,
                "pool",
                0,
                400,
                WaitsOn::Futex { lock: "condition variable".into(), addr: 0x80 },
                None,
                &["pthread_cond_wait"],
            ),
        ];
        let locks = analyze(&report(events), By::Comm).locks;
        assert_eq!(locks.len(), 1, "only the mutex is a lock: {locks:#?}");
        let l = &locks[0];
        assert_eq!((l.count, l.total_ns, l.max_ns), (3, 100 + 95 + 95, 100));
        assert_eq!(l.waiter_threads(), 2);
        assert_eq!(l.waiters.len(), 1, "one waiting site, two threads");
        assert_eq!(l.holders.len(), 1);
        assert_eq!(
            (l.holders[0].tids.iter().copied().collect::<Vec<_>>(), l.holders[0].count),
            (vec![9], 3)
        );
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
        let l = &analyze(&report(events), By::Comm).locks[0];
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
        let l = &analyze(&report(events), By::Comm).locks[0];
        assert_eq!(l.held_while.len(), 1, "{:?}", l.held_while);
        let h = &l.held_while[0];
        assert_eq!(
            (&h.waits_on, &h.function, h.ns, &h.waiters, &h.holders),
            (&None, &None, 50, &BTreeSet::from([2]), &BTreeSet::from([9]))
        );
        assert_eq!(
            (h.count, h.mean_ns(), h.user.frames().len()),
            (0, 0, 0),
            "running has no wait and no stack"
        );
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
            events.push(wait(
                holder,
                "worker",
                t,
                t + 50,
                sleep(),
                None,
                &["clock_nanosleep", "nsleep", "work_locked"],
            ));
            let mut release =
                hop(holder, &["__lll_lock_wake", "pthread_mutex_unlock", "work_locked"]);
            release.comm = b"worker".to_vec();
            events.push(wait(
                waiter,
                "worker",
                t + 10,
                t + 60,
                MUTEX,
                Some((release, t + 55)),
                &["__lll_lock_wait", "work_locked"],
            ));
        }
        let of = |by| analyze(&report(events.clone()), by).locks.remove(0);
        let (comm, thread, process) = (of(By::Comm), of(By::Thread), of(By::Process));
        // Each holder sleeps 40 of the 45 its waiter waits for it, and runs 5.
        let asleep = |l: &Lock| l.held_while.iter().filter(|h| h.waits_on.is_some()).count();
        assert_eq!(
            (comm.waiters.len(), comm.holders.len(), asleep(&comm), comm.held_while.len()),
            (1, 1, 1, 2),
            "{comm:#?}"
        );
        assert_eq!(comm.waiters[0].tids.len(), 4);
        assert_eq!((thread.waiters.len(), thread.holders.len(), asleep(&thread)), (4, 4, 4));
        assert_eq!((process.waiters.len(), process.holders.len()), (1, 1));
        // Held while sleeping in nsleep, called by the function that took the lock.
        assert_eq!(names(&comm.held_while[0].user), ["clock_nanosleep", "nsleep", "work_locked"]);
        assert_eq!(comm.held_while[0].ns, 8 * 40);
        assert_eq!(comm.held_while[0].mean_ns(), 50);
    }

    /// A thread's wait with its label and stack, ended by `by` (none: no
    /// thread ended it) 10 ns into its 50.
    fn labelled(tid: u32, on: Option<WaitsOn>, user: &[&str], by: Option<Hop>) -> Event {
        let mut e = wait(tid, "app", 0, 50, MUTEX, by.map(|h| (h, 10)), user);
        e.record.waits_on = on;
        e
    }

    fn sem(addr: u64) -> WaitsOn {
        WaitsOn::Futex { lock: "semaphore".into(), addr }
    }

    fn ids(events: Vec<Event>) -> Vec<LockId> {
        analyze(&report(events), By::Comm).locks.into_iter().map(|l| l.id).collect()
    }

    /// A semaphore, a condition variable (on either of its two words) and a
    /// pipe are locks where another thread's release ended the waits, and no
    /// locks where nothing did (a pool's idle condition variable).
    #[test]
    fn primitives_another_thread_released_are_locks() {
        let cv = |addr| Some(WaitsOn::Futex { lock: "condition variable".into(), addr });
        let pipe = Some(WaitsOn::Pipe {
            fd: 3,
            inode: Some(77),
            holders: vec!["pid 1 app (r)".into()],
            syscall: "read".into(),
        });
        let released = || Some(hop(9, &["sem_post", "give"]));
        let found = ids(vec![
            labelled(2, Some(sem(0x40)), &["sem_wait", "take"], released()),
            labelled(3, cv(0x128), &["pthread_cond_wait", "take"], released()),
            labelled(4, cv(0x12c), &["pthread_cond_wait", "take"], released()),
            labelled(5, pipe.clone(), &["read", "take"], released()),
            labelled(6, Some(sem(0x80)), &["sem_wait", "idle"], None),
        ]);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found.contains(&LockId::Primitive(sem(0x40))));
        assert!(
            found.contains(&LockId::Primitive(WaitsOn::Futex {
                lock: "condition variable".into(),
                addr: 0x128
            })),
            "one variable"
        );
        assert!(
            found.iter().any(|l| l.short() == "pipe inode 77"),
            "a pipe by its inode: {found:?}"
        );
        assert_eq!(found.iter().map(LockId::kind).filter(|k| k == "pipe").count(), 1);
    }

    /// PostgreSQL's own locks, by the functions its backends wait in: a
    /// heavyweight lock in ProcSleep (an event loop), an LWLock in
    /// LWLockAcquire (a semaphore) whatever its address; a backend preempted in
    /// LWLockAcquire waits for a CPU, not for the lock. An event loop woken by
    /// another thread's kill is a latch; woken by a send, no lock at all.
    #[test]
    fn a_servers_own_locks_are_known_by_where_they_are_waited_for() {
        let epoll = || Some(WaitsOn::Poll { via: "epoll_wait".into(), fds: Vec::new() });
        let heavy = [
            "epoll_wait",
            "WaitEventSetWait",
            "WaitLatch",
            "ProcSleep",
            "WaitOnLock",
            "LockAcquireExtended",
        ];
        let light = [
            "__futex_abstimed_wait_common",
            "PGSemaphoreLock",
            "LWLockAcquire",
            "ProcSleep",
            "WaitOnLock",
        ];
        let wake = |f: &[&str]| Some(hop(9, f));
        let kill = ["kill", "SetLatch", "ProcLockWakeup", "LockReleaseAll"];
        let preempted = labelled(5, Some(WaitsOn::RunQueue { ran_instead: None }), &light, None);
        let events = vec![
            labelled(2, epoll(), &heavy, wake(&kill)),
            labelled(
                3,
                Some(sem(0x40)),
                &light,
                wake(&["sem_post", "PGSemaphoreUnlock", "LWLockRelease"]),
            ),
            labelled(
                4,
                Some(sem(0x80)),
                &light,
                wake(&["sem_post", "PGSemaphoreUnlock", "LWLockRelease"]),
            ),
            preempted,
            labelled(6, epoll(), &["epoll_wait", "serve"], wake(&["kill", "notify_worker"])),
            labelled(7, epoll(), &["epoll_wait", "serve"], wake(&["send", "client"])),
        ];
        let found = analyze(&report(events), By::Comm);
        let names: Vec<String> = found.locks.iter().map(|l| l.id.short()).collect();
        assert_eq!(found.locks.len(), 3, "{names:?}");
        let heavy = found
            .locks
            .iter()
            .find(|l| l.id.kind() == "PostgreSQL heavyweight lock")
            .expect("the heavyweight lock");
        assert_eq!(heavy.id.short(), "PostgreSQL heavyweight lock (waited for in ProcSleep)");
        let light =
            found.locks.iter().find(|l| l.id.kind() == "PostgreSQL LWLock").expect("the LWLock");
        assert_eq!((light.count, light.waiter_threads()), (2, 2), "both semaphores, one kind");
        assert!(
            names.contains(
                &"latch set by a signal (waited for in serve, set in notify_worker)".to_string()
            ),
            "{names:?}"
        );
        assert_eq!(
            found.unclassified,
            vec![Unclassified { kind: "poll".into(), count: 1, ns: 50 }],
            "the send is no lock"
        );
    }

    #[test]
    fn locks_rank_by_their_waiting_and_frames_in_libc_are_skipped() {
        let k = WaitsOn::KernelLock {
            lock: "rwsem".into(),
            mode: Some("read".into()),
            addr: Some(1),
            name: Some("mmap_lock".into()),
        };
        let events =
            vec![wait(2, "a", 0, 10, MUTEX, None, &[]), wait(3, "b", 0, 50, k.clone(), None, &[])];
        let locks = analyze(&report(events), By::Comm).locks;
        assert_eq!(
            locks.iter().map(|l| l.id.clone()).collect::<Vec<_>>(),
            vec![LockId::Label(k.lock()), LockId::Label(MUTEX)]
        );
        let libc = Frame {
            addr: 1,
            symbol: Some("clock_nanosleep".into()),
            module: Some("/usr/lib/x86_64-linux-gnu/libc.so.6".into()),
            offset: None,
        };
        let main = Frame {
            addr: 2,
            symbol: Some("main".into()),
            module: Some("/usr/bin/app".into()),
            offset: None,
        };
        assert_eq!(own_function(&Stack::of(vec![libc, main])).as_deref(), Some("main"));
    }
}
