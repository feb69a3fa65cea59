//! What a command was asked to do, as plain types free of the command line's
//! parser: a trace's `Config`, its `View` and `Output`, the options of every
//! subcommand, and the values they take. cli/ parses and checks the command
//! line into these; every other module reads them from here.

use std::path::PathBuf;
use std::time::Duration;

mod commands;
mod target;
mod values;
mod view;

pub use commands::*;
pub use target::{cgroup_filter, filter_kind, Threads};
pub use values::{AttachMode, By, ValueKind};
pub use view::{ViewConfig, DEFAULT_MAX_RECORD_MIB};

/// Which stacks to capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stacks {
    Both,
    UserOnly,
    KernelOnly,
}

/// What to print.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    Top {
        limit: usize,
        delimited: bool,
    },
    /// `cgroup`: each record's cgroup as the root frame, as asked (else as
    /// the trace's target decides).
    Folded {
        delimited: bool,
        value: ValueKind,
        what: bool,
        cgroup: Option<bool>,
    },
    Json {
        limit: usize,
    },
}

/// Which aggregation the report shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// Per target stack (and waker chain with `-w`).
    OffCpu,
    /// Per waker stack and target comm (`--wakeups`).
    Wakeups,
    /// `topwaits why`: causes ranked, or one thread's critical path; causes
    /// alike but for their thread grouped as `by` says.
    Why { for_tid: Option<u32>, by: By },
    /// `topwaits locks`: the locks that made threads wait, ranked; their
    /// waiters and holders grouped as `by` says.
    Locks { by: By },
}

/// Validated options; nothing loads before this exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub view: View,
    /// Capture wakers.
    pub waker: bool,
    /// Waker hops to keep.
    pub chain: u32,
    pub threads: Threads,
    pub stacks: Stacks,
    pub min_us: u64,
    pub max_us: u64,
    pub state: Option<u32>,
    pub stack_storage_size: u32,
    pub max_entries: u32,
    /// The format on stdout and the files beside it.
    pub shown: ViewConfig,
    pub attach: AttachMode,
    pub duration: Option<Duration>,
    /// `--events-over`: waits this long or longer are also sent one by one.
    pub events_over_us: Option<u64>,
    /// `topwaits record -o FILE`: the record file.
    pub record: Option<PathBuf>,
    /// Print the view on stdout (a record prints one only when a format is asked).
    pub print: bool,
    pub interval: Option<Duration>,
    /// Report waits still in progress at the end.
    pub open_waits: bool,
    /// Take words at the user stack pointer for the callers of frameless leaves.
    pub leaf_callers: bool,
    /// How user stacks are walked.
    pub unwind: Unwind,
    /// Record what each wait was for (`--no-labels` turns it off).
    pub labels: bool,
    /// Trace the goroutines of Go programs (`--no-goroutines` turns it off).
    pub goroutines: bool,
    /// Where built unwind tables are kept between runs (None: `--no-cache`).
    pub cache: Option<PathBuf>,
    /// `--on-cpu`: sample running threads at this rate (Hz).
    pub on_cpu: Option<u32>,
    /// `--no-on-cpu`: no samples, not even for `why`.
    pub no_on_cpu: bool,
    /// Each on-CPU sample is also sent with its time: for the Perfetto trace's
    /// instants, and for `why`, which shows what a critical path's running
    /// stretches ran.
    pub timed_samples: bool,
}

/// The rate of `--on-cpu` given without one: prime against the kernel's timer
/// tick, so that samples do not lock onto work that follows it.
pub const DEFAULT_ON_CPU_HZ: u32 = 99;

/// How user stacks are walked (`--unwind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unwind {
    /// From `.eh_frame` unwind tables, with frame pointers where a file has none.
    Cfi,
    /// By frame pointers only.
    Fp,
}

/// Default number of records in the top view.
pub const DEFAULT_TOP: usize = 20;

impl Config {
    /// Human description of what is traced, for headers and titles.
    pub fn target(&self) -> String {
        let mut s = self.threads.describe();
        if self.min_us > 1 || self.max_us != u64::MAX {
            s.push_str(&format!(", waits {}..", self.min_us));
            if self.max_us != u64::MAX {
                s.push_str(&self.max_us.to_string());
            }
            s.push_str(" us");
        }
        if let Some(m) = self.state {
            s.push_str(&format!(", state {m:#x}"));
        }
        match self.stacks {
            Stacks::UserOnly => s.push_str(", user stacks"),
            Stacks::KernelOnly => s.push_str(", kernel stacks"),
            Stacks::Both => {}
        }
        s
    }

    /// Whether the kernel-side filters need `task_struct.flags`.
    pub fn needs_task_flags(&self) -> bool {
        matches!(self.threads, Threads::UserOnly | Threads::KernelOnly)
    }

    /// The settings global for the programs, without the BTF offsets.
    pub fn settings(&self) -> topwaits_common::Settings {
        use topwaits_common::{thread_kind, CAPTURE_KERNEL, CAPTURE_USER};
        let mut s = topwaits_common::Settings::defaults();
        s.min_us = self.min_us;
        s.max_us = self.max_us;
        s.thread_filter = filter_kind(&self.threads);
        s.cgroup = cgroup_filter(&self.threads);
        s.thread_kind = match self.threads {
            Threads::UserOnly => thread_kind::USER,
            Threads::KernelOnly => thread_kind::KERNEL,
            _ => thread_kind::ALL,
        };
        s.stacks = match self.stacks {
            Stacks::Both => CAPTURE_KERNEL | CAPTURE_USER,
            Stacks::UserOnly => CAPTURE_USER,
            Stacks::KernelOnly => CAPTURE_KERNEL,
        };
        if let Some(mask) = self.state {
            s.state_filter = 1;
            s.state_mask = mask;
        }
        s.waker = u32::from(self.waker);
        s.chain = self.chain;
        // User stacks of processes that exit before the end need their maps kept.
        s.events = u32::from(self.stacks != Stacks::KernelOnly);
        s.self_tgid = std::process::id();
        s.leaf_words = if self.leaf_callers { topwaits_common::LEAF_WORDS } else { 0 };
        // The walker knows x86-64's registers and signal frames only.
        s.cfi = u32::from(
            cfg!(target_arch = "x86_64")
                && self.unwind == Unwind::Cfi
                && self.stacks != Stacks::KernelOnly,
        );
        s.events_over_us = self.events_over_us.map_or(0, |us| us.min(u32::MAX as u64) as u32);
        // Rows held by their threads are drained once, after detaching: not with
        // intervals, which drain and clear the aggregate while tracing.
        s.hold_rows = u32::from(self.interval.is_none() && !self.waker);
        s.labels = u32::from(self.labels);
        // Half the aggregate stays for goroutine rows kept by stack.
        s.go_merge_rows = (self.max_entries / 2).max(1);
        if self.on_cpu.is_some() {
            use topwaits_common::on_cpu;
            let timed = self.timed_samples || self.shown.perfetto.is_some();
            s.on_cpu = on_cpu::COUNT | if timed { on_cpu::EVENTS } else { 0 };
        }
        s
    }
}
