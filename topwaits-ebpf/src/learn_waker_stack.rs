//! Hook: the learner of wakers' kernel stacks, tail-called at the end of the
//! `sched_waking` hook (as tp_btf or raw_tp, like the hook) when it has unwound a
//! new one. Loaded after attaching, as the `sched_switch` learner is.

use aya_ebpf::{
    macros::{btf_tracepoint, raw_tracepoint},
    programs::{BtfTracePointContext, RawTracePointContext},
};

#[btf_tracepoint(function = "sched_waking")]
pub fn learn_waker_btf(_ctx: BtfTracePointContext) -> i32 {
    crate::klearn::learn_pending();
    0
}

#[raw_tracepoint(tracepoint = "sched_waking")]
pub fn learn_waker_raw(_ctx: RawTracePointContext) -> i32 {
    crate::klearn::learn_pending();
    0
}
