//! Hook: the `cpu-clock` perf event of `--on-cpu`, opened on every CPU at the
//! asked rate times `on_cpu::OVERSAMPLE`, of which one tick in that many, at
//! random, is a sample: counted in `SAMPLES` under its thread and stacks.
//! Random ticks cannot lock onto a workload whose period is near the rate's
//! (a loop of 5 ms of work and 5 ms of sleep, sampled every 10.1 ms, would
//! otherwise be seen running far more or less than half of the time).
//!
//! As for `sched_switch`, the attached program only tail-calls its body in
//! `SAMPLE_IMPL`: the quick one (user stacks by frame pointers) from the start,
//! the full one (user stacks from the unwind tables) once loaded.

use aya_ebpf::{
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task, bpf_get_prandom_u32,
        bpf_ktime_get_ns,
    },
    macros::{map, perf_event},
    maps::{HashMap, PerCpuArray, ProgramArray},
    programs::PerfEventContext,
};
use topwaits_common::{
    counter, limits, on_cpu, thread_kind, SampleEvent, SampleKey, SampleVal, CAPTURE_KERNEL,
    CAPTURE_USER, PF_KTHREAD, STACK_NONE,
};

use crate::maps::{count, ended, fold_or_insert, settings, task_u32, thread_wanted, Kept, GROWS};

/// Samples per thread and stacks, sized like the aggregate at load time (to 1
/// without `--on-cpu`).
#[map]
static SAMPLES: HashMap<SampleKey, SampleVal> =
    HashMap::with_max_entries(limits::DEFAULT_MAX_ENTRIES, GROWS);

/// Slot 0: the hook's body (see the module's documentation).
#[map]
static SAMPLE_IMPL: ProgramArray = ProgramArray::with_max_entries(1, 0);

/// Per-CPU: the row key being built (too large for the BPF stack beside the walk).
#[map]
static SCRATCH_SAMPLE: PerCpuArray<SampleKey> = PerCpuArray::with_max_entries(1, 0);

#[perf_event]
pub fn cpu_sample(ctx: PerfEventContext) -> u32 {
    // SAFETY: a helper call without preconditions.
    if unsafe { bpf_get_prandom_u32() } % on_cpu::OVERSAMPLE != 0 {
        return 0;
    }
    // SAFETY: a tail call to a program of this type that user space put there;
    // it does not return, and an empty slot falls through.
    unsafe { SAMPLE_IMPL.tail_call(&ctx, 0) };
    0
}

// Inlined into their entries, as the switch bodies are.
#[perf_event]
#[inline(always)]
pub fn cpu_sample_full(ctx: PerfEventContext) -> u32 {
    sample::<true>(&ctx);
    0
}

#[perf_event]
#[inline(always)]
pub fn cpu_sample_quick(ctx: PerfEventContext) -> u32 {
    sample::<false>(&ctx);
    0
}

/// Whether `-u/-k` let the running task through.
#[inline(always)]
fn kind_wanted() -> bool {
    let s = settings();
    if s.thread_kind == thread_kind::ALL {
        return true;
    }
    // SAFETY: a helper call without preconditions.
    let task = unsafe { bpf_get_current_task() };
    let Some(flags) = task_u32(task, s.task.flags) else { return false };
    (flags & PF_KTHREAD != 0) == (s.thread_kind == thread_kind::KERNEL)
}

#[inline(always)]
fn sample<const CFI: bool>(ctx: &PerfEventContext) {
    let s = settings();
    let pid_tgid = bpf_get_current_pid_tgid();
    let (tgid, tid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    // The idle task is not a thread that runs.
    if tid == 0 || s.on_cpu & on_cpu::COUNT == 0 || !thread_wanted(tgid, tid) || !kind_wanted() {
        return;
    }
    // SAFETY: a helper call without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if s.threads != 0 && ended(now) {
        return;
    }
    count(counter::SAMPLES, 1);
    let Some(key) = SCRATCH_SAMPLE.get_ptr_mut(0) else { return };
    // SAFETY: this CPU's scratch slot, used by this program run alone.
    let key = unsafe { &mut *key };
    key.tgid = tgid;
    key.tid = tid;
    key.comm = bpf_get_current_comm().unwrap_or_default();
    key.ustack = if s.stacks & CAPTURE_USER != 0 {
        crate::ustack::sampled::<_, CFI>(ctx)
    } else {
        STACK_NONE
    };
    key.kstack =
        if s.stacks & CAPTURE_KERNEL != 0 { crate::kstack::sampled(ctx) } else { STACK_NONE };
    let key = &*key;
    let one = SampleVal { count: 1, last_ns: now };
    // SAFETY: a pointer from a map lookup; a race between CPUs on one row (a
    // thread's stacks are sampled on one CPU at a time) loses at most a count.
    let kept = fold_or_insert(&SAMPLES, key, &one, |v| unsafe {
        (*v).count += 1;
        (*v).last_ns = now;
    });
    if kept == Kept::Full {
        count(counter::LOST_SAMPLES_FULL, 1);
    }
    if s.on_cpu & on_cpu::EVENTS != 0 {
        crate::events::send_sample(&SampleEvent { at: now, key: *key });
    }
}
