//! The learner side of kernel stack reuse (see `kcache`): finding where the
//! return addresses of a stack just unwound lie on the task's kernel stack, by a
//! scan or from a layout another task learned, dropping stale copies, and keeping
//! the result as the task's own entry and as a shared layout. Runs in the learner
//! programs, tail-called at the end of the hooks.

use aya_ebpf::helpers::bpf_loop;
use topwaits_common::{
    limits::CACHED_PER_TASK, CacheKey, KernelStack, StackCache, CACHE_SLOTS, STACK_STORED,
};

use crate::kcache::{
    entry_in_place, read_region, scratch, Scan, ENTRY_SLOT_FROM_TOP, FIRST, LEARN, REGION_BYTES,
    REGION_WORDS, SEED,
};
use crate::layouts;

/// The learner's work: remembers the stack the hook left. Runs as a separate
/// program, tail-called at the end of the hook, so that its verification is not
/// on the start-up path: it is loaded after attaching.
#[inline(always)]
pub fn learn_pending() {
    let Some((st, _, frames)) = scratch() else { return };
    // SAFETY: per-CPU scratch, used by this program run alone.
    let (what, base, n, kstack) = unsafe {
        let what = (*st).pending;
        (*st).pending = 0;
        (what, (*st).pending_base, (*st).pending_frames as usize, (*st).pending_kstack)
    };
    match what {
        LEARN => remember(st, base, frames, n, kstack),
        SEED => seed(st, kstack),
        _ => {}
    }
}

/// Notes that word `i` of the region holds frame `frame`'s return address.
/// Returns 1 (stop the loop) when the slots are full.
#[inline(always)]
fn keep(st: &mut Scan, i: u64, frame: usize) -> i64 {
    let off = (i * 8) as u32;
    if frame + 1 == st.frames as usize && off == st.top_off {
        // The entry frame, checked from the top instead.
        st.fresh.last_at_top = 1;
        return 0;
    }
    let k = st.fresh.len as usize;
    if k >= CACHE_SLOTS {
        st.overflow = 1;
        return 1;
    }
    st.fresh.slots[k] = off as u16;
    st.fresh.owners[k] = frame as u8;
    st.fresh.len += 1;
    st.fresh.span = st.fresh.span.max(off + 8);
    0
}

/// `bpf_loop` body: looks at word `i` of the region for the next frame's return
/// address, and keeps every copy of the frames already found.
unsafe extern "C" fn scan_word(i: u64, _ctx: *mut core::ffi::c_void) -> i64 {
    let Some((st, region, frames)) = scratch() else { return 1 };
    // SAFETY: per-CPU scratch, used by this program run alone.
    let st = unsafe { &mut *st };
    let word = region[i as usize & (REGION_WORDS - 1)];
    if word < st.lo || word > st.hi {
        return 0;
    }
    // `learn` keeps `frames` below CACHE_SLOTS, so `next` is a valid index.
    let next = st.next as usize & 63;
    if next < st.frames as usize && word == frames[next] {
        st.next += 1;
        if !index_frame(st, frames, next) {
            st.overflow = 1;
            return 1;
        }
        return keep(st, i, next);
    }
    match find_frame(st, frames, word) {
        Some(j) => keep(st, i, j),
        None => 0,
    }
}

/// The two buckets of a return address in [`Scan::index`].
#[inline(always)]
fn buckets(ip: u64) -> (usize, usize) {
    let h = ip.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((h >> 56) as usize, ((h >> 48) & 0xff) as usize)
}

/// Whether a bucket holds a frame of this scan (older scans' entries are free).
#[inline(always)]
fn current(st: &Scan, entry: u16) -> Option<usize> {
    (entry >> 8 == st.generation as u16 & 0xff && entry & 0xff != 0)
        .then(|| (entry & 0xff) as usize - 1)
}

/// Indexes frame `j` by its return address, so that later copies are found
/// without a loop; false if both buckets hold other frames.
#[inline(always)]
fn index_frame(st: &mut Scan, frames: &KernelStack, j: usize) -> bool {
    let ip = frames[j & 63];
    let tag = ((st.generation as u16 & 0xff) << 8) | (j as u16 + 1);
    for b in [buckets(ip).0, buckets(ip).1] {
        match current(st, st.index[b]) {
            None => {
                st.index[b] = tag;
                return true;
            }
            // The same address as an earlier frame (recursion): its copies are
            // checked against the same value, so one index entry serves both.
            Some(k) if frames[k & 63] == ip => return true,
            Some(_) => {}
        }
    }
    false
}

/// The frame already found whose return address `word` is, if any.
#[inline(always)]
fn find_frame(st: &Scan, frames: &KernelStack, word: u64) -> Option<usize> {
    let (b1, b2) = buckets(word);
    for b in [b1, b2] {
        if let Some(k) = current(st, st.index[b]) {
            if frames[k & 63] == word {
                return Some(k & 63);
            }
        }
    }
    None
}

/// `bpf_loop` body: keeps slot `k` of the entry being refined if it still holds
/// its frame's return address, and notes the frame as covered.
unsafe extern "C" fn refine_slot(k: u64, _ctx: *mut core::ffi::c_void) -> i64 {
    let Some((st, region, frames)) = scratch() else { return 1 };
    // SAFETY: per-CPU scratch, used by this program run alone.
    let st = unsafe { &mut *st };
    let (k, m) = (k as usize, st.next as usize);
    if k >= CACHE_SLOTS || m >= CACHE_SLOTS {
        return 1;
    }
    let (off, owner) = (st.fresh.slots[k], st.fresh.owners[k] as usize & 63);
    if region[(off as usize >> 3) & (REGION_WORDS - 1)] == frames[owner] {
        st.fresh.slots[m] = off;
        st.fresh.owners[m] = owner as u8;
        st.next += 1;
        st.kept |= 1 << owner;
    }
    0
}

/// Learns the slots of the `n` frames in the stack scratch above `base` (the scan
/// range was set by `hash`) into the scratch entry; false if a frame was not
/// found or the copies do not fit.
#[inline(never)]
fn learn(st: *mut Scan, base: u64, top: u64, n: usize, kstack: u64) -> bool {
    if kstack & STACK_STORED == 0 || n <= FIRST || n >= CACHE_SLOTS {
        return false;
    }
    let span = (top - base).min(REGION_BYTES);
    if read_region(base, span).is_none() {
        return false;
    }
    // SAFETY: per-CPU scratch, used by this program run alone.
    unsafe {
        (*st).next = FIRST as u32;
        (*st).frames = n as u32;
        (*st).top_off = if cfg!(bpf_target_arch = "x86_64") {
            (top - base).wrapping_sub(ENTRY_SLOT_FROM_TOP) as u32
        } else {
            u32::MAX
        };
        (*st).overflow = 0;
        (*st).generation = (*st).generation.wrapping_add(1);
        (*st).fresh.kstack = kstack;
        (*st).fresh.frames = n as u32;
        (*st).fresh.len = 0;
        (*st).fresh.span = 8;
        (*st).fresh.last_at_top = 0;
        bpf_loop((span / 8) as u32, scan_word as *mut core::ffi::c_void, core::ptr::null_mut(), 0);
        (*st).next as usize == n && (*st).overflow == 0
    }
}

/// Drops the slots of `cache` that no longer hold their return address above
/// `base` (the task was found with the same stack, so those were stale copies);
/// false, leaving `cache` alone, if a frame was left with no slot.
#[inline(never)]
fn refine(st: *mut Scan, base: u64, cache: &mut StackCache) -> bool {
    // SAFETY: per-CPU scratch, used by this program run alone.
    unsafe {
        (*st).fresh = *cache;
        if !refine_fresh(st, base) {
            return false;
        }
        *cache = (*st).fresh;
    }
    true
}

/// [`refine`] of the scratch entry in place.
#[inline(always)]
fn refine_fresh(st: *mut Scan, base: u64) -> bool {
    // SAFETY: per-CPU scratch, used by this program run alone.
    unsafe {
        if (*st).fresh.len == 0 || read_region(base, (*st).fresh.span as u64).is_none() {
            return false;
        }
        let n = (*st).fresh.frames as usize;
        if n <= FIRST || n >= CACHE_SLOTS {
            return false;
        }
        (*st).next = 0;
        (*st).kept = 0;
        bpf_loop((*st).fresh.len, refine_slot as *mut core::ffi::c_void, core::ptr::null_mut(), 0);
        (*st).fresh.len = (*st).next;
        let mut want = ((1u64 << n) - 1) & !((1u64 << FIRST) - 1);
        if (*st).fresh.last_at_top != 0 {
            want &= !(1u64 << (n - 1));
        }
        (*st).kept & want == want
    }
}

/// Keeps the shared layout `id`, just reused by the task at the site in the
/// scratch, as that task's newest entry.
#[inline(never)]
fn seed(st: *mut Scan, id: u64) {
    let Some(l) = layouts::layout(id) else { return };
    // SAFETY: per-CPU scratch, used by this program run alone.
    unsafe {
        (*st).fresh = *l;
        keep_fresh(st, crate::kcache::own_entries(false), CACHED_PER_TASK);
    }
}

/// Remembers where the `n` frames of the stack just unwound (`frames`, stored as
/// `kstack`) lie: refines the entry that holds the same stack at the same site, or
/// learns it anew, in that entry's place or as the task's newest.
///
/// A BPF subprogram, not inlined: its many exits then end in one verifier state
/// at the return, instead of each multiplying the paths through the caller.
#[inline(never)]
fn remember(st: *mut Scan, base: u64, frames: &KernelStack, n: usize, kstack: u64) {
    // SAFETY: per-CPU scratch and map values, used by this program run alone
    // (an entry's key names one task, which runs on one CPU at a time).
    unsafe {
        let top = (*st).top;
        let key = (*st).key;
        let entry = crate::kcache::own_entries(false);
        // The entry that held this stack at this site, if any.
        let mut same = CACHED_PER_TASK;
        if let Some(e) = entry {
            for (i, c) in (*e).iter().enumerate() {
                if c.kstack == kstack && c.site == key.site && c.user_ip == key.user_ip {
                    same = i;
                    break;
                }
            }
            if same < CACHED_PER_TASK {
                // The same stack, with stale copies changed: keep the slots that held.
                // (One call, wherever the entry is, keeps the program and its
                // verification small.)
                let c = &mut (*e)[same];
                if entry_in_place(top, c, frames) && refine(st, base, c) {
                    // Fewer slots serve other tasks too.
                    layouts::publish(&key, c);
                    return;
                }
            }
        }
        if !from_layout(st, base, frames, kstack, &key) {
            if !learn(st, base, top, n, kstack) {
                return;
            }
            layouts::publish(&key, &(*st).fresh);
        }
        keep_fresh(st, entry, same);
    }
}

/// Fills the scratch entry from a layout another task learned for `kstack` at
/// `site`, with the slots that do not hold their frame in this task dropped
/// (refined layouts are published, so the site's converge on the true slots);
/// false if there is none or it does not cover every frame.
#[inline(never)]
fn from_layout(
    st: *mut Scan,
    base: u64,
    frames: &KernelStack,
    kstack: u64,
    site: &CacheKey,
) -> bool {
    let Some(list) = layouts::candidates(site) else { return false };
    // SAFETY: per-CPU scratch, used by this program run alone.
    let top = unsafe { (*st).top };
    for i in 0..layouts::CANDIDATES {
        let Some(l) = layouts::layout(layouts::candidate(list, i)) else { continue };
        if l.kstack != kstack {
            continue;
        }
        // SAFETY: per-CPU scratch, used by this program run alone.
        unsafe {
            (*st).fresh = *l;
            if !entry_in_place(top, l, frames) || !refine_fresh(st, base) {
                return false;
            }
            if (*st).fresh.len < l.len {
                layouts::publish(site, &(*st).fresh);
            }
        }
        return true;
    }
    false
}

/// Keeps the scratch entry as the running task's (the site in the scratch key):
/// in place of entry `same`, or as its newest, dropping the oldest.
#[inline(always)]
unsafe fn keep_fresh(
    st: *mut Scan,
    entry: Option<*mut [StackCache; CACHED_PER_TASK]>,
    same: usize,
) {
    // Copies in place: the values would not fit on the BPF stack.
    use core::ptr::{copy, copy_nonoverlapping};
    // SAFETY: per-CPU scratch and the task's own map value, used by this run alone.
    unsafe {
        let key = (*st).key;
        (*st).fresh.site = key.site;
        (*st).fresh.user_ip = key.user_ip;
        match entry {
            // Relearned in place, or the newest, dropping the oldest.
            Some(e) if same < CACHED_PER_TASK => {
                copy_nonoverlapping(&raw const (*st).fresh, &raw mut (*e)[same], 1)
            }
            Some(e) => {
                copy(&raw const (*e)[0], &raw mut (*e)[1], CACHED_PER_TASK - 1);
                copy_nonoverlapping(&raw const (*st).fresh, &raw mut (*e)[0], 1);
            }
            // The task's first stack: its entry is created zeroed (empty slots).
            None => {
                if let Some(e) = crate::kcache::own_entries(true) {
                    copy_nonoverlapping(&raw const (*st).fresh, &raw mut (*e)[0], 1);
                }
            }
        }
    }
}
