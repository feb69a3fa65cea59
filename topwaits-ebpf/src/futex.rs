//! Hooks: the futex syscall tracepoints. They mark a thread as being inside a futex
//! wake operation, so that the wakeups it performs meanwhile count as futex
//! dependencies in `topwaits threads`.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::tracepoint, programs::TracePointContext,
};

use crate::maps::{settings, FUTEX_WAKING};

const FUTEX_CMD_MASK: u32 = 0x7f;

/// The `futex(2)` operations that wake waiters.
#[inline(always)]
fn wakes(op: u32) -> bool {
    matches!(
        op & FUTEX_CMD_MASK,
        1 /* WAKE */ | 3 /* REQUEUE */ | 4 /* CMP_REQUEUE */ | 5 /* WAKE_OP */ | 7 /* UNLOCK_PI */
            | 10 /* WAKE_BITSET */ | 12 /* CMP_REQUEUE_PI */
    )
}

#[inline(always)]
fn enter() {
    let tid = bpf_get_current_pid_tgid() as u32;
    let _ = FUTEX_WAKING.insert(&tid, &1, 0);
}

#[tracepoint(category = "syscalls", name = "sys_enter_futex")]
pub fn sys_enter_futex(ctx: TracePointContext) -> u32 {
    let off = settings().off_futex_op as usize;
    // SAFETY: read_at checks the offset against the record through the helper.
    if let Ok(op) = unsafe { ctx.read_at::<u32>(off) } {
        if wakes(op) {
            enter();
        }
    }
    0
}

/// `futex_wake(2)` and `futex_requeue(2)` (futex2) always wake.
#[tracepoint(category = "syscalls", name = "sys_enter_futex_wake")]
pub fn sys_enter_futex_wake(_ctx: TracePointContext) -> u32 {
    enter();
    0
}

/// Shared by the exits of every futex syscall.
#[tracepoint(category = "syscalls", name = "sys_exit_futex")]
pub fn sys_exit_futex(_ctx: TracePointContext) -> u32 {
    let tid = bpf_get_current_pid_tgid() as u32;
    let _ = FUTEX_WAKING.remove(&tid);
    0
}
