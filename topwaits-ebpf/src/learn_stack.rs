//! Hook: the stack learner, tail-called at the end of the `sched_switch` hook (as
//! tp_btf or raw_tp, like the hook) when it has unwound a new kernel stack. Loaded
//! after attaching, so its verification does not delay the start of the trace.

use aya_ebpf::{
    macros::{btf_tracepoint, raw_tracepoint},
    programs::{BtfTracePointContext, RawTracePointContext},
};

#[btf_tracepoint(function = "sched_switch")]
pub fn learn_stack_btf(_ctx: BtfTracePointContext) -> i32 {
    crate::klearn::learn_pending();
    0
}

#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn learn_stack_raw(_ctx: RawTracePointContext) -> i32 {
    crate::klearn::learn_pending();
    0
}
