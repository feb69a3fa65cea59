//! The scheduling class of topwaits' own background threads: work that can
//! wait (building unwind tables) runs only when a CPU would otherwise idle, so
//! that it never takes a CPU from the workload being traced.

/// Puts the calling thread in the idle scheduling class (`SCHED_IDLE`), or,
/// where that is refused, at the lowest nice value. Says which it got.
pub fn lowest_for_this_thread() -> &'static str {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler on the calling thread (0) with a valid param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0 {
        return "SCHED_IDLE";
    }
    // SAFETY: gettid has no preconditions; setpriority on this thread only.
    let tid = unsafe { libc::gettid() };
    // SAFETY: as above; a failure leaves the priority as it was.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19) } == 0 {
        return "nice 19";
    }
    "unchanged"
}

/// Puts the calling thread back in the normal class (`SCHED_OTHER`, nice 0),
/// where the system allows it (root does); says whether it did.
pub fn normal_for_this_thread() -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler on the calling thread (0) with a valid param.
    let ok = unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) } == 0;
    // SAFETY: gettid has no preconditions; setpriority on this thread only.
    let tid = unsafe { libc::gettid() };
    // SAFETY: as above; a refusal leaves the nice value as it was.
    ok && unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 0) } == 0
}

/// The calling thread's scheduling policy (`SCHED_IDLE` is 5).
pub fn policy_of_this_thread() -> i32 {
    // SAFETY: sched_getscheduler on the calling thread has no preconditions.
    unsafe { libc::sched_getscheduler(0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_can_go_idle_and_its_siblings_keep_their_class() {
        let before = policy_of_this_thread();
        let (got, policy) =
            std::thread::spawn(|| (lowest_for_this_thread(), policy_of_this_thread()))
                .join()
                .unwrap();
        // Any thread may lower its own priority, privileged or not.
        assert_eq!(got, "SCHED_IDLE");
        assert_eq!(policy, libc::SCHED_IDLE);
        assert_eq!(policy_of_this_thread(), before, "only the calling thread changes");
        if unsafe { libc::geteuid() } == 0 {
            let back = std::thread::spawn(|| {
                lowest_for_this_thread();
                (normal_for_this_thread(), policy_of_this_thread())
            });
            assert_eq!(back.join().unwrap(), (true, libc::SCHED_OTHER), "root may take it back");
        }
    }
}
