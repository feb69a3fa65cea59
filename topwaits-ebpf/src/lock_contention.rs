//! Hooks: `lock:contention_begin` and `lock:contention_end`. A task about to wait
//! for a kernel mutex, rwsem or semaphore leaves the lock on its CPU's slot, where
//! its switch-out finds it (see `what`); getting the lock clears it. Pure spinning
//! on a spinlock never sleeps and is skipped.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::raw_tracepoint, programs::RawTracePointContext,
};
use topwaits_common::what;

use crate::what::CONTENTION;

/// Raw tracepoints: the arguments `(void *lock, unsigned int flags)` as they are,
/// where a classic tracepoint has the kernel build a record first and the program
/// read each field back with a helper (180 ns a run against 68).
#[raw_tracepoint(tracepoint = "contention_begin")]
pub fn contention_begin(ctx: RawTracePointContext) -> i32 {
    let lock: u64 = ctx.arg(0);
    let flags = ctx.arg::<u64>(1) as u32;
    if flags & what::LCB_SPIN != 0 && flags & what::LCB_MUTEX == 0 {
        return 0;
    }
    if let Some(c) = CONTENTION.get_ptr_mut(0) {
        // SAFETY: this CPU's slot; hooks on this CPU run one at a time.
        unsafe {
            (*c).tid = bpf_get_current_pid_tgid() as u32;
            (*c).flags = flags;
            (*c).lock = lock;
        }
    }
    0
}

#[raw_tracepoint(tracepoint = "contention_end")]
pub fn contention_end(_ctx: RawTracePointContext) -> i32 {
    if let Some(c) = CONTENTION.get_ptr_mut(0) {
        // SAFETY: this CPU's slot; hooks on this CPU run one at a time.
        unsafe {
            if (*c).tid == bpf_get_current_pid_tgid() as u32 {
                (*c).tid = 0;
            }
        }
    }
    0
}
