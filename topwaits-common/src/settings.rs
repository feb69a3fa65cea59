//! What user space tells the programs before they load: the settings global
//! (filters, what to capture), the task_struct offsets read from BTF, and the
//! cgroup a trace is limited to.

use crate::{CAPTURE_KERNEL, CAPTURE_USER};

/// Values of [`Settings::thread_filter`].
/// The slots of the `CONTROL` array, which user space writes while the
/// programs run (unlike the settings, fixed at load).
pub mod control {
    /// When the trace ends (CLOCK_MONOTONIC ns; 0 while open-ended).
    pub const END: u32 = 0;
    /// Rows inserted into the aggregate since it was last cleared.
    pub const ROWS: u32 = 1;
    /// Non-zero once a `JVM_Sleep` is hooked: only then does the switch read
    /// a futex wait's deadline (for the time a `Thread.sleep` asked for).
    pub const JVM_SLEEPS: u32 = 2;
    /// Non-zero once a HotSpot monitor's entry or `Object.wait` is hooked:
    /// only then does the switch look a futex waiter up among the threads in
    /// a monitor.
    pub const JVM_MONITORS: u32 = 3;
    /// The array's size.
    pub const SLOTS: u32 = 4;
}

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
    /// Goroutine waits (and goroutine wakers) are kept by stack rather than by
    /// goroutine once the aggregate has this many rows since it was last
    /// cleared (see [`control::ROWS`]): a server that starts goroutines per
    /// request then still fits. 0: never.
    pub go_merge_rows: u32,
    pub _pad: u32,
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
            go_merge_rows: 0,
            _pad: 0,
            task: TaskOffsets::UNKNOWN,
            cgroup: CgroupFilter::NONE,
        }
    }
}
