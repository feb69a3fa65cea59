//! What every hook knows of a task, below the accounting modules that share it
//! (`switch`, `wake`, `threads`): the outgoing task as a hook saw it, and the capture
//! of the current task's stacks.

use aya_ebpf::EbpfContext;
use topwaits_common::{CAPTURE_KERNEL, CAPTURE_USER, STACK_NONE, TASK_COMM_LEN};

use crate::maps::SETTINGS;
use crate::{kstack, ustack};

/// The task leaving the CPU, as the hook saw it.
pub struct Outgoing {
    /// `task_struct` address.
    pub task: u64,
    pub tgid: u32,
    pub tid: u32,
    /// State at switch-out, with preemption folded to 0 (runnable).
    pub state: u32,
    pub comm: [u8; TASK_COMM_LEN],
}

/// The current task's user stack reference, if the settings ask for it.
#[inline(always)]
fn user_stack<C: EbpfContext>(ctx: &C) -> u64 {
    if SETTINGS.load().stacks & CAPTURE_USER == 0 {
        return STACK_NONE;
    }
    ustack::of_current(ctx)
}

/// Takes the current task's stacks as references in `KSTACKS` and `USTACKS`, as
/// the settings ask, counting failures. `task` (the current task, when the hook
/// runs at `sched_switch`) lets a kernel stack still in place be reused; wakers
/// pass none.
#[inline(always)]
pub fn capture_stacks<C: EbpfContext>(ctx: &C, task: Option<u64>) -> (u64, u64) {
    let kstack = if SETTINGS.load().stacks & CAPTURE_KERNEL != 0 {
        kstack::of_current(ctx, task)
    } else {
        STACK_NONE
    };
    (kstack, user_stack(ctx))
}
