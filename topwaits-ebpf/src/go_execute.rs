//! Hook: a uprobe on the Go runtime's `execute` (see `goroutines`).

use aya_ebpf::{macros::uprobe, programs::ProbeContext};

#[uprobe]
pub fn go_execute(ctx: ProbeContext) -> u32 {
    // SAFETY: a uprobe's context is the probed task's registers.
    crate::goroutines::execute(unsafe { &*ctx.regs });
    0
}
