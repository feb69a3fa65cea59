//! Options of `topwaits why`: a trace of every wait with its waker (the trace's
//! target options and filters apply), or a trace recorded with `record --why`,
//! and the one thread whose critical path to show (`--for`).

use std::path::PathBuf;
use std::time::Duration;

use super::{parse_duration, Config, ConfigError, Output, TraceArgs, View, ViewConfig};

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

/// What `topwaits why` explains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WhyConfig {
    /// A live trace.
    Trace(Box<Config>),
    /// A recorded one, shown as `view` says.
    File { file: PathBuf, for_tid: Option<u32>, view: ViewConfig },
}

impl WhyConfig {
    pub fn from_args(mut a: WhyArgs) -> Result<Self, ConfigError> {
        let for_tid = a.for_tid;
        match file_or_trace(a.what.take(), a.trace, ConfigError::Why, "why explains")? {
            Source::File(file, view) => {
                check_view(&view, for_tid)?;
                Ok(WhyConfig::File { file, for_tid, view })
            }
            Source::Trace(mut c) => {
                check_view(&c.shown, for_tid)?;
                c.view = View::Why { for_tid };
                Ok(WhyConfig::Trace(c))
            }
        }
    }

    /// How long a live trace runs (None: until Ctrl-C).
    pub fn duration(&self) -> Option<Duration> {
        match self {
            WhyConfig::Trace(c) => c.duration,
            WhyConfig::File { .. } => None,
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

/// What a trace records for `why`: every wait as an event, with its waker.
pub(super) fn for_why(c: &mut Config) {
    c.waker = true;
    c.events_over_us = Some(1);
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::super::{Args, Command};
    use super::*;

    fn why(argv: &[&str]) -> Result<WhyConfig, ConfigError> {
        let a = Args::try_parse_from(["topwaits", "why"].into_iter().chain(argv.iter().copied())).expect("parses");
        let Some(Command::Why(w)) = a.command else { panic!("not why") };
        WhyConfig::from_args(w)
    }

    #[test]
    fn a_number_is_a_duration_and_anything_else_a_recording() {
        let WhyConfig::Trace(c) = why(&["-p", "7", "2.5"]).unwrap() else { panic!("not a trace") };
        assert_eq!(c.duration, Some(Duration::from_millis(2500)));
        assert!(c.waker && c.events_over_us == Some(1));
        assert_eq!(c.view, View::Why { for_tid: None });
        let WhyConfig::File { file, for_tid, view } = why(&["inc.twr", "--for", "9", "--json"]).unwrap() else { panic!("not a file") };
        assert_eq!((file, for_tid, view.output), ("inc.twr".into(), Some(9), Output::Json { limit: 0 }));
    }

    #[test]
    fn folded_needs_a_thread_and_intervals_are_refused() {
        assert!(matches!(why(&["-f", "3"]), Err(ConfigError::Why(m)) if m.contains("--for")));
        assert!(why(&["-f", "--for", "4", "3"]).is_ok());
        assert!(matches!(why(&["--svg", "p.svg", "3"]), Err(ConfigError::Why(m)) if m.contains("--for")));
        assert!(why(&["x.twr", "--svg", "p.svg", "--for", "4"]).is_ok());
        assert!(matches!(why(&["-i", "1", "3"]), Err(ConfigError::Why(m)) if m.contains("--interval")));
    }
}
