//! Hook: the `sched_process_exec` tracepoint (tp_btf and raw_tp). A process that
//! execs has new memory maps; user space re-reads them while the process lives.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{btf_tracepoint, raw_tracepoint},
    programs::{BtfTracePointContext, RawTracePointContext},
};
use topwaits_common::proc_event::EXEC;

use crate::maps::proc_event;

#[inline(always)]
fn on_exec() {
    proc_event((bpf_get_current_pid_tgid() >> 32) as u32, EXEC);
}

#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_process_exec_btf(_ctx: BtfTracePointContext) -> i32 {
    on_exec();
    0
}

#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn sched_process_exec_raw(_ctx: RawTracePointContext) -> i32 {
    on_exec();
    0
}
