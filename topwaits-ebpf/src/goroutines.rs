//! Goroutine waits (Go programs): a goroutine's park, its wakeup with its
//! waker's stack, and its wait ended when the scheduler runs it again, added
//! to the aggregate as a thread's wait is. The hooks are uprobes on the
//! runtime's `gopark`, `ready` and `execute`, entered with Go's register ABI:
//! the running `g` in r14, the first arguments in rax, rbx, rcx.

use aya_ebpf::{
    bindings::pt_regs,
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::{HashMap, LruHashMap},
};
use topwaits_common::{
    counter,
    golang::{
        tid_of, GoKey, GoPark, GoProc, GoRunning, MAX_GO_PARKED, MAX_GO_PROCS, MAX_GO_THREADS,
    },
    what, Hop, WaitKey, What, STACK_NONE,
};

use crate::gostack;
use crate::maps::{count, ended, settings, thread_wanted, CHAINS, SCRATCH_HOPS};
use crate::stackref;
use crate::switch::{finish, in_block_time, Ended};
use crate::uread::user_word;

/// The Go processes whose goroutines are traced, with their layout (by tgid).
#[map]
pub static GO_PROCS: HashMap<u32, GoProc> = HashMap::with_max_entries(MAX_GO_PROCS, 0);

/// Goroutines parked and not yet run again.
#[map]
static GO_PARKED: LruHashMap<GoKey, GoPark> = LruHashMap::with_max_entries(MAX_GO_PARKED, 0);

/// The goroutine each thread of a traced Go process runs (by tid).
#[map]
static GO_RUNNING: LruHashMap<u32, GoRunning> = LruHashMap::with_max_entries(MAX_GO_THREADS, 0);

/// A `sleep`-like state for a goroutine's wait: it blocked (it was not preempted).
const PARKED_STATE: u32 = 1;

struct Current {
    tgid: u32,
    tid: u32,
    proc: GoProc,
}

/// The calling thread, where it belongs to a traced Go process.
#[inline(always)]
fn current() -> Option<Current> {
    let id = bpf_get_current_pid_tgid();
    let tgid = (id >> 32) as u32;
    // SAFETY: a lookup of a plain value, copied out.
    let proc = unsafe { *GO_PROCS.get(&tgid)? };
    let tid = id as u32;
    thread_wanted(tgid, tid).then_some(Current { tgid, tid, proc })
}

/// A goroutine's id, from its `g`: where the layout is not known, its `g`
/// tells it apart instead.
#[inline(always)]
fn goid(g: u64, proc: &GoProc) -> u64 {
    if proc.goid_off == 0 {
        return g >> 3;
    }
    user_word(g + proc.goid_off as u64).unwrap_or(0)
}

#[inline(always)]
fn now() -> u64 {
    // SAFETY: a helper call without preconditions.
    unsafe { bpf_ktime_get_ns() }
}

/// `runtime.gopark(unlockf, lock, reason, ...)`: the running goroutine parks.
#[inline(always)]
pub fn park(regs: &pt_regs) {
    let Some(cur) = current() else { return };
    let g = regs.r14;
    let now = now();
    if g == 0 || ended(now) {
        return;
    }
    let goid = goid(g, &cur.proc);
    let ustack = gostack::walk(regs, (0, u64::MAX)).stack;
    let park = GoPark {
        ts: now,
        woken: 0,
        goid,
        ustack,
        chain: 0,
        reason: (regs.rcx & 0xff) as u32,
        _pad: 0,
        comm: bpf_get_current_comm().unwrap_or_default(),
    };
    let _ = GO_PARKED.insert(&GoKey { g, tgid: cur.tgid, _pad: 0 }, &park, 0);
    if settings().waker != 0 {
        // The thread runs no goroutine until the scheduler picks the next.
        let _ = GO_RUNNING.remove(&cur.tid);
    }
}

/// `runtime.ready(gp, ...)`, run on the system stack: `gp` is made runnable.
/// Its waker is the goroutine whose stack the walk reaches (the one that
/// switched to the system stack to call it), or the scheduler itself (timers,
/// the network poller) when the walk stays on the system stack.
#[inline(always)]
pub fn ready(regs: &pt_regs) {
    let Some(cur) = current() else { return };
    let key = GoKey { g: regs.rax, tgid: cur.tgid, _pad: 0 };
    let Some(parked) = GO_PARKED.get_ptr_mut(&key) else { return };
    // SAFETY: a pointer from a map lookup; a goroutine is readied once per park.
    let parked = unsafe { &mut *parked };
    if parked.woken != 0 {
        return;
    }
    let g0 = regs.r14;
    let bounds = (user_word(g0).unwrap_or(0), user_word(g0 + 8).unwrap_or(u64::MAX));
    let walked = gostack::walk(regs, bounds);
    let tid = match GO_RUNNING.get_ptr(&cur.tid) {
        // SAFETY: a pointer from a map lookup, read once.
        Some(r) if walked.left_bounds => tid_of(unsafe { (*r).goid }),
        _ => cur.tid,
    };
    let Some(hops) = SCRATCH_HOPS.get_ptr_mut(0) else { return };
    // SAFETY: this CPU's scratch slot, used by this program run alone.
    let hops = unsafe { &mut *hops };
    hops.len = 1;
    hops._pad = 0;
    for h in hops.hops.iter_mut() {
        *h = Hop::default();
    }
    hops.hops[0] = Hop {
        tgid: cur.tgid,
        tid,
        kstack: STACK_NONE,
        ustack: walked.stack,
        comm: bpf_get_current_comm().unwrap_or_default(),
    };
    let chain = crate::wake::chain_ref(hops);
    parked.chain = stackref::keep(&CHAINS, chain, hops, counter::LOST_CHAINS_FULL);
    parked.woken = now();
    count(counter::GO_WAKEUPS, 1);
}

/// `runtime.execute(gp, ...)`: the scheduler runs `gp` on this thread. A
/// parked goroutine's wait ends here, and is added as a wait of the goroutine.
#[inline(always)]
pub fn execute(regs: &pt_regs) {
    let Some(cur) = current() else { return };
    let g = regs.rax;
    if settings().waker != 0 {
        // Who wakes others from this thread's goroutine stack (see `ready`).
        let goid = goid(g, &cur.proc);
        let _ = GO_RUNNING.insert(&cur.tid, &GoRunning { g, goid }, 0);
    }
    let key = GoKey { g, tgid: cur.tgid, _pad: 0 };
    // SAFETY: a lookup of a plain value, copied out.
    let Some(p) = (unsafe { GO_PARKED.get(&key).copied() }) else { return };
    let _ = GO_PARKED.remove(&key);
    let now = now();
    if p.ts == 0 || now < p.ts || ended(now) || !in_block_time(now - p.ts) {
        return;
    }
    let row = WaitKey {
        kstack: STACK_NONE,
        ustack: p.ustack,
        tgid: cur.tgid,
        tid: tid_of(p.goid),
        comm: p.comm,
        what: What { nr: 0, flags: what::GOROUTINE, arg0: p.reason as u64, obj: p.goid },
    };
    count(counter::GO_WAITS, 1);
    finish(&row, p.ts, now, Ended { state: PARKED_STATE, woken: p.woken, chain: p.chain }, None);
}
