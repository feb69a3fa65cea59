//! Indices into the per-CPU [`crate::names::COUNTERS`] array.

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
/// Goroutine waits recorded (Go programs), and the wakeups of parked
/// goroutines whose waker was seen.
pub const GO_WAITS: u32 = 30;
pub const GO_WAKEUPS: u32 = 31;
/// Goroutine waits kept by stack rather than by goroutine (see
/// `Settings::go_merge_rows`).
pub const GO_MERGED: u32 = 32;
/// Starts of a goroutine on a thread that did not fit into the full
/// [`super::names::GO_RAN_ON`] map (that thread is missing from the
/// goroutine's `ran on` list).
pub const GO_RAN_ON_FULL: u32 = 33;
/// Number of counters (the size of the COUNTERS map).
pub const COUNT: u32 = 34;
