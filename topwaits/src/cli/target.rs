//! The options every subcommand shares: which processes or threads (`-p`, `-t`),
//! and, for those that trace, how to attach (`--attach`). Defined once here and
//! flattened into each subcommand's options.

use clap::Args;

use super::{pid_or_tid, AttachMode, ConfigError, Threads};

/// `-p` and `-t`.
#[derive(Args, Debug, Clone, Default)]
pub struct TargetArgs {
    /// Only these processes (comma-separated PIDs).
    #[arg(short = 'p', long = "pid", value_name = "PID", value_hint = clap::ValueHint::Other, value_delimiter = ',', num_args = 1,
          conflicts_with = "tid")]
    pub pid: Vec<u32>,

    /// Only these threads (comma-separated TIDs).
    #[arg(short = 't', long = "tid", value_name = "TID", value_hint = clap::ValueHint::Other, value_delimiter = ',', num_args = 1)]
    pub tid: Vec<u32>,
}

impl TargetArgs {
    /// The threads named, or `otherwise` when neither option is given.
    pub fn threads(self, otherwise: Threads) -> Result<Threads, ConfigError> {
        pid_or_tid(self.pid, self.tid, otherwise)
    }
}

/// `--attach`.
#[derive(Args, Debug, Clone)]
pub struct AttachArgs {
    /// How to attach: tp_btf (sched_switch with BTF), raw_tp, kprobe
    /// (finish_task_switch; not for `threads`), or auto (raw_tp, else tp_btf).
    #[arg(long, value_enum, default_value_t = AttachMode::Auto)]
    pub attach: AttachMode,
}
