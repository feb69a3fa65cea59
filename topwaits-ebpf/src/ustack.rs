//! User stacks of waits and wakers: taken with `bpf_get_stack`, kept in `USTACKS`
//! under a 64-bit hash of their frames. Unlike a bucketed stack map, two stacks
//! never collide and lose one, and entries are allocated as stacks arrive.

use aya_ebpf::{
    bindings::BPF_F_USER_STACK,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task_btf, bpf_get_stack, bpf_probe_read_kernel,
        bpf_probe_read_user, bpf_task_pt_regs,
    },
    EbpfContext,
};
use topwaits_common::{
    counter, walker::cut, KernelStack, KSTACK_DEPTH, LEAF_WORD, LEAF_WORDS, STACK_NONE,
};

use crate::maps::{ask_for_maps, count, settings, SCRATCH_USTACK, USTACKS};
use crate::stackref;
use crate::taskmap::TaskState;
use crate::uwalk::{self, Walked};

/// Where the user stack pointer sits in `struct pt_regs` (x86-64: `sp`, the 20th
/// word), and the link register that holds a leaf's caller on arm64 (`regs[30]`).
#[cfg(bpf_target_arch = "x86_64")]
const LEAF_REG: Option<(u64, bool)> = Some((19 * 8, true));
#[cfg(bpf_target_arch = "aarch64")]
const LEAF_REG: Option<(u64, bool)> = Some((30 * 8, false));
#[cfg(not(any(bpf_target_arch = "x86_64", bpf_target_arch = "aarch64")))]
const LEAF_REG: Option<(u64, bool)> = None;

/// With `--leaf-callers`, appends after the `n` frames the words at the user stack
/// pointer (x86-64; on arm64 the link register) that could be the return address
/// of a leaf function keeping no frame pointer, marked [`LEAF_WORD`]. Only words
/// whose upper half matches the leaf's or its walked caller's address are kept,
/// so that locals (counters, stack and heap pointers) rarely make stacks differ.
/// Returns the new length.
#[inline(always)]
fn append_leaf_words(frames: &mut [u64; KSTACK_DEPTH], n: usize) -> usize {
    let Some((off, at_sp)) = LEAF_REG else { return n };
    if settings().leaf_words == 0 || n == 0 || n + LEAF_WORDS as usize > KSTACK_DEPTH {
        return n;
    }
    // SAFETY: helper calls; the task pointer comes from the kernel.
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as u64;
    if regs == 0 {
        return n;
    }
    // SAFETY: bpf_probe_read_kernel checks the address.
    let Ok(reg) = (unsafe { bpf_probe_read_kernel((regs + off) as *const u64) }) else { return n };
    let mut words = [0u64; LEAF_WORDS as usize];
    if at_sp {
        for (i, w) in words.iter_mut().enumerate() {
            // SAFETY: bpf_probe_read_user checks the address.
            *w = unsafe { bpf_probe_read_user((reg + 8 * i as u64) as *const u64) }.unwrap_or(0);
        }
    } else {
        words[0] = reg;
    }
    let (leaf, next) = (frames[0] >> 32, if n > 1 { frames[1] >> 32 } else { u64::MAX });
    let mut len = n;
    for w in words {
        // A volatile read keeps the bound check, which the compiler would drop as
        // implied by the one above, in the program: the verifier needs to see it.
        // SAFETY: reading a local.
        let i = unsafe { core::ptr::read_volatile(&len) };
        if w != 0 && (w >> 32 == leaf || w >> 32 == next) && i < KSTACK_DEPTH {
            frames[i] = w | LEAF_WORD;
            len = i + 1;
        }
    }
    len
}

use topwaits_common::USER_SEED;

const EFAULT: i64 = 14;
const EPERM: i64 = 1;
const ENOMEM: u64 = 12;
const BYTES: u32 = (KSTACK_DEPTH * 8) as u32;

/// The user stack of the task running this program, as a reference: stored,
/// [`STACK_NONE`] when it has none (a kernel thread, or the idle task under an
/// interrupt), or the errno of a lost one (counted). `state` is the task's own
/// (see `TaskState`): walks from the unwind tables keep there what lets the next
/// one be reused, and without it the stack is taken by frame pointers (as on a
/// kernel without BTF, where the walker cannot find the registers either).
/// Without `CFI` (the hook's first, quickly verified version, in place while
/// the full one loads) the stack is taken by frame pointers, marked loading
/// where the settings ask for the walker.
#[inline(always)]
pub fn of_current<C: EbpfContext, const CFI: bool>(
    ctx: &C,
    state: Option<*mut TaskState>,
    running: bool,
) -> u64 {
    let Some(buf) = SCRATCH_USTACK.get_ptr_mut(0) else {
        return ENOMEM;
    };
    if !CFI {
        let mark = if settings().cfi != 0 { cut::STARTING } else { 0 };
        return by_frame_pointers(ctx, buf, mark);
    }
    let regs = if settings().cfi != 0 && state.is_some() { uwalk::user_regs() } else { None };
    let (Some(regs), Some(state)) = (regs, state) else {
        return by_frame_pointers(ctx, buf, 0);
    };
    if let Some(stack) = uwalk::reuse(regs, state) {
        return stack;
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    // A wait in a page fault samples where a program runs as a preemption does
    // (a starting or exiting process faults in every library it touches), so
    // the tables it meets are built only once several such walks meet them.
    let running = running || !uwalk::in_syscall();
    let n = match uwalk::walk(tgid, Some(regs), buf, running) {
        Walked::Frames(n) => n,
        // Marked, until the walker knows where the process maps its code;
        // user space is asked to read them (a waker outside the targets).
        Walked::NoMaps => {
            ask_for_maps(tgid);
            return by_frame_pointers(ctx, buf, cut::LOADING);
        }
        Walked::NotUser => return by_frame_pointers(ctx, buf, 0),
    };
    let stack = keep(buf, n);
    uwalk::remember(stack, n, regs, state);
    stack
}

/// The user stack of the task an on-CPU sample interrupted: walked from the
/// unwind tables (with `CFI`, as the hook's full body does) or by frame pointers,
/// as [`of_current`] takes them, but without the task's state, which the
/// switches' reuse keeps for their own call sites.
#[inline(always)]
pub fn sampled<C: EbpfContext, const CFI: bool>(ctx: &C) -> u64 {
    let Some(buf) = SCRATCH_USTACK.get_ptr_mut(0) else {
        return ENOMEM;
    };
    if !CFI || settings().cfi == 0 {
        let mark = if !CFI && settings().cfi != 0 { cut::STARTING } else { 0 };
        return by_frame_pointers(ctx, buf, mark);
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    match uwalk::walk(tgid, uwalk::user_regs(), buf, true) {
        Walked::Frames(n) => keep(buf, n),
        Walked::NoMaps => {
            ask_for_maps(tgid);
            by_frame_pointers(ctx, buf, cut::LOADING)
        }
        Walked::NotUser => by_frame_pointers(ctx, buf, 0),
    }
}

/// The stack by frame pointers, as the kernel's helper walks it: everywhere with
/// `--unwind fp`, from kernel threads, and, cut with `mark` (a `cut` reason; 0:
/// none), while the walker does not know where the process maps its code or is
/// not yet loaded itself.
#[inline(always)]
fn by_frame_pointers<C: EbpfContext>(ctx: &C, buf: *mut KernelStack, mark: u64) -> u64 {
    // SAFETY: the helper writes at most BYTES into the per-CPU buffer of that size.
    let ret = unsafe { bpf_get_stack(ctx.as_ptr(), buf.cast(), BYTES, BPF_F_USER_STACK as u64) };
    if ret == 0 || ret == -EFAULT || (ret == -EPERM && bpf_get_current_pid_tgid() as u32 == 0) {
        // No user context: there is no user stack to lose.
        return STACK_NONE;
    }
    if ret < 0 {
        count(counter::LOST_USER_STACK, 1);
        return (-ret) as u64;
    }
    let mut n = ret as usize / 8;
    if mark != 0 {
        // A walk that read a zero return address (the outermost frame of a
        // thread) stores it as its last frame; user space reads a stack up to its
        // first zero, so the mark goes in that zero's place.
        // SAFETY: the per-CPU buffer the helper just filled, used by this run alone.
        if n > 0 && n <= KSTACK_DEPTH && unsafe { (*buf)[n - 1] } == 0 {
            n -= 1;
        }
    }
    // SAFETY: the per-CPU buffer the helper just filled, used by this run alone.
    let n = if mark != 0 {
        uwalk::mark(buf, n, mark)
    } else {
        append_leaf_words(unsafe { &mut *buf }, n)
    };
    keep(buf, n)
}

/// Keeps the `n` frames in `buf` in `USTACKS`; their reference.
#[inline(always)]
fn keep(buf: *mut KernelStack, n: usize) -> u64 {
    // SAFETY: the per-CPU buffer just filled, used by this run alone.
    let frames = unsafe { &*buf };
    stackref::keep(&USTACKS, stackref::hash(frames, n, USER_SEED), frames, counter::LOST_USER_STACK)
}
