//! User stacks of waits and wakers: taken with `bpf_get_stack`, kept in `USTACKS`
//! under a 64-bit hash of their frames. Unlike a bucketed stack map, two stacks
//! never collide and lose one, and entries are allocated as stacks arrive.

use aya_ebpf::{
    bindings::{BPF_F_USER_STACK, BPF_NOEXIST},
    helpers::{bpf_get_current_pid_tgid, bpf_get_stack},
    EbpfContext,
};
use topwaits_common::{counter, KSTACK_DEPTH, STACK_NONE, STACK_STORED};

use crate::maps::{count, SCRATCH_USTACK, USTACKS};

const EEXIST: i32 = 17;
const EFAULT: i64 = 14;
const EPERM: i64 = 1;
const ENOMEM: u64 = 12;
const BYTES: u32 = (KSTACK_DEPTH * 8) as u32;

/// The user stack of the task running this program, as a reference: stored,
/// [`STACK_NONE`] when it has none (a kernel thread, or the idle task under an
/// interrupt), or the errno of a lost one (counted).
#[inline(always)]
pub fn of_current<C: EbpfContext>(ctx: &C) -> u64 {
    let Some(buf) = SCRATCH_USTACK.get_ptr_mut(0) else {
        return ENOMEM;
    };
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
    let n = ret as usize / 8;
    // SAFETY: the per-CPU buffer the helper just filled, used by this run alone.
    let frames = unsafe { &*buf };
    // The seed differs from the kernel stacks' so that the two kinds never share a
    // reference. A bounded loop in place: no call per frame.
    let mut hash = 0x1319_8a2e_0370_7344 ^ n as u64;
    for (i, &ip) in frames.iter().enumerate() {
        if i >= n {
            break;
        }
        let x = (hash ^ ip).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        hash = x ^ (x >> 29);
    }
    let key = hash | STACK_STORED;
    if USTACKS.get_ptr(&key).is_some() {
        return key;
    }
    match USTACKS.insert(&key, frames, BPF_NOEXIST as u64) {
        Ok(()) => key,
        // Stored by another CPU in between.
        Err(e) if e == -EEXIST => key,
        Err(e) => {
            count(counter::LOST_USER_STACK, 1);
            (-e) as u64
        }
    }
}
