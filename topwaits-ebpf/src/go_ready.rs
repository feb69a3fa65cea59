//! Hook: a uprobe on the Go runtime's `ready` (see `goroutines`).

use aya_ebpf::{macros::uprobe, programs::ProbeContext};

#[uprobe]
pub fn go_ready(ctx: ProbeContext) -> u32 {
    // SAFETY: a uprobe's context is the probed task's registers.
    crate::goroutines::ready(unsafe { &*ctx.regs });
    0
}
