//! The validated options of the subcommands other than a trace: threads,
//! blocked, report, why, locks, diff and serve.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{filter_kind, AttachMode, By, Config, Threads, Unwind, ViewConfig};
use crate::util::http::Url;

/// Validated options of `topwaits blocked`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedConfig {
    pub threads: Threads,
    /// List threads in interruptible sleep too (always with -p/-t).
    pub sleeping: bool,
    pub json: bool,
    pub dot: Option<PathBuf>,
    /// Where built unwind tables are kept between runs (None: `--no-cache`).
    pub cache: Option<PathBuf>,
}

/// The thresholds of `--fail-if-*`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Gate {
    /// The whole waiting grew by more than this percentage.
    pub grows_pct: Option<f64>,
    /// One stack's waiting grew by more than this.
    pub stack_grows_ns: Option<u64>,
    /// A stack not seen before waited longer than this in all.
    pub new_ns: Option<u64>,
}

impl Gate {
    pub fn is_set(&self) -> bool {
        self.grows_pct.is_some() || self.stack_grows_ns.is_some() || self.new_ns.is_some()
    }
}

/// How `diff` prints the change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffOutput {
    Top { limit: usize },
    Json { limit: usize },
    Folded,
}

/// Validated options of `topwaits diff`.
#[derive(Clone, Debug, PartialEq)]
pub struct DiffConfig {
    pub before: PathBuf,
    pub after: PathBuf,
    pub output: DiffOutput,
    pub svg: Option<PathBuf>,
    pub normalise: bool,
    pub gate: Gate,
    pub max_record_mib: u64,
}

/// What `topwaits locks` ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocksConfig {
    /// A live trace.
    Trace(Box<Config>),
    /// A recorded one, shown as `view` says, waiters and holders grouped as
    /// `by` says.
    File { file: PathBuf, by: By, view: ViewConfig },
}

/// Validated options of `topwaits report`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportConfig {
    pub file: PathBuf,
    pub wakeups: bool,
    pub view: ViewConfig,
}

/// Where OTLP profiles go, and how often.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpConfig {
    pub url: Url,
    pub interval: Duration,
    pub queue: usize,
}

/// Validated options of `topwaits serve`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeConfig {
    /// The trace: its target, filters and maps; drained every `step`.
    pub trace: Box<Config>,
    pub listen: SocketAddr,
    pub otlp: Option<OtlpConfig>,
    pub max_series: usize,
    pub step: Duration,
}

/// Validated options of `topwaits threads`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadsConfig {
    pub threads: Threads,
    pub json: bool,
    pub rt_app: Option<PathBuf>,
    pub rt_app_duration: Option<u32>,
    pub rt_app_wanted: bool,
    pub rt_app_calibration: Calibration,
    pub attach: AttachMode,
    pub duration: Option<Duration>,
    /// `--on-cpu`: samples a second of each thread's running stacks.
    pub on_cpu: Option<u32>,
    pub unwind: Unwind,
    /// Where built unwind tables are kept between runs (None: `--no-cache`).
    pub cache: Option<PathBuf>,
    /// List the goroutines of Go programs (`--no-goroutines` turns it off).
    pub goroutines: bool,
    /// `--max-entries`: rows for goroutine waits, and for on-CPU samples.
    pub max_entries: u32,
}

/// How rt-app turns `run` durations into busy-loop counts (its global `calibration`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Calibration {
    /// Measure the ns per loop on this CPU when rt-app starts.
    Cpu(u32),
    /// Use this many ns per loop.
    NsPerLoop(u32),
}

impl ThreadsConfig {
    /// The settings global for the programs, without the BTF offsets.
    pub fn settings(&self) -> topwaits_common::Settings {
        let mut s = topwaits_common::Settings::defaults();
        s.thread_filter = filter_kind(&self.threads);
        s.cgroup = super::cgroup_filter(&self.threads);
        s.threads = 1;
        s.stacks = 0;
        s.self_tgid = std::process::id();
        if self.goroutines {
            s.go_merge_rows = (self.max_entries / 2).max(1);
            // A Go program exec'd during the window is hooked at its exec.
            s.events = 1;
        }
        if self.on_cpu.is_some() {
            // The sampler takes both stacks; the profile's hooks take none. The
            // process events keep the maps of processes that exit, and tell
            // the table loader of new ones.
            s.on_cpu = topwaits_common::on_cpu::COUNT;
            s.stacks = topwaits_common::CAPTURE_KERNEL | topwaits_common::CAPTURE_USER;
            s.events = 1;
            s.cfi = u32::from(cfg!(target_arch = "x86_64") && self.unwind == Unwind::Cfi);
        }
        s
    }
}

/// What `topwaits why` explains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WhyConfig {
    /// A live trace.
    Trace(Box<Config>),
    /// A recorded one, shown as `view` says, causes grouped as `by` says.
    File { file: PathBuf, for_tid: Option<u32>, by: By, view: ViewConfig },
}

impl WhyConfig {
    /// How long a live trace runs (None: until Ctrl-C).
    pub fn duration(&self) -> Option<Duration> {
        match self {
            WhyConfig::Trace(c) => c.duration,
            WhyConfig::File { .. } => None,
        }
    }
}
