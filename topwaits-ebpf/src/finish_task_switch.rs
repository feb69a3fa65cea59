//! Hook: a kprobe on `finish_task_switch(prev)`, for kernels without tracepoint BTF.
//! It runs as the incoming task, so the waiting task's stacks are taken at switch-in
//! (as bcc offcputime does) and the outgoing task's fields come from BTF offsets.

use aya_ebpf::{helpers::bpf_get_current_task, macros::kprobe, programs::ProbeContext};
use topwaits_common::counter;

use crate::{
    maps::{count, settings, task_u32},
    switch::{switch_in, switch_out, Clock},
    task::Outgoing,
};

#[kprobe]
pub fn finish_task_switch_kprobe(ctx: ProbeContext) -> u32 {
    count(counter::SWITCHES, 1);
    let mut clock = Clock::new();
    // SAFETY: a helper call without preconditions.
    let current = unsafe { bpf_get_current_task() };
    if let Some(prev) = ctx.arg::<u64>(0) {
        let s = settings();
        let out = Outgoing {
            task: prev,
            tgid: task_u32(prev, s.task.tgid).unwrap_or(0),
            tid: task_u32(prev, s.task.pid).unwrap_or(0),
            state: task_u32(prev, s.task.state).unwrap_or(0),
            current: false,
            next: 0,
        };
        switch_out::<_, true>(&ctx, &out, &mut clock, false);
    }
    switch_in::<_, true>(&ctx, current, &mut clock, true);
    0
}
