//! Reuse of a task's kernel stack without another unwind while it is still in
//! place on the task's kernel stack: where each frame's return address lies is
//! learned once per task and call site, then checked with one bulk read (see
//! `topwaits_common::StackCache` for why the check is exact). Each task keeps its
//! last few stacks in its own entry, freed when the task exits.

use aya_ebpf::{
    helpers::{bpf_loop, generated::bpf_probe_read_kernel},
    macros::map,
    maps::{HashMap, PerCpuArray, ProgramArray},
    EbpfContext,
};
use topwaits_common::{counter, limits, limits::CACHED_PER_TASK, CacheKey, KernelStack, StackCache, CACHE_SLOTS, STACK_STORED};

use crate::layouts::{self, Site};
use crate::maps::{count, GROWS, KSTACKS, SCRATCH_STACK};

/// Kernel stacks are this large and aligned to it (x86-64 and arm64 without
/// KASAN). With larger stacks the top is misplaced, slots are not all found, and
/// nothing is cached.
const THREAD_SIZE: u64 = 16 * 1024;
/// Most of the stack read to learn or check slots.
const REGION_WORDS: usize = 1024;
const REGION_BYTES: u64 = (REGION_WORDS * 8) as u64;
/// The first frame with a slot. Frames 0 and 1 are the program's call to the
/// helper and the tracepoint's call to the program: fixed code addresses, with
/// their return addresses below the anchor (the tracepoint's argument array).
pub const FIRST: usize = 2;
/// x86-64: `struct pt_regs` at the top of the stack, the entry frame's return
/// address just below it, and the offsets of `orig_ax` and `ip` from the top.
const PT_REGS: u64 = 168;
const ENTRY_SLOT_FROM_TOP: u64 = PT_REGS + 8;
const ORIG_AX_FROM_TOP: u64 = PT_REGS - 120;
/// Top bit of [`CacheKey::site`] for a syscall.
const IN_SYSCALL: u64 = 1 << 63;

/// The hook a stack is taken at. Frames 0 and 1 (below the anchor) are fixed
/// per hook, and the two hooks' stacks of one task and call site differ, so each
/// has its own cache entries.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// `sched_switch`, as the task leaving the CPU.
    Switch,
    /// `sched_waking`, as the waker.
    Waking,
}

impl Hook {
    /// The bit of [`CacheKey::site`] that tells the hooks apart.
    #[inline(always)]
    fn bit(self) -> u64 {
        match self {
            Hook::Switch => 0,
            Hook::Waking => 1 << 62,
        }
    }
}

/// Per-CPU state of one stack capture, shared with the `bpf_loop` callbacks.
#[repr(C)]
pub struct Scan {
    /// Scratch word that turns the anchor address into a plain number.
    base: u64,
    /// The hash being computed.
    pub hash: u64,
    /// Lowest and highest return address of the frames with slots.
    pub lo: u64,
    pub hi: u64,
    /// Frames found by the refining pass.
    kept: u64,
    /// Next frame to find, and frames in the stack.
    next: u32,
    frames: u32,
    /// Byte offset above the anchor of the entry frame's slot (x86-64).
    top_off: u32,
    /// Set when more copies were found than fit.
    overflow: u32,
    /// Set when a checked slot no longer holds its return address.
    changed: u32,
    /// Numbers each learning scan, so that [`Scan::index`] needs no clearing.
    generation: u32,
    /// Found frames by return address (two buckets each): generation << 8 | frame + 1.
    index: [u16; 256],
    /// The frames an entry's slots must hold, while it is checked.
    want: [u64; 64],
    /// A cache entry being learned or refined.
    fresh: StackCache,
    /// A new cache value: the entry learned, then empty ones.
    fresh_set: [StackCache; CACHED_PER_TASK],
    /// The site [`find`] looked up, and the top of the kernel stack.
    key: CacheKey,
    top: u64,
    /// Work left for the learner (`pending`, one of [`LEARN`] and [`SEED`]): a
    /// stack just unwound (anchor, frames and reference), or the id of a shared
    /// layout to keep as the task's own.
    pending: u64,
    pending_base: u64,
    pending_frames: u64,
    pending_kstack: u64,
}

/// [`Scan::pending`]: learn the stack just unwound.
const LEARN: u64 = 1;
/// [`Scan::pending`]: keep the shared layout just reused as the task's own.
const SEED: u64 = 2;

/// Leaves the stack just unwound (in the stack scratch) for the learner, which
/// the hook tail-calls when it is done (see [`learn_pending`]).
#[inline(always)]
pub fn defer(st: *mut Scan, base: u64, n: usize, kstack: u64) {
    // SAFETY: per-CPU scratch, used by this program run alone.
    unsafe {
        (*st).pending = LEARN;
        (*st).pending_base = base;
        (*st).pending_frames = n as u64;
        (*st).pending_kstack = kstack;
    }
}

/// Whether a stack waits for the learner.
#[inline(always)]
fn pending() -> bool {
    // SAFETY: per-CPU scratch, used by this program run alone.
    SCRATCH_SCAN.get_ptr(0).is_some_and(|st| unsafe { (*st).pending != 0 })
}

/// Ends a hook: tail-calls its learner (slot 0 of `learners`) when a stack waits
/// for it. The call does not return when it succeeds; while no learner is loaded
/// it fails, and the stack is dropped.
#[inline(always)]
pub fn hand_to_learner<C: EbpfContext>(ctx: &C, learners: &ProgramArray) {
    if !pending() {
        return;
    }
    // SAFETY: the learner programs take the same context as the hook.
    unsafe { learners.tail_call(ctx, 0) };
    if let Some(st) = SCRATCH_SCAN.get_ptr_mut(0) {
        // SAFETY: per-CPU scratch, used by this program run alone.
        unsafe { (*st).pending = 0 };
    }
}

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

#[map(name = "SCRATCH_SCAN")]
static SCRATCH_SCAN: PerCpuArray<Scan> = PerCpuArray::with_max_entries(1, 0);

/// A copy of the kernel stack above the anchor, per CPU.
#[map(name = "SCRATCH_REGION")]
static SCRATCH_REGION: PerCpuArray<[u64; REGION_WORDS]> = PerCpuArray::with_max_entries(1, 0);

/// Where each task's kernel stacks lay (see `StackCache`), keyed by `task_struct`
/// address: the stacks last learned, newest first, each with its call site (one
/// site often alternates between two stacks: a read that blocks, and one
/// preempted on its way out). Per task rather than an LRU of task and site: an LRU
/// that all tasks share is preallocated, and once more tasks block than it holds,
/// every switch evicts, unwinds and learns again (10,000 sleeping threads cost 4x
/// the per-switch time of 10). Entries follow the tasks, like `STARTS`.
#[map(name = "KCACHE")]
static KCACHE: HashMap<u64, [StackCache; CACHED_PER_TASK]> = HashMap::with_max_entries(limits::START_ENTRIES, GROWS);

/// Frees a task's entry at its last switch.
#[inline(always)]
pub fn drop_task(task: u64) {
    let _ = KCACHE.remove(&task);
}

/// The per-CPU scratch of the callbacks. `Scan` stays a raw pointer (never `&mut`)
/// wherever `bpf_loop` runs: the callbacks write it, and a unique reference would
/// let the compiler assume that nothing does.
#[inline(always)]
pub fn scratch() -> Option<(*mut Scan, &'static [u64; REGION_WORDS], &'static KernelStack)> {
    let st = SCRATCH_SCAN.get_ptr_mut(0)?;
    let region = SCRATCH_REGION.get_ptr(0)?;
    let frames = SCRATCH_STACK.get_ptr(0)?;
    // SAFETY: per-CPU scratch, used by this program run alone.
    Some((st, unsafe { &*region }, unsafe { &*frames }))
}

/// Copies `len` bytes of the kernel stack from `addr` into the region scratch.
#[inline(always)]
fn read_region(addr: u64, len: u64) -> Option<&'static [u64; REGION_WORDS]> {
    let region = SCRATCH_REGION.get_ptr_mut(0)?;
    let len = ((len.max(8) - 1) & (REGION_BYTES - 8)) + 8;
    // SAFETY: the helper checks the source address and writes at most
    // REGION_BYTES into the per-CPU buffer of that size.
    let ret = unsafe { bpf_probe_read_kernel(region.cast(), len as u32, addr as *const _) };
    // SAFETY: the per-CPU buffer, used by this program run alone.
    (ret == 0).then(|| unsafe { &*region })
}

/// One word of the kernel stack.
#[inline(always)]
fn read_word(addr: u64) -> Option<u64> {
    // SAFETY: bpf_probe_read_kernel checks the address and fails cleanly.
    unsafe { aya_ebpf::helpers::bpf_probe_read_kernel(addr as *const u64).ok() }
}

/// Whether the entry frame of `cache` is still in place below the top.
#[inline(always)]
fn entry_in_place(top: u64, cache: &StackCache, frames: &KernelStack) -> bool {
    cache.last_at_top == 0
        || read_word(top - ENTRY_SLOT_FROM_TOP) == Some(frames[(cache.frames as usize).wrapping_sub(1) & 63])
}

/// `bpf_loop` body: checks slot `k` of the entry in the scratch against the
/// region, and notes a changed one.
unsafe extern "C" fn check_slot(k: u64, _ctx: *mut core::ffi::c_void) -> i64 {
    let Some((st, region, _)) = scratch() else { return 1 };
    // SAFETY: per-CPU scratch, used by this program run alone.
    let st = unsafe { &mut *st };
    let k = k as usize;
    if k >= CACHE_SLOTS {
        return 1;
    }
    let (off, owner) = (st.fresh.slots[k], st.fresh.owners[k] as usize & 63);
    if region[(off as usize >> 3) & (REGION_WORDS - 1)] != st.want[owner] {
        st.changed = 1;
        return 1;
    }
    0
}

/// The stored reference of `cache` if its stack is still in place above `base`,
/// else 0. Leaves the region it read in the scratch. Inlined: the program that
/// runs it tail-calls the learner, and BPF does not mix that with subprograms.
#[inline(always)]
fn reuse(st: *mut Scan, base: u64, top: u64, cache: &StackCache) -> u64 {
    if cache.len == 0 || cache.len as usize > CACHE_SLOTS {
        return 0;
    }
    // SAFETY: a value of a map lookup, only read.
    let Some(frames) = KSTACKS.get_ptr(&cache.kstack).map(|f| unsafe { &*f }) else {
        return 0;
    };
    if read_region(base, cache.span as u64).is_none() {
        return 0;
    }
    // SAFETY: per-CPU scratch, used by this program run alone.
    unsafe {
        (*st).fresh = *cache;
        (*st).want.copy_from_slice(&frames[..64]);
        (*st).changed = 0;
        bpf_loop(cache.len, check_slot as *mut core::ffi::c_void, core::ptr::null_mut(), 0);
        if (*st).changed == 0 && entry_in_place(top, cache, frames) {
            cache.kstack
        } else {
            0
        }
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
    (entry >> 8 == st.generation as u16 & 0xff && entry & 0xff != 0).then(|| (entry & 0xff) as usize - 1)
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

/// The address of the tracepoint's argument array (the program's context), as a
/// plain number. The array lies in `bpf_trace_run*`'s frame on the kernel stack,
/// at a fixed distance below every frame of the call path into the hook. (The
/// program's own frame may be on a per-CPU private stack instead.)
#[inline(always)]
pub fn anchor<C: EbpfContext>(st: *mut Scan, ctx: &C) -> u64 {
    // A round trip through map memory makes the verifier see a number, which
    // may be masked and compared, rather than a context pointer.
    // SAFETY: a field of the per-CPU scratch; volatile so the round trip is kept.
    unsafe {
        core::ptr::write_volatile(&raw mut (*st).base, ctx.as_ptr() as u64);
        core::ptr::read_volatile(&raw const (*st).base)
    }
}

/// Where the task entered the kernel: in a syscall (x86-64), its number and user
/// return address, which do not change with the random offset that syscall entry
/// applies to the stack; otherwise the depth of the anchor.
#[inline(always)]
fn site(task: u64, base: u64, top: u64, hook: Hook) -> CacheKey {
    if cfg!(bpf_target_arch = "x86_64") {
        if let (Some(nr), Some(ip)) = (read_word(top - ORIG_AX_FROM_TOP), read_word(top - ORIG_AX_FROM_TOP + 8)) {
            // Kernel threads have zeroed registers; interrupts and exceptions
            // store -1 as the syscall number.
            if ip != 0 && nr != u64::MAX {
                return CacheKey { task, site: (nr & 0xffff) | IN_SYSCALL | hook.bit(), user_ip: ip };
            }
        }
    }
    CacheKey { task, site: (top - base) | hook.bit(), user_ip: 0 }
}

/// Whether `base` (the anchor) lies on `task`'s own kernel stack, as it does at
/// `sched_switch`. A wakeup from an interrupt runs on the interrupt stack, which
/// the unwind leaves for the task's: such a stack is neither reused nor learned.
#[inline(always)]
pub fn on_task_stack(task: u64, base: u64, off_stack: u32) -> bool {
    if off_stack == u32::MAX {
        return false;
    }
    read_word(task + off_stack as u64) == Some(base & !(THREAD_SIZE - 1))
}

/// Finds the running task's cache entry for where it entered the hook (`base`,
/// the anchor), and returns the stored stack if one is still in place, else 0.
/// Leaves the site in the scratch for [`remember`]. `task` 0 (not at the
/// tracepoint) finds nothing.
#[inline(always)]
pub fn find(st: *mut Scan, base: u64, task: u64, hook: Hook) -> u64 {
    if task == 0 {
        return 0;
    }
    let top = (base | (THREAD_SIZE - 1)) + 1;
    let key = site(task, base, top, hook);
    // SAFETY: per-CPU scratch, used by this program run alone.
    unsafe {
        (*st).top = top;
        (*st).key = key;
    }
    let mut known = false;
    if let Some(e) = KCACHE.get_ptr(&task) {
        // SAFETY: a pointer from a map lookup; only this task's hooks use its entry,
        // and they do not run on two CPUs at once.
        for c in unsafe { &*e } {
            if c.site == key.site && c.user_ip == key.user_ip {
                known = true;
                let k = reuse(st, base, top, c);
                if k != 0 {
                    return k;
                }
            }
        }
    }
    if known {
        return 0;
    }
    shared(st, base, top, &Site { site: key.site, user_ip: key.user_ip })
}

/// For a task that never had a stack at this call site: the stack of a layout
/// another task learned there, if one is in place (and then left for the learner
/// to keep as this task's own), else 0.
#[inline(always)]
fn shared(st: *mut Scan, base: u64, top: u64, site: &Site) -> u64 {
    let Some(list) = layouts::candidates(site) else { return 0 };
    for i in 0..layouts::CANDIDATES {
        let id = layouts::candidate(list, i);
        let Some(l) = layouts::layout(id) else { continue };
        let k = reuse(st, base, top, l);
        if k != 0 {
            count(counter::KSTACK_SHARED, 1);
            // SAFETY: per-CPU scratch, used by this program run alone.
            unsafe {
                (*st).pending = SEED;
                (*st).pending_kstack = id;
            }
            return k;
        }
    }
    0
}

/// Keeps the shared layout `id`, just reused by the task at the site in the
/// scratch, as that task's newest entry.
#[inline(never)]
fn seed(st: *mut Scan, id: u64) {
    let Some(l) = layouts::layout(id) else { return };
    // SAFETY: per-CPU scratch, used by this program run alone.
    unsafe {
        (*st).fresh = *l;
        keep_fresh(st, KCACHE.get_ptr_mut(&(*st).key.task), CACHED_PER_TASK);
    }
}

/// Remembers where the `n` frames of the stack just unwound (`frames`, stored as
/// `kstack`) lie: refines the entry that holds the same stack at the same site, or
/// learns it anew, in that entry's place or as the task's newest.
///
/// A BPF subprogram, not inlined: its many exits then end in one verifier state
/// at the return, instead of each multiplying the paths through the caller.
#[inline(never)]
pub fn remember(st: *mut Scan, base: u64, frames: &KernelStack, n: usize, kstack: u64) {
    // SAFETY: per-CPU scratch and map values, used by this program run alone
    // (an entry's key names one task, which runs on one CPU at a time).
    unsafe {
        let top = (*st).top;
        let key = (*st).key;
        let entry = KCACHE.get_ptr_mut(&key.task);
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
                    layouts::publish(&Site { site: key.site, user_ip: key.user_ip }, c);
                    return;
                }
            }
        }
        let site = Site { site: key.site, user_ip: key.user_ip };
        if !from_layout(st, base, frames, kstack, &site) {
            if !learn(st, base, top, n, kstack) {
                return;
            }
            layouts::publish(&site, &(*st).fresh);
        }
        keep_fresh(st, entry, same);
    }
}

/// Fills the scratch entry from a layout another task learned for `kstack` at
/// `site`, with the slots that do not hold their frame in this task dropped
/// (refined layouts are published, so the site's converge on the true slots);
/// false if there is none or it does not cover every frame.
#[inline(never)]
fn from_layout(st: *mut Scan, base: u64, frames: &KernelStack, kstack: u64, site: &Site) -> bool {
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

/// Keeps the scratch entry as the task's (the task and site in the scratch key):
/// in place of entry `same`, or as its newest, dropping the oldest.
#[inline(always)]
unsafe fn keep_fresh(st: *mut Scan, entry: Option<*mut [StackCache; CACHED_PER_TASK]>, same: usize) {
    // Copies in place: the values would not fit on the BPF stack.
    use core::ptr::{copy, copy_nonoverlapping, write_bytes};
    // SAFETY: per-CPU scratch and the task's own map value, used by this run alone.
    unsafe {
        let key = (*st).key;
        (*st).fresh.site = key.site;
        (*st).fresh.user_ip = key.user_ip;
        match entry {
            // Relearned in place, or the newest, dropping the oldest.
            Some(e) if same < CACHED_PER_TASK => copy_nonoverlapping(&raw const (*st).fresh, &raw mut (*e)[same], 1),
            Some(e) => {
                copy(&raw const (*e)[0], &raw mut (*e)[1], CACHED_PER_TASK - 1);
                copy_nonoverlapping(&raw const (*st).fresh, &raw mut (*e)[0], 1);
            }
            None => {
                copy_nonoverlapping(&raw const (*st).fresh, &raw mut (*st).fresh_set[0], 1);
                write_bytes(&raw mut (*st).fresh_set[1], 0, CACHED_PER_TASK - 1);
                let _ = KCACHE.insert(&key.task, &(*st).fresh_set, 0);
            }
        }
    }
}
