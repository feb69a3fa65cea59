//! What every hook knows of a task, below the accounting modules that share it
//! (`switch`, `wake`, `threads`): the outgoing task as a hook saw it, and the capture
//! of the current task's stacks.

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_probe_read_kernel_buf},
    EbpfContext,
};
use topwaits_common::{CAPTURE_KERNEL, CAPTURE_USER, STACK_NONE, TASK_COMM_LEN};

use crate::kcache::Hook;
use crate::maps::{settings, task_u32, task_u64};
use crate::taskmap::{TaskState, TASKS};
use crate::{kstack, ustack};

/// The task leaving the CPU, as the hook saw it.
pub struct Outgoing {
    /// `task_struct` address.
    pub task: u64,
    pub tgid: u32,
    pub tid: u32,
    /// State at switch-out, with preemption folded to 0 (runnable).
    pub state: u32,
    /// Whether the hook runs as this task (at the tracepoint).
    pub current: bool,
    /// The task taking the CPU (`task_struct` address), 0 where not known.
    pub next: u64,
}

impl Outgoing {
    /// The process of the task taking the CPU, where known: read only for a
    /// preemption, whose label names it.
    #[inline(always)]
    pub fn next_tgid(&self) -> u32 {
        if self.state != 0 || self.next == 0 {
            return 0;
        }
        task_u32(self.next, settings().task.tgid).unwrap_or(0)
    }

    /// The task's name, read only once the filters have let the task through.
    #[inline(always)]
    pub fn comm(&self) -> [u8; TASK_COMM_LEN] {
        if self.current {
            bpf_get_current_comm().unwrap_or([0; TASK_COMM_LEN])
        } else {
            comm_of(self.task)
        }
    }
}

/// The name of a task that is not the current one, from its BTF offset.
#[inline(always)]
pub fn comm_of(task: u64) -> [u8; TASK_COMM_LEN] {
    let mut comm = [0u8; TASK_COMM_LEN];
    let off = settings().task.comm;
    if off != u32::MAX {
        // SAFETY: bpf_probe_read_kernel_buf checks the address.
        let _ = unsafe { bpf_probe_read_kernel_buf((task + off as u64) as *const u8, &mut comm) };
    }
    comm
}

/// The current task's user stack reference, if the settings ask for it.
#[inline(always)]
fn user_stack<C: EbpfContext, const CFI: bool>(
    ctx: &C,
    state: Option<*mut TaskState>,
    running: bool,
) -> u64 {
    if settings().stacks & CAPTURE_USER == 0 {
        return STACK_NONE;
    }
    ustack::of_current::<C, CFI>(ctx, state, running)
}

/// Takes the current task's stacks as references in `KSTACKS` and `USTACKS`, as
/// the settings ask, counting failures. `at` (the current task and the
/// tracepoint the hook runs at) lets a kernel stack still in place be reused;
/// hooks that do not run at the tracepoint pass none. `CFI`: whether user
/// stacks may be walked from the unwind tables (see `ustack::of_current`).
#[inline(always)]
pub fn capture_stacks<C: EbpfContext, const CFI: bool>(
    ctx: &C,
    at: Option<(u64, Hook)>,
) -> (u64, u64) {
    // The task's state (its stacks' reuse), found once for both stacks and made
    // at its first capture. Without one (no BTF, or no memory) the kernel stack
    // is unwound and the user stack taken by frame pointers.
    let state = TASKS.current_or_zeroed();
    // The user stack first: with the state's pointer live across the shorter
    // code, the verifier checks 160,000 instructions rather than 300,000.
    let running = matches!(at, Some((_, hook)) if hook.runnable());
    let ustack = user_stack::<C, CFI>(ctx, state, running);
    let at = match (at, state) {
        (Some((task, hook)), Some(s)) => Some((task, hook, s)),
        _ => None,
    };
    let kstack = if settings().stacks & CAPTURE_KERNEL != 0 {
        kstack::of_current(ctx, at)
    } else {
        STACK_NONE
    };
    (kstack, ustack)
}

/// When `task`, switching out at `now` and running since, came onto the CPU: its
/// run time since the fair class last picked it (`sum_exec_runtime` less
/// `prev_sum_exec_runtime`) before `now`. None for other classes, whose
/// `prev_sum_exec_runtime` is not kept, or when BTF lacks the fields.
#[inline(always)]
pub fn switched_in_at(task: u64, now: u64) -> Option<u64> {
    let s = settings();
    // SCHED_NORMAL, SCHED_BATCH and SCHED_IDLE are the fair class's policies.
    let policy = task_u32(task, s.task.policy)?;
    if !matches!(policy, 0 | 3 | 5) {
        return None;
    }
    let ran =
        task_u64(task, s.task.sum_exec)?.checked_sub(task_u64(task, s.task.prev_sum_exec)?)?;
    now.checked_sub(ran)
}
