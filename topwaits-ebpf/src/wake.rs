//! Waker accounting for `--waker`: the chain a wakeup leaves on the woken task, and
//! the split of each wait at its wakeup into blocked and run-queue time.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task, bpf_ktime_get_ns},
    programs::tracing::StackIdContext,
};
use topwaits_common::{counter, wake_kind, Hop, WaitKey, WakeVal, MAX_CHAIN};

use crate::maps::{count, upsert, LAST_WAKE, SCRATCH_CHAIN, SCRATCH_KEY, SETTINGS, STARTS, WAKE_WAITS};
use crate::kcache::Hook;
use crate::task::capture_stacks;

/// At `sched_waking(p)`: stores, against `p`, the waker as hop 0 followed by the
/// first `chain - 1` hops of the waker's own last wakeup.
#[inline(always)]
pub fn record_wakeup<C: StackIdContext>(ctx: &C, woken: u64) {
    let s = SETTINGS.load();
    count(counter::WAKINGS, 1);
    if s.threads != 0 {
        crate::threads::on_wake(woken);
        return;
    }
    if s.chain <= 1 {
        // Only a wait being traced needs its waker; deeper chains need every
        // task's last wakeup, since any task may wake a traced one later.
        match STARTS.get_ptr(&woken) {
            // SAFETY: a pointer from a map lookup.
            Some(st) if unsafe { (*st).ts } != 0 => {}
            _ => return,
        }
    }
    let Some(scratch) = SCRATCH_CHAIN.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU scratch, used by this program run alone.
    let c = unsafe { &mut *scratch };
    // SAFETY: helper calls without preconditions.
    c.ts = unsafe { bpf_ktime_get_ns() };
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: a helper call without preconditions.
    let me = unsafe { bpf_get_current_task() };
    let (kstack, ustack) = capture_stacks(ctx, Some((me, Hook::Waking)));
    c.hops[0] = Hop {
        tgid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        kstack,
        ustack,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
    };
    let mut len = 1u32;
    let prev = if s.chain > 1 { LAST_WAKE.get_ptr(&me) } else { None };
    for i in 1..MAX_CHAIN {
        c.hops[i] = Hop::default();
        if let Some(p) = prev {
            // SAFETY: a pointer from a map lookup; a torn read only mislabels a hop.
            let p = unsafe { &*p };
            if (i as u32) < s.chain && ((i - 1) as u32) < p.len {
                c.hops[i] = p.hops[i - 1];
                len += 1;
            }
        }
    }
    c.len = len;
    if let Some(slot) = LAST_WAKE.get_ptr_mut(&woken) {
        // SAFETY: a pointer from a map lookup.
        unsafe { *slot = *c };
    } else if LAST_WAKE.insert(&woken, &*c, BPF_NOEXIST as u64).is_err() {
        count(counter::LOST_WAKE_FULL, 1);
    }
}

/// At switch-in: builds the waker key for the wait that began at `began` and adds it.
#[inline(always)]
pub fn account(task: u64, target: &WaitKey, began: u64, state: u32, delta: u64, now: u64) {
    let Some(kp) = SCRATCH_KEY.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU scratch, used by this program run alone.
    let key = unsafe { &mut *kp };
    key.target = *target;
    let mut blocked = delta;
    key.kind = if state == 0 { wake_kind::PREEMPTED } else { wake_kind::NO_WAKER };
    key.len = 0;
    if state == 0 {
        blocked = 0;
    }
    let chain = LAST_WAKE.get_ptr(&task);
    // SAFETY: a pointer from a map lookup.
    let chain = chain.map(|c| unsafe { &*c }).filter(|c| c.ts >= began && c.ts <= now);
    for i in 0..MAX_CHAIN {
        key.hops[i] = Hop::default();
        if let Some(c) = chain {
            if (i as u32) < c.len {
                key.hops[i] = c.hops[i];
            }
        }
    }
    if let Some(c) = chain {
        key.kind = wake_kind::WOKEN;
        key.len = c.len;
        blocked = c.ts - began;
    }
    let runq = delta - blocked;
    let fold = |v: *mut WakeVal| {
        // SAFETY: a pointer from a map lookup; the key names one thread, which
        // switches in on one CPU at a time.
        let v = unsafe { &mut *v };
        v.total_ns += delta;
        v.count += 1;
        v.blocked_ns += blocked;
        v.runq_ns += runq;
        if delta > v.max_ns {
            v.max_ns = delta;
            v.max_end_ns = now;
        }
        if blocked > v.max_blocked_ns {
            v.max_blocked_ns = blocked;
        }
        if runq > v.max_runq_ns {
            v.max_runq_ns = runq;
        }
    };
    let fresh = WakeVal {
        total_ns: delta,
        count: 1,
        max_ns: delta,
        max_end_ns: now,
        blocked_ns: blocked,
        runq_ns: runq,
        max_blocked_ns: blocked,
        max_runq_ns: runq,
    };
    upsert(&WAKE_WAITS, &*key, &fresh, delta, fold);
}
