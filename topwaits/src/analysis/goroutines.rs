//! Go programs whose goroutines are traced: their threads' idle in the Go
//! scheduler (looking for a goroutine to run, or parked with none) is no wait
//! of the program, since its goroutines' own waits say what it waited for.

use std::collections::HashSet;

use topwaits_common::golang::is_goroutine;

use crate::model::Record;

/// The runtime's functions a thread is idle in when it has no goroutine to
/// run (`findrunnable` was renamed `findRunnable` in Go 1.20).
const SCHEDULER_IDLE: &[&str] = &[
    "runtime.schedule",
    "runtime.findrunnable",
    "runtime.findRunnable",
    "runtime.stopm",
    "runtime.mPark",
    "runtime.sysmon",
    "runtime.templateThread",
];

/// Whether a thread's wait (not a goroutine's) is idle in the Go scheduler.
pub fn scheduler_idle(r: &Record) -> bool {
    !is_goroutine(r.tid)
        && !r.on_cpu()
        && r.user.frames().iter().any(|f| {
            let name = f.name();
            SCHEDULER_IDLE.iter().any(|s| name.as_ref() == *s)
        })
}

/// The processes with goroutine waits among `records`.
pub fn go_processes(records: &[Record]) -> HashSet<u32> {
    records.iter().filter(|r| is_goroutine(r.tid)).map(|r| r.tgid).collect()
}

/// Which of `records` to keep: all but the scheduler idle of a process in
/// `go` (see [`go_processes`]); with the nanoseconds left out.
pub fn keep(records: &[Record], go: &HashSet<u32>) -> (Vec<bool>, u64) {
    let mut dropped = 0;
    let keep = records
        .iter()
        .map(|r| {
            let idle = go.contains(&r.tgid) && scheduler_idle(r);
            if idle {
                dropped += r.total_ns;
            }
            !idle
        })
        .collect();
    (keep, dropped)
}

/// What woke a goroutine when no goroutine did: the Go runtime itself, from
/// the scheduler's system stack. A timer's firing (`time.Sleep`, a
/// `time.Timer`) is a timer, as a timer interrupt is for a thread. None when
/// the waker is a goroutine, or the woken is a thread.
pub fn runtime_waker(woken_tid: u32, hop: &crate::model::Hop) -> Option<&'static str> {
    if !is_goroutine(woken_tid) || is_goroutine(hop.tid) || hop.interrupt {
        return None;
    }
    let timer = hop.user.frames().iter().any(|f| {
        let name = f.name();
        name == "runtime.goroutineReady" || name.starts_with("runtime.runOneTimer")
    });
    Some(if timer { "timer" } else { "the Go runtime" })
}

/// What ended a goroutine's wait that no `runtime.ready` ended: the network
/// poller hands a goroutine whose socket is ready back to the scheduler
/// directly, as a network interrupt wakes a thread. None for other waits.
pub fn unseen_waker(r: &Record) -> Option<&'static str> {
    let network = matches!(
        &r.waits_on,
        Some(crate::model::label::WaitsOn::Goroutine { reason }) if reason == "network I/O"
    );
    (is_goroutine(r.tid) && network).then_some("network")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::bare_record;
    use crate::model::{Frame, Stack};

    fn record_with_user(tgid: u32, tid: u32, user: &[&str], total_ns: u64) -> Record {
        let frames = user
            .iter()
            .map(|n| Frame { symbol: Some((*n).into()), ..Frame::unknown(0x1000) })
            .collect();
        Record { tgid, tid, user: Stack::of(frames), ..bare_record("gm", total_ns, 1) }
    }

    #[test]
    fn a_go_programs_scheduler_idle_is_left_out_and_its_goroutines_kept() {
        let g = topwaits_common::golang::tid_of(5);
        let recs = vec![
            record_with_user(10, 11, &["runtime.futex", "runtime.stopm", "runtime.schedule"], 700),
            record_with_user(10, g, &["runtime.gopark", "sync.(*Mutex).lockSlow", "main.h"], 500),
            record_with_user(10, 12, &["syscall.read", "main.r"], 300),
            // Another process, whose goroutines are not traced.
            record_with_user(20, 21, &["runtime.futex", "runtime.stopm"], 900),
        ];
        let go = go_processes(&recs);
        assert_eq!(go, HashSet::from([10]));
        let (kept, dropped) = keep(&recs, &go);
        assert_eq!(kept, [false, true, true, true]);
        assert_eq!(dropped, 700);
    }

    #[test]
    fn a_goroutine_woken_from_the_scheduler_by_a_timer_has_the_timer_as_waker() {
        let hop = |tid: u32, user: &[&str]| crate::model::Hop {
            tgid: 10,
            tid,
            comm: b"gm".to_vec(),
            kernel: Stack::None,
            user: record_with_user(10, tid, user, 0).user,
            interrupt: false,
        };
        let g = topwaits_common::golang::tid_of(5);
        let timer = hop(11, &["runtime.ready", "runtime.goready", "runtime.goroutineReady"]);
        assert_eq!(runtime_waker(g, &timer), Some("timer"));
        assert_eq!(
            runtime_waker(g, &hop(11, &["runtime.ready", "runtime.schedule"])),
            Some("the Go runtime")
        );
        // A goroutine's waker is itself; a thread's waits are not the runtime's.
        let unlocker = topwaits_common::golang::tid_of(6);
        assert_eq!(runtime_waker(g, &hop(unlocker, &["runtime.ready", "main.handle"])), None);
        assert_eq!(runtime_waker(12, &timer), None);
    }

    #[test]
    fn a_goroutines_network_wait_is_ended_by_the_network() {
        use crate::model::label::WaitsOn;
        let g = topwaits_common::golang::tid_of(5);
        let mut r = record_with_user(10, g, &["runtime.gopark", "runtime.netpollblock"], 1);
        r.waits_on = Some(WaitsOn::Goroutine { reason: "network I/O".into() });
        assert_eq!(unseen_waker(&r), Some("network"));
        r.waits_on = Some(WaitsOn::Goroutine { reason: "chan receive".into() });
        assert_eq!(unseen_waker(&r), None);
    }
}
