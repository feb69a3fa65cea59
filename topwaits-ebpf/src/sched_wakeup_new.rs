//! Hook: the `sched_wakeup_new` tracepoint (tp_btf and raw_tp), where a new thread
//! first becomes runnable; `topwaits threads` marks it as started during the trace.

use aya_ebpf::{
    macros::{btf_tracepoint, raw_tracepoint},
    programs::{BtfTracePointContext, RawTracePointContext},
};

#[btf_tracepoint(function = "sched_wakeup_new")]
pub fn sched_wakeup_new_btf(ctx: BtfTracePointContext) -> i32 {
    crate::threads::on_new(ctx.arg(0));
    0
}

#[raw_tracepoint(tracepoint = "sched_wakeup_new")]
pub fn sched_wakeup_new_raw(ctx: RawTracePointContext) -> i32 {
    crate::threads::on_new(ctx.arg(0));
    0
}
