//! `topwaits threads`: per-thread time in each scheduling state (running, on the run
//! queue, sleeping, in I/O) and wake dependencies between traced threads.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
};
use topwaits_common::{
    counter, thread_state, DepKey, ThreadStats, TASK_COMM_LEN, TASK_DEAD, THREAD_EXITED,
    THREAD_STARTED,
};

use crate::maps::{
    count, ended, set_member, settings, task_u32, task_u64, thread_wanted, DEPS, FUTEX_WAKING,
    THREADS,
};
use crate::task::{comm_of, switched_in_at, Outgoing};

const TASK_UNINTERRUPTIBLE: u32 = 0x2;
const TASK_NOLOAD: u32 = 0x400;

/// A task's ids from BTF offsets (the task is not the current one), if the
/// task is a traced thread (not the idle task, and let through by `-p`/`-t`).
#[inline(always)]
fn traced_ids(task: u64) -> Option<(u32, u32)> {
    let s = settings();
    let (tgid, tid) = (task_u32(task, s.task.tgid)?, task_u32(task, s.task.pid)?);
    (tid != 0 && thread_wanted(tgid, tid)).then_some((tgid, tid))
}

/// The stats slot of a thread, created on first sight.
#[inline(always)]
fn slot(
    tgid: u32,
    tid: u32,
    comm: &[u8; TASK_COMM_LEN],
    now: u64,
    flags: u32,
) -> Option<*mut ThreadStats> {
    if let Some(p) = THREADS.get_ptr_mut(&tid) {
        return Some(p);
    }
    let fresh = ThreadStats { tgid, tid, comm: *comm, last_ts: now, flags, ..Default::default() };
    if THREADS.insert(&tid, &fresh, BPF_NOEXIST as u64).is_err()
        && THREADS.get_ptr_mut(&tid).is_none()
    {
        count(counter::LOST_THREADS_FULL, 1);
        return None;
    }
    THREADS.get_ptr_mut(&tid)
}

/// Closes the interval spent in the current state.
#[inline(always)]
fn close(t: &mut ThreadStats, now: u64) {
    let d = now.saturating_sub(t.last_ts);
    // A volatile read keeps the compiler from replacing the mask with what it
    // knows of the state at the call site, which the verifier cannot follow.
    // SAFETY: reading a field of a valid reference.
    let st = unsafe { core::ptr::read_volatile(&t.state) } & 7;
    t.state_ns[st as usize] += d;
    t.last_ts = now;
}

/// Reads priority and policy of a task.
#[inline(always)]
fn sched_params(t: &mut ThreadStats, task: u64) {
    let s = settings();
    if let Some(v) = task_u32(task, s.task.prio) {
        t.prio = v as i32;
    }
    if let Some(v) = task_u32(task, s.task.static_prio) {
        t.static_prio = v as i32;
    }
    if let Some(v) = task_u32(task, s.task.policy) {
        t.policy = v;
    }
    if let Some(v) = task_u32(task, s.task.rt_priority) {
        t.rt_priority = v;
    }
}

/// At sched_switch: `out` leaves the CPU (it is the current task), `next` enters.
#[inline(always)]
pub fn on_switch(out: &Outgoing, next: u64, now: u64) {
    if ended(now) {
        return;
    }
    if out.tid != 0 && thread_wanted(out.tgid, out.tid) {
        let comm = out.comm();
        if let Some(p) = slot(out.tgid, out.tid, &comm, now, 0) {
            // SAFETY: a pointer from a map lookup; only this thread's events touch it.
            let t = unsafe { &mut *p };
            if t.state == thread_state::RUNQ
                || t.state == thread_state::SLEEP
                || t.state == thread_state::IO
            {
                // Switching out while not seen running: the hook missed its switch-in
                // (see `switch::end_unseen`). Run it from when its run time says.
                if let Some(at) = switched_in_at(out.task, now).filter(|&at| at >= t.last_ts) {
                    count(counter::ENDS_ESTIMATED, 1);
                    close(t, at);
                    t.state = thread_state::RUNNING;
                    t.run_events += 1;
                    t.exec_mark = task_u64(out.task, settings().task.prev_sum_exec).unwrap_or(0);
                }
            }
            if t.state == thread_state::RUNNING && t.exec_mark != 0 {
                if let Some(exec) = task_u64(out.task, settings().task.sum_exec) {
                    t.cpu_ns += exec.saturating_sub(t.exec_mark);
                }
            }
            close(t, now);
            t.comm = comm;
            sched_params(t, out.task);
            t.state = if out.state & TASK_DEAD != 0 {
                t.flags |= THREAD_EXITED;
                // Its tid may be reused by a thread outside the cgroup.
                set_member(out.tid, false);
                thread_state::UNKNOWN
            } else if out.state == 0 {
                thread_state::RUNQ
            } else if out.state & TASK_UNINTERRUPTIBLE != 0 && out.state & TASK_NOLOAD == 0 {
                t.sleep_events += 1;
                thread_state::IO
            } else {
                t.sleep_events += 1;
                thread_state::SLEEP
            };
        }
    }
    let Some((tgid, tid)) = traced_ids(next) else { return };
    if let Some(p) = slot(tgid, tid, &comm_of(next), now, 0) {
        // SAFETY: as above.
        let t = unsafe { &mut *p };
        close(t, now);
        t.state = thread_state::RUNNING;
        t.run_events += 1;
        t.exec_mark = task_u64(next, settings().task.sum_exec).unwrap_or(0);
    }
}

/// At sched_waking of `woken`, run by the waker (the current task).
#[inline(always)]
pub fn on_wake(woken: u64) {
    // SAFETY: helper calls without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if ended(now) {
        return;
    }
    let Some((tgid, tid)) = traced_ids(woken) else { return };
    if let Some(p) = THREADS.get_ptr_mut(&tid) {
        // SAFETY: a pointer from a map lookup.
        let t = unsafe { &mut *p };
        if t.state == thread_state::SLEEP || t.state == thread_state::IO {
            close(t, now);
            t.state = thread_state::RUNQ;
        }
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let (wtgid, wtid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    if wtid == 0 || wtid == tid || wtgid != tgid || !thread_wanted(wtgid, wtid) {
        return;
    }
    // SAFETY: the value is a plain u32 that is only tested for presence.
    let futex = unsafe { FUTEX_WAKING.get(&wtid) }.is_some();
    let key = DepKey { waker: wtid, sleeper: tid, futex: u32::from(futex), _pad: 0 };
    if let Some(c) = DEPS.get_ptr_mut(&key) {
        // SAFETY: a pointer from a map lookup; a lost increment under a race is
        // acceptable for a dependency count.
        unsafe { *c += 1 };
    } else if DEPS.insert(&key, &1, BPF_NOEXIST as u64).is_err() {
        count(counter::LOST_DEPS_FULL, 1);
    }
}

/// At sched_wakeup_new: a thread or process starts during the trace.
#[inline(always)]
pub fn on_new(task: u64) {
    // SAFETY: helper calls without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if ended(now) {
        return;
    }
    let Some((tgid, tid)) = traced_ids(task) else { return };
    if let Some(p) = slot(tgid, tid, &comm_of(task), now, THREAD_STARTED) {
        // SAFETY: a pointer from a map lookup.
        let t = unsafe { &mut *p };
        t.flags |= THREAD_STARTED;
        t.state = thread_state::RUNQ;
        t.last_ts = now;
    }
}
