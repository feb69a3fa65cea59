//! Hook: a BPF iterator over every task (`iter/task`). It writes each user
//! task's registers as it entered the kernel, the frame pointer among them,
//! which `/proc` does not show: with it, the stack of a thread that was blocked
//! before the trace began is unwound in user space by every rule, including
//! those of code built with frame pointers. Run once when asked; costs nothing
//! while tracing.

use core::ffi::c_void;

use aya_ebpf::{
    bindings::{seq_file, task_struct},
    helpers::{bpf_seq_write, bpf_task_pt_regs},
};
use topwaits_common::{TaskRegs, PF_KTHREAD};

use crate::maps::{settings, task_u32};
use crate::uwalk::{PtRegs, REGS_BP, REGS_CS, REGS_IP, REGS_SP, USER_CS};

/// `struct bpf_iter__task`: the iterator's context, one pointer per field.
#[repr(C)]
struct IterTask {
    meta: *const IterMeta,
    task: *mut task_struct,
}

/// The head of `struct bpf_iter_meta`: the output file.
#[repr(C)]
struct IterMeta {
    seq: *mut seq_file,
}

#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub fn task_regs(ctx: *mut c_void) -> i32 {
    // SAFETY: the context the kernel passes an `iter/task` program, whose two
    // pointers the verifier types by BTF; `task` is null once, at the end.
    let (meta, task) = unsafe { ((*(ctx as *const IterTask)).meta, (*(ctx as *const IterTask)).task) };
    if task.is_null() || meta.is_null() {
        return 0;
    }
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
    // SAFETY: `meta` is the iterator's, its `seq` the file being read; the
    // record is a local of that size.
    unsafe {
        let seq = (*meta).seq;
        bpf_seq_write(seq, (&raw const out).cast(), core::mem::size_of::<TaskRegs>() as u32);
    }
    0
}
