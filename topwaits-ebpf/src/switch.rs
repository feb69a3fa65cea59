//! The accounting shared by every attach path: filters and the start of a wait at
//! switch-out, stack capture where each path can afford it, and the delta added
//! to the in-kernel aggregate at switch-in.

use aya_ebpf::{
    bindings::BPF_NOEXIST, helpers::bpf_ktime_get_ns, macros::map, maps::PerCpuArray,
    programs::tracing::StackIdContext,
};
use topwaits_common::{
    counter, thread_kind, SwitchOut, WaitKey, WaitVal, What, PF_KTHREAD, SEEDED_USTACK, STACK_NONE,
    TASK_COMM_LEN, TASK_DEAD, TASK_NOLOAD, TASK_UNINTERRUPTIBLE,
};

use crate::kcache::Hook;
use crate::maps::{
    ask_for_maps, count, fold_or_insert_row, mark_started, maybe_started, set_member, settings,
    task_u32, thread_wanted, upsert, LAST_WAKE, REWALKS, STARTS, WAITS,
};
use crate::task::{capture_stacks, Outgoing};
use crate::wake;

/// Whether the filters of `-p/-t/-u/-k/--state` let this task's wait be recorded.
#[inline(always)]
pub fn wanted(out: &Outgoing) -> bool {
    let s = settings();
    if !thread_wanted(out.tgid, out.tid) {
        return false;
    }
    if s.thread_kind != thread_kind::ALL {
        let Some(flags) = task_u32(out.task, s.task.flags) else {
            return false;
        };
        let kthread = flags & PF_KTHREAD != 0;
        if kthread != (s.thread_kind == thread_kind::KERNEL) {
            return false;
        }
    }
    if s.state_filter != 0 {
        let matches = if s.state_mask == 0 {
            out.state == 0
        } else {
            // TASK_IDLE (uninterruptible | noload) is how idle kernel threads
            // sleep: not "D state" as load average and users count it.
            let state = if out.state & TASK_NOLOAD != 0 {
                out.state & !TASK_UNINTERRUPTIBLE
            } else {
                out.state
            };
            state & s.state_mask != 0
        };
        if !matches {
            return false;
        }
    }
    true
}

/// Per-CPU: a new task's start entry, built before it is inserted.
#[map]
static SCRATCH_START: PerCpuArray<SwitchOut> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU: what the wait being begun is for, read before its stacks are taken.
#[map]
static SCRATCH_WHAT: PerCpuArray<What> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU: the row key of the wait being ended.
#[map]
static SCRATCH_ROW: PerCpuArray<WaitKey> = PerCpuArray::with_max_entries(1, 0);

/// Records the start of a wait. `in_own_context`: the hook runs as the outgoing
/// task, so its stacks are taken here.
#[inline(always)]
pub fn switch_out<C: StackIdContext, const CFI: bool>(
    ctx: &C,
    out: &Outgoing,
    clock: &mut Clock,
    in_own_context: bool,
) {
    if out.tid == 0 {
        // The idle task does not wait.
        return;
    }
    if out.state & TASK_DEAD != 0 {
        // Its last switch: free the slots instead of starting a wait that never ends.
        if let Some(slot) = STARTS.get_ptr_mut(&out.task) {
            // SAFETY: a pointer from a map lookup; only this task's switches touch it.
            let start = unsafe { &mut *slot };
            if start.ts != 0 {
                end_unseen::<C, CFI>(ctx, out, start, clock.now(), in_own_context);
            }
            write_held(start);
        }
        let _ = STARTS.remove(&out.task);
        let _ = LAST_WAKE.remove(&out.task);
        crate::kcache::drop_task();
        // Its tid may be reused by a thread outside the cgroup.
        set_member(out.tid, false);
        return;
    }
    if !wanted(out) {
        return;
    }
    // Before the stacks are taken: the wait begins at the switch.
    let now = clock.now();
    // What it waits for is read before the stacks: read after them, the
    // verifier checked it again for each way a stack walk can end, which was
    // half of the bodies' verification and so of the start-up.
    {
        let Some(what) = SCRATCH_WHAT.get_ptr_mut(0) else { return };
        // SAFETY: this CPU's scratch slot, used by this program run alone.
        let what = unsafe { &mut *what };
        if in_own_context && settings().labels != 0 {
            crate::what::fill(what, out.tid, out.state, out.next_tgid(), now);
        } else {
            *what = NO_WHAT;
        }
    }
    let (kstack, ustack) = if in_own_context {
        capture_stacks::<C, CFI>(ctx, Some((out.task, Hook::switch(out.state == 0))))
    } else {
        (STACK_NONE, STACK_NONE)
    };
    let arrivals = task_u32(out.task, settings().task.pcount).unwrap_or(0);
    let comm = out.comm();
    if let Some(slot) = STARTS.get_ptr_mut(&out.task) {
        // SAFETY: a pointer from a map lookup; only this task's switches touch it.
        let start = unsafe { &mut *slot };
        if start.ts != 0 {
            end_unseen::<C, CFI>(ctx, out, start, now, in_own_context);
        }
        // The wait's own fields: a held row stays.
        begin(start, out, now, (kstack, ustack), arrivals, comm);
    } else {
        mark_started(out.task);
        // Built in per-CPU scratch: the entry is too large for the BPF stack
        // beside the hook's own frame.
        let Some(rec) = SCRATCH_START.get_ptr_mut(0) else { return };
        // SAFETY: this CPU's scratch slot, used by this program run alone.
        let rec = unsafe { &mut *rec };
        begin(rec, out, now, (kstack, ustack), arrivals, comm);
        rec.row = NO_ROW;
        rec.held = WaitVal::default();
        rec.woken = 0;
        rec.chain = 0;
        if STARTS.insert(&out.task, rec, BPF_NOEXIST as u64).is_err() {
            count(counter::LOST_START_FULL, 1);
        } else {
            // First sight of this task: user space keeps its process's maps
            // (once a process).
            ask_for_maps(out.tgid);
        }
    }
}

/// Writes a wait's own fields into its task's start entry. What it waits for
/// (`what`) was read where the hook runs as the task; otherwise it is read at
/// the switch-in.
#[inline(always)]
fn begin(
    start: &mut SwitchOut,
    out: &Outgoing,
    now: u64,
    stacks: (u64, u64),
    arrivals: u32,
    comm: [u8; TASK_COMM_LEN],
) {
    start.ts = now;
    (start.kstack, start.ustack) = stacks;
    start.tgid = out.tgid;
    start.tid = out.tid;
    start.state = out.state;
    start.arrivals = arrivals;
    start.comm = comm;
    start.what = SCRATCH_WHAT.get(0).copied().unwrap_or(NO_WHAT);
}

/// Ends the wait of `task`, which is switching in, and adds it to the aggregate.
/// With `stacks_now`, the stacks are taken here (the hook runs as that task).
#[inline(always)]
pub fn switch_in<C: StackIdContext, const CFI: bool>(
    ctx: &C,
    task: u64,
    clock: &mut Clock,
    stacks_now: bool,
) {
    if !maybe_started(task) {
        return;
    }
    let Some(slot) = STARTS.get_ptr_mut(&task) else {
        return;
    };
    // SAFETY: a pointer from a map lookup; only this task's switches touch it.
    let start = unsafe { &mut *slot };
    if start.ts == 0 {
        return;
    }
    end_wait::<C, CFI>(ctx, task, start, clock.now(), stacks_now);
}

/// The time of this switch, read from the clock once and only when needed: a
/// switch of tasks that are not traced never reads it.
pub struct Clock(u64);

impl Clock {
    #[inline(always)]
    pub fn new() -> Self {
        Clock(0)
    }

    #[inline(always)]
    pub fn now(&mut self) -> u64 {
        if self.0 == 0 {
            // SAFETY: a helper call without preconditions.
            self.0 = unsafe { bpf_ktime_get_ns() };
        }
        self.0
    }
}

/// A task switches out while its last wait is still open: the hook never saw the
/// switch-in that ended it. Some kernels run no program for the switches out of
/// certain tasks (seen: every switch out of a sandbox's PID 1), so the task that
/// such a switch put on the CPU is missed. The wait is ended at the switch-in time
/// its run time gives where that is known, and otherwise counted as lost.
#[inline(always)]
fn end_unseen<C: StackIdContext, const CFI: bool>(
    ctx: &C,
    out: &Outgoing,
    start: &mut SwitchOut,
    now: u64,
    in_own_context: bool,
) {
    match crate::task::switched_in_at(out.task, now) {
        // Only where the stacks were taken at switch-out: the other path takes them
        // at a switch-in, and this one was missed.
        Some(at) if in_own_context && at >= start.ts => {
            count(counter::ENDS_ESTIMATED, 1);
            end_wait::<C, CFI>(ctx, out.task, start, at, false);
        }
        _ => {
            count(counter::UNENDED, 1);
            start.ts = 0;
        }
    }
}

/// Adds the wait in `start` (not yet consumed) of `task`, ending at `now`, to
/// the aggregate and marks it consumed.
#[inline(always)]
fn end_wait<C: StackIdContext, const CFI: bool>(
    ctx: &C,
    task: u64,
    start: &mut SwitchOut,
    now: u64,
    stacks_now: bool,
) {
    let began = start.ts;
    // Mark as consumed rather than delete: no map delete on the hot path.
    start.ts = 0;
    if now < began {
        count(counter::NEGATIVE_DELTA, 1);
        return;
    }
    let delta = now - began;
    let s = settings();
    if !in_block_time(delta) {
        return;
    }
    let (kstack, ustack) =
        if stacks_now { capture_stacks::<C, CFI>(ctx, None) } else { (start.kstack, start.ustack) };
    let ustack = if ustack == SEEDED_USTACK {
        match rewalked(task, began, delta) {
            Some(walked) => walked,
            None => return,
        }
    } else {
        ustack
    };
    // Built in per-CPU scratch, as the start entry is: the BPF stack is too small.
    let Some(key) = SCRATCH_ROW.get_ptr_mut(0) else { return };
    // SAFETY: this CPU's scratch slot, used by this program run alone.
    let key = unsafe { &mut *key };
    key.kstack = kstack;
    key.ustack = ustack;
    key.tgid = start.tgid;
    key.tid = start.tid;
    key.comm = start.comm;
    if stacks_now && s.labels != 0 {
        // A hook that runs as the incoming task reads its syscall now: it is still in it.
        crate::what::fill(&mut key.what, start.tid, start.state, 0, now);
    } else {
        key.what = start.what;
    }
    let (state, woken, chain) = (start.state, start.woken, start.chain);
    let held = if s.hold_rows != 0 { Some(start) } else { None };
    finish(&*key, began, now, Ended { state, woken, chain }, held);
}

/// How a wait ended: the state it began in (0: preempted) and its task's last
/// wakeup (time and chain).
pub struct Ended {
    pub state: u32,
    pub woken: u64,
    pub chain: u64,
}

/// Adds one wait under `key`, from `began` to `now`, to the aggregate the
/// settings name, and sends it as an event if it is long enough; a thread that
/// holds its row (`held`) adds it there. Shared with the goroutine hooks.
#[inline(always)]
pub fn finish(key: &WaitKey, began: u64, now: u64, e: Ended, held: Option<&mut SwitchOut>) {
    let s = settings();
    let delta = now - began;
    if s.events_over_us != 0 && delta / 1000 >= s.events_over_us as u64 {
        crate::events::send(key, began, now, e.state, s.waker != 0, e.woken, e.chain);
    }
    if s.waker != 0 {
        wake::account(key, began, e.state, delta, now, e.woken, e.chain);
    } else if let Some(start) = held {
        hold(start, key, delta, now);
    } else {
        add(key, delta, now);
    }
}

/// Whether a wait of `delta` ns is inside `--min-block`/`--max-block`; one
/// outside is counted.
#[inline(always)]
pub fn in_block_time(delta: u64) -> bool {
    let s = settings();
    let us = delta / 1000;
    if us < s.min_us || us > s.max_us {
        count(counter::OUTSIDE_BLOCK_TIME, 1);
        return false;
    }
    true
}

/// The user stack of a wait that was in progress when the trace began (from
/// `began`, lasting `delta` ns): the one user space walked for it while it
/// waited. None where the wait ended first: its stack is unknown, and the wait
/// (at most the few milliseconds the walks at the start take) is left out,
/// counted, rather than kept under a stack cut short.
#[inline(always)]
fn rewalked(task: u64, began: u64, delta: u64) -> Option<u64> {
    if let Some(r) = REWALKS.get_ptr_mut(&task) {
        // SAFETY: a pointer from a map lookup; only this task's switches use it.
        let r = unsafe { &mut *r };
        if r.ts == began && r.ustack != 0 {
            r.ts = 0;
            count(counter::SEEDED_WALKED, 1);
            return Some(r.ustack);
        }
    }
    count(counter::SEEDED_UNWALKED, 1);
    count(counter::SEEDED_UNWALKED_NS, delta);
    None
}

/// The key of no row.
pub const NO_ROW: WaitKey =
    WaitKey { kstack: 0, ustack: 0, tgid: 0, tid: 0, comm: [0; TASK_COMM_LEN], what: NO_WHAT };
const NO_WHAT: What = What { nr: 0, flags: 0, arg0: 0, obj: 0 };

/// Whether two keys name the same row, compared a word at a time.
#[inline(always)]
fn same_row(a: &WaitKey, b: &WaitKey) -> bool {
    // SAFETY: unaligned reads of the two 8-byte halves of each 16-byte name.
    let half = |k: &WaitKey, i: usize| unsafe {
        core::ptr::read_unaligned(k.comm.as_ptr().add(8 * i).cast::<u64>())
    };
    a.kstack == b.kstack
        && a.ustack == b.ustack
        && a.tid == b.tid
        && a.tgid == b.tgid
        && half(a, 0) == half(b, 0)
        && half(a, 1) == half(b, 1)
        && a.what.nr == b.what.nr
        && a.what.flags == b.what.flags
        && a.what.arg0 == b.what.arg0
        && a.what.obj == b.what.obj
}

/// Adds one wait to the row the thread holds in its start entry (see
/// `Settings::hold_rows`): nearly every wait of a thread has the stacks of its last
/// one, and such a wait then costs no lookup in the aggregate. A wait with other
/// stacks first writes the held row to the aggregate.
#[inline(always)]
fn hold(start: &mut SwitchOut, key: &WaitKey, delta: u64, now: u64) {
    count(counter::RECORDED, 1);
    let one = WaitVal::one(delta, now);
    if start.held.count != 0 && same_row(&start.row, key) {
        start.held.absorb(&one);
        return;
    }
    write_held(start);
    start.row = *key;
    start.held = one;
}

/// Writes the thread's held row, if any, to the aggregate. Its waits were counted
/// as recorded when held: a full map counts them lost, and `HELD_LOST` lets user
/// space take them out of the recorded count again.
#[inline(always)]
fn write_held(start: &mut SwitchOut) {
    if start.held.count == 0 {
        return;
    }
    let held = start.held;
    start.held.count = 0;
    // SAFETY: a pointer from a map lookup; the row names this thread, whose
    // switches run on one CPU at a time.
    if !fold_or_insert_row(&WAITS, &start.row, &held, |v| unsafe { (*v).absorb(&held) }) {
        count(counter::LOST_AGG_FULL, held.count);
        count(counter::LOST_AGG_FULL_NS, held.total_ns);
        count(counter::HELD_LOST, held.count);
    }
}

/// Adds one wait of `delta` ns ending at `now` to the aggregate.
#[inline(always)]
fn add(key: &WaitKey, delta: u64, now: u64) {
    let one = WaitVal::one(delta, now);
    // SAFETY: a pointer from a map lookup; the key names one thread, which switches
    // in on one CPU at a time, so nothing else writes this value meanwhile.
    upsert(&WAITS, key, &one, delta, |v| unsafe { (*v).absorb(&one) });
}
