//! Hooks: `lock:contention_begin` and `lock:contention_end`. A task about to wait
//! for a kernel mutex, rwsem or semaphore leaves the lock on its CPU's slot, where
//! its switch-out finds it (see `what`); getting the lock clears it. Pure spinning
//! on a spinlock never sleeps and is skipped.

use aya_ebpf::{helpers::bpf_get_current_pid_tgid, macros::tracepoint, programs::TracePointContext};
use topwaits_common::what;

use crate::what::CONTENTION;

/// Offsets in the tracepoints' records: `void *lock_addr`, `unsigned int flags`.
const OFF_LOCK: usize = 8;
const OFF_FLAGS: usize = 16;

#[tracepoint(category = "lock", name = "contention_begin")]
pub fn contention_begin(ctx: TracePointContext) -> u32 {
    // SAFETY: read_at checks the offsets against the record through the helper.
    let (Ok(lock), Ok(flags)) = (unsafe { ctx.read_at::<u64>(OFF_LOCK) }, unsafe { ctx.read_at::<u32>(OFF_FLAGS) }) else {
        return 0;
    };
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

#[tracepoint(category = "lock", name = "contention_end")]
pub fn contention_end(_ctx: TracePointContext) -> u32 {
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
