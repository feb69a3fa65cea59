//! Hook: a BPF iterator over every task (`iter/task`). It writes each user
//! task's registers as it entered the kernel, the frame pointer among them,
//! which `/proc` does not show: with it, the stack of a thread that was blocked
//! before the trace began is unwound in user space by every rule, including
//! those of code built with frame pointers. Run once when asked; costs nothing
//! while tracing.

use core::ffi::c_void;

use aya_ebpf::helpers::bpf_task_pt_regs;
use topwaits_common::{TaskRegs, PF_KTHREAD};

use crate::itertask::task_and_output;
use crate::maps::{settings, task_u32};
use crate::uwalk::{PtRegs, REGS_BP, REGS_CS, REGS_IP, REGS_SP, USER_CS};

#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub fn task_regs(ctx: *mut c_void) -> i32 {
    let Some((task, output)) = task_and_output(ctx) else { return 0 };
    let t = settings().task;
    let addr = task as u64;
    if task_u32(addr, t.flags).is_none_or(|f| f & PF_KTHREAD != 0) {
        return 0;
    }
    // SAFETY: a helper call on the task the iterator hands over.
    let regs = unsafe { bpf_task_pt_regs(task) } as *const u64;
    if regs.is_null() {
        return 0;
    }
    let regs = PtRegs::at(regs);
    if regs.word(REGS_CS) != USER_CS {
        return 0;
    }
    let out = TaskRegs {
        tid: task_u32(addr, t.pid).unwrap_or(0),
        tgid: task_u32(addr, t.tgid).unwrap_or(0),
        ip: regs.word(REGS_IP),
        sp: regs.word(REGS_SP),
        bp: regs.word(REGS_BP),
    };
    output.write(&out);
    0
}
