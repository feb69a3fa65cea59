//! Goroutine waits (Go programs, from uprobes on the runtime's scheduler): the
//! per-process layout user space hands the hooks, a parked goroutine's entry,
//! and how a goroutine is told apart from a thread in a wait's key.

/// Set in [`super::WaitKey::tid`] and [`super::Hop::tid`] when the "thread" is
/// a goroutine: the rest of the word is its goid (modulo [`GOID_MASK`]). Task
/// ids never reach this bit (`pid_max` is at most 2^22).
pub const GOROUTINE_TID: u32 = 1 << 30;
/// The goid bits a goroutine's tid keeps; [`super::What::obj`] has the whole goid.
pub const GOID_MASK: u32 = GOROUTINE_TID - 1;

/// `runtime.g.atomicstatus` of a running goroutine (`_Grunning`) and of a
/// parked one (`_Gwaiting`).
pub const G_RUNNING: u32 = 2;
pub const G_WAITING: u32 = 4;

/// Most Go processes whose goroutines are traced at once.
pub const MAX_GO_PROCS: u32 = 256;
/// Most goroutines parked at once that are remembered; the oldest parked goes
/// first (an LRU map, preallocated: goroutines idle for the whole trace fall
/// out, and their waits, which would end after it, are not missed).
pub const MAX_GO_PARKED: u32 = 16384;
/// Most threads of traced Go programs whose running goroutine is kept.
pub const MAX_GO_THREADS: u32 = 4096;

/// A Go process's layout, written by user space (by tgid) from its binary: the
/// hooks do nothing in a process without one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GoProc {
    /// Offset of `runtime.g.goid`; `atomicstatus` is 8 bytes before it, and
    /// `waitreason` 24 after it, in every release where it is known.
    pub goid_off: u32,
    pub _pad: u32,
}

/// Key of a parked goroutine: its `g` and its process.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GoKey {
    pub g: u64,
    pub tgid: u32,
    pub _pad: u32,
}

/// A parked goroutine, from its park until `runtime.execute` runs it again.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GoPark {
    /// CLOCK_MONOTONIC ns of the park; of the wakeup (`runtime.ready`, 0 until then).
    pub ts: u64,
    pub woken: u64,
    pub goid: u64,
    /// The waker's chain (one hop) in `CHAINS`, once woken.
    pub chain: u64,
    /// The runtime's `waitReason`.
    pub reason: u32,
    /// The thread it parked from, where it last ran.
    pub tid: u32,
    pub comm: [u8; super::TASK_COMM_LEN],
}

/// The goroutine a thread last started, from `runtime.execute` (by tid): the
/// one whose park its next choice or sleep shows, and who calls
/// `runtime.ready` from that thread's goroutine stack. `g` is 0 once its park
/// is taken.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GoRunning {
    pub g: u64,
    pub goid: u64,
}

/// A goroutine and a thread it ran on: the key of the count of the times the
/// scheduler started it there (`runtime.execute`) other than right after it
/// parked from that same thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GoRanOn {
    pub goid: u64,
    pub tgid: u32,
    pub tid: u32,
}

/// A goroutine's tid in keys and hops.
#[inline(always)]
pub const fn tid_of(goid: u64) -> u32 {
    GOROUTINE_TID | (goid as u32 & GOID_MASK)
}

/// Whether a key's or hop's tid names a goroutine.
#[inline(always)]
pub const fn is_goroutine(tid: u32) -> bool {
    tid & GOROUTINE_TID != 0
}
