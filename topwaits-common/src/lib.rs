//! Types, names and limits shared by the eBPF programs and user space: map keys and
//! values (all `#[repr(C)]`, padding-free), map and program names, and counter indices.
#![no_std]

pub mod python;
pub mod walker;

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

/// Values of [`Settings::thread_filter`].
pub mod thread_filter {
    /// Every thread.
    pub const ALL: u32 = 0;
    /// Threads whose tgid is in the `PIDS` map.
    pub const TGID: u32 = 1;
    /// Threads whose tid is in the `PIDS` map.
    pub const TID: u32 = 2;
    /// Threads in a cgroup (see [`super::CgroupFilter`]): as `TID`, but the
    /// programs keep the map, setting a thread's bit when it is forked by one in
    /// the cgroup or moved into it, and clearing it when it leaves or exits.
    pub const CGROUP: u32 = 3;
}

/// Values of [`Settings::thread_kind`].
pub mod thread_kind {
    /// User and kernel threads.
    pub const ALL: u32 = 0;
    /// User threads only.
    pub const USER: u32 = 1;
    /// Kernel threads only.
    pub const KERNEL: u32 = 2;
}

/// Byte offsets of the `task_struct` fields the programs read, from the kernel's
/// BTF; `u32::MAX` where a field is unknown (the programs then do without it).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskOffsets {
    pub pid: u32,
    pub tgid: u32,
    pub flags: u32,
    /// `__state` since 5.14, `state` before.
    pub state: u32,
    pub comm: u32,
    /// Scheduling parameters, for `topwaits threads`.
    pub prio: u32,
    pub static_prio: u32,
    pub policy: u32,
    pub rt_priority: u32,
    /// `se.sum_exec_runtime`: the CPU time the scheduler charged the task, which
    /// leaves out time the hypervisor stole from the vCPU.
    pub sum_exec: u32,
    /// `se.prev_sum_exec_runtime`: `sum_exec_runtime` as it was when the fair class
    /// last put the task on a CPU, so the difference is how long it has run since.
    /// Ends a wait whose switch-in the hook did not see.
    pub prev_sum_exec: u32,
    /// `sched_info.pcount` (times the task got a CPU); absent without
    /// `CONFIG_SCHED_INFO`.
    pub pcount: u32,
    /// `stack`, the base of the task's kernel stack: a waker's kernel stack is
    /// reused only when the hook runs on it (not on an interrupt stack).
    pub stack: u32,
    /// `thread.fsbase` (x86-64): the thread's TLS base, which is its `pthread_t`
    /// (how CPython 3.10 names a thread state's thread).
    pub fsbase: u32,
    /// `on_cpu`: non-zero while the task runs on a CPU (a task whose wait is in
    /// progress when a trace begins is not on one).
    pub on_cpu: u32,
    /// Keeps the struct a whole number of words.
    pub reserved: u32,
}

impl TaskOffsets {
    /// No field known.
    pub const UNKNOWN: TaskOffsets = TaskOffsets {
        pid: u32::MAX,
        tgid: u32::MAX,
        flags: u32::MAX,
        state: u32::MAX,
        comm: u32::MAX,
        prio: u32::MAX,
        static_prio: u32::MAX,
        policy: u32::MAX,
        rt_priority: u32::MAX,
        sum_exec: u32::MAX,
        prev_sum_exec: u32::MAX,
        pcount: u32::MAX,
        stack: u32::MAX,
        fsbase: u32::MAX,
        on_cpu: u32::MAX,
        reserved: 0,
    };
}

/// Everything user space tells the programs, as one read-only global named
/// [`names::SETTINGS`]. Checked against the other options before loading.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Minimum wait to record, in microseconds (inclusive).
    pub min_us: u64,
    /// Maximum wait to record, in microseconds (inclusive).
    pub max_us: u64,
    /// One of [`thread_filter`].
    pub thread_filter: u32,
    /// One of [`thread_kind`].
    pub thread_kind: u32,
    /// Bits [`CAPTURE_KERNEL`] and [`CAPTURE_USER`].
    pub stacks: u32,
    /// Non-zero: only record waits whose switch-out state matches `state_mask`.
    pub state_filter: u32,
    /// State mask; 0 means "preempted while runnable".
    pub state_mask: u32,
    /// Non-zero: capture wakers at sched_waking and aggregate into `WAKE_WAITS`.
    pub waker: u32,
    /// Number of waker hops to keep, 1..=[`MAX_CHAIN`].
    pub chain: u32,
    /// Non-zero: per-thread scheduling profile (`topwaits threads`) instead of stacks.
    pub threads: u32,
    /// Byte offset of `op` in the `sys_enter_futex` tracepoint record.
    pub off_futex_op: u32,
    /// Non-zero: tell user space (ring buffer `EVENTS`) when a task is first seen,
    /// forks or execs, so it can keep a process's memory maps for after it exits.
    pub events: u32,
    /// topwaits' own process id: its threads are never recorded.
    pub self_tgid: u32,
    /// With `--leaf-callers`: how many words at the user stack pointer to append
    /// to each user stack as [`LEAF_WORD`] candidates (0: none).
    pub leaf_words: u32,
    /// With `--events-over`: waits of at least this many microseconds are also sent
    /// one by one through [`names::WAIT_EVENTS`] (0: none).
    pub events_over_us: u32,
    /// Non-zero when the kernel has BTF: the per-task stack-reuse entries are task
    /// storage, reached through a helper the verifier types with the kernel's BTF.
    /// Without it the programs never reach that code (the verifier drops it, as
    /// this is a constant) and every kernel stack is unwound.
    pub task_storage: u32,
    /// Non-zero: a thread's row is held in its start entry while its waits keep the
    /// same stacks, and written to the aggregate only when they change or the
    /// thread exits; user space adds the rows still held when it drains, once,
    /// after detaching. Off when the aggregate is drained while tracing
    /// (`--interval`), and with `--waker`.
    pub hold_rows: u32,
    /// Non-zero: user stacks are walked from the binaries' unwind tables (see
    /// [`unwind`]) instead of by frame pointers with `bpf_get_stack`.
    pub cfi: u32,
    /// Non-zero: each wait keeps what it was for ([`What`]) in its row's key.
    pub labels: u32,
    /// Bits of [`on_cpu`]: `--on-cpu` samples counted in [`names::SAMPLES`], and
    /// each also sent through [`names::WAIT_EVENTS`] when their times are wanted.
    pub on_cpu: u32,
    /// Where the `task_struct` fields the programs read lie.
    pub task: TaskOffsets,
    /// With [`thread_filter::CGROUP`]: the cgroup, and where the fields that
    /// place another cgroup under it lie.
    pub cgroup: CgroupFilter,
}

/// The cgroup `--cgroup` (or `--unit`, `--container`) traces, and the BTF
/// offsets that tell whether a cgroup a task moves to is it or lies below it:
/// in the same hierarchy (`cgroup.root->hierarchy_id`; 0 is the unified one),
/// at least as deep, and with the cgroup as its ancestor at `level`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupFilter {
    /// The cgroup's id: its kernfs node id, the inode number of its directory.
    pub id: u64,
    pub hierarchy: u32,
    /// Its depth below the hierarchy's root (the root is 0).
    pub level: u32,
    /// In `struct cgroup`: `root`, `level`, `ancestors` (or `ancestor_ids`),
    /// `kn`; in `struct cgroup_root`: `hierarchy_id`; in `struct kernfs_node`:
    /// `id`. `u32::MAX` where unknown: moves are then not followed.
    pub off_root: u32,
    pub off_level: u32,
    pub off_ancestors: u32,
    pub off_kn: u32,
    pub off_hierarchy_id: u32,
    pub off_kn_id: u32,
    /// Non-zero: `ancestors` holds ids (`ancestor_ids`, kernels before 6.1),
    /// not pointers to the ancestors.
    pub ancestors_are_ids: u32,
    /// `task_struct.cgroups` and `css_set.dfl_cgrp`: a new task's cgroup in the
    /// unified hierarchy, which a fork with `CLONE_INTO_CGROUP` (systemd's way
    /// of starting a unit's processes) chooses apart from its parent's.
    /// `u32::MAX` where unknown: a child then follows its parent.
    pub off_task_cgroups: u32,
    pub off_dfl_cgrp: u32,
    pub _pad: u32,
}

impl CgroupFilter {
    /// No cgroup.
    pub const NONE: CgroupFilter = CgroupFilter {
        id: 0,
        hierarchy: 0,
        level: 0,
        off_root: u32::MAX,
        off_level: u32::MAX,
        off_ancestors: u32::MAX,
        off_kn: u32::MAX,
        off_hierarchy_id: u32::MAX,
        off_kn_id: u32::MAX,
        ancestors_are_ids: 0,
        off_task_cgroups: u32::MAX,
        off_dfl_cgrp: u32::MAX,
        _pad: 0,
    };
}

impl Settings {
    /// Settings that record everything with both stacks.
    pub const fn defaults() -> Self {
        Settings {
            min_us: 1,
            max_us: u64::MAX,
            thread_filter: thread_filter::ALL,
            thread_kind: thread_kind::ALL,
            stacks: CAPTURE_KERNEL | CAPTURE_USER,
            state_filter: 0,
            state_mask: 0,
            waker: 0,
            chain: 1,
            threads: 0,
            off_futex_op: 24,
            events: 0,
            self_tgid: 0,
            leaf_words: 0,
            events_over_us: 0,
            task_storage: 0,
            hold_rows: 0,
            cfi: 0,
            labels: 1,
            on_cpu: 0,
            task: TaskOffsets::UNKNOWN,
            cgroup: CgroupFilter::NONE,
        }
    }
}

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
    /// in ns ([`what::SLEEP`]), or the process that ran instead ([`what::PREEMPTED`]).
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

/// Indices into the per-CPU [`names::COUNTERS`] array.
pub mod counter {
    /// sched_switch (or finish_task_switch) program runs.
    pub const SWITCHES: u32 = 0;
    /// Waits added to the aggregate.
    pub const RECORDED: u32 = 1;
    /// Waits dropped because they were shorter than `-m` or longer than `-M`.
    pub const OUTSIDE_BLOCK_TIME: u32 = 2;
    /// Kernel stacks that could not be taken or stored (a full map, ...).
    pub const LOST_KERNEL_STACK: u32 = 3;
    /// User stacks that could not be taken or stored.
    pub const LOST_USER_STACK: u32 = 4;
    /// Waits that did not fit into the full aggregate map.
    pub const LOST_AGG_FULL: u32 = 5;
    /// Nanoseconds of those waits.
    pub const LOST_AGG_FULL_NS: u32 = 6;
    /// Switch-outs that did not fit into the full start map.
    pub const LOST_START_FULL: u32 = 7;
    /// Waits whose end came before their start.
    pub const NEGATIVE_DELTA: u32 = 8;
    /// sched_waking program runs.
    pub const WAKINGS: u32 = 9;
    /// Wakeup chains that did not fit into the full LAST_WAKE map.
    pub const LOST_WAKE_FULL: u32 = 10;
    /// Threads that did not fit into the full THREADS map.
    pub const LOST_THREADS_FULL: u32 = 11;
    /// Wake dependencies that did not fit into the full DEPS map.
    pub const LOST_DEPS_FULL: u32 = 12;
    /// Process events that did not fit into the full ring buffer.
    pub const LOST_EVENTS: u32 = 13;
    /// Kernel stacks of waits reused in place instead of unwound (see [`StackCache`]).
    pub const KSTACK_REUSED: u32 = 14;
    /// Kernel stacks of wakers reused in place instead of unwound.
    pub const WAKER_KSTACK_REUSED: u32 = 15;
    /// Long-wait events (`--events-over`) that did not fit into the full ring buffer.
    pub const LOST_WAIT_EVENTS: u32 = 16;
    /// Long-wait events sent.
    pub const WAIT_EVENTS: u32 = 17;
    /// Switch-outs of a traced task whose previous wait no switch-in ended: the
    /// hook saw that wait begin but never the task's return to a CPU.
    pub const UNENDED: u32 = 18;
    /// Waits like those of [`UNENDED`] that were ended anyway, at the switch-in
    /// time the task's run time since then gives (fair-class tasks).
    pub const ENDS_ESTIMATED: u32 = 19;
    /// Kernel stacks reused (and counted in [`KSTACK_REUSED`] or
    /// [`WAKER_KSTACK_REUSED`] too) from a layout another task learned at the same
    /// call site.
    pub const KSTACK_SHARED: u32 = 20;
    /// Waits counted in [`RECORDED`] as they were added to a held row (see
    /// [`Settings::hold_rows`]) that then did not fit into the full aggregate map
    /// (and are counted in [`LOST_AGG_FULL`] too).
    pub const HELD_LOST: u32 = 21;
    /// Wakeups whose chain did not fit into the full [`super::names::CHAINS`] map
    /// (their waits show no waker).
    pub const LOST_CHAINS_FULL: u32 = 22;
    /// On-CPU samples of traced threads (`--on-cpu`).
    pub const SAMPLES: u32 = 23;
    /// Samples that did not fit into the full [`super::names::SAMPLES`] map.
    pub const LOST_SAMPLES_FULL: u32 = 24;
    /// Samples whose event did not fit into the full event ring buffer.
    pub const LOST_SAMPLE_EVENTS: u32 = 25;
    /// Waits in progress when the trace began, recorded from its start by the
    /// `seed_waits` iterator.
    pub const SEEDED: u32 = 26;
    /// Of those, the ones that ended with the user stack user space walked.
    pub const SEEDED_WALKED: u32 = 27;
    /// Of those, the ones that ended before user space had walked their user
    /// stack, left out, and their nanoseconds.
    pub const SEEDED_UNWALKED: u32 = 28;
    pub const SEEDED_UNWALKED_NS: u32 = 29;
    /// Number of counters (the size of the COUNTERS map).
    pub const COUNT: u32 = 30;
}

/// Map, program and global names, shared so the two sides cannot drift apart.
pub mod names {
    pub const SETTINGS: &str = "SETTINGS";
    pub const UNWIND_NODES: &str = "UNWIND_NODES";
    pub const UNWIND_FILES: &str = "UNWIND_FILES";
    pub const UNWIND_PROCS: &str = "UNWIND_PROCS";
    pub const PY_PROCS: &str = "PY_PROCS";
    pub const PY_EPOCH: &str = "PY_EPOCH";
    pub const USTACKS: &str = "USTACKS";
    pub const KSTACKS: &str = "KSTACKS";
    pub const LAYOUTS: &str = "LAYOUTS";
    pub const SITES: &str = "SITES";
    pub const LEARNERS: &str = "LEARNERS";
    pub const PROG_LEARN_BTF: &str = "learn_stack_btf";
    pub const PROG_TASK_REGS: &str = "task_regs";
    pub const PROG_SEED_WAITS: &str = "seed_waits";
    pub const REWALKS: &str = "REWALKS";
    pub const PROG_LEARN_RAW: &str = "learn_stack_raw";
    pub const WAKE_LEARNERS: &str = "WAKE_LEARNERS";
    pub const PROG_LEARN_WAKER_BTF: &str = "learn_waker_btf";
    pub const PROG_LEARN_WAKER_RAW: &str = "learn_waker_raw";
    pub const STARTS: &str = "STARTS";
    pub const WAITS: &str = "WAITS";
    pub const PIDS: &str = "PIDS";
    pub const CONTROL: &str = "CONTROL";
    pub const LAST_WAKE: &str = "LAST_WAKE";
    pub const CHAINS: &str = "CHAINS";
    pub const WAKE_WAITS: &str = "WAKE_WAITS";
    pub const PROG_WAKING_BTF: &str = "sched_waking_btf";
    pub const PROG_WAKING_RAW: &str = "sched_waking_raw";
    pub const WAKING_IMPL: &str = "WAKING_IMPL";
    pub const PROG_WAKING_FULL_BTF: &str = "sched_waking_full_btf";
    pub const PROG_WAKING_FULL_RAW: &str = "sched_waking_full_raw";
    pub const PROG_WAKING_QUICK_BTF: &str = "sched_waking_quick_btf";
    pub const PROG_WAKING_QUICK_RAW: &str = "sched_waking_quick_raw";
    pub const THREADS: &str = "THREADS";
    pub const DEPS: &str = "DEPS";
    pub const FUTEX_WAKING: &str = "FUTEX_WAKING";
    pub const EVENTS: &str = "EVENTS";
    pub const WAIT_EVENTS: &str = "WAIT_EVENTS";
    pub const PROG_EXEC_BTF: &str = "sched_process_exec_btf";
    pub const PROG_EXEC_RAW: &str = "sched_process_exec_raw";
    pub const PROG_FORK_BTF: &str = "sched_process_fork_btf";
    pub const PROG_FORK_RAW: &str = "sched_process_fork_raw";
    pub const PROG_CGROUP_ATTACH_BTF: &str = "cgroup_attach_task_btf";
    pub const PROG_CGROUP_ATTACH_RAW: &str = "cgroup_attach_task_raw";
    pub const PROG_NEW_BTF: &str = "sched_wakeup_new_btf";
    pub const PROG_NEW_RAW: &str = "sched_wakeup_new_raw";
    pub const PROG_FUTEX_ENTER: &str = "sys_enter_futex";
    pub const PROG_FUTEX_WAKE_ENTER: &str = "sys_enter_futex_wake";
    pub const PROG_FUTEX_EXIT: &str = "sys_exit_futex";
    pub const PROG_LOCK_BEGIN: &str = "contention_begin";
    pub const PROG_LOCK_END: &str = "contention_end";
    pub const LABEL_SYSCALLS: &str = "LABEL_SYSCALLS";
    pub const COUNTERS: &str = "COUNTERS";
    pub const PROG_SWITCH_BTF: &str = "sched_switch_btf";
    pub const PROG_SWITCH_RAW: &str = "sched_switch_raw";
    pub const SWITCH_IMPL: &str = "SWITCH_IMPL";
    pub const PROG_SWITCH_FULL_BTF: &str = "sched_switch_full_btf";
    pub const PROG_SWITCH_FULL_RAW: &str = "sched_switch_full_raw";
    pub const PROG_SWITCH_QUICK_BTF: &str = "sched_switch_quick_btf";
    pub const PROG_SWITCH_QUICK_RAW: &str = "sched_switch_quick_raw";
    pub const PROG_FINISH_KPROBE: &str = "finish_task_switch_kprobe";
    pub const SAMPLES: &str = "SAMPLES";
    pub const SAMPLE_IMPL: &str = "SAMPLE_IMPL";
    pub const PROG_SAMPLE: &str = "cpu_sample";
    pub const PROG_SAMPLE_QUICK: &str = "cpu_sample_quick";
    pub const PROG_SAMPLE_FULL: &str = "cpu_sample_full";
}

/// Default and hard limits.
pub mod limits {
    /// Default `--stack-storage-size`: the most kernel stacks, and the most user
    /// stacks, kept (each map allocates its entries as stacks arrive).
    pub const DEFAULT_STACK_STORAGE: u32 = 16384;
    /// Default `--max-entries` of the aggregate map.
    pub const DEFAULT_MAX_ENTRIES: u32 = 32768;
    /// Kernel stacks kept for reuse per task (each with its call site), newest
    /// first: a task that blocks at more sites than this unwinds again.
    pub const CACHED_PER_TASK: usize = 3;
    /// Capacity of the per-task start map.
    pub const START_ENTRIES: u32 = 65536;
    /// Kernel stack layouts shared by all tasks, and the call sites they are kept
    /// under (entries are allocated as stacks are learned).
    pub const LAYOUTS: u32 = 16384;
    pub const LAYOUT_SITES: u32 = 4096;
    /// Words of the `STARTED` map: one byte per hash of a task address (65,536).
    pub const STARTED_WORDS: u32 = 8192;
    /// Capacity of the pid/tid filter map.
    pub const MAX_FILTER_IDS: u32 = 4096;
    /// Unwind tree nodes (512 bytes each, allocated as tables load: 32 MiB at
    /// most) and processes (2 KiB each) the user stack walker keeps.
    pub const UNWIND_NODES: u32 = 65536;
    pub const UNWIND_PROCS: u32 = 16384;
    /// Capacity of the wake-dependency map of `topwaits threads`.
    pub const DEPS_ENTRIES: u32 = 16384;
    /// Processes whose maps the walker asked user space for, least recently
    /// asked forgotten first.
    pub const ASKED_PROCS: u32 = 4096;
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
            8 * 2 + 4 * 18 + size_of::<TaskOffsets>() + size_of::<CgroupFilter>()
        );
        assert_eq!(size_of::<CgroupFilter>(), 8 + 4 * 12);
        assert_eq!(size_of::<walker::ExecMap>(), 8 * 4);
        assert_eq!(size_of::<walker::ProcMaps>(), 16 + 32 * walker::MAX_MAPS);
        assert_eq!(size_of::<walker::FileInfo>(), 8);
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
