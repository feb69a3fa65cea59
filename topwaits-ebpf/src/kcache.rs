//! Reuse of a task's kernel stack without another unwind while it is still in
//! place on the task's kernel stack, the hooks' side: where each frame's return
//! address lies (learned by `klearn`) is checked with one bulk read (see
//! `topwaits_common::StackCache` for why the check is exact). Each task keeps its
//! last few stacks in its own entry, freed when the task exits; a task new to a
//! call site checks the layouts other tasks learned there (`layouts`).

use aya_ebpf::{
    helpers::{bpf_loop, generated::bpf_probe_read_kernel},
    macros::map,
    maps::{PerCpuArray, ProgramArray},
    EbpfContext,
};
use topwaits_common::{
    counter, limits::CACHED_PER_TASK, CacheKey, KernelStack, StackCache, CACHE_SLOTS,
};

use crate::layouts;
use crate::maps::{count, KSTACKS, SCRATCH_STACK};
use crate::taskmap::{TaskState, TASKS};
use crate::uwalk::{PtRegs, REGS_IP, REGS_ORIG_AX};

/// Kernel stacks are this large and aligned to it (x86-64 and arm64 without
/// KASAN). With larger stacks the top is misplaced, slots are not all found, and
/// nothing is cached.
const THREAD_SIZE: u64 = 16 * 1024;
/// Most of the stack read to learn or check slots.
pub(crate) const REGION_WORDS: usize = 1024;
pub(crate) const REGION_BYTES: u64 = (REGION_WORDS * 8) as u64;
/// The first frame with a slot. Frames 0 and 1 are the program's call to the
/// helper and the tracepoint's call to the program: fixed code addresses, with
/// their return addresses below the anchor (the tracepoint's argument array).
pub const FIRST: usize = 2;
/// x86-64: `struct pt_regs` at the top of the stack, and the entry frame's return
/// address just below it.
const PT_REGS: u64 = 168;
pub(crate) const ENTRY_SLOT_FROM_TOP: u64 = PT_REGS + 8;
/// Top bit of [`CacheKey::site`] for a syscall.
const IN_SYSCALL: u64 = 1 << 63;

/// The hook a stack is taken at. Frames 0 and 1 (below the anchor) are fixed
/// per hook, and the two hooks' stacks of one task and call site differ, so each
/// has its own cache entries.
#[derive(Clone, Copy)]
pub enum Hook {
    /// `sched_switch`, as the task leaving the CPU, with its [`Hook::switch`] bits.
    Switch(u64),
    /// `sched_waking`, as the waker.
    Waking,
}

/// [`CacheKey::site`]'s bit for a waker's stack.
const WAKING_BIT: u64 = 1 << 62;
/// [`CacheKey::site`]'s bit for a task that stays runnable at `sched_switch`.
const RUNNABLE_BIT: u64 = 1 << 61;

impl Hook {
    /// `sched_switch`. A task that stays runnable (preempted, or yielding) has
    /// cache entries apart from its waits' at the same call site: its stack
    /// differs (a task preempted on its way out of the syscall it otherwise blocks
    /// in), and a task that alternates between the two then checks one stack a
    /// switch, not 1.45 (`messaging`). The bit goes through map memory: chosen by a
    /// branch, it would be a different constant on each path, and the verifier
    /// would check all the stack code after it twice (55,000 instructions more).
    #[inline(always)]
    pub fn switch(runnable: bool) -> Hook {
        let bit = if runnable { RUNNABLE_BIT } else { 0 };
        Hook::Switch(SCRATCH_SCAN.get_ptr_mut(0).map_or(bit, |st| through_map(st, bit)))
    }

    /// Whether this is the waker's hook.
    #[inline(always)]
    pub fn waking(self) -> bool {
        matches!(self, Hook::Waking)
    }

    /// Whether the task switching out is still runnable (preempted).
    #[inline(always)]
    pub fn runnable(self) -> bool {
        matches!(self, Hook::Switch(bits) if bits & RUNNABLE_BIT != 0)
    }

    /// The bits of [`CacheKey::site`] that tell the hooks apart.
    #[inline(always)]
    fn bits(self) -> u64 {
        match self {
            Hook::Switch(bits) => bits & RUNNABLE_BIT,
            Hook::Waking => WAKING_BIT,
        }
    }
}

/// Per-CPU state of one stack capture, shared with the `bpf_loop` callbacks.
#[repr(C)]
pub struct Scan {
    /// Scratch word of [`through_map`].
    opaque: u64,
    /// The hash being computed.
    pub hash: u64,
    /// Lowest and highest return address of the frames with slots.
    pub lo: u64,
    pub hi: u64,
    /// Frames found by the refining pass.
    pub(crate) kept: u64,
    /// Next frame to find, and frames in the stack.
    pub(crate) next: u32,
    pub(crate) frames: u32,
    /// Byte offset above the anchor of the entry frame's slot (x86-64).
    pub(crate) top_off: u32,
    /// Set when more copies were found than fit.
    pub(crate) overflow: u32,
    /// Set when a checked slot no longer holds its return address.
    changed: u32,
    /// Numbers each learning scan, so that [`Scan::index`] needs no clearing.
    pub(crate) generation: u32,
    /// Found frames by return address (two buckets each): generation << 8 | frame + 1.
    pub(crate) index: [u16; 256],
    /// A cache entry being learned or refined.
    pub(crate) fresh: StackCache,
    /// The site [`find`] looked up, and the top of the kernel stack.
    pub(crate) key: CacheKey,
    pub(crate) top: u64,
    /// Work left for the learner (`pending`, one of [`LEARN`] and [`SEED`]): a
    /// stack just unwound (anchor, frames and reference), or the id of a shared
    /// layout to keep as the task's own.
    pub(crate) pending: u64,
    pub(crate) pending_base: u64,
    pub(crate) pending_frames: u64,
    pub(crate) pending_kstack: u64,
}

/// [`Scan::pending`]: learn the stack just unwound.
pub(crate) const LEARN: u64 = 1;
/// [`Scan::pending`]: keep the shared layout just reused as the task's own.
pub(crate) const SEED: u64 = 2;

/// Leaves the stack just unwound (in the stack scratch) for the learner, which
/// the hook tail-calls when it is done (see [`crate::klearn::learn_pending`]).
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

#[map]
static SCRATCH_SCAN: PerCpuArray<Scan> = PerCpuArray::with_max_entries(1, 0);

/// A copy of the kernel stack above the anchor, per CPU.
#[map]
static SCRATCH_REGION: PerCpuArray<[u64; REGION_WORDS]> = PerCpuArray::with_max_entries(1, 0);

/// The running task's kernel stack entries (in its [`TaskState`]), if it has a
/// state; with `create`, one is made for it (zeroed: no entries).
#[inline(always)]
pub(crate) fn own_entries(create: bool) -> Option<*mut [StackCache; CACHED_PER_TASK]> {
    let state = if create { TASKS.current_or_zeroed() } else { TASKS.current() };
    // SAFETY: a pointer from a task storage lookup, alive for the program run.
    state.map(|s| unsafe { &raw mut (*s).kstacks })
}

/// Frees the running task's state (its kernel stacks and its last user walk) at
/// its last switch.
#[inline(always)]
pub fn drop_task() {
    TASKS.remove_current();
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
pub(crate) fn read_region(addr: u64, len: u64) -> Option<&'static [u64; REGION_WORDS]> {
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
pub(crate) fn entry_in_place(top: u64, cache: &StackCache, frames: &KernelStack) -> bool {
    cache.last_at_top == 0
        || read_word(top - ENTRY_SLOT_FROM_TOP)
            == Some(frames[(cache.frames as usize).wrapping_sub(1) & 63])
}

/// What [`check_slot`] compares, on the BPF stack (`bpf_loop` passes only a stack
/// pointer to its callback): pointers to the entry, the stored frames and the
/// region just read, so that neither the entry nor the frames are copied first.
/// The verdict goes to map memory (`changed`), whose writes the verifier does not
/// track: a flag on the stack would make it walk the loop body once per value.
#[repr(C)]
struct Check {
    cache: *const StackCache,
    frames: *const KernelStack,
    region: *const [u64; REGION_WORDS],
    changed: *mut u32,
}

impl Check {
    const CLEARED: Check = Check {
        cache: core::ptr::null(),
        frames: core::ptr::null(),
        region: core::ptr::null(),
        changed: core::ptr::null_mut(),
    };
}

/// `bpf_loop` body: checks slot `k` of the entry against the region, and notes a
/// changed one.
unsafe extern "C" fn check_slot(k: u64, ctx: *mut core::ffi::c_void) -> i64 {
    let k = k as usize;
    if k >= CACHE_SLOTS {
        return 1;
    }
    // SAFETY: `ctx` is the `Check` that `reuse` passed, on its stack; its pointers
    // are map values, alive for the whole program run.
    unsafe {
        let c = &mut *ctx.cast::<Check>();
        let (off, owner) = ((*c.cache).slots[k], (*c.cache).owners[k] as usize & 63);
        if (*c.region)[(off as usize >> 3) & (REGION_WORDS - 1)] != (*c.frames)[owner] {
            *c.changed = 1;
            return 1;
        }
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
    let Some(region) = read_region(base, cache.span as u64) else {
        return 0;
    };
    // SAFETY: per-CPU scratch, used by this program run alone.
    let changed = unsafe {
        (*st).changed = 0;
        &raw mut (*st).changed
    };
    let mut check = Check { cache, frames, region, changed };
    // SAFETY: the callback reads `check` through the pointer, for this call only.
    unsafe {
        bpf_loop(cache.len, check_slot as *mut core::ffi::c_void, (&raw mut check).cast(), 0);
        // Pointers left on the BPF stack stay in the verifier's state for the rest
        // of the program, and pointers of different maps from different call sites
        // keep it from merging paths: with `--leaf-callers` that took the verified
        // instructions of `sched_switch` from 176,000 to 261,000. Cleared, the
        // slots hold the same number on every path.
        core::ptr::write_volatile(&raw mut check, Check::CLEARED);
    }
    // SAFETY: as above; volatile, as the callback wrote it behind the compiler's back.
    if unsafe { core::ptr::read_volatile(changed) } == 0 && entry_in_place(top, cache, frames) {
        cache.kstack
    } else {
        0
    }
}

/// The address of the tracepoint's argument array (the program's context), as a
/// plain number. The array lies in `bpf_trace_run*`'s frame on the kernel stack,
/// at a fixed distance below every frame of the call path into the hook. (The
/// program's own frame may be on a per-CPU private stack instead.)
#[inline(always)]
pub fn anchor<C: EbpfContext>(st: *mut Scan, ctx: &C) -> u64 {
    // Through map memory, the verifier sees a number, which may be masked and
    // compared, rather than a context pointer.
    through_map(st, ctx.as_ptr() as u64)
}

/// `v`, after a round trip through the per-CPU scratch: the verifier does not
/// follow values through map memory, so what comes back is an unknown number,
/// whatever it knew of `v` (a pointer's kind, or a constant chosen by a branch).
#[inline(always)]
fn through_map(st: *mut Scan, v: u64) -> u64 {
    // SAFETY: a field of the per-CPU scratch; volatile so the round trip is kept.
    unsafe {
        core::ptr::write_volatile(&raw mut (*st).opaque, v);
        core::ptr::read_volatile(&raw const (*st).opaque)
    }
}

/// Where the task entered the kernel: in a syscall (x86-64), its number and user
/// return address, which do not change with the random offset that syscall entry
/// applies to the stack; otherwise the depth of the anchor.
#[inline(always)]
fn site(base: u64, top: u64, hook: Hook) -> CacheKey {
    if let Some(regs) = PtRegs::current() {
        let (nr, ip) = (regs.word(REGS_ORIG_AX), regs.word(REGS_IP));
        // Kernel threads have zeroed registers; interrupts and exceptions
        // store -1 as the syscall number.
        if ip != 0 && nr != u64::MAX {
            return CacheKey { site: (nr & 0xffff) | IN_SYSCALL | hook.bits(), user_ip: ip };
        }
    }
    CacheKey { site: (top - base) | hook.bits(), user_ip: 0 }
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
pub fn find(st: *mut Scan, base: u64, task: u64, hook: Hook, state: *mut TaskState) -> u64 {
    if task == 0 {
        return 0;
    }
    let top = (base | (THREAD_SIZE - 1)) + 1;
    let key = site(base, top, hook);
    // SAFETY: per-CPU scratch, used by this program run alone.
    unsafe {
        (*st).top = top;
        (*st).key = key;
    }
    let mut known = false;
    // SAFETY: the task's state, from a map lookup; only this task's hooks use it,
    // and they do not run on two CPUs at once.
    for c in unsafe { &(*state).kstacks } {
        if c.site == key.site && c.user_ip == key.user_ip {
            known = true;
            let k = reuse(st, base, top, c);
            if k != 0 {
                return k;
            }
        }
    }
    if known {
        return 0;
    }
    shared(st, base, top, &key)
}

/// For a task that never had a stack at this call site: the stack of a layout
/// another task learned there, if one is in place (and then left for the learner
/// to keep as this task's own), else 0.
#[inline(always)]
fn shared(st: *mut Scan, base: u64, top: u64, site: &CacheKey) -> u64 {
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
