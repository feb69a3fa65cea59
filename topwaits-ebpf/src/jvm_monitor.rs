//! Hook: a uprobe on HotSpot's contended monitor entry (`ObjectMonitor::EnterI`,
//! `enter_internal` since JDK 24) and on `ObjectMonitor::wait`, for the monitor
//! a Java thread's futex wait is in (see `what`).

use aya_ebpf::{helpers::generated as gen, macros::uprobe, programs::ProbeContext, EbpfContext};

#[uprobe]
pub fn jvm_monitor(ctx: ProbeContext) -> u32 {
    // SAFETY: a uprobe's context is the probed task's registers, and the
    // cookie helper takes the program's context.
    let (regs, cookie) = unsafe { (&*ctx.regs, gen::bpf_get_attach_cookie(ctx.as_ptr())) };
    crate::what::jvm_monitor(regs, cookie);
    0
}
