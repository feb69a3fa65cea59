//! What a wait is for, read as the task leaves the CPU: the syscall it is in and
//! that call's first argument (from the user registers at the top of its kernel
//! stack), the time a sleep asked for, and the kernel lock it contends for (left by
//! the `lock_contention` hooks on this CPU).

use aya_ebpf::bindings::pt_regs;
use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns};
use aya_ebpf::maps::{Array, LruHashMap};
use aya_ebpf::{cty::c_void, helpers::generated as gen, macros::map, maps::PerCpuArray};
use topwaits_common::{
    label_syscalls, what, JvmMonitor, JvmSleep, What, JVM_MONITOR_FIELD, JVM_MONITOR_THREAD_IN_RCX,
};

use crate::uwalk::{PtRegs, REGS_CS, REGS_DI, REGS_DX, REGS_ORIG_AX, REGS_R10, REGS_SI, USER_CS};

/// Syscall numbers are below this; `orig_ax` holds a negated vector for interrupts.
const MAX_NR: u64 = 512;
/// `TIMER_ABSTIME` in `clock_nanosleep`'s flags, and `CLOCK_MONOTONIC`.
const TIMER_ABSTIME: u64 = 1;
const CLOCK_MONOTONIC: u64 = 1;
/// A futex op's command and its `FUTEX_CLOCK_REALTIME` bit, and the command
/// that waits to an absolute deadline (on the monotonic clock without that bit).
const FUTEX_CMD_AND_CLOCK: u64 = 0x7f | 256;
const FUTEX_WAIT_BITSET: u64 = 9;

/// The kernel lock a task on this CPU contends for, until it gets it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Contention {
    pub tid: u32,
    pub flags: u32,
    pub lock: u64,
}

/// See `topwaits_common::label_syscalls`; set by user space before loading.
#[map]
pub static LABEL_SYSCALLS: Array<u64> = Array::with_max_entries(label_syscalls::LEN, 0);

#[map]
pub static CONTENTION: PerCpuArray<Contention> = PerCpuArray::with_max_entries(1, 0);

/// Each HotSpot thread's latest `JVM_Sleep`, by tid (see [`jvm_sleep`]).
#[map]
static JVM_SLEEPS: LruHashMap<u32, JvmSleep> = LruHashMap::with_max_entries(4096, 0);

/// At HotSpot's `JVM_Sleep(env, class, time)` (a `Thread.sleep`): the time
/// asked for, and when.
#[inline(always)]
pub fn jvm_sleep(regs: &pt_regs) {
    // SAFETY: helper calls without arguments.
    let (tid, at) = unsafe { (bpf_get_current_pid_tgid() as u32, bpf_ktime_get_ns()) };
    let _ = JVM_SLEEPS.insert(&tid, &JvmSleep { arg: regs.rdx, at }, 0);
}

/// Each HotSpot thread's latest contended monitor entry or `Object.wait`, by
/// tid (see [`jvm_monitor`]); and, written by user space as it hooks a JVM,
/// the monitor each of its threads is in then.
#[map]
static JVM_MONITORS: LruHashMap<u32, JvmMonitor> = LruHashMap::with_max_entries(4096, 0);

/// At HotSpot's `ObjectMonitor::EnterI(this, current)` or
/// `ObjectMonitor::wait(this, millis, interruptible, current)`: the monitor,
/// the thread, and (from the probe's cookie) the thread's field that names the
/// monitor while the thread is in it.
#[inline(always)]
pub fn jvm_monitor(regs: &pt_regs, cookie: u64) {
    // Both read, each at its fixed offset: the verifier takes no computed
    // offset into the context.
    // SAFETY: fields of a valid reference.
    let (rcx, rsi) =
        unsafe { (core::ptr::read_volatile(&regs.rcx), core::ptr::read_volatile(&regs.rsi)) };
    let thread = if cookie & JVM_MONITOR_THREAD_IN_RCX != 0 { rcx } else { rsi };
    let tid = bpf_get_current_pid_tgid() as u32;
    let m = JvmMonitor { monitor: regs.rdi, thread, field: cookie & JVM_MONITOR_FIELD };
    let _ = JVM_MONITORS.insert(&tid, &m, 0);
}

/// The Java monitor thread `tid` waits in, if it is in one now: the monitor its
/// hook kept, while its `JavaThread` still names that monitor (the field is
/// cleared once the thread has entered it, or been notified). `scratch` is
/// 8 bytes of map value to read into.
#[inline(always)]
fn monitor_of(tid: u32, scratch: *mut u64) -> Option<u64> {
    // SAFETY: a copy out of a map value.
    let m = unsafe { *JVM_MONITORS.get(&tid)? };
    let at = m.thread.checked_add(m.field)?;
    // SAFETY: the helper checks the user address; `scratch` is map memory.
    if unsafe { gen::bpf_probe_read_user(scratch.cast(), 8, at as *const c_void) } != 0 {
        return None;
    }
    // SAFETY: just filled.
    (unsafe { *scratch } == m.monitor && m.monitor != 0).then_some(m.monitor)
}

/// The time a `Thread.sleep` asked for, where the futex wait to `deadline`
/// (CLOCK_MONOTONIC ns) is the one its `JVM_Sleep` made: the deadline is the
/// call's time plus what it asked, a little later for the JVM's own steps (a
/// sleep woken early sleeps again to the same deadline, from a millisecond
/// count before JDK 21). The argument is in ms or ns by the JDK; the deadline
/// tells which.
#[inline(always)]
fn asked_of(tid: u32, deadline: u64) -> Option<u64> {
    // SAFETY: a copy out of a map value.
    let s = unsafe { *JVM_SLEEPS.get(&tid)? };
    let span = deadline.checked_sub(s.at)?;
    let close = |asked: u64| span >= asked && span - asked < JVM_SLEEP_SLACK;
    // Below 2^40 ms (35 years), so that the product does not wrap.
    if s.arg < 1 << 40 && close(s.arg * 1_000_000) {
        Some(s.arg * 1_000_000)
    } else if close(s.arg) {
        Some(s.arg)
    } else {
        None
    }
}

/// How much later than the call plus its asked time a sleep's deadline may be.
const JVM_SLEEP_SLACK: u64 = 20_000_000;

/// Writes into `w` what the current task, `tid`, leaving the CPU in `state` (0:
/// preempted) for `next_tgid`'s task (0: not known), waits for. `now` is the
/// switch's time. A sleep's timespec is read into per-CPU scratch, not the BPF
/// stack, which the hooks that inline this have used up.
#[inline(always)]
pub fn fill(w: &mut What, tid: u32, state: u32, next_tgid: u32, now: u64) {
    w.nr = 0;
    w.flags = 0;
    w.arg0 = 0;
    w.obj = 0;
    if state == 0 {
        w.flags = what::PREEMPTED;
        w.obj = next_tgid as u64;
        return;
    }
    if let Some(c) = CONTENTION.get_ptr_mut(0) {
        // SAFETY: this CPU's slot; hooks on this CPU run one at a time.
        let c = unsafe { &mut *c };
        if c.tid == tid && c.lock != 0 {
            w.flags = what::KLOCK | (c.flags & what::LOCK_FLAGS);
            w.obj = c.lock;
            c.tid = 0;
        }
    }
    syscall(w, tid, now);
}

/// Per-CPU: a sleep's timespec, read for [`fill`].
#[map]
static SCRATCH_TIMESPEC: PerCpuArray<[u64; 2]> = PerCpuArray::with_max_entries(1, 0);

/// Fills in the syscall the task whose registers are `regs` is in, if it came
/// from user mode by one, and its first argument where kept; false otherwise.
#[inline(always)]
fn syscall_of(w: &mut What, regs: &PtRegs) -> bool {
    let nr = regs.word(REGS_ORIG_AX);
    if regs.word(REGS_CS) != USER_CS || nr >= MAX_NR {
        return false;
    }
    w.nr = nr as u32 + 1;
    let word = LABEL_SYSCALLS
        .get((nr / 64) as u32 & (label_syscalls::ARG0_WORDS - 1))
        .copied()
        .unwrap_or(0);
    if word & (1 << (nr % 64)) != 0 {
        w.arg0 = regs.word(REGS_DI);
        if w.flags & what::KLOCK == 0 && is_futex(nr) {
            w.flags |=
                what::FUTEX_OP | (((regs.word(REGS_SI) & 0x7f) as u32) << what::FUTEX_OP_SHIFT);
        }
    }
    true
}

/// Writes into `w` what another task, `tid`, whose registers are `regs`, waits
/// for in `state` (0: runnable): its syscall and first argument, and for a
/// futex wait the Java monitor it is in (as user space found it when hooking
/// its JVM, or a hook since). A sleep's asked time lies in that task's memory,
/// which only its own context reads.
#[inline(always)]
pub fn fill_other(w: &mut What, tid: u32, regs: Option<PtRegs>, state: u32) {
    *w = What { nr: 0, flags: 0, arg0: 0, obj: 0 };
    if state == 0 {
        w.flags = what::PREEMPTED;
        return;
    }
    let Some(regs) = regs else { return };
    if syscall_of(w, &regs) && is_futex(w.nr as u64 - 1) && crate::maps::jvm_monitors_hooked() {
        // SAFETY: a copy out of a map value.
        if let Some(m) = unsafe { JVM_MONITORS.get(&tid) } {
            if m.monitor != 0 {
                w.obj = m.monitor;
                w.flags |= what::JMONITOR;
            }
        }
    }
}

/// Fills in the syscall the current task is in, if it came from user mode by one.
#[inline(always)]
fn syscall(w: &mut What, tid: u32, now: u64) {
    let Some(regs) = PtRegs::current() else { return };
    if !syscall_of(w, &regs) || w.flags & what::KLOCK != 0 {
        return;
    }
    let nr1 = w.nr as u64;
    let (ptr, abs) = if LABEL_SYSCALLS.get(label_syscalls::NANOSLEEP).is_some_and(|&n| n == nr1) {
        (regs.word(REGS_DI), false)
    } else if is_futex(nr1 - 1) {
        if crate::maps::jvm_monitors_hooked() {
            let Some(scratch) = SCRATCH_TIMESPEC.get_ptr_mut(0) else { return };
            if let Some(monitor) = monitor_of(tid, scratch.cast()) {
                w.obj = monitor;
                w.flags |= what::JMONITOR;
                return;
            }
        }
        // A wait to a deadline on the monotonic clock, as a HotSpot
        // `Thread.sleep`'s is; read only where a JVM is hooked.
        if regs.word(REGS_SI) & FUTEX_CMD_AND_CLOCK != FUTEX_WAIT_BITSET
            || !crate::maps::jvm_sleeps_hooked()
        {
            return;
        }
        (regs.word(REGS_R10), true)
    } else if LABEL_SYSCALLS.get(label_syscalls::CLOCK_NANOSLEEP).is_some_and(|&n| n == nr1) {
        let abs = regs.word(REGS_SI) & TIMER_ABSTIME != 0;
        if abs && regs.word(REGS_DI) != CLOCK_MONOTONIC {
            return;
        }
        (regs.word(REGS_DX), abs)
    } else {
        return;
    };
    if ptr == 0 {
        // No timeout: most futex waits.
        return;
    }
    let Some(ts) = SCRATCH_TIMESPEC.get_ptr_mut(0) else { return };
    // SAFETY: the helper checks the user address; the scratch is 16 bytes of map value.
    if unsafe { gen::bpf_probe_read_user(ts.cast(), 16, ptr as *const c_void) } != 0 {
        return;
    }
    // SAFETY: this CPU's scratch slot, just filled, used by this program run alone.
    let ts = unsafe { &*ts };
    let ns = ts[0].wrapping_mul(1_000_000_000).wrapping_add(ts[1]);
    if is_futex(nr1 - 1) {
        if let Some(asked) = asked_of(tid, ns) {
            w.obj = asked;
            w.flags |= what::ASKED;
        }
    } else if abs {
        w.obj = up_to_125(ns.saturating_sub(now));
        w.flags |= what::SLEEP | what::SLEEP_DEADLINE;
    } else {
        w.obj = coarse(ns);
        w.flags |= what::SLEEP;
    }
}

/// The time left to an absolute deadline, rounded up to 1, 2 or 5 times a power
/// of ten (at least 1 us). What was asked is not known: the time left falls
/// short of it by however late the task reached the switch (a busy CPU delays
/// it by anything up to milliseconds), so a finer value would split the sleeps
/// of one loop into rows by that delay.
#[inline(always)]
fn up_to_125(ns: u64) -> u64 {
    let mut step = 1_000u64;
    // Ten decades reach 10^13 ns (hours); a bounded loop for the verifier.
    for _ in 0..10 {
        if ns <= step {
            return step;
        }
        if ns <= 2 * step {
            return 2 * step;
        }
        if ns <= 5 * step {
            return 5 * step;
        }
        step *= 10;
    }
    step
}

/// A sleep's asked time to two significant digits: an absolute deadline less the
/// time of the switch differs by microseconds from call to call, and every value
/// would be a row of its own. It falls short of what was asked, never over, so it
/// is rounded up, with the digits chosen from a value 1.5% larger: 9.994 ms left
/// of a 10 ms sleep is 10 ms.
#[inline(always)]
fn coarse(ns: u64) -> u64 {
    let step = match ns + ns / 64 {
        n if n >= 1_000_000_000 => 10_000_000,
        n if n >= 100_000_000 => 1_000_000,
        n if n >= 10_000_000 => 100_000,
        n if n >= 1_000_000 => 10_000,
        n if n >= 100_000 => 1_000,
        _ => 100,
    };
    ns.div_ceil(step) * step
}

/// `futex` on x86-64 (the only ABI whose registers are read here).
#[inline(always)]
fn is_futex(nr: u64) -> bool {
    nr == 202
}
