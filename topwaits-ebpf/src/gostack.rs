//! Goroutine stacks for the Go hooks: a frame-pointer walk (Go keeps frame
//! pointers in all its code) from a uprobe's registers in a function's
//! prologue, or from what a parked goroutine saved when it left the
//! processor; kept in `USTACKS` as every user stack is.

use aya_ebpf::{
    bindings::pt_regs,
    helpers::{bpf_loop, bpf_probe_read_user},
    macros::map,
    maps::PerCpuArray,
};
use topwaits_common::{counter, KernelStack, KSTACK_DEPTH, STACK_NONE, STACK_STORED, USER_SEED};

use crate::maps::{SCRATCH_USTACK, USTACKS};
use crate::stackref::{self, mix};
use crate::uread::user_word;

/// A walked stack: its reference, and whether a frame lay outside
/// `[lo, hi)` (the system stack's bounds, where the walk began).
pub struct GoStack {
    pub stack: u64,
    pub left_bounds: bool,
}

/// A walk in progress, kept in a per-CPU map rather than on the stack: the
/// verifier then knows none of its values exactly, so it checks the loop's
/// body once rather than once per frame count (and what follows once per
/// length). Its hash is taken as the frames are.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Walk {
    n: u64,
    bp: u64,
    lo: u64,
    hi: u64,
    left: u64,
    hash: u64,
}

#[map]
static GO_WALK: PerCpuArray<Walk> = PerCpuArray::with_max_entries(1, 0);

/// Walks the stack of the goroutine (or system stack) the probe interrupted in
/// a function's prologue, before its frame is made: its pc, the return address
/// at the stack pointer (the function has no frame of its own yet), then one
/// frame per saved frame pointer.
#[inline(always)]
pub fn walk(regs: &pt_regs, bounds: (u64, u64)) -> GoStack {
    walk_from(regs.rip, user_word(regs.rsp).unwrap_or(0), regs.rbp, bounds)
}

/// Walks a parked goroutine's stack from what it saved when it left the
/// processor (`g.sched`, written by `mcall` in `gopark`: the pc it returns to
/// in `gopark`, and `gopark`'s frame pointer).
#[inline(always)]
pub fn walk_parked(g: u64) -> u64 {
    // runtime.g.sched (a gobuf) is at 56 in every Go release: its pc at 8, its
    // bp at 48.
    let pc = user_word(g + 56 + 8).unwrap_or(0);
    let bp = user_word(g + 56 + 48).unwrap_or(0);
    if pc == 0 {
        return STACK_NONE;
    }
    // The caller of `gopark`, then the frames above it.
    let [next, ret] = frame_at(bp).unwrap_or([0, 0]);
    walk_from(pc, ret, next, (0, u64::MAX)).stack
}

/// The frame at frame pointer `bp`: the caller's saved frame pointer and the
/// return address above it, in one read.
#[inline(always)]
fn frame_at(bp: u64) -> Option<[u64; 2]> {
    if bp == 0 || bp & 7 != 0 {
        return None;
    }
    // SAFETY: bpf_probe_read_user checks the address and fails cleanly.
    unsafe { bpf_probe_read_user(bp as *const [u64; 2]).ok() }
}

/// Walks from a pc, its caller's return address (0: none) and that caller's
/// frame pointer.
#[inline(always)]
fn walk_from(pc: u64, ret: u64, bp: u64, bounds: (u64, u64)) -> GoStack {
    let none = GoStack { stack: STACK_NONE, left_bounds: false };
    let (Some(buf), Some(w)) = (SCRATCH_USTACK.get_ptr_mut(0), GO_WALK.get_ptr_mut(0)) else {
        return none;
    };
    // SAFETY: this CPU's scratch slots, used by this program run alone.
    let (frames, w): (&mut KernelStack, &mut Walk) = unsafe { (&mut *buf, &mut *w) };
    // Ended by a zero after the last frame (written where the walk stops):
    // user space reads a stack up to its first zero.
    frames[0] = pc;
    frames[1] = ret;
    *w = Walk {
        n: 2,
        bp,
        lo: bounds.0,
        hi: bounds.1,
        left: 0,
        hash: mix(mix(USER_SEED, frames[0]), frames[1]),
    };
    frames[2] = 0;
    if frames[1] != 0 {
        // SAFETY: the callback takes no context; it finds the walk in its map.
        unsafe {
            bpf_loop(KSTACK_DEPTH as u32, step as *mut core::ffi::c_void, core::ptr::null_mut(), 0);
        }
    }
    // Read again: the callback wrote it behind the compiler's back.
    let Some(w) = GO_WALK.get(0).copied() else { return none };
    let stack = stackref::keep(&USTACKS, w.hash | STACK_STORED, frames, counter::LOST_USER_STACK);
    GoStack { stack, left_bounds: w.left != 0 }
}

/// `bpf_loop` body: takes one frame; 1 (stop) at the end of the chain.
unsafe extern "C" fn step(_i: u64, _ctx: *mut core::ffi::c_void) -> i64 {
    let (Some(buf), Some(w)) = (SCRATCH_USTACK.get_ptr_mut(0), GO_WALK.get_ptr_mut(0)) else {
        return 1;
    };
    // SAFETY: this CPU's scratch slots, used by this program run alone.
    let (frames, w) = unsafe { (&mut *buf, &mut *w) };
    let n = w.n as usize;
    if n >= KSTACK_DEPTH {
        return 1;
    }
    let Some([next, ret]) = frame_at(w.bp).filter(|f| f[1] != 0) else {
        frames[n] = 0;
        return 1;
    };
    if w.bp < w.lo || w.bp >= w.hi {
        w.left = 1;
    }
    frames[n] = ret;
    w.n += 1;
    w.hash = mix(w.hash, ret);
    w.bp = next;
    0
}
