//! How a trace is shown, shared by a trace and by `topwaits report`: the format
//! on stdout (top view, folded, JSON) and the files written beside it.

use std::path::PathBuf;

use super::{By, ConfigError, Output, ValueKind, DEFAULT_TOP};
use crate::settings::*;

/// The same options for a trace and for `topwaits report`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ViewArgs {
    /// Print folded stacks, one line per record, for flamegraph.pl or inferno.
    #[arg(short = 'f', long, conflicts_with = "json")]
    pub folded: bool,
    /// Put a "-" frame between user and kernel frames.
    #[arg(short = 'd', long)]
    pub delimited: bool,
    /// Print one JSON document (schema in topwaits(1) and docs/JSON.md).
    #[arg(long)]
    pub json: bool,
    /// Show the N records with the longest waits (0 = all). Default: 20 in the top view,
    /// all in JSON.
    #[arg(short = 'n', long, value_name = "N")]
    pub top: Option<usize>,
    /// The value of each folded line and flame-graph width: total wait (µs, the
    /// default), longest wait (µs) or count. Applies to -f and --svg.
    #[arg(long, value_enum)]
    pub value: Option<ValueKind>,
    /// What one record of the top view and JSON stands for: a thread (the default),
    /// the threads of a process with the same stacks (process), every thread
    /// of that name (comm), or every thread in a cgroup, a container's or a
    /// unit's (cgroup). Folded lines are per comm, as bcc prints them.
    #[arg(long, value_enum, value_name = "WHAT", conflicts_with = "folded")]
    pub by: Option<By>,
    /// Also write an interactive flame graph (SVG): off-CPU in blue, or with -w an
    /// off-wake graph with the wakers in aqua above a grey divider.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Also write a timeline (SVG) of the longest waits (as many as -n, default 20):
    /// one row per thread, bars at their wall-clock times.
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
    /// Also write a pprof profile (gzip-compressed profile.proto) for go tool pprof,
    /// Pyroscope or Parca: sample values off_cpu (ns, the default) and waits, with
    /// -w also blocked and runq (ns), with --on-cpu also on_cpu (ns) and samples;
    /// labels comm, pid, tid, max_wait (ns), state,
    /// waker; user frames with their file's mapping and build id.
    #[arg(long, value_name = "FILE")]
    pub pprof: Option<PathBuf>,

    /// Also write a Perfetto trace (ui.perfetto.dev): one track per thread, each
    /// wait of at least --events-over (default 1000 µs) a slice named by its most
    /// telling frame with its stacks, and with -w a flow arrow from its waker;
    /// with --on-cpu, each sample an instant named where the thread ran.
    #[arg(long, value_name = "FILE")]
    pub perfetto: Option<PathBuf>,
    /// Put what each wait was for (mutex 0x…, disk vda, socket …, sleep, run
    /// queue, …) as the root frame of folded lines and of the --svg flame graph.
    #[arg(long = "what", id = "what_root")]
    pub what: bool,
    /// Put each record's cgroup ([cgroup:/system.slice/…]) as the root frame of
    /// folded lines and of the --svg flame graph, and label pprof samples with
    /// it. The default when tracing --cgroup, --unit or --container.
    #[arg(long, overrides_with = "no_cgroup_frames")]
    pub cgroup_frames: bool,
    /// Leave the cgroup out of folded lines, the flame graph and pprof, even
    /// when tracing a cgroup, unit or container.
    #[arg(long, overrides_with = "cgroup_frames")]
    pub no_cgroup_frames: bool,
    /// Read a recording only up to this size in MiB, compressed or expanded
    /// (default 1024): a larger one, or one that expands past it (a gzip bomb),
    /// is refused.
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_record_size: Option<u64>,
}

impl ViewArgs {
    /// Checks the options against each other.
    pub fn config(self) -> Result<ViewConfig, ConfigError> {
        if self.value.is_some() && !self.folded && self.svg.is_none() {
            return Err(ConfigError::ValueWithoutGraph);
        }
        let value = self.value.unwrap_or(ValueKind::Total);
        let cgroup_frames = match (self.cgroup_frames, self.no_cgroup_frames) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        };
        let output = if self.folded {
            Output::Folded {
                delimited: self.delimited,
                value,
                what: self.what,
                cgroup: cgroup_frames,
            }
        } else if self.json {
            Output::Json { limit: self.top.unwrap_or(0) }
        } else {
            Output::Top { limit: self.top.unwrap_or(DEFAULT_TOP), delimited: self.delimited }
        };
        Ok(ViewConfig {
            output,
            value,
            by: self.by.unwrap_or_default(),
            svg: self.svg,
            timeline: self.timeline,
            timeline_limit: self.top.filter(|&n| n > 0).unwrap_or(DEFAULT_TOP),
            pprof: self.pprof,
            perfetto: self.perfetto,
            what: self.what,
            cgroup_frames,
            max_record_mib: self.max_record_size.unwrap_or(DEFAULT_MAX_RECORD_MIB),
        })
    }
}
