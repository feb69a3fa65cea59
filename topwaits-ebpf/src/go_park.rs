//! Hook: a uprobe on the Go runtime's `park` (see `goroutines`).

use aya_ebpf::{macros::uprobe, programs::ProbeContext};

#[uprobe]
pub fn go_park(ctx: ProbeContext) -> u32 {
    // SAFETY: a uprobe's context is the probed task's registers.
    crate::goroutines::park(unsafe { &*ctx.regs });
    0
}
