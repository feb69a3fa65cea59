//! The options every subcommand shares: which processes or threads (`-p`, `-t`,
//! or a cgroup by `--cgroup`, `--unit`, `--container`), and, for those that
//! trace, how to attach (`--attach`). Defined once here and flattened into
//! each subcommand's options; with the selection they make (`Threads`) and
//! how the programs' filter is told it.

use clap::Args;

use topwaits_common::limits;

use super::{AttachMode, ConfigError};
use crate::settings::*;

/// `-p`, `-t`, and the cgroup options.
#[derive(Args, Debug, Clone, Default)]
pub struct TargetArgs {
    /// Only these processes (comma-separated PIDs).
    #[arg(short = 'p', long = "pid", value_name = "PID", value_hint = clap::ValueHint::Other, value_delimiter = ',', num_args = 1,
          conflicts_with = "tid")]
    pub pid: Vec<u32>,

    /// Only these threads (comma-separated TIDs).
    #[arg(short = 't', long = "tid", value_name = "TID", value_hint = clap::ValueHint::Other, value_delimiter = ',', num_args = 1)]
    pub tid: Vec<u32>,

    /// Only the threads in this cgroup and the cgroups below it, including those
    /// that join during the trace: a directory of a mounted hierarchy, or a path
    /// within one (/system.slice/nginx.service), unified hierarchy first.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["pid", "tid", "unit", "container"])]
    pub cgroup: Option<String>,

    /// Only the threads of this systemd unit (nginx, or nginx.service), found by
    /// its cgroup.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["pid", "tid", "container"])]
    pub unit: Option<String>,

    /// Only the threads of this container (docker, containerd, CRI-O, podman),
    /// by its ID or a unique prefix of it, as `docker ps` or `crictl ps` show it
    /// (or Kubernetes, as containerd://ID).
    #[arg(long, value_name = "ID", conflicts_with_all = ["pid", "tid"])]
    pub container: Option<String>,
}

impl TargetArgs {
    /// The threads named, or `otherwise` when no option is given. A cgroup is
    /// found now, so that a wrong one is an error before anything loads.
    pub fn threads(self, otherwise: Threads) -> Result<Threads, ConfigError> {
        use crate::sys::cgroup;
        let found = match (&self.cgroup, &self.unit, &self.container) {
            (Some(p), _, _) => {
                Some((cgroup::by_path(p, &cgroup::mounts()?)?, "cgroup".to_string()))
            }
            (_, Some(u), _) => Some((
                cgroup::by_unit(u, &cgroup::mounts()?)?,
                format!("unit {}", cgroup::unit_name(u)),
            )),
            (_, _, Some(c)) => {
                let cg = cgroup::by_container(c, &cgroup::mounts()?)?;
                let id = cg
                    .dir
                    .file_name()
                    .and_then(|f| cgroup::container_id_of(f.to_str()?))
                    .map_or_else(|| c.clone(), str::to_string);
                Some((cg, format!("container {}", &id[..12.min(id.len())])))
            }
            _ => None,
        };
        match found {
            Some((cg, named)) => Ok(Threads::Cgroup(Box::new(cg), named)),
            None => pid_or_tid(self.pid, self.tid, otherwise),
        }
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

/// The selection of `-p`/`-t`, else `otherwise` (every thread, or `-u`/`-k`).
pub(crate) fn pid_or_tid(
    pid: Vec<u32>,
    tid: Vec<u32>,
    otherwise: Threads,
) -> Result<Threads, ConfigError> {
    Ok(if !pid.is_empty() {
        Threads::Pids(ids(pid)?)
    } else if !tid.is_empty() {
        Threads::Tids(ids(tid)?)
    } else {
        otherwise
    })
}

/// Sorted, deduplicated, checked ids of -p/-t.
pub(crate) fn ids(mut v: Vec<u32>) -> Result<Vec<u32>, ConfigError> {
    v.sort_unstable();
    v.dedup();
    if v.len() > limits::MAX_FILTER_IDS as usize {
        return Err(ConfigError::TooManyIds(v.len()));
    }
    if v.contains(&0) {
        return Err(ConfigError::ZeroId);
    }
    Ok(v)
}
