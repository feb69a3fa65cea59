//! Kernel stack layouts shared by all tasks: where the return addresses of a stack
//! lie above the hook's argument array is a property of the stack (see
//! `topwaits_common::StackCache`), not of the task that had it. A layout learned by
//! one task is kept here under its call site, so that a task new to that site
//! (a new thread of a pool, a forked worker) checks it in place instead of
//! unwinding and scanning its own stack.
//!
//! Layouts are immutable once stored: a map element is never updated or deleted,
//! so a reader on another CPU never sees one half written. A layout refined to
//! fewer slots is stored as a new element, and the site's list of candidates (plain
//! words, each written whole) is pointed at it.

use aya_ebpf::{bindings::BPF_NOEXIST, macros::map, maps::HashMap};
use topwaits_common::{limits, CacheKey, StackCache};

use crate::maps::GROWS;
use crate::stackref;

/// Layouts kept per call site, newest first.
pub const CANDIDATES: usize = 4;

/// Layouts by id (a hash of their stack and slot count); never updated or deleted.
#[map]
static LAYOUTS: HashMap<u64, StackCache> = HashMap::with_max_entries(limits::LAYOUTS, GROWS);

/// The ids of the layouts last learned at each call site, newest first (0: none).
#[map]
static SITES: HashMap<CacheKey, [u64; CANDIDATES]> =
    HashMap::with_max_entries(limits::LAYOUT_SITES, GROWS);

/// The candidate layouts of `site`, if any task learned one there.
#[inline(always)]
pub fn candidates(site: &CacheKey) -> Option<*const [u64; CANDIDATES]> {
    SITES.get_ptr(site)
}

/// Candidate `i` of a site's list, read whole (another CPU may be rewriting it).
#[inline(always)]
pub fn candidate(list: *const [u64; CANDIDATES], i: usize) -> u64 {
    // SAFETY: a map value pointer; each word is written whole by `publish`.
    unsafe { core::ptr::read_volatile(&raw const (*list)[i & (CANDIDATES - 1)]) }
}

/// The stored layout `id`, which nothing changes once stored.
#[inline(always)]
pub fn layout(id: u64) -> Option<&'static StackCache> {
    if id == 0 {
        return None;
    }
    // SAFETY: elements of LAYOUTS are never updated or deleted.
    LAYOUTS.get_ptr(&id).map(|l| unsafe { &*l })
}

/// Stores `layout` (slots for this stack valid in every task, see the module
/// note) and makes it the newest candidate of `site`. A full map keeps what it has.
#[inline(always)]
pub fn publish(site: &CacheKey, layout: &StackCache) {
    let id = stackref::mix(layout.kstack, layout.len as u64 + 1) | 1;
    // EEXIST: another task stored the same stack with as many slots; either serves.
    if LAYOUTS.insert(&id, layout, BPF_NOEXIST as u64).is_err() && LAYOUTS.get_ptr(&id).is_none() {
        return;
    }
    let Some(list) = SITES.get_ptr_mut(site) else {
        let fresh = [id, 0, 0, 0];
        let _ = SITES.insert(site, &fresh, BPF_NOEXIST as u64);
        return;
    };
    let mut prev = id;
    for i in 0..CANDIDATES {
        let cur = candidate(list, i);
        // SAFETY: a map value pointer; a whole-word store, as readers expect.
        unsafe { core::ptr::write_volatile(&raw mut (*list)[i], prev) };
        if cur == id || cur == 0 {
            break;
        }
        prev = cur;
    }
}
