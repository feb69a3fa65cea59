//! Hook: the `sched_process_fork` tracepoint (tp_btf and raw_tp). A forked process
//! maps what its parent does until it execs, so user space shares the parent's
//! maps with it instead of reading its own: under fork-heavy work (`perf bench
//! sched messaging` forks 40 processes a group) that reading was most of the
//! user side's CPU. The walker's copy is made here, at once. With `--cgroup` it
//! also adds the new thread to the traced set when it is in the cgroup: by its
//! own cgroup (`CLONE_INTO_CGROUP` puts it apart from its parent), or, where
//! that cannot be read, when its parent is in it.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{btf_tracepoint, raw_tracepoint},
    programs::{BtfTracePointContext, RawTracePointContext},
};
use topwaits_common::{proc_event::FORK, thread_filter, ProcEvent};

use crate::maps::{send_proc_event, set_member, settings, task_u32, thread_wanted, told_at_fork};

/// Tells user space about a new process (not a thread) that the filters trace.
/// With `--cgroup`, a thread or process forked by a traced thread is in its
/// cgroup, so it is traced from its first switch.
#[inline(always)]
fn on_fork(child: u64) {
    let s = settings();
    if s.events == 0 && s.thread_filter != thread_filter::CGROUP {
        return;
    }
    let (Some(pid), Some(tgid)) = (task_u32(child, s.task.pid), task_u32(child, s.task.tgid))
    else {
        return;
    };
    if s.thread_filter == thread_filter::CGROUP {
        // Its own cgroup where it can be read (a fork with CLONE_INTO_CGROUP
        // lands elsewhere than its parent), else its parent's.
        let inside = crate::cgroup_attach_task::task_under_target(child).unwrap_or_else(|| {
            let current = bpf_get_current_pid_tgid();
            thread_wanted((current >> 32) as u32, current as u32)
        });
        if inside {
            set_member(pid, true);
        }
    }
    if s.events == 0 {
        return;
    }
    if pid != tgid {
        return;
    }
    let wanted = thread_wanted(tgid, pid);
    told_at_fork(tgid, wanted);
    if !wanted {
        return;
    }
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    let maps_version = if s.cfi != 0 { crate::uwalk::inherit(parent, tgid) } else { 0 };
    send_proc_event(&ProcEvent { tgid, kind: FORK, parent, maps_version });
}

#[btf_tracepoint(function = "sched_process_fork")]
pub fn sched_process_fork_btf(ctx: BtfTracePointContext) -> i32 {
    // sched_process_fork's arguments are (parent, child) task pointers.
    on_fork(ctx.arg(1));
    0
}

#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub fn sched_process_fork_raw(ctx: RawTracePointContext) -> i32 {
    // The same pointers as tp_btf's.
    on_fork(ctx.arg(1));
    0
}
