//! Goroutine waits (Go programs): a goroutine's park, seen when its thread
//! next runs the scheduler's choice or sleeps; its wakeup with its waker's
//! stack; and its wait ended when the scheduler runs it again, added to the
//! aggregate as a thread's wait is.
//!
//! One uprobe per goroutine switch: on the runtime's `execute`, where a thread
//! starts the goroutine it chose. The goroutine the thread ran before has
//! parked if its status says it waits; its wait began then, or when the
//! thread went to sleep in the scheduler instead (`thread_leaves`, from the
//! kernel's switch), whichever came first. Its stack is walked when it runs
//! again, from what it saved at the park. `ready` (with `--waker`) gives the
//! waker's stack. The uprobes enter with Go's register ABI: the running `g`
//! in r14, the first arguments in rax, rbx, rcx.

use aya_ebpf::{
    bindings::{pt_regs, BPF_NOEXIST},
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::{HashMap, LruHashMap},
};
use topwaits_common::{
    counter,
    golang::{
        tid_of, GoKey, GoPark, GoProc, GoRanOn, GoRunning, G_RUNNING, G_WAITING, MAX_GO_PARKED,
        MAX_GO_PROCS, MAX_GO_THREADS,
    },
    limits, what, Hop, WaitKey, What, STACK_NONE,
};

use crate::gostack;
use crate::maps::{
    aggregate_rows, count, ended, settings, thread_wanted, CHAINS, GROWS, SCRATCH_HOPS,
};
use crate::stackref;
use crate::switch::{finish, in_block_time, Ended};
use crate::uread::user_word;

/// The Go processes whose goroutines are traced, with their layout (by tgid).
#[map]
pub static GO_PROCS: HashMap<u32, GoProc> = HashMap::with_max_entries(MAX_GO_PROCS, 0);

/// Goroutines parked and not yet run again.
#[map]
static GO_PARKED: LruHashMap<GoKey, GoPark> = LruHashMap::with_max_entries(MAX_GO_PARKED, 0);

/// The goroutine each thread of a traced Go process last started (by tid); 0
/// once its park is taken.
#[map]
static GO_RUNNING: LruHashMap<u32, GoRunning> = LruHashMap::with_max_entries(MAX_GO_THREADS, 0);

/// How many times the scheduler started each goroutine on each thread, but
/// for a start on the thread it parked from, counted already when it first
/// started there: so a goroutine that stays on its thread costs no update.
/// Not counted while goroutines are kept by stack ([`by_stack`]).
/// Read by user space at the end. Sized at load time (`--max-entries`) and
/// allocated as pairs arrive; a pair that finds it full is counted
/// (`GO_RAN_ON_FULL`), and `serve` deletes the pairs of goroutines gone quiet.
#[map]
static GO_RAN_ON: HashMap<GoRanOn, u64> =
    HashMap::with_max_entries(limits::DEFAULT_MAX_ENTRIES, GROWS);

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

/// A word of a goroutine's `g` at `off` from its goid.
#[inline(always)]
fn g_word(g: u64, proc: &GoProc, off: i64) -> u64 {
    user_word((g as i64 + proc.goid_off as i64 + off) as u64).unwrap_or(0)
}

#[inline(always)]
fn now() -> u64 {
    // SAFETY: a helper call without preconditions.
    unsafe { bpf_ktime_get_ns() }
}

/// Takes the park of `prev`, the goroutine this thread ran last, if it now
/// waits: its wait began no later than `now`. Whether it was taken.
#[inline(always)]
fn take_park(prev: &GoRunning, cur: &Current, now: u64) -> bool {
    if status(prev.g, &cur.proc) != G_WAITING {
        return false;
    }
    let park = GoPark {
        ts: now,
        woken: 0,
        goid: prev.goid,
        chain: 0,
        // waitreason (a byte) is three words after the goid, past schedlink
        // and waitsince.
        reason: (g_word(prev.g, &cur.proc, 24) & 0xff) as u32,
        tid: cur.tid,
        comm: bpf_get_current_comm().unwrap_or_default(),
    };
    let key = GoKey { g: prev.g, tgid: cur.tgid, _pad: 0 };
    let _ = GO_PARKED.insert(&key, &park, BPF_NOEXIST as u64);
    true
}

/// Whether goroutine rows are kept by stack alone (goid 0: "goroutines") rather
/// than one per goroutine: once the aggregate holds `go_merge_rows` rows, so
/// that a program starting goroutines by the thousand still fits.
#[inline(always)]
fn by_stack() -> bool {
    let at = settings().go_merge_rows;
    at != 0 && aggregate_rows() >= at as u64
}

/// The `_Gscan` bit the garbage collector sets on a status while it scans.
const G_SCAN: u32 = 0x1000;

/// A goroutine's `atomicstatus` (the word before its goid, its low half),
/// without the scan bit.
#[inline(always)]
fn status(g: u64, proc: &GoProc) -> u32 {
    g_word(g, proc, -8) as u32 & !G_SCAN
}

/// The kernel switches a thread out: a thread of a traced Go process that
/// leaves the processor with its last goroutine parked sleeps in the
/// scheduler, and that goroutine's wait began no later than now.
#[inline(always)]
pub fn thread_leaves() {
    let id = bpf_get_current_pid_tgid();
    let Some(r) = GO_RUNNING.get_ptr_mut(&(id as u32)) else { return };
    // SAFETY: a pointer from a map lookup; only this thread's events touch it.
    let r = unsafe { &mut *r };
    if r.g == 0 {
        return;
    }
    let Some(cur) = current() else { return };
    if take_park(r, &cur, now()) {
        r.g = 0;
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
    // The walk also leaves the system stack into a goroutine that parked
    // (`mcall` keeps its frame pointer), so that goroutine must be running.
    // SAFETY: a lookup of a plain value, copied out.
    let tid = match unsafe { GO_RUNNING.get(&cur.tid).copied() } {
        Some(r) if walked.left_bounds && r.g != 0 && status(r.g, &cur.proc) == G_RUNNING => {
            tid_of(if by_stack() { 0 } else { r.goid })
        }
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

/// Counts one start of a goroutine on a thread.
#[inline(always)]
fn ran_on(key: GoRanOn) {
    match GO_RAN_ON.get_ptr_mut(&key) {
        // SAFETY: a pointer from a map lookup; the key names this thread, so
        // only this thread's events touch it.
        Some(n) => unsafe { *n += 1 },
        None => {
            if GO_RAN_ON.insert(&key, &1, 0).is_err() {
                count(counter::GO_RAN_ON_FULL, 1);
            }
        }
    }
}

/// `runtime.execute(gp, ...)`: the scheduler runs `gp` on this thread. The
/// goroutine the thread ran before has parked if it waits now; `gp`'s own
/// wait, if it was parked, ends here and is added as a wait of the goroutine.
#[inline(always)]
pub fn execute(regs: &pt_regs) {
    let Some(cur) = current() else { return };
    let g = regs.rax;
    let now = now();
    let goid = g_word(g, &cur.proc, 0);
    let running = GoRunning { g, goid };
    let key = GoKey { g, tgid: cur.tgid, _pad: 0 };
    // SAFETY: a lookup of a plain value, copied out.
    let parked = unsafe { GO_PARKED.get(&key).copied() };
    // Once goroutines are kept by stack, no row to come names one.
    if parked.is_none_or(|p| p.tid != cur.tid) && !by_stack() {
        ran_on(GoRanOn { goid, tgid: cur.tgid, tid: cur.tid });
    }
    match GO_RUNNING.get_ptr_mut(&cur.tid) {
        Some(r) => {
            // SAFETY: a pointer from a map lookup; only this thread's events touch it.
            let r = unsafe { &mut *r };
            if r.g != 0 && r.g != g {
                take_park(r, &cur, now);
            }
            *r = running;
        }
        None => {
            let _ = GO_RUNNING.insert(&cur.tid, &running, 0);
        }
    }
    let Some(p) = parked else { return };
    let _ = GO_PARKED.remove(&key);
    if p.ts == 0 || now < p.ts || ended(now) || !in_block_time(now - p.ts) {
        return;
    }
    let goid = if by_stack() {
        count(counter::GO_MERGED, 1);
        0
    } else {
        p.goid
    };
    let row = WaitKey {
        kstack: STACK_NONE,
        ustack: gostack::walk_parked(g),
        tgid: cur.tgid,
        tid: tid_of(goid),
        comm: p.comm,
        what: What { nr: 0, flags: what::GOROUTINE, arg0: p.reason as u64, obj: goid },
    };
    count(counter::GO_WAITS, 1);
    finish(&row, p.ts, now, Ended { state: PARKED_STATE, woken: p.woken, chain: p.chain }, None);
}
