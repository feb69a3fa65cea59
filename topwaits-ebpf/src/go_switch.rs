//! Hook: the `sched_switch` raw tracepoint, attached only while goroutines
//! are traced: a Go program's thread leaving the processor (see `goroutines`).

use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn go_switch(_ctx: RawTracePointContext) -> i32 {
    crate::goroutines::thread_leaves();
    0
}
