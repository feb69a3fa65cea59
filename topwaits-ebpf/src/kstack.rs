//! Kernel stacks of waits: taken with `bpf_get_stack`, kept in `KSTACKS` under
//! a hash of their frames, and reused through `kcache` while still in place (a
//! new one is left for the learner program).

use aya_ebpf::{
    helpers::{bpf_get_stack, bpf_loop},
    EbpfContext,
};
use topwaits_common::{counter, KernelStack, CACHE_SLOTS, KSTACK_DEPTH, STACK_STORED};

use crate::kcache::{self, Hook, Scan, FIRST};
use crate::maps::{count, settings, KSTACKS, SCRATCH_STACK};
use crate::stackref;
use crate::taskmap::TaskState;

const ENODATA: u64 = 61;
const ENOMEM: u64 = 12;
const BYTES: u32 = (KSTACK_DEPTH * 8) as u32;

/// `bpf_loop` body: folds frame `i` of the stack scratch into the hash, and into
/// the range of return addresses that `scan_word` looks for.
unsafe extern "C" fn hash_frame(i: u64, _ctx: *mut core::ffi::c_void) -> i64 {
    let Some((st, _, frames)) = kcache::scratch() else { return 1 };
    let i = i as usize;
    if i >= KSTACK_DEPTH {
        return 1;
    }
    let ip = frames[i];
    // SAFETY: per-CPU scratch, used by this program run alone.
    let st = unsafe { &mut *st };
    st.hash = stackref::mix(st.hash, ip);
    if (FIRST..CACHE_SLOTS).contains(&i) {
        st.lo = st.lo.min(ip);
        st.hi = st.hi.max(ip);
    }
    0
}

/// The seed of kernel stack hashes (see [`stackref::hash`]).
pub const SEED: u64 = 0x243f_6a88_85a3_08d3;

/// A 64-bit hash of the first `n` frames of the stack scratch, with
/// [`STACK_STORED`] set, equal to [`stackref::hash`] with [`SEED`]. Also sets the
/// scan's range of return addresses.
#[inline(always)]
fn hash(st: *mut Scan, n: usize) -> u64 {
    // SAFETY: per-CPU scratch, used by this program run alone.
    unsafe {
        (*st).hash = SEED ^ n as u64;
        (*st).lo = u64::MAX;
        (*st).hi = 0;
        bpf_loop(n as u32, hash_frame as *mut core::ffi::c_void, core::ptr::null_mut(), 0);
        (*st).hash | STACK_STORED
    }
}

/// Stores the stack a helper wrote into `frames` (`ret` is its return: bytes
/// written, or a negated errno) and returns its reference, or an errno (a lost
/// stack, counted).
#[inline(always)]
fn store(st: *mut Scan, frames: &KernelStack, ret: i64) -> u64 {
    if ret <= 0 {
        count(counter::LOST_KERNEL_STACK, 1);
        return if ret < 0 { (-ret) as u64 } else { ENODATA };
    }
    stackref::keep(&KSTACKS, hash(st, ret as usize / 8), frames, counter::LOST_KERNEL_STACK)
}

/// The kernel stack of the task running this program. With `at` (the running
/// task, the tracepoint the program runs at, and the task's state), a stack the
/// task had at the same call site is reused when still in place, and a new one
/// is learned.
#[inline(always)]
pub fn of_current<C: EbpfContext>(ctx: &C, at: Option<(u64, Hook, *mut TaskState)>) -> u64 {
    let Some((task, hook, state)) = at else { return unwound(ctx) };
    let (Some((st, _, _)), Some(buf)) = (kcache::scratch(), SCRATCH_STACK.get_ptr_mut(0)) else {
        return ENOMEM;
    };
    let base = kcache::anchor(st, ctx);
    if hook.waking() && !kcache::on_task_stack(task, base, settings().task.stack) {
        return unwound(ctx);
    }
    let hit = kcache::find(st, base, task, hook, state);
    if hit != 0 {
        count(if hook.waking() { counter::WAKER_KSTACK_REUSED } else { counter::KSTACK_REUSED }, 1);
        return hit;
    }
    // SAFETY: the helper writes at most BYTES into the per-CPU buffer of that size.
    let ret = unsafe { bpf_get_stack(ctx.as_ptr(), buf.cast(), BYTES, 0) };
    // SAFETY: the per-CPU buffer, used by this program run alone.
    let frames = unsafe { &*buf };
    let kstack = store(st, frames, ret);
    if ret > 0 {
        kcache::defer(st, base, ret as usize / 8, kstack);
    }
    kstack
}

/// The kernel stack where an on-CPU sample interrupted the task: none when it
/// interrupted user code (the helper then finds no kernel frame), else
/// unwound as [`unwound`] does.
#[inline(always)]
pub fn sampled<C: EbpfContext>(ctx: &C) -> u64 {
    let Some(buf) = SCRATCH_STACK.get_ptr_mut(0) else {
        return ENOMEM;
    };
    // SAFETY: the helper writes at most BYTES into the per-CPU buffer of that size.
    let ret = unsafe { bpf_get_stack(ctx.as_ptr(), buf.cast(), BYTES, 0) };
    if ret == 0 {
        return topwaits_common::STACK_NONE;
    }
    if ret < 0 {
        count(counter::LOST_KERNEL_STACK, 1);
        return (-ret) as u64;
    }
    // SAFETY: the per-CPU buffer the helper just filled, used by this run alone.
    let frames = unsafe { &*buf };
    stackref::keep(
        &KSTACKS,
        stackref::hash(frames, ret as usize / 8, SEED),
        frames,
        counter::LOST_KERNEL_STACK,
    )
}

/// The kernel stack of a task with nothing to reuse or learn (a waker in an
/// interrupt, or a task switching in on the kprobe path): unwound and hashed
/// in place, without the `bpf_loop` callback per frame and the reuse bookkeeping
/// that waits need. Its reference is the one [`hash`] gives, so a stack seen both
/// ways is kept once.
#[inline(always)]
fn unwound<C: EbpfContext>(ctx: &C) -> u64 {
    let Some(buf) = SCRATCH_STACK.get_ptr_mut(0) else {
        return ENOMEM;
    };
    // SAFETY: the helper writes at most BYTES into the per-CPU buffer of that size.
    let ret = unsafe { bpf_get_stack(ctx.as_ptr(), buf.cast(), BYTES, 0) };
    if ret <= 0 {
        count(counter::LOST_KERNEL_STACK, 1);
        return if ret < 0 { (-ret) as u64 } else { ENODATA };
    }
    // SAFETY: the per-CPU buffer the helper just filled, used by this run alone.
    let frames = unsafe { &*buf };
    let key = stackref::hash(frames, ret as usize / 8, SEED);
    stackref::keep(&KSTACKS, key, frames, counter::LOST_KERNEL_STACK)
}
