//! The failures users meet, each with a hint on how to fix it.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum UserError {
    #[error("missing privilege: loading eBPF tracing programs needs root, or CAP_BPF and CAP_PERFMON (try sudo)")]
    NoPrivilege,
    #[error("no process with PID {0} (is it still running?)")]
    NoSuchPid(u32),
    #[error("PID {id} is a thread of process {tgid}: use -t {id} for the thread or -p {tgid} for the process")]
    NotAProcess { id: u32, tgid: u32 },
    #[error("no thread with TID {0} (is it still running?)")]
    NoSuchTid(u32),
    #[error("kernel BTF is missing ({path}), which {what} needs; use a kernel built with CONFIG_DEBUG_INFO_BTF=y")]
    NoBtf { path: String, what: &'static str },
    #[error("kprobes are not available on this kernel (CONFIG_KPROBES is not set: {0} is missing); use --attach tp_btf or --attach raw_tp")]
    NoKprobes(String),
    #[error("no attachable finish_task_switch symbol in /proc/kallsyms; use --attach tp_btf or --attach raw_tp")]
    NoKprobeTarget,
}
