//! Waker accounting for `--waker`: the chain a wakeup leaves on the woken task
//! (kept once in `CHAINS`, referred to by hash), and the split of each wait at its wakeup into blocked and run-queue time.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task, bpf_ktime_get_ns,
    },
    programs::tracing::StackIdContext,
};
use topwaits_common::{
    counter, wake_kind, Chain, Hop, Hops, WaitKey, WakeVal, MAX_CHAIN, STACK_STORED,
};

use crate::kcache::Hook;
use crate::maps::{
    count, settings, upsert, CHAINS, LAST_WAKE, SCRATCH_HOPS, SCRATCH_KEY, STARTS, WAKE_WAITS,
};
use crate::stackref;
use crate::task::capture_stacks;

/// The seed of chain references, apart from the stacks' (see `stackref::hash`).
const CHAIN_SEED: u64 = 0x4528_21e6_38d0_1377;

/// The reference of the first `len` hops of `h`: a hash of their words.
#[inline(always)]
pub fn chain_ref(h: &Hops) -> u64 {
    let mut x = CHAIN_SEED ^ h.len as u64;
    for (i, hop) in h.hops.iter().enumerate() {
        if i as u32 >= h.len {
            break;
        }
        let comm = |k: usize| {
            u64::from_ne_bytes([
                hop.comm[k],
                hop.comm[k + 1],
                hop.comm[k + 2],
                hop.comm[k + 3],
                hop.comm[k + 4],
                hop.comm[k + 5],
                hop.comm[k + 6],
                hop.comm[k + 7],
            ])
        };
        for w in
            [(hop.tgid as u64) << 32 | hop.tid as u64, hop.kstack, hop.ustack, comm(0), comm(8)]
        {
            x = stackref::mix(x, w);
        }
    }
    x | STACK_STORED
}

/// At `sched_waking(p)`: stores, against `p`, the time and the reference of its
/// chain: the waker as hop 0 followed by the first `chain - 1` hops of the
/// waker's own last wakeup.
#[inline(always)]
pub fn record_wakeup<C: StackIdContext, const CFI: bool>(ctx: &C, woken: u64) {
    let s = settings();
    count(counter::WAKINGS, 1);
    if s.threads != 0 {
        crate::threads::on_wake(woken);
        return;
    }
    let start = STARTS.get_ptr_mut(&woken);
    // SAFETY: a pointer from a map lookup.
    let traced = start.is_some_and(|st| unsafe { (*st).ts } != 0);
    if s.chain <= 1 && !traced {
        // Only a wait being traced needs its waker; deeper chains need every
        // task's last wakeup, since any task may wake a traced one later.
        return;
    }
    let Some(scratch) = SCRATCH_HOPS.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU scratch, used by this program run alone.
    let h = unsafe { &mut *scratch };
    // SAFETY: helper calls without preconditions.
    let ts = unsafe { bpf_ktime_get_ns() };
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: a helper call without preconditions.
    let me = unsafe { bpf_get_current_task() };
    let (kstack, ustack) = capture_stacks::<C, CFI>(ctx, Some((me, Hook::Waking)));
    h.hops[0] = Hop {
        tgid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        kstack,
        ustack,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
    };
    let mut len = 1u32;
    // SAFETY: pointers from map lookups; a torn read only mislabels a hop.
    let prev = if s.chain > 1 {
        LAST_WAKE.get_ptr(&me).and_then(|c| CHAINS.get_ptr(unsafe { &(*c).chain }))
    } else {
        None
    };
    for i in 1..MAX_CHAIN {
        h.hops[i] = Hop::default();
        if let Some(p) = prev {
            // SAFETY: as above.
            let p = unsafe { &*p };
            if (i as u32) < s.chain && ((i - 1) as u32) < p.len {
                h.hops[i] = p.hops[i - 1];
                len += 1;
            }
        }
    }
    h.len = len;
    let chain = stackref::keep(&CHAINS, chain_ref(h), h, counter::LOST_CHAINS_FULL);
    if chain & STACK_STORED == 0 {
        return;
    }
    if let Some(st) = start {
        // SAFETY: a pointer from a map lookup. The chain is written before the time
        // that makes it current, so a reader that sees the new time (x86-64 keeps
        // stores in order) sees the new chain; elsewhere a torn read only
        // mislabels one wait's waker.
        unsafe {
            core::ptr::write_volatile(&raw mut (*st).chain, chain);
            core::ptr::write_volatile(&raw mut (*st).woken, ts);
        }
    }
    if s.chain <= 1 {
        return;
    }
    let last = Chain { ts, chain };
    if let Some(slot) = LAST_WAKE.get_ptr_mut(&woken) {
        // SAFETY: a pointer from a map lookup.
        unsafe { *slot = last };
    } else if LAST_WAKE.insert(&woken, &last, BPF_NOEXIST as u64).is_err() {
        count(counter::LOST_WAKE_FULL, 1);
    }
}

/// At switch-in: builds the waker key for the wait that began at `began` and adds it.
#[inline(always)]
/// `woken` and `chain`: the task's last wakeup, from its start entry.
pub fn account(
    target: &WaitKey,
    began: u64,
    state: u32,
    delta: u64,
    now: u64,
    woken: u64,
    chain: u64,
) {
    let Some(kp) = SCRATCH_KEY.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU scratch, used by this program run alone.
    let key = unsafe { &mut *kp };
    key.target = *target;
    key.kind = if state == 0 { wake_kind::PREEMPTED } else { wake_kind::NO_WAKER };
    key.chain = 0;
    let mut blocked = if state == 0 { 0 } else { delta };
    if topwaits_common::woke_wait(woken, chain, began, now) {
        key.kind = wake_kind::WOKEN;
        key.chain = chain;
        blocked = woken - began;
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
