//! Options of `topwaits why`: a trace of every wait with its waker (the trace's
//! target options and filters apply), or a trace recorded with `record --why`,
//! and the one thread whose critical path to show (`--for`).

use std::path::PathBuf;

use super::{parse_duration, By, Config, ConfigError, Output, TraceArgs, View, ViewConfig};
use crate::settings::*;

pub(super) const WHY_EXAMPLES: &str = "\
Examples:
  topwaits why -p 1234 10                   what process 1234's threads waited behind, ranked
  topwaits why -p 1234 --for 1240 10        where thread 1240's 10 s went: its critical path
  topwaits record --why -o inc.twr -p 1234 10
  topwaits why inc.twr                      the same analysis later, anywhere, without root
  topwaits why inc.twr --for 1240 -f | flamegraph.pl > path.svg";

/// Options of `topwaits why`.
#[derive(clap::Args, Debug, Clone)]
pub struct WhyArgs {
    /// A trace recorded with `topwaits record --why` to explain instead of
    /// tracing, or the seconds to trace (without it, until Ctrl-C).
    #[arg(value_name = "FILE|DURATION")]
    pub what: Option<String>,

    /// Show where this thread's time went over the trace instead of the ranking:
    /// its running, run-queue and blocked time, each blocked stretch followed to
    /// the thread or device that ended it, recursively.
    #[arg(long = "for", value_name = "TID", value_hint = clap::ValueHint::Other)]
    pub for_tid: Option<u32>,

    #[command(flatten)]
    pub trace: TraceArgs,
}

impl WhyConfig {
    pub fn from_args(mut a: WhyArgs) -> Result<Self, ConfigError> {
        let for_tid = a.for_tid;
        let by = grouping(&mut a.trace, ConfigError::Why, "why")?;
        match file_or_trace(a.what.take(), a.trace, ConfigError::Why, "why explains")? {
            Source::File(file, view) => {
                check_view(&view, for_tid)?;
                Ok(WhyConfig::File { file, for_tid, by, view })
            }
            Source::Trace(mut c) => {
                check_view(&c.shown, for_tid)?;
                c.view = View::Why { for_tid, by };
                Ok(WhyConfig::Trace(c))
            }
        }
    }
}

/// What a subcommand that reads every wait with its waker was given: a recording
/// to read, or a live trace of every wait as an event with its waker.
pub(super) enum Source {
    File(PathBuf, ViewConfig),
    Trace(Box<Config>),
}

/// A recording when `what` is not a number at all, else a trace of `what`
/// seconds (or of the trace options' duration). `err` makes the subcommand's
/// errors, which say that it `verb` one whole trace.
pub(super) fn file_or_trace(
    what: Option<String>,
    trace: TraceArgs,
    err: fn(String) -> ConfigError,
    verb: &str,
) -> Result<Source, ConfigError> {
    let name = verb.split(' ').next().unwrap_or(verb);
    let duration = match what {
        Some(w) => match parse_duration(&w) {
            Ok(d) => Some(d),
            // Not a number at all: a file.
            Err(_) if w.parse::<f64>().is_err() && trace.duration.is_none() => {
                return Ok(Source::File(PathBuf::from(w), trace.view.config()?))
            }
            Err(e) => return Err(err(e)),
        },
        None => None,
    };
    if trace.interval.is_some() {
        return Err(err(format!("--interval: {verb} one whole trace")));
    }
    if trace.wakeups {
        return Err(err(format!("--wakeups: {name} has views of its own")));
    }
    let mut c = Config::from_args(trace)?;
    if duration.is_some() {
        c.duration = duration;
    }
    for_why(&mut c);
    Ok(Source::Trace(Box::new(c)))
}

/// How `why` and `locks` group what threads did alike (`--by`): by name unless
/// asked otherwise, as profiles aggregate samples across threads. Options of the
/// top view that these views would ignore are refused, not silently dropped;
/// the records stay per thread (the views group them themselves).
pub(super) fn grouping(
    trace: &mut TraceArgs,
    err: fn(String) -> ConfigError,
    name: &str,
) -> Result<By, ConfigError> {
    let v = &mut trace.view;
    let ignored = [
        (v.value.is_some(), "--value"),
        (v.delimited, "-d/--delimited"),
        (v.what, "--what"),
        (v.by == Some(By::What), "--by what"),
        (v.by == Some(By::Cgroup) && name == "locks", "--by cgroup"),
    ];
    if let Some((_, opt)) = ignored.iter().find(|(given, _)| *given) {
        let instead = match *opt {
            "--by what" => " (it groups by thread, process or comm; `topwaits --by what` ranks waits by what they were for)",
            "--by cgroup" => {
                " (it groups waiters and holders by thread, process or comm; `topwaits why --by cgroup` groups causes per cgroup)"
            }
            _ => "",
        };
        return Err(err(format!("{opt}: not an option of {name}{instead}")));
    }
    Ok(v.by.take().unwrap_or(By::Comm))
}

/// Folded output and the svg are a critical path's: they need `--for`.
fn check_view(view: &ViewConfig, for_tid: Option<u32>) -> Result<(), ConfigError> {
    if for_tid.is_none() {
        if matches!(view.output, Output::Folded { .. }) {
            return Err(ConfigError::Why("-f folds a critical path: give --for TID".into()));
        }
        if view.svg.is_some() {
            return Err(ConfigError::Why("--svg draws a critical path: give --for TID".into()));
        }
    }
    Ok(())
}

/// What a trace records for `why`: every wait as an event, with its waker;
/// and, unless `--no-on-cpu`, on-CPU samples, which show what a running cause
/// ran.
pub(super) fn for_why(c: &mut Config) {
    c.waker = true;
    c.events_over_us = Some(1);
    if !c.no_on_cpu {
        c.on_cpu.get_or_insert(super::DEFAULT_ON_CPU_HZ);
        c.timed_samples = true;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser as _;

    use super::super::{Args, Command};
    use super::*;

    fn why(argv: &[&str]) -> Result<WhyConfig, ConfigError> {
        let a = Args::try_parse_from(["topwaits", "why"].into_iter().chain(argv.iter().copied()))
            .expect("parses");
        let Some(Command::Why(w)) = a.command else { panic!("not why") };
        WhyConfig::from_args(w)
    }

    #[test]
    fn a_number_is_a_duration_and_anything_else_a_recording() {
        let WhyConfig::Trace(c) = why(&["-p", "7", "2.5"]).unwrap() else { panic!("not a trace") };
        assert_eq!(c.duration, Some(Duration::from_millis(2500)));
        assert!(c.waker && c.events_over_us == Some(1));
        assert_eq!(c.on_cpu, Some(super::super::DEFAULT_ON_CPU_HZ), "why samples running threads");
        assert!(c.timed_samples, "each with its time, for the critical path");
        assert_eq!(c.view, View::Why { for_tid: None, by: By::Comm });
        let WhyConfig::Trace(c) = why(&["--no-on-cpu", "2"]).unwrap() else {
            panic!("not a trace")
        };
        assert_eq!(c.on_cpu, None);
        let WhyConfig::Trace(c) = why(&["--on-cpu=49", "2"]).unwrap() else {
            panic!("not a trace")
        };
        assert_eq!(c.on_cpu, Some(49));
        let WhyConfig::File { file, for_tid, by, view } =
            why(&["inc.twr", "--for", "9", "--json", "--by", "thread"]).unwrap()
        else {
            panic!("not a file")
        };
        assert_eq!(
            (file, for_tid, by, view.output),
            ("inc.twr".into(), Some(9), By::Thread, Output::Json { limit: 0 })
        );
    }

    /// Causes are grouped by name unless --by says otherwise, the records stay
    /// per thread, and options why would ignore are refused in one line.
    #[test]
    fn by_groups_causes_and_ignored_options_are_refused() {
        let WhyConfig::Trace(c) = why(&["--by", "process", "3"]).unwrap() else {
            panic!("not a trace")
        };
        assert_eq!(
            (c.view, c.shown.by),
            (View::Why { for_tid: None, by: By::Process }, By::Thread)
        );
        let WhyConfig::Trace(c) = why(&["--by", "cgroup", "3"]).unwrap() else {
            panic!("not a trace")
        };
        assert_eq!(c.view, View::Why { for_tid: None, by: By::Cgroup });
        for (args, opt) in [
            (&["--by", "what", "3"][..], "--by what"),
            (&["--value", "max", "--for", "3", "-f", "2"][..], "--value"),
            (&["-d", "3"][..], "-d"),
            (&["--what", "x.twr"][..], "--what"),
        ] {
            match why(args) {
                Err(ConfigError::Why(m)) => assert!(
                    m.starts_with(opt) && m.contains("not an option of why"),
                    "{args:?}: {m}"
                ),
                other => panic!("{args:?} accepted: {other:?}"),
            }
        }
    }

    #[test]
    fn folded_needs_a_thread_and_intervals_are_refused() {
        assert!(matches!(why(&["-f", "3"]), Err(ConfigError::Why(m)) if m.contains("--for")));
        assert!(why(&["-f", "--for", "4", "3"]).is_ok());
        assert!(
            matches!(why(&["--svg", "p.svg", "3"]), Err(ConfigError::Why(m)) if m.contains("--for"))
        );
        assert!(why(&["x.twr", "--svg", "p.svg", "--for", "4"]).is_ok());
        assert!(
            matches!(why(&["-i", "1", "3"]), Err(ConfigError::Why(m)) if m.contains("--interval"))
        );
    }
}
