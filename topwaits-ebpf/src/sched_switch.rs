//! Hook: the `sched_switch` tracepoint, as tp_btf (primary) and raw_tp (fallback).
//! It runs as the outgoing task, so that task's stacks are taken here.
//!
//! The attached program only tail-calls the hook's body in `SWITCH_IMPL`: first
//! its quick version, whose user stacks are taken by frame pointers (marked
//! loading where the walker is asked for) and which the verifier checks in a
//! fifth of the time, so that tracing starts at once; then, once user space has
//! loaded it after attaching, the full one, which walks user stacks from the
//! unwind tables.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{btf_tracepoint, raw_tracepoint},
    programs::{tracing::StackIdContext, BtfTracePointContext, RawTracePointContext},
    EbpfContext,
};

use crate::{
    maps::{as_number, count, SWITCH_IMPL},
    switch::{switch_in, switch_out, Clock},
    task::Outgoing,
};
use topwaits_common::counter;

/// Both attach kinds pass the tracepoint's arguments
/// `(bool preempt, task_struct *prev, task_struct *next, unsigned int prev_state)`;
/// `prev` and `next` arrive here as numbers (see [`as_number`]).
#[inline(always)]
fn on_switch<C: StackIdContext + EbpfContext, const CFI: bool>(
    ctx: &C,
    preempt: u64,
    prev: u64,
    next: u64,
    prev_state: u64,
) {
    count(counter::SWITCHES, 1);
    let mut clock = Clock::new();
    let pid_tgid = bpf_get_current_pid_tgid();
    let out = Outgoing {
        task: prev,
        tgid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        // A preempted task stays runnable whatever its __state said.
        state: if preempt & 0xff != 0 { 0 } else { prev_state as u32 },
        current: true,
        next,
    };
    if crate::maps::settings().threads != 0 {
        crate::threads::on_switch(&out, next, clock.now());
        return;
    }
    switch_out::<C, CFI>(ctx, &out, &mut clock, true);
    switch_in::<C, CFI>(ctx, next, &mut clock, false);
    crate::kcache::hand_to_learner(ctx, &crate::maps::LEARNERS);
}

/// The attached program: the body in `SWITCH_IMPL` (nothing while it is empty).
#[inline(always)]
fn dispatch<C: EbpfContext>(ctx: &C) -> i32 {
    // SAFETY: a tail call to a program of this hook's type that user space put
    // there; it does not return, and an empty slot falls through.
    unsafe { SWITCH_IMPL.tail_call(ctx, 0) };
    0
}

#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch_btf(ctx: BtfTracePointContext) -> i32 {
    dispatch(&ctx)
}

#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn sched_switch_raw(ctx: RawTracePointContext) -> i32 {
    dispatch(&ctx)
}

// The bodies are inlined into their programs' entries, whatever their size:
// were one a function of its own, every stack taken there would have one more
// frame below the anchor than `kcache::FIRST` allows, and no kernel stack would
// ever be reused.
#[btf_tracepoint(function = "sched_switch")]
#[inline(always)]
pub fn sched_switch_full_btf(ctx: BtfTracePointContext) -> i32 {
    on_switch::<_, true>(
        &ctx,
        ctx.arg(0),
        as_number(ctx.arg(1)),
        as_number(ctx.arg(2)),
        ctx.arg(3),
    );
    0
}

#[raw_tracepoint(tracepoint = "sched_switch")]
#[inline(always)]
pub fn sched_switch_full_raw(ctx: RawTracePointContext) -> i32 {
    on_switch::<_, true>(&ctx, ctx.arg(0), ctx.arg(1), ctx.arg(2), ctx.arg(3));
    0
}

#[btf_tracepoint(function = "sched_switch")]
#[inline(always)]
pub fn sched_switch_quick_btf(ctx: BtfTracePointContext) -> i32 {
    on_switch::<_, false>(
        &ctx,
        ctx.arg(0),
        as_number(ctx.arg(1)),
        as_number(ctx.arg(2)),
        ctx.arg(3),
    );
    0
}

#[raw_tracepoint(tracepoint = "sched_switch")]
#[inline(always)]
pub fn sched_switch_quick_raw(ctx: RawTracePointContext) -> i32 {
    on_switch::<_, false>(&ctx, ctx.arg(0), ctx.arg(1), ctx.arg(2), ctx.arg(3));
    0
}
