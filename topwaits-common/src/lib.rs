//! Types, names and limits shared by the eBPF programs and user space: map keys and
//! values (all `#[repr(C)]`, padding-free), map and program names, and counter indices.
#![no_std]

pub mod golang;
pub mod jit;
pub mod python;
pub mod walker;

pub mod counter;
pub mod limits;
pub mod names;
mod settings;

pub use settings::*;

/// Length of `task_struct.comm`, including the terminating NUL.
pub const TASK_COMM_LEN: usize = 16;

/// Most frames of a stack (the kernel's default `perf_event_max_stack`).
pub const KSTACK_DEPTH: usize = 127;

/// One stack in [`names::KSTACKS`] (kernel) or [`names::USTACKS`] (user): return
/// addresses from the leaf up, zero-filled after the last frame.
pub type KernelStack = [u64; KSTACK_DEPTH];

/// A stack reference (kernel or user, of a wait or a waker) that holds no stack:
/// none was asked for (`-U`/`-K`), or none exists (a kernel thread's user stack).
pub const STACK_NONE: u64 = 0;

/// Set in every stack reference that names a stored stack; the other bits are a
/// hash of its frames, and the reference is its key in [`names::KSTACKS`] or
/// [`names::USTACKS`]. Stacks are kept under a hash, not in a bucketed stack map,
/// so two stacks never collide in a bucket and lose one of them. A reference
/// without this bit and not [`STACK_NONE`] is the errno of a stack that could not
/// be taken or stored, and counts as a lost stack.
pub const STACK_STORED: u64 = 1 << 63;

/// Set on the words at the user stack pointer that `--leaf-callers` appends to a
/// user stack after its frames: candidates for the caller of a leaf function that
/// keeps no frame pointer (libc's syscall wrappers), for user space to check.
/// User addresses never have bit 63 set.
pub const LEAF_WORD: u64 = 1 << 63;

/// Whether a user stack's word is a frame of a language runtime (Python's or
/// JavaScript's), named from the process's memory rather than looked up as an
/// address.
#[inline(always)]
pub const fn is_runtime_frame(word: u64) -> bool {
    python::is_py_frame(word) || jit::is_v8_frame(word) || jit::is_jvm_frame(word)
}

/// Words at the user stack pointer taken with `--leaf-callers`: glibc's syscall
/// wrappers, in a threaded process, keep their return address 6 words up.
pub const LEAF_WORDS: u32 = 8;

/// `task_struct.__state` bit of an uninterruptible sleep (D state).
pub const TASK_UNINTERRUPTIBLE: u32 = 0x2;

/// `task_struct.__state` bit of a sleep that does not count towards load average;
/// with [`TASK_UNINTERRUPTIBLE`] it is TASK_IDLE, how idle kernel threads sleep.
pub const TASK_NOLOAD: u32 = 0x400;

/// `task_struct.__state` bit of a task that is exiting for the last time.
pub const TASK_DEAD: u32 = 0x80;

/// `task_struct.flags` bit of kernel threads.
pub const PF_KTHREAD: u32 = 0x0020_0000;

/// Bit in [`Settings::stacks`]: capture kernel stacks.
pub const CAPTURE_KERNEL: u32 = 1;
/// Bit in [`Settings::stacks`]: capture user stacks.
pub const CAPTURE_USER: u32 = 2;

/// What a task left behind when it switched out, keyed by its `task_struct` address
/// in the [`names::STARTS`] map until it switches in again.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchOut {
    /// `bpf_ktime_get_ns()` at switch-out; 0 once the wait has been accounted.
    pub ts: u64,
    /// Stack references, when the attach path takes them at switch-out.
    pub kstack: u64,
    pub ustack: u64,
    pub tgid: u32,
    pub tid: u32,
    /// State at switch-out (0 = preempted while runnable).
    pub state: u32,
    /// The low 32 bits of `sched_info.pcount` at switch-out, or 0 when unknown: a
    /// task whose count has moved on since has been back on a CPU, even if the hook
    /// did not see it arrive.
    pub arrivals: u32,
    pub comm: [u8; TASK_COMM_LEN],
    /// What the wait is for, where the hook runs as the task.
    pub what: What,
    /// With [`Settings::hold_rows`]: the thread's row not yet in the aggregate
    /// (`held.count` 0: none), keyed by `row`.
    pub row: WaitKey,
    pub held: WaitVal,
    /// With `--waker`: when the task was last woken (`bpf_ktime_get_ns()`, 0:
    /// never) and that wakeup's chain (its reference in [`names::CHAINS`]). A
    /// wakeup from before `ts` belongs to an earlier wait.
    pub woken: u64,
    pub chain: u64,
}

/// The seed of user stacks' references (see [`stack_ref`]), unlike the
/// kernel stacks' so that the two kinds never share one.
pub const USER_SEED: u64 = 0x1319_8a2e_0370_7344;

/// Folds one frame into a stack reference's hash.
#[inline(always)]
pub const fn mix(hash: u64, ip: u64) -> u64 {
    let h = (hash ^ ip).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^ (h >> 29)
}

/// The reference of a stack of `frames`, hashed from `seed` as the eBPF
/// programs hash what they keep: user space stores stacks under the same
/// reference the kernel would give them.
pub fn stack_ref(frames: &[u64], seed: u64) -> u64 {
    frames.iter().fold(seed ^ frames.len() as u64, |h, &ip| mix(h, ip)) | STACK_STORED
}

/// The user stack of a wait that was in progress when the trace began, until
/// user space has walked it (see [`Rewalk`]): one frame, the mark of a stack cut
/// while the trace started ([`walker::cut::STARTING`]), kept in
/// [`names::USTACKS`] under this reference by the `seed_waits` iterator. A wait
/// that ends with it is left out (counted), so no record shows it.
pub const SEEDED_USTACK: u64 =
    mix(USER_SEED ^ 1, walker::CUT_MARK | walker::cut::STARTING) | STACK_STORED;

/// A wait in progress when the trace began, as the `seed_waits` iterator
/// recorded it in [`names::STARTS`] (from the trace's start): its task, that
/// start, and the user registers its user stack is walked from in user space.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeededWait {
    pub task: u64,
    pub ts: u64,
    pub tid: u32,
    pub tgid: u32,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// The user stack that user space walked for a wait in progress when the trace
/// began, by `task_struct` address in [`names::REWALKS`]: the wait that began
/// (for the trace) at `ts` takes `ustack` in place of [`SEEDED_USTACK`] when it
/// ends. Written only while that wait is still in progress, so the task never
/// ran between the registers' reading and the stack's: the walk is its stack.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rewalk {
    pub ts: u64,
    pub ustack: u64,
}

/// Whether a task's last wakeup, at `woken` with chain reference `chain` (see
/// [`SwitchOut::woken`]), is the one that ended its wait from `began` to `end`:
/// a wakeup from before `began` belongs to an earlier wait, and a reference of 0
/// means no chain was kept. The kernel side and the drain of open waits share it.
#[inline(always)]
pub const fn woke_wait(woken: u64, chain: u64, began: u64, end: u64) -> bool {
    chain != 0 && woken >= began && woken <= end
}

/// Most stack slots that [`StackCache`] can check in place; stacks of this many
/// frames or more are never cached.
pub const CACHE_SLOTS: usize = 48;

/// Where the return addresses of a kernel stack that a task had lay on its kernel
/// stack; kept per task and call site ([`CacheKey`]) in each task's `TASKS` state, so that the
/// stack can be reused without another unwind while it is still in place.
///
/// Unwinding with ORC is deterministic: frame `i + 1` is found at an offset from
/// frame `i` that depends only on the return address of frame `i`. So when the
/// task enters the hook with the same return address in the slot of each frame,
/// counted from the hook's argument array, the unwind gives the same stack. (The
/// one exception on x86-64, the random offset that syscall entry puts above the
/// syscall's frames, is handled by checking the entry frame from the stack's top.)
///
/// The true slot of each frame is not known (ORC data is not available to BPF),
/// but it lies at or above the first copy of its return address found scanning up
/// from the first copy of the frame below. So every copy at or above that point is
/// checked, and stale copies in local variables cannot hide a changed slot. When
/// the task is found with the same stack again, copies that moved are dropped.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackCache {
    /// The stack's reference in [`names::KSTACKS`].
    pub kstack: u64,
    /// Where the task entered the hook when the stack was learned
    /// ([`CacheKey::site`] and [`CacheKey::user_ip`]); 0 in an empty entry.
    pub site: u64,
    pub user_ip: u64,
    /// Slots to check.
    pub len: u32,
    /// Bytes above the anchor that hold every slot.
    pub span: u32,
    /// Frames in the stack.
    pub frames: u32,
    /// Non-zero: the last frame is the entry frame, checked at its fixed place
    /// below the user registers at the stack's top.
    pub last_at_top: u32,
    /// Byte offset above the anchor of each slot.
    pub slots: [u16; CACHE_SLOTS],
    /// The frame whose return address each slot must hold.
    pub owners: [u8; CACHE_SLOTS],
}

/// Where a task entered the hook, which a [`StackCache`] must match to be checked;
/// also the key of the layouts kept per call site for all tasks. (Whose entry it
/// is needs no field: a task's entries are its own storage.)
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheKey {
    /// In a syscall (x86-64): its number with the top bit set. Otherwise the depth
    /// of the hook's argument array below the top of the kernel stack. Bit 62 is
    /// set for a waker's stack at `sched_waking`, and bit 61 for the stack of a
    /// task that stays runnable at `sched_switch`, so that a task's stacks as
    /// waker, as sleeper and as preempted in one syscall are kept apart.
    pub site: u64,
    /// In a syscall: the user address it returns to.
    pub user_ip: u64,
}

/// What a wait was for, as the hook saw it when the task left the CPU: the
/// syscall it was in and that call's object, a kernel lock it contended for, the
/// sleep it asked for, or the preemption. User space names it (the file behind a
/// descriptor, the socket's ports, the lock's kind).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct What {
    /// The syscall the task was in, plus one; 0 when it had not entered the kernel
    /// by a syscall from user mode (a kernel thread, an interrupt, a page fault
    /// shows its error code here: the kernel stack tells it apart).
    pub nr: u32,
    /// [`what`] bits, with a kernel lock's `LCB_F_*` flags in the low byte.
    pub flags: u32,
    /// The syscall's first argument, for those [`label_syscalls`] marks.
    pub arg0: u64,
    /// Per flag: the kernel lock's address ([`what::KLOCK`]), the sleep asked for
    /// in ns ([`what::SLEEP`]), a `Thread.sleep`'s asked time ([`what::ASKED`]),
    /// or the process that ran instead ([`what::PREEMPTED`]).
    pub obj: u64,
}

/// The entries of [`names::LABEL_SYSCALLS`], set by user space: words 0 to 7 mark
/// the syscalls whose first argument names what a wait is on (a file descriptor
/// or a futex word), one bit per number, kept in [`What::arg0`]; the next two are
/// the numbers of `nanosleep` and `clock_nanosleep` plus one (0: none), whose
/// waits keep the time they asked for. A map rather than settings fields: the
/// verifier takes each settings field as a constant, and 512 bytes of them would
/// be that much more state in every hook.
pub mod label_syscalls {
    pub const ARG0_WORDS: u32 = 8;
    pub const NANOSLEEP: u32 = 8;
    pub const CLOCK_NANOSLEEP: u32 = 9;
    pub const LEN: u32 = 10;
}

/// A HotSpot thread's latest call to `JVM_Sleep`, kept by its uprobe: the
/// argument (milliseconds before JDK 21, nanoseconds since) and when it was
/// made (CLOCK_MONOTONIC ns). The switch takes the time a `Thread.sleep` asked
/// for from it where the futex wait's deadline is this call's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JvmSleep {
    pub arg: u64,
    pub at: u64,
}

/// A HotSpot thread in a Java monitor, kept by the uprobe on the monitor's
/// contended entry (`ObjectMonitor::EnterI`) or its `Object.wait`: the
/// `ObjectMonitor`, the thread's `JavaThread`, and where in that `JavaThread`
/// the JVM keeps the monitor the thread is in (`_current_pending_monitor` or
/// `_current_waiting_monitor`), which is this monitor only while it is.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JvmMonitor {
    pub monitor: u64,
    pub thread: u64,
    pub field: u64,
}

/// The cookie of a HotSpot monitor uprobe: the offset of the `JavaThread`'s
/// field that holds the monitor, and with [`JVM_MONITOR_THREAD_IN_RCX`] set,
/// that the `JavaThread*` is the fourth argument (`ObjectMonitor::wait(long,
/// bool, JavaThread*)`) rather than the second (`EnterI(JavaThread*)`).
pub const JVM_MONITOR_FIELD: u64 = 0xffff_ffff;
pub const JVM_MONITOR_THREAD_IN_RCX: u64 = 1 << 32;

/// Bits of [`What::flags`].
pub mod what {
    /// The low byte holds the `LCB_F_*` flags of `lock:contention_begin`.
    pub const LOCK_FLAGS: u32 = 0xff;
    /// The task was waiting for a kernel lock at [`super::What::obj`].
    pub const KLOCK: u32 = 1 << 8;
    /// [`super::What::obj`] is the sleep asked for, in ns.
    pub const SLEEP: u32 = 1 << 9;
    /// Preempted while runnable; [`super::What::obj`] is the tgid that ran instead
    /// (0: not known).
    pub const PREEMPTED: u32 = 1 << 10;
    /// A futex call: its operation (`op & 0x7f`) is in bits 16 to 22.
    pub const FUTEX_OP: u32 = 1 << 11;
    /// With [`SLEEP`]: a sleep to an absolute deadline, whose
    /// [`super::What::obj`] is the time left at the switch, rounded up to 1, 2
    /// or 5 times a power of ten (what was asked is not known).
    pub const SLEEP_DEADLINE: u32 = 1 << 12;
    /// A goroutine's wait (see `golang`): [`super::What::arg0`] is the
    /// runtime's wait reason, [`super::What::obj`] the goid.
    pub const GOROUTINE: u32 = 1 << 13;
    /// A futex wait to the deadline of the `JVM_Sleep` call its thread made
    /// last (a HotSpot `Thread.sleep`): [`super::What::obj`] is the time that
    /// call asked for, in ns.
    pub const ASKED: u32 = 1 << 14;
    /// A futex wait of a HotSpot thread in a Java monitor (entering it, or in
    /// its `Object.wait`): [`super::What::obj`] is the `ObjectMonitor`.
    pub const JMONITOR: u32 = 1 << 15;
    pub const FUTEX_OP_SHIFT: u32 = 16;
    /// `LCB_F_*`: spinning, a reader, a writer, a mutex.
    pub const LCB_SPIN: u32 = 1;
    pub const LCB_READ: u32 = 2;
    pub const LCB_WRITE: u32 = 4;
    pub const LCB_RT: u32 = 8;
    pub const LCB_PERCPU: u32 = 16;
    pub const LCB_MUTEX: u32 = 32;
}

/// Aggregate key: one row per thread, pair of stacks and [`What`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WaitKey {
    /// Stack references (see [`STACK_STORED`]).
    pub kstack: u64,
    pub ustack: u64,
    pub tgid: u32,
    pub tid: u32,
    pub comm: [u8; TASK_COMM_LEN],
    pub what: What,
}

/// Aggregate value. Each key names one thread, and a thread switches in on one CPU
/// at a time, so the in-place updates of one value never race with each other.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitVal {
    pub total_ns: u64,
    pub count: u64,
    pub max_ns: u64,
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) when the longest wait ended.
    pub max_end_ns: u64,
}

impl WaitVal {
    /// One wait of `delta_ns` that ended at `end_ns`.
    #[inline(always)]
    pub const fn one(delta_ns: u64, end_ns: u64) -> WaitVal {
        WaitVal { total_ns: delta_ns, count: 1, max_ns: delta_ns, max_end_ns: end_ns }
    }

    /// Adds the waits of `other`, a value of the same key, to this one.
    #[inline(always)]
    pub fn absorb(&mut self, other: &WaitVal) {
        self.total_ns += other.total_ns;
        self.count += other.count;
        if other.max_ns > self.max_ns {
            self.max_ns = other.max_ns;
            self.max_end_ns = other.max_end_ns;
        }
    }
}

/// Most waker hops a record can carry (`--chain`).
pub const MAX_CHAIN: usize = 4;

/// One waker: who ran `try_to_wake_up`, and its stacks at that moment.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Hop {
    pub tgid: u32,
    pub tid: u32,
    /// Stack references (see [`STACK_STORED`]).
    pub kstack: u64,
    pub ustack: u64,
    pub comm: [u8; TASK_COMM_LEN],
}

/// One wait of at least `--events-over`, sent to user space at its end through the
/// [`names::WAIT_EVENTS`] ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct WaitEvent {
    /// CLOCK_MONOTONIC ns of the switch-out and the switch-in.
    pub start: u64,
    pub end: u64,
    /// With `--waker`: when the wakeup came (0 when none was seen).
    pub woken: u64,
    /// Stack references (see [`STACK_STORED`]).
    pub kstack: u64,
    pub ustack: u64,
    pub tgid: u32,
    pub tid: u32,
    /// State at switch-out (0: preempted).
    pub state: u32,
    /// One of [`wake_kind`] (with `--waker`).
    pub wake_kind: u32,
    pub comm: [u8; TASK_COMM_LEN],
    /// With `--waker`: the task that woke it.
    pub waker: Hop,
    pub what: What,
}

/// Bits of [`Settings::on_cpu`].
pub mod on_cpu {
    /// Samples of traced threads are counted per stack in `SAMPLES`.
    pub const COUNT: u32 = 1;
    /// Each sample is also sent, with its time, through `WAIT_EVENTS`
    /// (`--perfetto`).
    pub const EVENTS: u32 = 2;
    /// The `cpu-clock` event ticks this many times as fast as the asked rate,
    /// and one tick in this many, at random, is a sample (see the hook).
    pub const OVERSAMPLE: u32 = 4;
}

/// The row of an on-CPU sample in [`names::SAMPLES`]: whose it was and where.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SampleKey {
    /// Stack references (see [`STACK_STORED`]); [`STACK_NONE`] for a kernel stack
    /// when the sample interrupted user code.
    pub kstack: u64,
    pub ustack: u64,
    pub tgid: u32,
    pub tid: u32,
    pub comm: [u8; TASK_COMM_LEN],
}

/// The samples of one row: how many, and when the latest was taken
/// (CLOCK_MONOTONIC ns).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SampleVal {
    pub count: u64,
    pub last_ns: u64,
}

/// One on-CPU sample with its time, sent through [`names::WAIT_EVENTS`] (where
/// its size tells it from a [`WaitEvent`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SampleEvent {
    /// CLOCK_MONOTONIC ns.
    pub at: u64,
    pub key: SampleKey,
}

/// A wakeup chain: hop 0 woke the task, hop 1 had last woken hop 0, and so on.
/// Kept once per distinct chain in [`names::CHAINS`], under a 64-bit hash of its
/// hops with [`STACK_STORED`] set, so that keys and per-task entries carry that
/// 8-byte reference instead of the hops.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Hops {
    /// Valid hops; the rest are zero.
    pub len: u32,
    pub _pad: u32,
    pub hops: [Hop; MAX_CHAIN],
}

/// The last wakeup of a task, keyed by its `task_struct` address in
/// [`names::LAST_WAKE`] with `--chain` above 1 (a waker's own last wakeup gives a
/// chain its next hops, and wakers need not be traced). A traced task's last
/// wakeup is also in its start entry ([`SwitchOut::woken`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chain {
    /// `bpf_ktime_get_ns()` of the wakeup.
    pub ts: u64,
    /// The chain's reference in [`names::CHAINS`].
    pub chain: u64,
}

/// Values of [`WakeKey::kind`].
pub mod wake_kind {
    /// Woken by the hops in the key.
    pub const WOKEN: u32 = 0;
    /// Went to sleep during the trace but no wakeup was seen (e.g. a lost map slot).
    pub const NO_WAKER: u32 = 1;
    /// Switched out runnable (preempted): nobody had to wake it.
    pub const PREEMPTED: u32 = 2;
}

/// Aggregate key with `--waker`: the target's key plus its waker chain.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WakeKey {
    pub target: WaitKey,
    /// One of [`wake_kind`].
    pub kind: u32,
    pub _pad: u32,
    /// With [`wake_kind::WOKEN`], the chain's reference in [`names::CHAINS`]; 0
    /// otherwise.
    pub chain: u64,
}

/// Aggregate value with `--waker`: the wait split at the wakeup into the time
/// blocked (switch-out to wakeup) and on the run queue (wakeup to switch-in).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakeVal {
    pub total_ns: u64,
    pub count: u64,
    pub max_ns: u64,
    pub max_end_ns: u64,
    pub blocked_ns: u64,
    pub runq_ns: u64,
    pub max_blocked_ns: u64,
    pub max_runq_ns: u64,
}

/// Values of [`ProcEvent::kind`].
pub mod proc_event {
    /// A task was seen for the first time.
    pub const SEEN: u32 = 1;
    /// A process replaced its image (exec).
    pub const EXEC: u32 = 2;
    /// A traced process was forked: until it execs it maps what its parent does.
    pub const FORK: u32 = 3;
    /// The user stack walker met code in none of the process's mappings (a
    /// library loaded since, or JIT code): its maps are read again.
    pub const MAPS: u32 = 4;
    /// The walker met a file whose table was not built (see
    /// `walker::file_state::UNBUILT`) in process `tgid`: the file's index is in
    /// `parent`.
    pub const TABLE: u32 = 5;
    /// As [`TABLE`], met in the stack of a task that was running (preempted,
    /// or sampled on a CPU) rather than blocking: user space builds the table
    /// once such meetings recur.
    pub const TABLE_RUNNING: u32 = 6;

    /// Events that wake user space at once: the process's code changed, and its
    /// maps are read while it still runs; or stacks wait for a table.
    #[inline(always)]
    pub const fn urgent(kind: u32) -> bool {
        kind == EXEC || kind == MAPS || kind == TABLE
    }

    /// The other events wake user space at most once in this many ns: a wakeup
    /// costs the kernel about 15 us (an inter-processor interrupt in a VM), and a
    /// fork-heavy workload sends thousands a second. Between wakeups user space
    /// reads the buffer on a timer of this period while events keep coming, so
    /// none waits longer than about twice this. None of them is in a hurry: a
    /// fork's maps are copied by its hook, and a fork is named by its parent's.
    pub const BATCH_NS: u64 = 16_000_000;
}

/// A record in the `EVENTS` ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcEvent {
    pub tgid: u32,
    /// One of [`proc_event`].
    pub kind: u32,
    /// With [`proc_event::FORK`], the process that forked `tgid`; else 0.
    pub parent: u32,
    /// With [`proc_event::FORK`], the [`walker::ProcMaps::version`] of the
    /// parent's mappings that the fork hook copied for `tgid` (0: none copied,
    /// or a copy user space must write over).
    pub maps_version: u32,
}

/// One user task's registers as it entered the kernel (`struct pt_regs` at the
/// top of its kernel stack), written by the `task_regs` iterator: what
/// `/proc/TID/syscall` shows of a blocked thread (ip, sp), and its frame
/// pointer, which nothing in `/proc` shows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskRegs {
    pub tid: u32,
    pub tgid: u32,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// Values of [`ThreadStats::state`].
pub mod thread_state {
    pub const UNKNOWN: u32 = 0;
    pub const RUNNING: u32 = 1;
    /// Runnable, waiting for a CPU (preempted, or woken and not yet running).
    pub const RUNQ: u32 = 2;
    /// Interruptible sleep.
    pub const SLEEP: u32 = 3;
    /// Uninterruptible sleep (D state), usually I/O.
    pub const IO: u32 = 4;
}

/// Bits of [`ThreadStats::flags`].
pub const THREAD_STARTED: u32 = 1;
pub const THREAD_EXITED: u32 = 2;

/// Per-thread scheduling profile, keyed by tid in [`names::THREADS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadStats {
    pub tgid: u32,
    pub tid: u32,
    pub comm: [u8; TASK_COMM_LEN],
    /// Nanoseconds spent in each [`thread_state`], indexed by the state (an array
    /// indexed by a masked state keeps the verifier sure of the bounds).
    pub state_ns: [u64; 8],
    pub run_events: u64,
    pub sleep_events: u64,
    /// CPU time the scheduler charged while running (`sum_exec_runtime` deltas).
    pub cpu_ns: u64,
    /// `sum_exec_runtime` when the thread last went on the CPU.
    pub exec_mark: u64,
    /// When `state` was entered.
    pub last_ts: u64,
    /// One of [`thread_state`].
    pub state: u32,
    /// [`THREAD_STARTED`], [`THREAD_EXITED`].
    pub flags: u32,
    pub prio: i32,
    pub static_prio: i32,
    pub policy: u32,
    pub rt_priority: u32,
}

/// A wake dependency between two traced threads, counted in [`names::DEPS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DepKey {
    pub waker: u32,
    pub sleeper: u32,
    /// Non-zero when the waker was inside a futex wake operation.
    pub futex: u32,
    pub _pad: u32,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are #[repr(C)], made of integers and byte arrays only, and
    // laid out without implicit padding (checked by the size tests below).
    unsafe impl aya::Pod for super::Settings {}
    unsafe impl aya::Pod for super::SwitchOut {}
    unsafe impl aya::Pod for super::SampleEvent {}
    unsafe impl aya::Pod for super::StackCache {}
    unsafe impl aya::Pod for super::CacheKey {}
    unsafe impl aya::Pod for super::WaitKey {}
    unsafe impl aya::Pod for super::What {}
    unsafe impl aya::Pod for super::WaitVal {}
    unsafe impl aya::Pod for super::Hop {}
    unsafe impl aya::Pod for super::Chain {}
    unsafe impl aya::Pod for super::Hops {}
    unsafe impl aya::Pod for super::WakeKey {}
    unsafe impl aya::Pod for super::WakeVal {}
    unsafe impl aya::Pod for super::ThreadStats {}
    unsafe impl aya::Pod for super::DepKey {}
    unsafe impl aya::Pod for super::WaitEvent {}
    unsafe impl aya::Pod for super::SampleKey {}
    unsafe impl aya::Pod for super::SampleVal {}
    unsafe impl aya::Pod for super::Rewalk {}
    unsafe impl aya::Pod for super::walker::ExecMap {}
    unsafe impl aya::Pod for super::walker::ProcMaps {}
    unsafe impl aya::Pod for super::walker::FileInfo {}
    unsafe impl aya::Pod for super::python::PyProc {}
    unsafe impl aya::Pod for super::jit::JitProc {}
    unsafe impl aya::Pod for super::jit::JvmCode {}
    unsafe impl aya::Pod for super::golang::GoProc {}
    unsafe impl aya::Pod for super::golang::GoRanOn {}
    unsafe impl aya::Pod for super::JvmMonitor {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::size_of;

    #[test]
    fn a_seeded_wait_names_the_one_frame_stack_its_reference_hashes() {
        let mark = walker::CUT_MARK | walker::cut::STARTING;
        assert_eq!(SEEDED_USTACK, stack_ref(&[mark], USER_SEED));
        assert!(walker::is_cut_mark(mark));
    }

    #[test]
    fn a_wakeup_ends_a_wait_only_from_within_it_and_with_a_chain() {
        assert!(woke_wait(100, 7, 100, 200) && woke_wait(200, 7, 100, 200));
        assert!(!woke_wait(99, 7, 100, 200), "a wakeup of an earlier wait");
        assert!(!woke_wait(201, 7, 100, 200), "after the wait ended");
        assert!(!woke_wait(150, 0, 100, 200), "no chain kept");
    }

    #[test]
    fn absorbing_a_value_adds_totals_and_counts_and_keeps_the_longer_max() {
        let mut a = WaitVal { total_ns: 10, count: 2, max_ns: 7, max_end_ns: 100 };
        a.absorb(&WaitVal { total_ns: 5, count: 1, max_ns: 5, max_end_ns: 200 });
        assert_eq!(a, WaitVal { total_ns: 15, count: 3, max_ns: 7, max_end_ns: 100 });
        a.absorb(&WaitVal { total_ns: 9, count: 1, max_ns: 9, max_end_ns: 300 });
        assert_eq!(a, WaitVal { total_ns: 24, count: 4, max_ns: 9, max_end_ns: 300 });
    }

    #[test]
    fn shared_types_have_no_padding() {
        assert_eq!(
            size_of::<Settings>(),
            8 * 2 + 4 * 20 + size_of::<TaskOffsets>() + size_of::<CgroupFilter>()
        );
        assert_eq!(size_of::<CgroupFilter>(), 8 + 4 * 12);
        assert_eq!(size_of::<walker::ExecMap>(), 8 * 4);
        assert_eq!(size_of::<walker::ProcMaps>(), 16 + 32 * walker::MAX_MAPS);
        assert_eq!(size_of::<walker::FileInfo>(), 8 + 4 * walker::MAX_LEVELS as usize);
        assert_eq!(size_of::<TaskOffsets>(), 4 * 16);
        assert_eq!(size_of::<SeededWait>(), 8 * 2 + 4 * 2 + 8 * 3);
        assert_eq!(size_of::<Rewalk>(), 8 * 2);
        assert_eq!(size_of::<ProcEvent>(), 16);
        assert_eq!(size_of::<TaskRegs>(), 8 + 8 * 3);
        assert_eq!(size_of::<ThreadStats>(), 8 + TASK_COMM_LEN + 8 * 8 + 8 * 5 + 4 * 6);
        assert_eq!(size_of::<DepKey>(), 16);
        assert_eq!(size_of::<StackCache>(), 8 * 5 + 3 * CACHE_SLOTS);
        assert_eq!(size_of::<CacheKey>(), 8 * 2);
        assert_eq!(
            size_of::<SwitchOut>(),
            8 * 3
                + 4 * 4
                + TASK_COMM_LEN
                + size_of::<What>()
                + size_of::<WaitKey>()
                + size_of::<WaitVal>()
                + 8 * 2
        );
        assert_eq!(size_of::<SampleEvent>(), 8 + size_of::<SampleKey>());
        assert_ne!(
            size_of::<SampleEvent>(),
            size_of::<WaitEvent>(),
            "the event ring tells them apart by size"
        );
        assert_eq!(size_of::<Hop>(), 24 + TASK_COMM_LEN);
        assert_eq!(size_of::<Hops>(), 8 + MAX_CHAIN * size_of::<Hop>());
        assert_eq!(size_of::<Chain>(), 16);
        assert_eq!(size_of::<WakeKey>(), size_of::<WaitKey>() + 16);
        assert_eq!(size_of::<WakeVal>(), 8 * 8);
        assert_eq!(size_of::<WaitKey>(), 8 * 2 + 4 * 2 + TASK_COMM_LEN + size_of::<What>());
        assert_eq!(size_of::<What>(), 24);
        assert_eq!(size_of::<WaitVal>(), 8 * 4);
        assert_eq!(size_of::<SampleKey>(), 8 * 2 + 4 * 2 + TASK_COMM_LEN);
        assert_eq!(size_of::<SampleVal>(), 8 * 2);
        assert_eq!(
            size_of::<WaitEvent>(),
            8 * 5 + 4 * 4 + TASK_COMM_LEN + size_of::<Hop>() + size_of::<What>()
        );
    }
}
