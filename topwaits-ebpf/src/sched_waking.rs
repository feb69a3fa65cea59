//! Hook: the `sched_waking` tracepoint, as tp_btf and raw_tp. It runs in the
//! waking context, so the current task is the waker (or whatever an interrupt
//! happened to hit, which user space tells apart by the waker's kernel stack). A
//! new kernel stack of a waker is left for the learner (`learn_waker_stack`).

use aya_ebpf::{
    macros::{btf_tracepoint, raw_tracepoint},
    programs::{BtfTracePointContext, RawTracePointContext},
};

use crate::kcache::hand_to_learner;
use crate::maps::WAKE_LEARNERS;
use crate::wake::record_wakeup;

/// Both attach kinds pass `(struct task_struct *p)`. Inlined into the program's
/// entry, as `sched_switch`'s hooks are, so that a waker's stack has the frames
/// below the anchor that `kcache::FIRST` counts.
#[btf_tracepoint(function = "sched_waking")]
#[inline(always)]
pub fn sched_waking_btf(ctx: BtfTracePointContext) -> i32 {
    record_wakeup(&ctx, ctx.arg(0));
    hand_to_learner(&ctx, &WAKE_LEARNERS);
    0
}

#[raw_tracepoint(tracepoint = "sched_waking")]
#[inline(always)]
pub fn sched_waking_raw(ctx: RawTracePointContext) -> i32 {
    record_wakeup(&ctx, ctx.arg(0));
    hand_to_learner(&ctx, &WAKE_LEARNERS);
    0
}
