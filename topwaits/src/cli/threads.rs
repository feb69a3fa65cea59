//! Options of `topwaits threads` and their validation into a [`ThreadsConfig`].

use std::path::PathBuf;
use std::time::Duration;

use super::{parse_duration, AttachArgs, AttachMode, ConfigError, TargetArgs, Threads, Unwind};
use crate::settings::*;

pub(super) const THREADS_EXAMPLES: &str = "\
Examples:
  topwaits threads -p 1234 10                       table of process 1234's threads
  topwaits threads -p 1234 --json 10                the profile and dependencies as JSON
  topwaits threads -p 1234 --rt-app app.json 10     also write an rt-app reproducer
  topwaits threads -p 1234 --on-cpu 10              with each thread's hottest running stacks
  rt-app app.json                                   replay it without the application";

/// Options of `topwaits threads`.
#[derive(clap::Args, Debug, Clone)]
pub struct ThreadsArgs {
    #[command(flatten)]
    pub target: TargetArgs,

    /// Print one JSON document: version, duration_s, target, warnings, threads,
    /// dependencies, groups and goroutines (schema in topwaits-threads(1) and
    /// docs/JSON.md).
    #[arg(long)]
    pub json: bool,

    /// Write an rt-app JSON file that reproduces the threads' scheduling behaviour.
    #[arg(long, value_name = "FILE")]
    pub rt_app: Option<PathBuf>,

    /// In the rt-app file, count run-queue (preempted) time as time the threads
    /// wanted to run, as the sched-time seed did. By default only on-CPU time counts.
    #[arg(long, requires = "rt_app")]
    pub rt_app_wanted: bool,

    /// The rt-app file's global duration in seconds (default: the traced duration).
    #[arg(long, value_name = "SECS", requires = "rt_app", value_parser = clap::value_parser!(u32).range(1..))]
    pub rt_app_duration: Option<u32>,

    /// The rt-app file's calibration: CPUn makes rt-app measure its busy loop on CPU n
    /// at start-up (the default, CPU0); a number gives the ns per loop and skips that
    /// measurement, which takes seconds and varies by tens of percent on busy or
    /// virtual machines. Find the number in rt-app's "pLoad = Nns" line.
    #[arg(long, value_name = "CPUn|NS", requires = "rt_app", value_parser = parse_calibration)]
    pub rt_app_calibration: Option<Calibration>,

    /// Also sample each thread's stacks while it runs, HZ times a second
    /// (default 99), and show each thread's hottest running stacks beside its
    /// run time (JSON `running_stacks`).
    #[arg(long, value_name = "HZ", num_args = 0..=1, require_equals = true, default_missing_value = "99",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub on_cpu: Option<u32>,

    /// How the samples' user stacks are walked: from the binaries' unwind tables
    /// (cfi, the default: whole stacks through code built without frame
    /// pointers) or by frame pointers only (fp).
    #[arg(long, value_name = "HOW", value_enum, requires = "on_cpu")]
    pub unwind: Option<Unwind>,

    /// Do not trace goroutines. By default, a traced Go program's goroutines
    /// are listed after its threads: each one's time parked, what it waited
    /// on and the threads it ran on, from uprobes on its runtime.
    #[arg(long)]
    pub no_goroutines: bool,

    /// Rows the kernel keeps for goroutine waits (one per goroutine, wait
    /// reason and stack; once half full, later ones are kept by stack alone)
    /// and, with --on-cpu, for distinct sampled stacks.
    #[arg(long, value_name = "N", default_value_t = topwaits_common::limits::DEFAULT_MAX_ENTRIES,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_entries: u32,

    #[command(flatten)]
    pub cache: super::CacheArgs,

    #[command(flatten)]
    pub attach: AttachArgs,

    /// Seconds to trace (decimals allowed). Without it, trace until Ctrl-C.
    #[arg(value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
}

impl ThreadsConfig {
    pub fn from_args(a: ThreadsArgs) -> Result<Self, ConfigError> {
        if a.attach.attach == AttachMode::Kprobe {
            return Err(ConfigError::ThreadsKprobe);
        }
        let threads = a.target.threads(Threads::All)?;
        Ok(ThreadsConfig {
            threads,
            json: a.json,
            rt_app: a.rt_app,
            rt_app_duration: a.rt_app_duration,
            rt_app_wanted: a.rt_app_wanted,
            rt_app_calibration: a.rt_app_calibration.unwrap_or(Calibration::Cpu(0)),
            attach: a.attach.attach,
            duration: a.duration,
            on_cpu: a.on_cpu,
            unwind: a.unwind.unwrap_or(Unwind::Cfi),
            cache: a.cache.dir(),
            goroutines: !a.no_goroutines,
            max_entries: a.max_entries,
        })
    }
}

/// Largest ns-per-loop value accepted; rt-app's loop takes tens of ns.
const MAX_NS_PER_LOOP: u32 = 1_000_000;

fn parse_calibration(s: &str) -> Result<Calibration, String> {
    let t = s.trim();
    if let Some(cpu) = t.strip_prefix("CPU").or_else(|| t.strip_prefix("cpu")) {
        return cpu
            .parse()
            .map(Calibration::Cpu)
            .map_err(|_| format!("'{s}' is not a CPU: write CPU0, CPU1, ..."));
    }
    match t.parse::<u32>() {
        Ok(ns) if (1..=MAX_NS_PER_LOOP).contains(&ns) => Ok(Calibration::NsPerLoop(ns)),
        _ => Err(format!(
            "'{s}' is neither CPUn nor a number of ns per loop (1 to {MAX_NS_PER_LOOP})"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Args, Command};
    use super::*;
    use clap::Parser as _;

    /// Regression: `--help` described the JSON as `{"threads","dependencies"}`,
    /// leaving out the document's other keys.
    #[test]
    fn json_help_names_every_top_level_key() {
        use clap::CommandFactory as _;
        let mut cmd = Args::command();
        let help = cmd.find_subcommand_mut("threads").unwrap().render_long_help().to_string();
        let keys =
            ["version", "duration_s", "target", "warnings", "threads", "dependencies", "groups"];
        for key in keys {
            assert!(help.contains(key), "{key} missing from threads --help:\n{help}");
        }
    }

    #[test]
    fn threads_subcommand() {
        let a = Args::try_parse_from([
            "topwaits",
            "threads",
            "-p",
            "5,3",
            "--rt-app",
            "x.json",
            "--rt-app-duration",
            "4",
            "2",
        ])
        .unwrap();
        let Some(Command::Threads(t)) = a.command else { panic!("no subcommand") };
        let c = ThreadsConfig::from_args(t).unwrap();
        assert_eq!(c.threads, Threads::Pids(vec![3, 5]));
        assert_eq!(c.rt_app_duration, Some(4));
        assert_eq!(c.rt_app_calibration, Calibration::Cpu(0), "rt-app's own default");
        assert_eq!(c.duration, Some(Duration::from_secs(2)));
        assert_eq!(c.settings().threads, 1);
        assert_eq!(c.settings().go_merge_rows, topwaits_common::limits::DEFAULT_MAX_ENTRIES / 2);
        let a = Args::try_parse_from(["topwaits", "threads", "--max-entries", "100", "1"]).unwrap();
        let Some(Command::Threads(t)) = a.command else { panic!("no subcommand") };
        let small = ThreadsConfig::from_args(t).unwrap();
        assert_eq!((small.max_entries, small.settings().go_merge_rows), (100, 50));
        let a = Args::try_parse_from(["topwaits", "threads", "--no-goroutines", "1"]).unwrap();
        let Some(Command::Threads(t)) = a.command else { panic!("no subcommand") };
        let bare = ThreadsConfig::from_args(t).unwrap().settings();
        assert_eq!(bare.go_merge_rows, 0);
        assert!(Args::try_parse_from(["topwaits", "threads", "--max-entries", "0"]).is_err());
        assert_eq!((bare.stacks, bare.on_cpu, bare.events), (0, 0, 0), "no samples unless asked");
        // Goroutines want the process events: a Go program exec'd during the
        // window is hooked at its exec.
        assert_eq!((c.settings().stacks, c.settings().on_cpu, c.settings().events), (0, 0, 1));
        let a = Args::try_parse_from(["topwaits", "threads", "-p", "5", "--on-cpu", "2"]).unwrap();
        let Some(Command::Threads(t)) = a.command else { panic!("no subcommand") };
        let c = ThreadsConfig::from_args(t).unwrap();
        assert_eq!(
            (c.on_cpu, c.duration),
            (Some(99), Some(Duration::from_secs(2))),
            "a bare --on-cpu takes no value"
        );
        let s = c.settings();
        assert_eq!((s.threads, s.on_cpu, s.events), (1, topwaits_common::on_cpu::COUNT, 1));
        assert_eq!(s.stacks, topwaits_common::CAPTURE_KERNEL | topwaits_common::CAPTURE_USER);
        assert!(
            Args::try_parse_from(["topwaits", "threads", "--unwind", "fp"]).is_err(),
            "--unwind needs --on-cpu"
        );
        assert!(
            Args::try_parse_from(["topwaits", "threads", "--rt-app-duration", "4"]).is_err(),
            "needs --rt-app"
        );
        assert!(Args::try_parse_from(["topwaits", "threads", "-p", "1", "-t", "2"]).is_err());
        let calibration = |v: &str| {
            let a = Args::try_parse_from([
                "topwaits",
                "threads",
                "--rt-app",
                "x.json",
                "--rt-app-calibration",
                v,
            ])
            .map_err(|e| e.to_string())?;
            let Some(Command::Threads(t)) = a.command else { panic!("no subcommand") };
            Ok::<_, String>(ThreadsConfig::from_args(t).unwrap().rt_app_calibration)
        };
        assert_eq!(calibration("CPU1"), Ok(Calibration::Cpu(1)));
        assert_eq!(calibration("cpu0"), Ok(Calibration::Cpu(0)));
        assert_eq!(calibration("31"), Ok(Calibration::NsPerLoop(31)));
        for bad in ["0", "CPU", "CPUx", "-3", "2000000", "fast"] {
            let e = calibration(bad).unwrap_err();
            assert!(e.contains(bad) && !e.contains("panicked"), "{bad}: {e}");
        }
        assert!(
            Args::try_parse_from(["topwaits", "threads", "--rt-app-calibration", "30"]).is_err(),
            "needs --rt-app"
        );
        let a = Args::try_parse_from(["topwaits", "threads", "--attach", "kprobe"]).unwrap();
        let Some(Command::Threads(t)) = a.command else { panic!() };
        assert_eq!(ThreadsConfig::from_args(t).unwrap_err(), ConfigError::ThreadsKprobe);
        // A plain duration is still the main command's.
        let a = Args::try_parse_from(["topwaits", "3"]).unwrap();
        assert!(a.command.is_none());
    }
}
