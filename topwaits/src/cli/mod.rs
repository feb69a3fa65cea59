//! Command-line options (clap derive, doc comments are the help text) and their
//! validation into a [`Config`], with every cross-option check done here.

use std::time::Duration;

use clap::{Parser, Subcommand};

mod blocked;
mod cache;
mod diff;
#[cfg(test)]
mod docs_check;
pub mod generate;
mod locks;
mod record;
mod serve;
mod target;
mod threads;
mod values;
pub mod view;
mod why;

pub use blocked::BlockedArgs;
pub use cache::CacheArgs;
pub use diff::DiffArgs;
pub use locks::LocksArgs;
pub use record::{RecordArgs, ReportArgs};
pub use serve::ServeArgs;
pub use target::{AttachArgs, TargetArgs};
use thiserror::Error;
pub use threads::ThreadsArgs;
pub(crate) use values::parse_duration;
use values::{parse_mask, OpenWaits};
pub use view::ViewArgs;
pub use why::WhyArgs;

use crate::settings::*;
use topwaits_common::limits;

const EXAMPLES: &str = "\
Examples:
  topwaits 10                     all threads for 10 s, longest waits first
  topwaits -p 1234 10             the threads of process 1234
  topwaits -t 1240,1241 -m 1000   two threads, waits of 1 ms or more, until Ctrl-C
  topwaits -f 10 | flamegraph.pl --color=io --countname=us > offcpu.svg
  topwaits --json -n 50 10        the 50 longest-waiting stacks as JSON
  topwaits --state 2 10           uninterruptible (D state) waits only
  topwaits -w -p 1234 10          who woke process 1234's threads, blocked vs run-queue time
  topwaits --chain 3 -f 10        off-wake stacks with the waker's wakers, 3 hops deep
  topwaits --wakeups -f 10        wakeup view: blocked time by waker stack (like wakeuptime)";

/// `--version`: the release, and the commit the binary was built from.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("TOPWAITS_COMMIT"), ")");

/// Where did threads wait, for how long, at most when? An off-CPU profiler that keeps,
/// per unique stack, the total wait, the count, the longest single wait and when it ended.
#[derive(Parser, Debug, Clone)]
#[command(name = "topwaits", version = VERSION, after_help = EXAMPLES, max_term_width = 100, args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub trace: TraceArgs,
}

/// The validated options of the subcommand asked for.
#[derive(Debug)]
pub enum Validated {
    /// A trace (`topwaits`, `topwaits record`).
    Trace(Box<Config>),
    Threads(ThreadsConfig),
    Blocked(BlockedConfig),
    Report(ReportConfig),
    Why(WhyConfig),
    Locks(LocksConfig),
    Diff(DiffConfig),
    Serve(ServeConfig),
    /// `topwaits generate DIR`: completions and man pages.
    Generate(std::path::PathBuf),
}

impl Args {
    /// Checks the options against each other, before anything runs.
    pub fn validate(self) -> Result<Validated, ConfigError> {
        Ok(match self.command {
            Some(Command::Threads(t)) => Validated::Threads(ThreadsConfig::from_args(t)?),
            Some(Command::Blocked(b)) => Validated::Blocked(BlockedConfig::from_args(b)?),
            Some(Command::Record(r)) => Validated::Trace(Box::new(Config::for_record(r)?)),
            Some(Command::Report(r)) => Validated::Report(ReportConfig::from_args(r)?),
            Some(Command::Why(w)) => Validated::Why(WhyConfig::from_args(w)?),
            Some(Command::Locks(l)) => Validated::Locks(LocksConfig::from_args(l)?),
            Some(Command::Diff(d)) => Validated::Diff(DiffConfig::from_args(d)?),
            Some(Command::Serve(s)) => Validated::Serve(ServeConfig::from_args(s)?),
            Some(Command::Generate { dir }) => Validated::Generate(dir),
            None => Validated::Trace(Box::new(Config::from_args(self.trace)?)),
        })
    }
}

/// What to trace and how: the options of a trace, shared by `topwaits` and
/// `topwaits record`.
#[derive(clap::Args, Debug, Clone)]
pub struct TraceArgs {
    /// Also capture who woke each wait (off-wake stacks), and split each wait into
    /// blocked time (until the wakeup) and run-queue time (after it).
    #[arg(short = 'w', long)]
    pub waker: bool,

    /// Follow wakers back N hops: the waker's own waker, and so on (1-4; implies -w).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=topwaits_common::MAX_CHAIN as i64))]
    pub chain: u32,

    /// Show the wakeup view instead (like wakeuptime): time from block to wakeup,
    /// by waker stack and target; implies -w.
    #[arg(long)]
    pub wakeups: bool,

    #[command(flatten)]
    pub target: TargetArgs,

    /// Trace user threads only (no kernel threads).
    #[arg(short = 'u', long, conflicts_with_all = ["kernel_threads_only", "pid", "tid", "cgroup", "unit", "container"])]
    pub user_threads_only: bool,

    /// Trace kernel threads only (no user threads).
    #[arg(short = 'k', long, conflicts_with_all = ["pid", "tid", "cgroup", "unit", "container"])]
    pub kernel_threads_only: bool,

    /// Show user-space stacks only (no kernel stacks).
    #[arg(short = 'U', long, conflicts_with = "kernel_stacks_only")]
    pub user_stacks_only: bool,

    /// Show kernel stacks only (no user-space stacks).
    #[arg(short = 'K', long)]
    pub kernel_stacks_only: bool,

    /// Record only waits of at least this many microseconds.
    #[arg(short = 'm', long, value_name = "USECS", default_value_t = 1)]
    pub min_block_time: u64,

    /// Record only waits of at most this many microseconds.
    #[arg(short = 'M', long, value_name = "USECS", default_value_t = u64::MAX, hide_default_value = true)]
    pub max_block_time: u64,

    /// Record only waits whose thread state at switch-out matches this bit mask
    /// (1 = interruptible sleep, 2 = uninterruptible/D, as load average counts it: not
    /// idle kernel threads in TASK_IDLE); 0 means preempted while runnable.
    /// Accepts decimal or 0x-prefixed hex.
    #[arg(long, value_name = "MASK", value_parser = parse_mask)]
    pub state: Option<u32>,

    /// Number of unique stack traces the kernel can store.
    #[arg(long, value_name = "N", default_value_t = limits::DEFAULT_STACK_STORAGE,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub stack_storage_size: u32,

    /// Number of unique (thread, stack) records the kernel aggregate can hold (the
    /// row each thread is still adding to at the end is kept apart, on top); with
    /// --waker, also the number of distinct waker chains kept. A trace with more is
    /// emptied into topwaits whenever the aggregate is half full.
    #[arg(long, value_name = "N", default_value_t = limits::DEFAULT_MAX_ENTRIES,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_entries: u32,

    /// Recover the caller of a leaf function that keeps no frame pointer (libc's
    /// syscall wrappers, whose callers frame-pointer walks skip): take a few words at
    /// the user stack pointer with each user stack and insert the one that checks
    /// out as a return address. Costs more per switch; see the README.
    #[arg(long, conflicts_with = "kernel_stacks_only")]
    pub leaf_callers: bool,

    /// How user stacks are walked: from the binaries' unwind tables (cfi, the
    /// default unless --leaf-callers: whole stacks through code built without
    /// frame pointers, as most distributions' binaries and libc are), or by frame
    /// pointers only (fp: cheaper, and stacks end at the first frame without one).
    #[arg(long, value_name = "HOW", value_enum)]
    pub unwind: Option<Unwind>,

    /// Accepted for scripts written for topwaits 0.2: every trace now begins
    /// with the unwind table walker in place.
    #[arg(long, hide = true)]
    pub wait_for_walker: bool,

    /// Do not record what each wait was for (its syscall, descriptor, lock, sleep
    /// or preemption): waits are then told apart by their stacks alone, as before
    /// labels, at a little less cost per switch.
    #[arg(long)]
    pub no_labels: bool,

    /// Do not trace goroutines. By default, a traced Go program's goroutine
    /// waits (a sync.Mutex, a channel, a sleep, network I/O) are recorded from
    /// a uprobe on its runtime (a few µs per goroutine switch), with -w their
    /// waker goroutines, and its threads' idle in the Go scheduler is left out.
    #[arg(long)]
    pub no_goroutines: bool,

    /// Also sample each traced thread's stacks while it runs, HZ times a second
    /// (default 99), so that its whole time is accounted for: where it ran
    /// (samples scaled to time) beside where it waited.
    #[arg(long, value_name = "HZ", num_args = 0..=1, require_equals = true, default_missing_value = "99",
          value_parser = clap::value_parser!(u32).range(1..=1000), conflicts_with_all = ["wakeups", "no_on_cpu"])]
    pub on_cpu: Option<u32>,

    /// Take no on-CPU samples (`why`, `locks` and `record --why` take them by
    /// default, to show what a running cause ran).
    #[arg(long)]
    pub no_on_cpu: bool,

    #[command(flatten)]
    pub cache: CacheArgs,

    /// Print one report per interval of SECS seconds, clearing the kernel aggregates
    /// after each, until the duration ends or Ctrl-C.
    #[arg(short = 'i', long, value_name = "SECS", value_parser = parse_duration)]
    pub interval: Option<Duration>,

    #[command(flatten)]
    pub attach: AttachArgs,

    /// Include waits still in progress when the trace ends, with their time so far
    /// (yes, the default), or only waits that ended during the trace, as bcc's
    /// offcputime reports (no).
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = OpenWaits::Yes)]
    pub open_waits: OpenWaits,

    /// Also send each wait of at least USECS microseconds to user space as an event
    /// (start, end, thread, state, stacks, and with -w its waker), for --perfetto
    /// and JSON "events"; shorter waits stay aggregated in the kernel.
    #[arg(long, value_name = "USECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub events_over: Option<u64>,

    /// Seconds to trace (decimals allowed). Without it, trace until Ctrl-C.
    #[arg(value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    #[command(flatten)]
    pub view: ViewArgs,
}

/// The first line of a clap error (`error: ...`), without the usage block that
/// follows it, with clap's tips (the option meant by a misspelt one), plus the
/// pointer to `--help`.
pub fn one_line(rendered: &str) -> String {
    let tips: Vec<&str> = rendered.lines().filter_map(|l| l.trim().strip_prefix("tip: ")).collect();
    let mut lines = rendered.lines().skip_while(|l| l.trim().is_empty());
    let mut line = lines.next().unwrap_or("error: invalid arguments").trim_end().to_string();
    // "the following required arguments were not provided:" lists them on the
    // indented lines that follow: name them on the same line.
    if line.ends_with(':') {
        let listed: Vec<&str> = lines
            .take_while(|l| l.starts_with(' ') && !l.trim().is_empty())
            .map(str::trim)
            .collect();
        if !listed.is_empty() {
            line = format!("{} {}", line, listed.join(", "));
        }
    }
    for tip in tips {
        line = format!("{line}; {tip}");
    }
    format!("{line} (see --help)")
}

/// Subcommands.
#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Per-thread scheduling profile (run, run-queue, sleep and I/O time) with futex
    /// wake dependencies, optionally written as an rt-app file that reproduces it.
    #[command(after_help = threads::THREADS_EXAMPLES)]
    Threads(ThreadsArgs),
    /// Snapshot of the threads blocked right now: how long, where (kernel and user
    /// stacks), on what (syscall, futex, pipe), who holds the lock, wait-for chains and
    /// deadlocks. Read-only and instant: no tracing, no duration, the target never stops.
    #[command(after_help = blocked::BLOCKED_EXAMPLES)]
    Blocked(BlockedArgs),
    /// Trace as topwaits does and save the symbolized trace to a file (-o), to show
    /// later with `topwaits report`, anywhere and without root. Frames are named
    /// now, so processes that exit before the report keep their names.
    #[command(after_help = record::RECORD_EXAMPLES)]
    Record(RecordArgs),
    /// Show a trace saved by `topwaits record`: every view and file of a trace (top,
    /// folded, JSON, --svg, --timeline, --pprof), without root.
    #[command(after_help = record::REPORT_EXAMPLES)]
    Report(ReportArgs),
    /// Which waits matter: every wait of the traced threads followed to what it
    /// waited behind (the waker, and while the waker itself waited, its waker, and
    /// so on), and the causes ranked by the waiting they explain. Threads that woke
    /// no other are idle and listed apart. With --for, one thread's critical path.
    #[command(after_help = why::WHY_EXAMPLES)]
    Why(WhyArgs),
    /// The locks that made threads wait, user mutexes and kernel locks alike, ranked:
    /// for each, its contended waits (count, total, max), the waiters' stacks, the
    /// holders (the stacks where they released it) ranked by the waiting they
    /// ended, and what the holders were waiting on while holding it.
    #[command(after_help = locks::LOCKS_EXAMPLES)]
    Locks(LocksArgs),
    /// Compare two traces (record files or --json outputs): per stack, matched by
    /// its frames' names, the change in total, count and max, largest first, with
    /// what is new and what vanished. With --fail-if-*, a gate for CI: exit 3
    /// when a threshold is crossed.
    #[command(after_help = diff::DIFF_EXAMPLES)]
    Diff(DiffArgs),
    /// Trace until stopped and serve what waited: Prometheus metrics (/metrics),
    /// pprof profiles of the next N seconds (/debug/pprof/offcpu?seconds=N), and
    /// with --otlp-endpoint, OTLP profiles pushed every interval.
    #[command(after_help = serve::SERVE_EXAMPLES)]
    Serve(ServeArgs),
    /// Write shell completions (DIR/completions) and man pages (DIR/man), made
    /// from these options, for packagers.
    #[command(hide = true)]
    Generate {
        /// The directory to write into.
        dir: std::path::PathBuf,
    },
}

/// Option errors that clap cannot see.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("--min-block-time {min} is above --max-block-time {max}")]
    MinAboveMax { min: u64, max: u64 },
    #[error("too many ids in -p/-t: {0} (at most {max})", max = limits::MAX_FILTER_IDS)]
    TooManyIds(usize),
    #[error("-p/-t ids must be positive, got 0")]
    ZeroId,
    #[error(transparent)]
    Cgroup(#[from] crate::sys::cgroup::CgroupError),
    #[error("topwaits threads cannot use --attach kprobe; use tp_btf or raw_tp")]
    ThreadsKprobe,
    #[error("--value applies to -f and --svg")]
    ValueWithoutGraph,
    #[error("{0} writes one file for the whole trace: not with -i/--interval")]
    FileWithInterval(&'static str),
    #[error("--max-record-size bounds a recording read (report, why FILE, locks FILE, diff): not a trace")]
    RecordSizeWithoutFile,
    #[error("{0} draws waits, not wakeups: not with --wakeups")]
    FileWithWakeups(&'static str),
    #[error("--by cgroup groups waits, not wakeups: not with --wakeups")]
    ByCgroupWakeups,
    #[error("--interval {:.1} s is longer than the duration {:.1} s", .interval.as_secs_f64(), .duration.as_secs_f64())]
    IntervalTooLong { interval: Duration, duration: Duration },
    #[error("--leaf-callers works on frame-pointer walks: not with --unwind cfi, which finds a leaf's caller from its unwind table")]
    LeafCallersWithCfi,
    #[error("diff: {0}")]
    Diff(String),
    #[error("why: {0}")]
    Why(String),
    #[error("locks: {0}")]
    Locks(String),
    #[error("serve: {0}")]
    Serve(String),
}

impl Config {
    /// Checks options against each other.
    pub fn from_args(a: TraceArgs) -> Result<Self, ConfigError> {
        let v = a.view;
        if v.max_record_size.is_some() {
            return Err(ConfigError::RecordSizeWithoutFile);
        }
        if a.min_block_time > a.max_block_time {
            return Err(ConfigError::MinAboveMax { min: a.min_block_time, max: a.max_block_time });
        }
        let otherwise = if a.user_threads_only {
            Threads::UserOnly
        } else if a.kernel_threads_only {
            Threads::KernelOnly
        } else {
            Threads::All
        };
        let threads = a.target.threads(otherwise)?;
        let stacks = match (a.user_stacks_only, a.kernel_stacks_only) {
            (true, _) => Stacks::UserOnly,
            (_, true) => Stacks::KernelOnly,
            _ => Stacks::Both,
        };
        let v = v.config()?;
        let files = [
            ("--events-over", a.events_over.is_some()),
            ("--svg", v.svg.is_some()),
            ("--timeline", v.timeline.is_some()),
            ("--pprof", v.pprof.is_some()),
            ("--perfetto", v.perfetto.is_some()),
        ];
        if let Some((name, _)) = files.iter().find(|f| f.1 && a.interval.is_some()) {
            return Err(ConfigError::FileWithInterval(name));
        }
        if let Some((name, _)) = files[2..].iter().find(|f| f.1 && a.wakeups) {
            return Err(ConfigError::FileWithWakeups(name));
        }
        if a.wakeups && v.by == By::Cgroup {
            return Err(ConfigError::ByCgroupWakeups);
        }
        if let (Some(i), Some(d)) = (a.interval, a.duration) {
            if i > d {
                return Err(ConfigError::IntervalTooLong { interval: i, duration: d });
            }
        }
        Ok(Config {
            view: if a.wakeups { View::Wakeups } else { View::OffCpu },
            waker: a.waker || a.wakeups || a.chain > 1,
            chain: a.chain,
            threads,
            stacks,
            min_us: a.min_block_time,
            max_us: a.max_block_time,
            state: a.state,
            stack_storage_size: a.stack_storage_size,
            max_entries: a.max_entries,
            attach: a.attach.attach,
            duration: a.duration,
            // --perfetto draws the long waits: 1 ms and more unless told.
            events_over_us: a.events_over.or(v.perfetto.is_some().then_some(1000)),
            shown: v,
            record: None,
            print: true,
            interval: a.interval,
            open_waits: a.open_waits == OpenWaits::Yes,
            leaf_callers: a.leaf_callers,
            unwind: match (a.unwind, a.leaf_callers) {
                (Some(Unwind::Cfi), true) => return Err(ConfigError::LeafCallersWithCfi),
                (Some(u), _) => u,
                (None, true) => Unwind::Fp,
                (None, false) => Unwind::Cfi,
            },
            labels: !a.no_labels,
            goroutines: !a.no_goroutines,
            cache: a.cache.dir(),
            on_cpu: a.on_cpu,
            no_on_cpu: a.no_on_cpu,
            timed_samples: false,
        })
    }

    /// The options of `topwaits record`: a trace that also writes the record file.
    pub fn for_record(r: RecordArgs) -> Result<Self, ConfigError> {
        let interval = r.trace.interval.is_some();
        let v = &r.trace.view;
        let print = v.folded || v.json || v.top.is_some();
        let mut c = Config::from_args(r.trace)?;
        if interval {
            return Err(ConfigError::FileWithInterval("record"));
        }
        c.record = Some(r.output);
        c.print = print;
        if r.why {
            why::for_why(&mut c);
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, String> {
        let a = Args::try_parse_from(std::iter::once("topwaits").chain(args.iter().copied()))
            .map_err(|e| e.kind().to_string())?;
        Config::from_args(a.trace).map_err(|e| e.to_string())
    }

    #[test]
    fn version_names_the_release_and_the_commit() {
        let text = Args::try_parse_from(["topwaits", "--version"]).unwrap_err().to_string();
        let want = format!("topwaits {} (", env!("CARGO_PKG_VERSION"));
        assert!(text.starts_with(&want) && text.trim_end().ends_with(')'), "{text}");
        assert!(!text.contains("()"), "a commit or `unknown`: {text}");
    }

    #[test]
    fn defaults_trace_everything_with_both_stacks_until_ctrl_c() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.threads, Threads::All);
        assert_eq!(c.stacks, Stacks::Both);
        assert_eq!((c.min_us, c.max_us), (1, u64::MAX));
        assert_eq!(c.stack_storage_size, 16384);
        assert_eq!(c.shown.output, Output::Top { limit: DEFAULT_TOP, delimited: false });
        assert_eq!(c.duration, None);
        assert_eq!(c.target(), "all threads");
        assert!(c.open_waits, "waits still in progress are reported by default");
        assert!(!parse(&["--open-waits", "no"]).unwrap().open_waits);
        assert!(parse(&["--open-waits", "maybe"]).is_err());
        assert_eq!(c.settings().self_tgid, std::process::id(), "topwaits never records itself");
    }

    #[test]
    fn pid_lists_and_durations() {
        let c = parse(&["-p", "30,10,30", "2.5"]).unwrap();
        assert_eq!(c.threads, Threads::Pids(vec![10, 30]));
        assert_eq!(c.duration, Some(Duration::from_millis(2500)));
        assert_eq!(c.settings().thread_filter, topwaits_common::thread_filter::TGID);
        let c = parse(&["-t", "5", "-t", "6"]).unwrap();
        assert_eq!(c.threads, Threads::Tids(vec![5, 6]));
        assert_eq!(c.target(), "TID 5,6");
    }

    #[test]
    fn mutually_exclusive_options_are_rejected() {
        for bad in [
            &["-u", "-k"][..],
            &["-U", "-K"],
            &["-p", "1", "-t", "2"],
            &["-p", "1", "-u"],
            &["-f", "--json"],
            &["-f", "--by", "comm"],
        ] {
            assert_eq!(
                parse(bad).unwrap_err(),
                "an argument cannot be used with one or more of the other specified arguments",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn leaf_callers_ask_the_kernel_for_words_at_the_stack_pointer() {
        assert_eq!(parse(&[]).unwrap().settings().leaf_words, 0);
        assert_eq!(
            parse(&["--leaf-callers"]).unwrap().settings().leaf_words,
            topwaits_common::LEAF_WORDS
        );
        assert!(parse(&["--leaf-callers", "-K"]).is_err(), "no user stacks, no leaf callers");
        assert_eq!(
            parse(&["--leaf-callers"]).unwrap().unwind,
            Unwind::Fp,
            "leaf callers walk frame pointers"
        );
        assert!(parse(&["--leaf-callers", "--unwind", "cfi"]).is_err());
    }

    #[test]
    fn user_stacks_are_walked_from_unwind_tables_unless_told() {
        assert_eq!(parse(&[]).unwrap().settings().cfi, 1);
        assert_eq!(parse(&["--unwind", "fp"]).unwrap().settings().cfi, 0);
        assert_eq!(parse(&["-K"]).unwrap().settings().cfi, 0, "no user stacks, nothing to walk");
        assert!(parse(&["--unwind", "dwarf"]).is_err());
    }

    #[test]
    fn by_defaults_to_thread_and_takes_process_or_comm() {
        assert_eq!(parse(&[]).unwrap().shown.by, By::Thread);
        assert_eq!(parse(&["--by", "process", "--json"]).unwrap().shown.by, By::Process);
        assert_eq!(parse(&["--by", "comm", "--wakeups"]).unwrap().shown.by, By::Comm);
        assert_eq!(parse(&["--by", "cgroup", "--json"]).unwrap().shown.by, By::Cgroup);
        assert_eq!(
            parse(&["--by", "cgroup", "--wakeups"]).unwrap_err(),
            ConfigError::ByCgroupWakeups.to_string()
        );
        assert!(parse(&["--by", "cpu"]).is_err());
        use clap::ValueEnum as _;
        for b in By::value_variants() {
            assert_eq!(
                b.to_possible_value().map(|v| v.get_name().to_string()).as_deref(),
                Some(b.name()),
                "JSON names --by's values as the option does"
            );
        }
    }

    #[test]
    fn bad_values_are_rejected() {
        assert!(parse(&["-m", "-5"]).is_err());
        assert!(parse(&["--stack-storage-size", "0"]).is_err());
        assert!(parse(&["--max-entries", "0"]).is_err());
        assert!(parse(&["-p", "abc"]).is_err());
        assert!(parse(&["0"]).is_err());
        assert!(parse(&["-3"]).is_err());
        assert!(parse(&["nan"]).is_err());
        assert!(parse(&["--attach", "fentry"]).is_err());
        assert_eq!(parse(&["--value", "max"]).unwrap_err(), "--value applies to -f and --svg");
        assert!(parse(&["--value", "max", "--svg", "x.svg"]).is_ok());
        assert!(parse(&["-i", "1", "--svg", "x.svg"]).is_err(), "one picture per trace");
        assert_eq!(
            parse(&["-i", "5", "2"]).unwrap_err(),
            "--interval 5.0 s is longer than the duration 2.0 s"
        );
        assert_eq!(parse(&["-i", "0.5", "3"]).unwrap().interval, Some(Duration::from_millis(500)));
        assert_eq!(parse(&["-p", "0"]).unwrap_err(), "-p/-t ids must be positive, got 0");
    }

    #[test]
    fn min_above_max_is_an_error() {
        assert_eq!(
            parse(&["-m", "100", "-M", "10"]).unwrap_err(),
            "--min-block-time 100 is above --max-block-time 10"
        );
        assert!(parse(&["-m", "10", "-M", "10"]).is_ok());
    }

    #[test]
    fn state_masks_in_decimal_and_hex() {
        assert_eq!(parse(&["--state", "0"]).unwrap().settings().state_filter, 1);
        assert_eq!(parse(&["--state", "0x2"]).unwrap().state, Some(2));
        assert_eq!(parse(&["--state", "3"]).unwrap().settings().state_mask, 3);
        assert!(parse(&["--state", "two"]).is_err());
        assert_eq!(parse(&[]).unwrap().settings().state_filter, 0);
    }

    #[test]
    fn outputs_and_stack_modes_map_to_settings() {
        use topwaits_common::{CAPTURE_KERNEL, CAPTURE_USER};
        let c = parse(&["-f", "-d", "--value", "count", "-K"]).unwrap();
        assert_eq!(
            c.shown.output,
            Output::Folded { delimited: true, value: ValueKind::Count, what: false, cgroup: None }
        );
        assert_eq!(c.settings().stacks, CAPTURE_KERNEL);
        assert_eq!(parse(&["-U"]).unwrap().settings().stacks, CAPTURE_USER);
        assert_eq!(parse(&["--json"]).unwrap().shown.output, Output::Json { limit: 0 });
        assert_eq!(parse(&["--json", "-n", "5"]).unwrap().shown.output, Output::Json { limit: 5 });
        assert!(parse(&["-u"]).unwrap().needs_task_flags());
        assert_eq!(parse(&["--attach", "raw_tp"]).unwrap().attach, AttachMode::RawTp);
    }

    #[test]
    fn on_cpu_samples_at_the_rate_given_or_99() {
        use topwaits_common::on_cpu;
        assert_eq!(parse(&[]).unwrap().settings().on_cpu, 0, "no samples unless asked");
        let c = parse(&["--on-cpu", "5"]).unwrap();
        assert_eq!(
            (c.on_cpu, c.duration),
            (Some(DEFAULT_ON_CPU_HZ), Some(Duration::from_secs(5))),
            "a bare --on-cpu takes no value"
        );
        assert_eq!(c.settings().on_cpu, on_cpu::COUNT);
        assert_eq!(parse(&["--on-cpu=49"]).unwrap().on_cpu, Some(49));
        for bad in [
            &["--on-cpu=0"][..],
            &["--on-cpu=5000"],
            &["--on-cpu=fast"],
            &["--on-cpu", "--wakeups"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn waker_options() {
        let c = parse(&[]).unwrap();
        assert!(!c.waker);
        assert_eq!((c.settings().waker, c.settings().chain), (0, 1));
        let c = parse(&["-w"]).unwrap();
        assert!(c.waker && c.view == View::OffCpu);
        let c = parse(&["--chain", "3"]).unwrap();
        assert!(c.waker, "--chain implies -w");
        assert_eq!((c.settings().waker, c.settings().chain), (1, 3));
        assert!(parse(&["--chain", "0"]).is_err());
        assert!(parse(&["--chain", "5"]).is_err());
        let c = parse(&["--wakeups", "-f"]).unwrap();
        assert!(c.waker && c.view == View::Wakeups);
    }

    #[test]
    fn missing_required_arguments_are_named_in_the_one_line() {
        for (opt, val) in
            [("--rt-app-duration", "3"), ("--rt-app-wanted", ""), ("--rt-app-calibration", "30")]
        {
            let mut argv = vec!["topwaits", "threads", opt];
            if !val.is_empty() {
                argv.push(val);
            }
            argv.push("1");
            let e = Args::try_parse_from(argv).unwrap_err();
            let line = one_line(&e.render().to_string());
            assert!(line.contains("--rt-app <FILE>"), "{opt}: {line}");
            assert!(!line.contains('\n'), "{line}");
        }
    }

    #[test]
    fn a_misspelt_option_names_the_one_meant() {
        let e =
            Args::try_parse_from(["topwaits", "threads", "--rtapp", "x.json", "1"]).unwrap_err();
        let line = one_line(&e.render().to_string());
        assert_eq!(line, "error: unexpected argument '--rtapp' found; a similar argument exists: '--rt-app' (see --help)");
        let e = Args::try_parse_from(["topwaits", "--wakr", "1"]).unwrap_err();
        assert!(one_line(&e.render().to_string()).contains("a similar argument exists: '--waker'"));
    }

    #[test]
    fn clap_errors_become_one_line() {
        let e = Args::try_parse_from(["topwaits", "-u", "-k"]).unwrap_err();
        let line = one_line(&e.to_string());
        assert!(!line.contains('\n'));
        assert!(line.starts_with("error: the argument"), "{line}");
        assert!(line.ends_with("(see --help)"));
    }

    #[test]
    fn help_renders_with_examples() {
        use clap::CommandFactory;
        let help = Args::command().render_long_help().to_string();
        assert!(help.contains("--min-block-time") && help.contains("Examples:"), "{help}");
    }
}
