//! Hook: the `sched_waking` tracepoint, as tp_btf and raw_tp. It runs in the
//! waking context, so the current task is the waker (or whatever an interrupt
//! happened to hit, which user space tells apart by the waker's kernel stack). A
//! new kernel stack of a waker is left for the learner (`learn_waker_stack`).
//! As `sched_switch`'s, the attached program tail-calls the body in
//! `WAKING_IMPL`: the quick version first, the full one once loaded.

use aya_ebpf::{
    macros::{btf_tracepoint, raw_tracepoint},
    programs::{tracing::StackIdContext, BtfTracePointContext, RawTracePointContext},
    EbpfContext,
};

use crate::kcache::hand_to_learner;
use crate::maps::{WAKE_LEARNERS, WAKING_IMPL};
use crate::wake::record_wakeup;

#[inline(always)]
fn dispatch<C: EbpfContext>(ctx: &C) -> i32 {
    // SAFETY: as in `sched_switch`: a tail call that does not return, or falls
    // through on an empty slot.
    unsafe { WAKING_IMPL.tail_call(ctx, 0) };
    0
}

#[btf_tracepoint(function = "sched_waking")]
pub fn sched_waking_btf(ctx: BtfTracePointContext) -> i32 {
    dispatch(&ctx)
}

#[raw_tracepoint(tracepoint = "sched_waking")]
pub fn sched_waking_raw(ctx: RawTracePointContext) -> i32 {
    dispatch(&ctx)
}

/// Both attach kinds pass `(struct task_struct *p)`. Inlined into the program's
/// entry, as `sched_switch`'s bodies are, so that a waker's stack has the frames
/// below the anchor that `kcache::FIRST` counts.
#[inline(always)]
fn on_waking<C: StackIdContext + EbpfContext, const CFI: bool>(ctx: &C, woken: u64) {
    record_wakeup::<C, CFI>(ctx, woken);
    hand_to_learner(ctx, &WAKE_LEARNERS);
}

#[btf_tracepoint(function = "sched_waking")]
#[inline(always)]
pub fn sched_waking_full_btf(ctx: BtfTracePointContext) -> i32 {
    on_waking::<_, true>(&ctx, ctx.arg(0));
    0
}

#[raw_tracepoint(tracepoint = "sched_waking")]
#[inline(always)]
pub fn sched_waking_full_raw(ctx: RawTracePointContext) -> i32 {
    on_waking::<_, true>(&ctx, ctx.arg(0));
    0
}

#[btf_tracepoint(function = "sched_waking")]
#[inline(always)]
pub fn sched_waking_quick_btf(ctx: BtfTracePointContext) -> i32 {
    on_waking::<_, false>(&ctx, ctx.arg(0));
    0
}

#[raw_tracepoint(tracepoint = "sched_waking")]
#[inline(always)]
pub fn sched_waking_quick_raw(ctx: RawTracePointContext) -> i32 {
    on_waking::<_, false>(&ctx, ctx.arg(0));
    0
}
