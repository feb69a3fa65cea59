//! Telling a wakeup from interrupt context from a task's, by the waker's kernel
//! stack: interrupt hops are labelled, cut at their entry and stripped of the
//! task they happened to hit.

use crate::model::{Frame, Hop, Stack};

/// Frames that mark a kernel stack as taken in interrupt (hard or soft) context.
fn is_interrupt_entry(name: &str) -> bool {
    name.starts_with("asm_sysvec_")
        || name.starts_with("asm_common_interrupt")
        || name.starts_with("sysvec_")
        || name.starts_with("__sysvec_")
        || name == "common_interrupt"
        || name == "handle_softirqs"
        || name == "__do_softirq"
        || name == "irq_exit_rcu"
        || name == "__irq_exit_rcu"
        || name == "hrtimer_interrupt"
}

/// Softirq entry frames, the ones of [`is_interrupt_entry`] that a task may also
/// reach itself.
fn is_softirq_entry(name: &str) -> bool {
    name == "handle_softirqs" || name == "__do_softirq"
}

/// Whether the softirq whose entry is frame `entry` ran for the task itself: the
/// task re-enabled bottom halves (`local_bh_enable`, as the network stack does
/// after queueing a packet, so a loopback send wakes its receiver this way) and
/// the kernel ran the pending softirqs right there, with no hard interrupt
/// anywhere on the stack. The wakeup is then the task's doing.
fn softirq_of_the_task<F: AsRef<Frame>>(frames: &[F], entry: usize) -> bool {
    fn name<F: AsRef<Frame>>(f: &F) -> &str {
        f.as_ref().symbol.as_deref().unwrap_or("")
    }
    is_softirq_entry(name(&frames[entry]))
        && !frames.iter().any(|f| is_interrupt_entry(name(f)) && !is_softirq_entry(name(f)))
        && frames[entry + 1..].iter().take(3).any(|f| {
            let n = name(f);
            n.starts_with("__local_bh_enable")
                || n.starts_with("local_bh_enable")
                || n.starts_with("_local_bh_enable")
        })
}

/// Marks a waker hop whose kernel stack ran in interrupt context, and cuts its
/// stack after the outermost interrupt-entry frame: the rest belongs to whatever
/// task the interrupt hit, as do its user stack and its ids, which are dropped.
/// A softirq that the task ran itself when it re-enabled bottom halves is the
/// task's: its hop stays whole.
pub fn classify_interrupt(hop: &mut Hop) {
    let Stack::Frames(frames) = &hop.kernel else {
        return;
    };
    let last = frames.iter().rposition(|f| f.symbol.as_deref().is_some_and(is_interrupt_entry));
    if let Some(i) = last.filter(|&i| !softirq_of_the_task(frames, i)) {
        // Keep the asm_ entry frame itself if it directly follows.
        let keep = match frames.get(i + 1) {
            Some(f) if f.symbol.as_deref().is_some_and(|n| n.starts_with("asm_")) => i + 2,
            _ => i + 1,
        };
        hop.kernel = Stack::shared(frames[..keep].to_vec());
        hop.interrupt = true;
        hop.user = Stack::None;
        (hop.tgid, hop.tid) = (0, 0);
        hop.comm.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str) -> Frame {
        Frame { addr: 1, symbol: Some(name.into()), module: None, offset: None }
    }

    fn hop_with(kernel: &[&str]) -> Hop {
        Hop {
            tgid: 5,
            tid: 6,
            comm: b"busy".to_vec(),
            kernel: Stack::of(kernel.iter().copied().map(frame).collect()),
            user: Stack::of(vec![frame("main")]),
            interrupt: false,
        }
    }

    #[test]
    fn timer_interrupt_wakeups_are_labelled_and_cut_at_the_entry() {
        let mut h = hop_with(&[
            "try_to_wake_up",
            "hrtimer_wakeup",
            "__hrtimer_run_queues",
            "hrtimer_interrupt",
            "__sysvec_apic_timer_interrupt",
            "sysvec_apic_timer_interrupt",
            "asm_sysvec_apic_timer_interrupt",
            "pv_native_safe_halt",
            "default_idle",
        ]);
        classify_interrupt(&mut h);
        assert!(h.interrupt);
        assert_eq!(h.user, Stack::None);
        let names: Vec<_> = h.kernel.frames().iter().map(|f| f.name().to_string()).collect();
        assert_eq!(names.last().map(String::as_str), Some("asm_sysvec_apic_timer_interrupt"));
        assert!(!names.contains(&"default_idle".to_string()));
    }

    /// The tail of a loopback TCP send: the receiver is woken from the softirq that
    /// the sender runs when it re-enables bottom halves.
    const LOOPBACK_SEND: [&str; 12] = [
        "try_to_wake_up",
        "sock_def_readable",
        "tcp_v4_rcv",
        "net_rx_action",
        "handle_softirqs",
        "do_softirq.part.0",
        "__local_bh_enable_ip",
        "__dev_queue_xmit",
        "tcp_sendmsg",
        "__x64_sys_sendto",
        "do_syscall_64",
        "entry_SYSCALL_64_after_hwframe",
    ];

    #[test]
    fn a_softirq_the_task_ran_itself_keeps_the_task_as_the_waker() {
        let mut h = hop_with(&LOOPBACK_SEND);
        let before = h.clone();
        classify_interrupt(&mut h);
        assert_eq!(h, before, "the sender is the waker, with its whole stack");
    }

    #[test]
    fn a_softirq_run_at_a_hard_interrupt_exit_is_an_interrupt() {
        let mut h = hop_with(&[
            "try_to_wake_up",
            "sock_def_readable",
            "net_rx_action",
            "handle_softirqs",
            "__irq_exit_rcu",
            "irq_exit_rcu",
            "sysvec_apic_timer_interrupt",
            "asm_sysvec_apic_timer_interrupt",
            "busy_loop",
        ]);
        classify_interrupt(&mut h);
        assert!(h.interrupt);
        assert_eq!((h.tgid, h.tid, h.user.clone()), (0, 0, Stack::None));
        assert!(!h.kernel.frames().iter().any(|f| f.name() == "busy_loop"));
    }

    #[test]
    fn a_hard_interrupt_inside_a_task_run_softirq_is_still_an_interrupt() {
        // A timer interrupt that hit while the task ran its softirqs, and woke
        // someone itself.
        let mut frames = vec![
            "try_to_wake_up",
            "hrtimer_wakeup",
            "hrtimer_interrupt",
            "sysvec_apic_timer_interrupt",
            "asm_sysvec_apic_timer_interrupt",
        ];
        frames.extend_from_slice(&LOOPBACK_SEND[2..]);
        let mut h = hop_with(&frames);
        classify_interrupt(&mut h);
        assert!(h.interrupt);
        assert_eq!((h.tgid, h.tid), (0, 0));
    }

    #[test]
    fn ksoftirqd_running_softirqs_is_still_an_interrupt() {
        let mut h = hop_with(&[
            "try_to_wake_up",
            "net_rx_action",
            "handle_softirqs",
            "run_ksoftirqd",
            "smpboot_thread_fn",
            "kthread",
        ]);
        classify_interrupt(&mut h);
        assert!(h.interrupt);
    }

    #[test]
    fn task_context_wakeups_stay_as_they_are() {
        let mut h = hop_with(&["try_to_wake_up", "pipe_write", "vfs_write", "ksys_write"]);
        let before = h.clone();
        classify_interrupt(&mut h);
        assert_eq!(h, before);
    }
}
