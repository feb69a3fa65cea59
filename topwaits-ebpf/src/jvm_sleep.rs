//! Hook: a uprobe on HotSpot's `JVM_Sleep`, for the time a `Thread.sleep`
//! asked for (see `what`).

use aya_ebpf::{macros::uprobe, programs::ProbeContext};

#[uprobe]
pub fn jvm_sleep(ctx: ProbeContext) -> u32 {
    // SAFETY: a uprobe's context is the probed task's registers.
    crate::what::jvm_sleep(unsafe { &*ctx.regs });
    0
}
