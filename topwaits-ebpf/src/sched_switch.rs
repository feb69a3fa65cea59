//! Hook: the `sched_switch` tracepoint, as tp_btf (primary) and raw_tp (fallback).
//! It runs as the outgoing task, so that task's stacks are taken here.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{btf_tracepoint, raw_tracepoint},
    programs::{tracing::StackIdContext, BtfTracePointContext, RawTracePointContext},
};

use crate::{
    maps::{as_number, count},
    switch::{switch_in, switch_out, Clock},
    task::Outgoing,
};
use topwaits_common::counter;

/// Both attach kinds pass the tracepoint's arguments
/// `(bool preempt, task_struct *prev, task_struct *next, unsigned int prev_state)`;
/// `prev` and `next` arrive here as numbers (see [`as_number`]).
#[inline(always)]
fn on_switch<C: StackIdContext + aya_ebpf::EbpfContext>(ctx: &C, preempt: u64, prev: u64, next: u64, prev_state: u64) {
    count(counter::SWITCHES, 1);
    let mut clock = Clock::new();
    let pid_tgid = bpf_get_current_pid_tgid();
    let out = Outgoing {
        task: prev,
        tgid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        // A preempted task stays runnable whatever its __state said.
        state: if preempt & 0xff != 0 { 0 } else { prev_state as u32 },
        current: true,
        next,
    };
    if crate::maps::settings().threads != 0 {
        crate::threads::on_switch(&out, next, clock.now());
        return;
    }
    switch_out(ctx, &out, &mut clock, true);
    switch_in(ctx, next, &mut clock, false);
    crate::kcache::hand_to_learner(ctx, &crate::maps::LEARNERS);
}

// Inlined into the program's entry, whatever the body's size: were it a function
// of its own, every stack taken here would have one more frame below the anchor
// than `kcache::FIRST` allows, and no kernel stack would ever be reused.
#[btf_tracepoint(function = "sched_switch")]
#[inline(always)]
pub fn sched_switch_btf(ctx: BtfTracePointContext) -> i32 {
    on_switch(&ctx, ctx.arg(0), as_number(ctx.arg(1)), as_number(ctx.arg(2)), ctx.arg(3));
    0
}

#[raw_tracepoint(tracepoint = "sched_switch")]
#[inline(always)]
pub fn sched_switch_raw(ctx: RawTracePointContext) -> i32 {
    on_switch(&ctx, ctx.arg(0), ctx.arg(1), ctx.arg(2), ctx.arg(3));
    0
}
