//! Stack references, shared by kernel and user stacks (and waker chains): a
//! 64-bit hash of a stack's frames (with `STACK_STORED` set), and keeping the
//! frames in a map under it.

use aya_ebpf::{bindings::BPF_NOEXIST, maps::HashMap};
use topwaits_common::{KernelStack, STACK_STORED};

use crate::maps::count;

const EEXIST: i32 = 17;

pub use topwaits_common::mix;

/// The reference of the first `n` frames, hashed from `seed` by a bounded loop in
/// place (no call per frame), as `topwaits_common::stack_ref` hashes it.
#[inline(always)]
pub fn hash(frames: &KernelStack, n: usize, seed: u64) -> u64 {
    // Read through memory, so that the compiler keeps the loop's own bound (the
    // array's end) rather than trust a bound on `n` it derived from the caller,
    // which the verifier cannot see.
    // SAFETY: a volatile read of a local.
    let n = unsafe { core::ptr::read_volatile(&n) };
    let mut h = seed ^ n as u64;
    for (i, &ip) in frames.iter().enumerate() {
        if i >= n {
            break;
        }
        h = mix(h, ip);
    }
    h | STACK_STORED
}

/// Keeps `frames` (a stack, or a waker chain) in `map` under reference `key`
/// (unless kept already) and returns the reference, or the errno of a lost
/// value, counted in `lost`.
#[inline(always)]
pub fn keep<V>(map: &HashMap<u64, V>, key: u64, frames: &V, lost: u32) -> u64 {
    if map.get_ptr(&key).is_some() {
        return key;
    }
    match map.insert(&key, frames, BPF_NOEXIST as u64) {
        Ok(()) => key,
        // Stored by another CPU in between.
        Err(e) if e == -EEXIST => key,
        Err(e) => {
            count(lost, 1);
            (-e) as u64
        }
    }
}
