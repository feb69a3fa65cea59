//! Waits still in progress at the end of a trace that began before it: threads of
//! the target that never switched out while tracing, read from `/proc` (see
//! [`crate::analysis::snapshot`]) and added to the capture as open records with an estimated
//! start. Waits that began during the trace come from the kernel maps instead.

use std::collections::HashMap;

use crate::analysis::snapshot::{Snapshot, Snapshotter};
use crate::model::{Capture, OpenSince, RawRecord, StackId, WakeInfo, WakeKind, SNAPSHOT_STACK};
use crate::settings::{Config, Stacks, Threads};
use crate::sys::thread;

/// What of a trace's options decides which waits in progress since before it
/// are reported, and what each carries.
#[derive(Clone, Copy, Debug)]
pub struct Wanted<'a> {
    pub threads: &'a Threads,
    /// `--state`'s mask.
    pub state: Option<u32>,
    pub min_us: u64,
    pub max_us: u64,
    pub stacks: Stacks,
    /// Whether records carry a waker (here: none yet).
    pub waker: bool,
}

impl<'a> Wanted<'a> {
    pub fn of(c: &'a Config) -> Self {
        let Config { threads, state, min_us, max_us, stacks, waker, .. } = c;
        Wanted {
            threads,
            state: *state,
            min_us: *min_us,
            max_us: *max_us,
            stacks: *stacks,
            waker: *waker,
        }
    }
}

/// Whether a thread's current state is one the options record: S or D (D only
/// system-wide), matching `--state`, of the kind `-u`/`-k` asks for.
fn wanted(config: &Wanted, s: &Snapshot) -> bool {
    let bit = match s.state {
        'S' => 1,
        'D' => 2,
        _ => return false,
    };
    if matches!(config.threads, Threads::All | Threads::UserOnly | Threads::KernelOnly) && bit != 2
    {
        return false;
    }
    if config.state.is_some_and(|mask| mask & bit == 0) {
        return false;
    }
    let kthread = s.flags & topwaits_common::PF_KTHREAD != 0;
    match config.threads {
        Threads::UserOnly => !kthread,
        Threads::KernelOnly => kthread,
        _ => true,
    }
}

/// The span of a trace, as CLOCK_MONOTONIC ns, and what each CPU's task clock
/// had left out when it began ([`crate::sys::schedclock::lost_ns`]).
#[derive(Clone, Debug, Default)]
pub struct Span {
    pub start: u64,
    pub end: u64,
    pub lost_at_start: HashMap<u32, u64>,
}

/// How far past the trace's start a thread's last run may be estimated and
/// still be taken for a wait that began before it (the clocks' conversion),
/// besides what its CPU's task clock lost during the trace.
const BORN_LATE_NS: u64 = 20_000_000;

/// Whether a wait whose start is estimated at `since` may have begun before the
/// trace did. The estimate runs late by what its CPU's task clock left out since
/// (on a busy VM, tens of ms of steal over a trace of seconds), so that is
/// allowed on top of the conversion's own error.
fn began_before(span: &Span, since: u64, cpu: u32, lost_now: &HashMap<u32, u64>) -> bool {
    let lost = match (lost_now.get(&cpu), span.lost_at_start.get(&cpu)) {
        (Some(now), Some(then)) => now.saturating_sub(*then),
        _ => 0,
    };
    since <= span.start + BORN_LATE_NS + lost
}

/// Whether any thread of the target may have been blocked since before the
/// trace: one that never switched out while tracing and is asleep now. Only
/// then are snapshots (and the registers they are walked from) needed.
pub fn any_unseen(threads: &Threads, capture: &Capture, me: u32) -> bool {
    crate::analysis::snapshot::candidates(threads)
        .into_iter()
        .filter(|&(tgid, tid)| tgid != me && !capture.switched.contains(&tid))
        .any(|(tgid, tid)| thread::stat(tgid, tid).is_some_and(|st| matches!(st.state, 'S' | 'D')))
}

/// Adds, as open records, the waits of the target's threads that have been blocked
/// since before the trace began (they never switched out during it). Process `me`
/// (topwaits itself) is left out.
pub fn add_waits_before_trace(
    config: &Wanted,
    capture: &mut Capture,
    snap: &mut Snapshotter,
    span: Span,
    me: u32,
) {
    let (start_mono, end_mono) = (span.start, span.end);
    let lost_now = crate::sys::schedclock::lost_ns();
    let mut late = 0;
    // Snapshot ids (bit 62, not bit 63) never meet the kernel's stack references.
    let mut next_id = SNAPSHOT_STACK;
    for (tgid, tid) in crate::analysis::snapshot::candidates(config.threads) {
        if tgid == me || capture.switched.contains(&tid) {
            continue;
        }
        // Cheap first: the state decides most threads without the rest of a snapshot.
        match thread::stat(tgid, tid) {
            Some(st) if matches!(st.state, 'S' | 'D') => {}
            _ => continue,
        }
        let Some(s) = snap.take(tgid, tid) else {
            continue;
        };
        if !wanted(config, &s) {
            continue;
        }
        // It never ran while tracing, so its wait began before the trace did;
        // unless it last ran well after the start: a thread born once the hooks
        // were detached, whose wait no hook saw and which is not this one's.
        let since = match s.since {
            Some(t) if !began_before(&span, t, s.cpu, &lost_now) => {
                log::debug!("tid {tid} began to wait after the trace began, unseen: left out");
                late += 1;
                continue;
            }
            Some(t) => OpenSince::Estimated(t.min(start_mono)),
            None => OpenSince::BeforeTrace,
        };
        let so_far = end_mono.saturating_sub(since.mono().unwrap_or(start_mono));
        if !(config.min_us..=config.max_us).contains(&(so_far / 1000)) {
            continue;
        }
        let mut id = || {
            next_id += 1;
            next_id
        };
        let kstack = match (&s.kernel, config.stacks) {
            (_, Stacks::UserOnly) => StackId::None,
            (Ok(frames), _) => {
                let k = id();
                capture.named.insert(k, frames.clone());
                StackId::Id(k)
            }
            (Err(e), _) => {
                log::debug!("no kernel stack for tid {tid}: {e}");
                StackId::Lost(-1)
            }
        };
        let ustack = if config.stacks == Stacks::KernelOnly || s.user.is_empty() {
            StackId::None
        } else {
            let u = id();
            capture.stacks.insert(u, s.user.clone());
            StackId::Id(u)
        };
        capture.records.push(RawRecord {
            tgid,
            tid,
            comm: s.comm.clone(),
            kstack,
            ustack,
            total_ns: so_far,
            count: 1,
            max_ns: so_far,
            max_end_mono: end_mono,
            wake: config.waker.then(|| WakeInfo {
                kind: WakeKind::NotYet,
                hops: Vec::new(),
                blocked_ns: so_far,
                runq_ns: 0,
                max_blocked_ns: so_far,
                max_runq_ns: 0,
            }),
            open: Some(since),
            what: what_of(&s.syscall),
            on_cpu: false,
        });
    }
    if late > 0 {
        log::info!("{late} threads blocked at the end began to wait after the hooks were detached: not waits of this trace");
    }
}

/// What a wait found in `/proc` is for: its syscall and, where the programs keep
/// it, its first argument (a sleep's asked time is not read).
fn what_of(s: &Result<thread::SyscallState, String>) -> topwaits_common::What {
    match s {
        Ok(thread::SyscallState::In(c)) => topwaits_common::What {
            nr: c.nr as u32 + 1,
            arg0: if crate::sys::syscalls::keeps_arg0_of(c.nr) { c.args[0] } else { 0 },
            flags: if crate::sys::syscalls::syscall_info(c.nr).is_some_and(|i| i.name == "futex") {
                topwaits_common::what::FUTEX_OP
                    | (((c.args[1] & 0x7f) as u32) << topwaits_common::what::FUTEX_OP_SHIFT)
            } else {
                0
            },
            obj: 0,
        },
        _ => topwaits_common::What::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `topwaits` with these options (`-p`/`-t` as `threads`, `--state`)
    /// asks of open waits.
    fn config(threads: &Threads, state: Option<u32>) -> Wanted<'_> {
        Wanted { threads, state, min_us: 1, max_us: u64::MAX, stacks: Stacks::Both, waker: false }
    }

    fn snap(state: char, flags: u32) -> Snapshot {
        Snapshot {
            tgid: 1,
            tid: 1,
            comm: b"x".to_vec(),
            state,
            flags,
            since: None,
            cpu: 0,
            kernel: Ok(Vec::new()),
            user: Vec::new(),
            syscall: Err("n/a".into()),
        }
    }

    #[test]
    fn system_wide_keeps_d_state_only_a_target_keeps_s_too() {
        let all = config(&Threads::All, None);
        assert!(wanted(&all, &snap('D', 0)));
        assert!(!wanted(&all, &snap('S', 0)));
        assert!(!wanted(&all, &snap('R', 0)));
        let one = Threads::Pids(vec![1]);
        let p = config(&one, None);
        assert!(wanted(&p, &snap('S', 0)) && wanted(&p, &snap('D', 0)));
        assert!(!wanted(&p, &snap('T', 0)));
    }

    #[test]
    fn state_mask_and_thread_kind_apply() {
        let one = Threads::Pids(vec![1]);
        let d_only = config(&one, Some(2));
        assert!(!wanted(&d_only, &snap('S', 0)));
        assert!(wanted(&d_only, &snap('D', 0)));
        assert!(
            !wanted(&config(&Threads::Pids(vec![1]), Some(0)), &snap('S', 0)),
            "preempted-only wants no sleepers"
        );
        let k = topwaits_common::PF_KTHREAD;
        assert!(!wanted(&config(&Threads::UserOnly, None), &snap('D', k)));
        assert!(wanted(&config(&Threads::KernelOnly, None), &snap('D', k)));
    }

    #[test]
    fn a_wait_estimated_late_by_what_its_cpu_lost_still_began_before() {
        let ms = 1_000_000;
        let span = Span {
            start: 1_000 * ms,
            end: 3_000 * ms,
            lost_at_start: HashMap::from([(0, 500 * ms), (1, 0)]),
        };
        let lost_now = HashMap::from([(0, 560 * ms), (1, 0)]);
        // CPU 0 lost 60 ms during the trace: an estimate up to 80 ms late is allowed.
        assert!(began_before(&span, 1_070 * ms, 0, &lost_now));
        assert!(!began_before(&span, 1_090 * ms, 0, &lost_now), "a wait that began 90 ms in");
        // CPU 1 lost nothing: only the conversion's 20 ms.
        assert!(began_before(&span, 1_015 * ms, 1, &lost_now));
        assert!(!began_before(&span, 1_030 * ms, 1, &lost_now));
        assert!(!began_before(&span, 1_030 * ms, 7, &lost_now), "an unknown CPU gets no allowance");
    }

    #[test]
    fn a_thread_of_ours_blocked_since_before_the_trace_becomes_an_open_record() {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(400));
        });
        let tid = rx.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let start = crate::util::clock::monotonic_now() - 50_000_000;
        let end = crate::util::clock::monotonic_now();
        let tids = Threads::Tids(vec![tid]);
        let cfg = config(&tids, None);
        let mut capture = Capture::default();
        let span = Span { start, end, lost_at_start: crate::sys::schedclock::lost_ns() };
        add_waits_before_trace(&cfg, &mut capture, &mut Snapshotter::default(), span.clone(), 0);
        let mut skipped = Capture::default();
        skipped.switched.insert(tid);
        add_waits_before_trace(&cfg, &mut skipped, &mut Snapshotter::default(), span.clone(), 0);
        let mut own = Capture::default();
        add_waits_before_trace(
            &cfg,
            &mut own,
            &mut Snapshotter::default(),
            span,
            std::process::id(),
        );
        t.join().unwrap();
        assert_eq!(capture.records.len(), 1, "{:?}", capture.records);
        let r = &capture.records[0];
        assert_eq!((r.tid, r.count, r.max_end_mono), (tid, 1, end));
        assert!(matches!(r.open, Some(OpenSince::Estimated(_))), "{:?}", r.open);
        // ~100 ms asleep before `end`, less whatever delay the busy test process
        // put between the thread's message and its sleep; the start is estimated.
        assert!((50_000_000..250_000_000).contains(&r.max_ns), "about 100 ms so far: {}", r.max_ns);
        assert!(
            skipped.records.is_empty(),
            "a thread seen switching has its open wait from the kernel"
        );
        assert!(own.records.is_empty(), "topwaits never reports itself");
    }
}
