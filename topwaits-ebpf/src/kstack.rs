//! Kernel stacks of waits: taken with `bpf_get_stack`, kept in `KSTACKS` under
//! a hash of their frames, and reused through `kcache` while still in place (a
//! new one is left for the learner program).

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_stack, bpf_loop},
    EbpfContext,
};
use topwaits_common::{counter, KernelStack, CACHE_SLOTS, KSTACK_DEPTH, STACK_STORED};

use crate::kcache::{self, Scan, FIRST};
use crate::maps::{count, KSTACKS, SCRATCH_STACK};

const EEXIST: i32 = 17;
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
    st.hash = mix(st.hash, ip);
    if (FIRST..CACHE_SLOTS).contains(&i) {
        st.lo = st.lo.min(ip);
        st.hi = st.hi.max(ip);
    }
    0
}

/// The seed of kernel stack hashes; the mixing step is [`mix`].
const SEED: u64 = 0x243f_6a88_85a3_08d3;

/// Folds one frame into a stack hash.
#[inline(always)]
fn mix(hash: u64, ip: u64) -> u64 {
    let h = (hash ^ ip).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^ (h >> 29)
}

/// A 64-bit hash of the first `n` frames of the stack scratch, with
/// [`STACK_STORED`] set. Also sets the scan's range of return addresses.
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
    keep(hash(st, ret as usize / 8), frames)
}

/// Keeps `frames` under hash `h` (if not kept already); returns its reference.
#[inline(always)]
fn keep(h: u64, frames: &KernelStack) -> u64 {
    if KSTACKS.get_ptr(&h).is_some() {
        return h;
    }
    match KSTACKS.insert(&h, frames, BPF_NOEXIST as u64) {
        Ok(()) => h,
        // Stored by another CPU in between.
        Err(e) if e == -EEXIST => h,
        Err(e) => {
            count(counter::LOST_KERNEL_STACK, 1);
            (-e) as u64
        }
    }
}

/// The kernel stack of the task running this program. With `task` (the running
/// task, when the program runs at the tracepoint), a stack the task had at the
/// same call site is reused when still in place, and a new one is learned.
#[inline(always)]
pub fn of_current<C: EbpfContext>(ctx: &C, task: Option<u64>) -> u64 {
    let Some(task) = task else { return of_waker(ctx) };
    let (Some((st, _, _)), Some(buf)) = (kcache::scratch(), SCRATCH_STACK.get_ptr_mut(0)) else {
        return ENOMEM;
    };
    let base = kcache::anchor(st, ctx);
    let hit = kcache::find(st, base, task);
    if hit != 0 {
        count(counter::KSTACK_REUSED, 1);
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

/// The kernel stack of a waker (a running task, at `sched_waking`): nothing to
/// reuse or learn, so it is unwound and hashed by a bounded loop in place, without
/// the `bpf_loop` callback per frame and the reuse bookkeeping that waits need.
/// The hash is the one [`hash`] gives, so a stack seen both ways is kept once.
#[inline(always)]
fn of_waker<C: EbpfContext>(ctx: &C) -> u64 {
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
    let n = ret as usize / 8;
    let mut h = SEED ^ n as u64;
    for (i, &ip) in frames.iter().enumerate() {
        if i >= n {
            break;
        }
        h = mix(h, ip);
    }
    keep(h | STACK_STORED, frames)
}
