//! The maps and the read-only settings global, and small helpers around them.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, ProgramArray, RingBuf},
    Global,
};
use topwaits_common::{
    control, counter, limits, Chain, DepKey, Hops, KernelStack, ProcEvent, Settings, SwitchOut,
    ThreadStats, WaitKey, WaitVal, WakeKey, WakeVal,
};

/// Options from user space; overridden at load time.
#[unsafe(no_mangle)]
pub static SETTINGS: Global<Settings> = Global::new(Settings::defaults());

/// The settings, read in place: each field a hook reads is one load, where
/// `Global::load` copied the whole struct onto the BPF stack at every call. The
/// address goes through a volatile read so that the compiler cannot fold the
/// defaults the object file holds into the code (user space overrides them at
/// load time), as `Global::load`'s volatile copy does.
#[inline(always)]
pub fn settings() -> &'static Settings {
    let at: *const Settings = (&raw const SETTINGS).cast();
    // SAFETY: `Global` is `repr(transparent)` over an always initialized `T`; a
    // read-only map value, alive for the program run. The volatile read is of a local.
    unsafe { &*core::ptr::read_volatile(&at) }
}

/// No preallocation: the hash maps below hold one entry per stack, traced task
/// or record, created once and then updated in place (never deleted and reinserted
/// on the hot path), so memory follows what is traced rather than the limits.
pub const GROWS: u32 = aya_ebpf::bindings::BPF_F_NO_PREALLOC;

/// User stacks of waits and wakers by reference (see `topwaits_common::STACK_STORED`),
/// sized by `--stack-storage-size` at load time. Not preallocated, like `KSTACKS`.
#[map]
pub static USTACKS: HashMap<u64, KernelStack> =
    HashMap::with_max_entries(limits::DEFAULT_STACK_STORAGE, GROWS);

/// Kernel stacks of waits by reference (see `topwaits_common::STACK_STORED`),
/// sized by `--stack-storage-size` at load time. Not preallocated: an entry is
/// 1 KiB and only the first sight of a stack inserts one.
#[map]
pub static KSTACKS: HashMap<u64, KernelStack> =
    HashMap::with_max_entries(limits::DEFAULT_STACK_STORAGE, GROWS);

/// Per-task switch-out state, keyed by `task_struct` address. An entry is marked
/// consumed at switch-in rather than deleted, and freed at the task's last switch.
#[map]
pub static STARTS: HashMap<u64, SwitchOut> =
    HashMap::with_max_entries(limits::START_ENTRIES, GROWS);

/// User stacks that user space walked for waits in progress when the trace
/// began (see `topwaits_common::Rewalk`), by `task_struct` address.
#[map]
pub static REWALKS: HashMap<u64, topwaits_common::Rewalk> =
    HashMap::with_max_entries(limits::START_ENTRIES, GROWS);

/// One byte per hash of a `task_struct` address, set before a task first gets a
/// `STARTS` entry and never cleared. A switch-in whose byte is 0 has no wait to end,
/// and skips the hash lookup: under `-p`, that is nearly every switch on the machine.
/// Bytes, not bits: two CPUs setting neighbours never race (a byte store is whole).
#[map]
pub static STARTED: Array<u64> = Array::with_max_entries(limits::STARTED_WORDS, 0);

/// Per-CPU: a task address passed through memory.
#[map]
static SCRATCH_ADDR: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// A tp_btf task argument as a plain number. The verifier types it as a pointer,
/// on which it allows no shift or mask (as [`started_byte`] does); through a map
/// value, the address becomes a number. raw_tp arguments are numbers already, and
/// their hooks skip this.
#[inline(always)]
pub fn as_number(task: u64) -> u64 {
    let Some(slot) = SCRATCH_ADDR.get_ptr_mut(0) else { return 0 };
    // SAFETY: per-CPU scratch, used by this program run alone; volatile, so that the
    // compiler does not hand the stored value straight back.
    unsafe {
        core::ptr::write_volatile(slot, task);
        core::ptr::read_volatile(slot)
    }
}

/// `task`, a number (see [`as_number`]), as a word and byte of `STARTED`.
#[inline(always)]
fn started_byte(task: u64) -> (u32, usize) {
    // task_struct objects lie kilobytes apart: bits from 6 up tell them apart.
    let h = (task >> 6) as u32 & (limits::STARTED_WORDS * 8 - 1);
    (h / 8, (h % 8) as usize)
}

/// Marks `task` as possibly having a `STARTS` entry.
#[inline(always)]
pub fn mark_started(task: u64) {
    let (word, byte) = started_byte(task);
    if let Some(w) = STARTED.get_ptr_mut(word) {
        // SAFETY: a pointer into an array value of 8 bytes; byte < 8.
        unsafe { *(w as *mut u8).add(byte) = 1 };
    }
}

/// False when `task` certainly has no `STARTS` entry.
#[inline(always)]
pub fn maybe_started(task: u64) -> bool {
    let (word, byte) = started_byte(task);
    STARTED.get(word).is_none_or(|&w| (w >> (byte * 8)) & 0xff != 0)
}

/// The in-kernel aggregate, sized by `--max-entries` at load time.
#[map]
pub static WAITS: HashMap<WaitKey, WaitVal> =
    HashMap::with_max_entries(limits::DEFAULT_MAX_ENTRIES, GROWS);

/// Slot 0: the learner program of the attach path in use (`learn_stack`), set by
/// user space once it has loaded it, after attaching.
#[map]
pub static LEARNERS: ProgramArray = ProgramArray::with_max_entries(1, 0);

/// Slot 0: the body of the `sched_switch` hook its attached program tail-calls:
/// first its quickly verified version (user stacks by frame pointers), so that
/// tracing starts at once, then, once loaded, the whole one (see `sched_switch`).
#[map]
pub static SWITCH_IMPL: ProgramArray = ProgramArray::with_max_entries(1, 0);

/// Slot 0: the same for `sched_waking` (an array of its own, as the learners'
/// are: a tracing program may tail-call only programs of its prototype).
#[map]
pub static WAKING_IMPL: ProgramArray = ProgramArray::with_max_entries(1, 0);

/// Slot 0: the learner of wakers' stacks (`learn_waker_stack`), for the
/// `sched_waking` hook. A separate array: a tracing program may tail-call only
/// programs attached to a function of the same prototype.
#[map]
pub static WAKE_LEARNERS: ProgramArray = ProgramArray::with_max_entries(1, 0);

/// The pids or tids of `-p`/`-t`, as a bitmap: bit `id % 64` of word `id / 64`,
/// sized by user space to the largest id. The verifier inlines an array lookup, so
/// the test costs a few instructions where a hash lookup cost a hash and a
/// bucket walk: every switch on the machine pays it.
#[map]
pub static PIDS: Array<u64> = Array::with_max_entries(1, 0);

/// What user space changes while the programs run (see
/// `topwaits_common::control`). [`control::END`]: when the trace ends. From then
/// on the threads hooks record nothing more, so that every thread's open state
/// closes at one known instant: the end of the requested duration, even when
/// topwaits itself cannot run then (SCHED_FIFO hogs), and however long detaching
/// takes (hundreds of ms on a busy VM). [`control::ROWS`]: the aggregate's rows,
/// counted as they are inserted and reset by user space when it clears them.
/// [`control::JVM_SLEEPS`]: set once a JVM's sleep call is hooked.
#[map]
pub static CONTROL: Array<u64> = Array::with_max_entries(control::SLOTS, 0);

/// Whether the trace has ended by `now` (see [`CONTROL`]).
#[inline(always)]
pub fn ended(now: u64) -> bool {
    CONTROL.get(control::END).is_some_and(|&end| end != 0 && now >= end)
}

/// Whether a JVM's `JVM_Sleep` is hooked (see [`control::JVM_SLEEPS`]).
#[inline(always)]
pub fn jvm_sleeps_hooked() -> bool {
    CONTROL.get(control::JVM_SLEEPS).is_some_and(|&n| n != 0)
}

/// Whether a JVM's monitors are hooked (see [`control::JVM_MONITORS`]).
#[inline(always)]
pub fn jvm_monitors_hooked() -> bool {
    CONTROL.get(control::JVM_MONITORS).is_some_and(|&n| n != 0)
}

/// The rows inserted into the aggregate since user space last cleared it.
#[inline(always)]
pub fn aggregate_rows() -> u64 {
    CONTROL.get(control::ROWS).copied().unwrap_or(0)
}

/// Counts a row inserted into the aggregate.
#[inline(always)]
fn row_inserted() {
    if let Some(rows) = CONTROL.get_ptr_mut(control::ROWS) {
        // SAFETY: a pointer from an array lookup, valid for the program's run; the
        // add is atomic.
        unsafe { atomic_add(rows, 1) };
    }
}

/// Each task's last wakeup, keyed by `task_struct` address (sized to 1 unless
/// `--chain` is above 1). Preallocated: a burst of first wakeups (800 new
/// tasks at once) outran the allocator of a growing map and lost 2% of the wakers.
#[map]
pub static LAST_WAKE: HashMap<u64, Chain> = HashMap::with_max_entries(limits::START_ENTRIES, 0);

/// Waker chains, each kept once under its reference (see `Hops`); sized like the
/// aggregate with `--waker`, to 1 otherwise.
#[map]
pub static CHAINS: HashMap<u64, Hops> =
    HashMap::with_max_entries(limits::DEFAULT_MAX_ENTRIES, GROWS);

/// The aggregate with `--waker` (sized to 1 otherwise).
#[map]
pub static WAKE_WAITS: HashMap<WakeKey, WakeVal> =
    HashMap::with_max_entries(limits::DEFAULT_MAX_ENTRIES, GROWS);

/// Per-thread profiles of `topwaits threads`, keyed by tid (sized to 1 otherwise).
#[map]
pub static THREADS: HashMap<u32, ThreadStats> =
    HashMap::with_max_entries(limits::START_ENTRIES, GROWS);

/// Wake dependencies between traced threads (sized to 1 unless `threads`).
#[map]
pub static DEPS: HashMap<DepKey, u64> = HashMap::with_max_entries(limits::DEPS_ENTRIES, GROWS);

/// Threads currently inside a futex wake operation, keyed by tid.
#[map]
pub static FUTEX_WAKING: HashMap<u32, u32> = HashMap::with_max_entries(limits::START_ENTRIES, 0);

/// Process events for user space (first sight of a task, exec).
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(64 * 1024, 0);

/// Tells user space about a process, if the settings ask for it.
#[inline(always)]
pub fn proc_event(tgid: u32, kind: u32) {
    send_proc_event(&ProcEvent { tgid, kind, parent: 0, maps_version: 0 });
}

/// Processes user space has been told about (seen switching, met by the
/// walker before user space told it where they map their code, or forked),
/// each told about once: a waker outside the traced processes (a client) is
/// seen only by the walker, and stayed unknown for the trace; and each of
/// the 200 processes `perf bench sched messaging` forks was told about twice,
/// at its fork and at its first switch.
#[map]
static ASKED: LruHashMap<u32, u8> = LruHashMap::with_max_entries(limits::ASKED_PROCS, 0);

/// Tells user space about process `tgid`, once, so that it reads its maps.
#[inline(always)]
pub fn ask_for_maps(tgid: u32) {
    // Looked up first: an LRU insert that finds the key takes a free node
    // (evicting, when there is none) before it fails.
    // SAFETY: a lookup whose value is not kept.
    if unsafe { ASKED.get(&tgid) }.is_none() && ASKED.insert(&tgid, &0, BPF_NOEXIST as u64).is_ok()
    {
        proc_event(tgid, topwaits_common::proc_event::SEEN);
    }
}

/// At a fork: whether user space is told about the new process `tgid` by its
/// fork event. When it is not, what was told about an earlier process with
/// the same id is forgotten.
#[inline(always)]
pub fn told_at_fork(tgid: u32, told: bool) {
    if told {
        let _ = ASKED.insert(&tgid, &0, 0);
    } else {
        let _ = ASKED.remove(&tgid);
    }
}

/// Slot 0: when a process event last woke user space (`bpf_ktime_get_ns`).
#[map]
static EVENTS_WOKE: Array<u64> = Array::with_max_entries(1, 0);

/// Whether a process event of `kind` wakes user space: an urgent one always,
/// the others once per `proc_event::BATCH_NS` (see there).
#[inline(always)]
fn wake_flags(kind: u32) -> u64 {
    use aya_ebpf::bindings::{BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP};
    // SAFETY: a helper call without preconditions.
    let now = unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() };
    let Some(woke) = EVENTS_WOKE.get_ptr_mut(0) else { return 0 };
    // SAFETY: a map value; a race between CPUs costs at most one wakeup more.
    unsafe {
        if !topwaits_common::proc_event::urgent(kind)
            && now.wrapping_sub(*woke) < topwaits_common::proc_event::BATCH_NS
        {
            return BPF_RB_NO_WAKEUP as u64;
        }
        *woke = now;
    }
    BPF_RB_FORCE_WAKEUP as u64
}

/// Sends one process event, if the settings ask for them.
#[inline(always)]
pub fn send_proc_event(ev: &ProcEvent) {
    if settings().events != 0 && EVENTS.output::<ProcEvent>(ev, wake_flags(ev.kind)).is_err() {
        count(counter::LOST_EVENTS, 1);
    }
}

/// Per-CPU scratch space for values too large for the 512-byte BPF stack.
#[map]
pub static SCRATCH_HOPS: PerCpuArray<Hops> = PerCpuArray::with_max_entries(1, 0);
#[map]
pub static SCRATCH_STACK: PerCpuArray<KernelStack> = PerCpuArray::with_max_entries(1, 0);
/// User stacks are taken here: the kernel stack's scratch may still be needed by
/// the learner program after the user stack is taken.
#[map]
pub static SCRATCH_USTACK: PerCpuArray<KernelStack> = PerCpuArray::with_max_entries(1, 0);
#[map]
pub static SCRATCH_KEY: PerCpuArray<WakeKey> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU event and loss counters, indexed by `topwaits_common::counter`.
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Adds `n` to one per-CPU counter.
#[inline(always)]
pub fn count(index: u32, n: u64) {
    if let Some(slot) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: the pointer comes from a per-CPU array lookup, which is valid and
        // used by this CPU alone while the program runs.
        unsafe { *slot += n };
    }
}

const EEXIST: i32 = 17;

/// What [`fold_or_insert`] did.
#[derive(PartialEq, Eq)]
pub enum Kept {
    Folded,
    Inserted,
    Full,
}

/// Folds into `key`'s value in an aggregate map, or inserts `fresh`.
#[inline(always)]
pub fn fold_or_insert<K, V>(
    map: &HashMap<K, V>,
    key: &K,
    fresh: &V,
    fold: impl Fn(*mut V),
) -> Kept {
    if let Some(v) = map.get_ptr_mut(key) {
        fold(v);
        return Kept::Folded;
    }
    match map.insert(key, fresh, BPF_NOEXIST as u64) {
        Ok(()) => Kept::Inserted,
        // Created on another CPU in between: fold into that one.
        Err(e) if e == -EEXIST => {
            if let Some(v) = map.get_ptr_mut(key) {
                fold(v);
            }
            Kept::Folded
        }
        Err(_) => Kept::Full,
    }
}

/// Adds a row to the wait aggregate (`WAITS` or `WAKE_WAITS`) as
/// [`fold_or_insert`] does, counting the rows it inserts; false when the map is full.
#[inline(always)]
pub fn fold_or_insert_row<K, V>(
    map: &HashMap<K, V>,
    key: &K,
    fresh: &V,
    fold: impl Fn(*mut V),
) -> bool {
    match fold_or_insert(map, key, fresh, fold) {
        Kept::Folded => true,
        Kept::Inserted => {
            row_inserted();
            true
        }
        Kept::Full => false,
    }
}

/// Adds one wait to an aggregate map: folds it into the existing value, or inserts
/// `fresh`. A full map counts the wait and its `delta_ns` as lost.
#[inline(always)]
pub fn upsert<K, V>(map: &HashMap<K, V>, key: &K, fresh: &V, delta_ns: u64, fold: impl Fn(*mut V)) {
    if fold_or_insert_row(map, key, fresh, fold) {
        count(counter::RECORDED, 1);
    } else {
        count(counter::LOST_AGG_FULL, 1);
        count(counter::LOST_AGG_FULL_NS, delta_ns);
    }
}

/// Whether `-p`/`-t` (the PIDS map) lets a thread through. topwaits' own threads
/// never pass.
#[inline(always)]
pub fn thread_wanted(tgid: u32, tid: u32) -> bool {
    let s = settings();
    if tgid == s.self_tgid {
        return false;
    }
    let id = match s.thread_filter {
        topwaits_common::thread_filter::TGID => tgid,
        topwaits_common::thread_filter::TID | topwaits_common::thread_filter::CGROUP => tid,
        _ => return true,
    };
    PIDS.get(id / 64).is_some_and(|w| w & (1 << (id % 64)) != 0)
}

/// With `--cgroup`: puts thread `tid` in the traced set (`on`) or takes it out.
/// Bits of one word belong to different threads and may change on two CPUs at
/// once, so each is flipped by an atomic add (which every BPF CPU version has)
/// of its own value, and only when it is not already as asked: a thread's own
/// bit changes by events about that thread alone, which do not race.
#[inline(always)]
pub fn set_member(tid: u32, on: bool) {
    if settings().thread_filter != topwaits_common::thread_filter::CGROUP || tid == 0 {
        return;
    }
    let Some(word) = PIDS.get_ptr_mut(tid / 64) else { return };
    let bit = 1u64 << (tid % 64);
    // SAFETY: a pointer from an array lookup, valid for the program's run.
    let was = unsafe { core::ptr::read_volatile(word) } & bit != 0;
    if was != on {
        // SAFETY: as above; the add is atomic.
        unsafe { atomic_add(word, if on { bit } else { bit.wrapping_neg() }) };
    }
}

/// Adds `v` to `*p` atomically, its old value unused: the BPF instruction
/// `lock *(u64 *)p += v`, in every BPF CPU version. The BPF target has no
/// `AtomicU64::fetch_add`; the host build (clippy) uses it.
#[cfg(target_arch = "bpf")]
#[inline(always)]
unsafe fn atomic_add(p: *mut u64, v: u64) {
    // SAFETY: the caller's pointer is valid for the program's run.
    let _ = unsafe {
        core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
            p, v,
        )
    };
}

#[cfg(not(target_arch = "bpf"))]
#[inline(always)]
unsafe fn atomic_add(p: *mut u64, v: u64) {
    // SAFETY: the caller's pointer is valid and aligned for a u64.
    unsafe { core::sync::atomic::AtomicU64::from_ptr(p) }
        .fetch_add(v, core::sync::atomic::Ordering::Relaxed);
}

/// Reads a `u64` field of a `task_struct` at a byte offset found in BTF.
#[inline(always)]
pub fn task_u64(task: u64, off: u32) -> Option<u64> {
    if off == u32::MAX {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel checks the address and fails cleanly.
    unsafe { aya_ebpf::helpers::bpf_probe_read_kernel((task + off as u64) as *const u64).ok() }
}

/// Reads a `u32` field of a `task_struct` at a byte offset found in BTF.
#[inline(always)]
pub fn task_u32(task: u64, off: u32) -> Option<u32> {
    if off == u32::MAX {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel checks the address and fails cleanly.
    unsafe { aya_ebpf::helpers::bpf_probe_read_kernel((task + off as u64) as *const u32).ok() }
}
