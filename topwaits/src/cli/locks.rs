//! Options of `topwaits locks`: a trace of every wait with its waker (the trace's
//! target options and filters apply), or a trace recorded with `record --why`,
//! shown as the locks that made threads wait.

use super::why::{file_or_trace, grouping, Source};
use super::{ConfigError, TraceArgs, View};
use crate::settings::*;

pub(super) const LOCKS_EXAMPLES: &str = "\
Examples:
  topwaits locks -p 1234 10                 the locks process 1234's threads waited for, ranked
  topwaits locks -p 1234 --json 10          the same as a ranked `locks` array
  topwaits locks -p 1234 -f 10 | flamegraph.pl > locks.svg
  topwaits record --why -o inc.twr -p 1234 10
  topwaits locks inc.twr                    the same ranking later, anywhere, without root";

/// Options of `topwaits locks`.
#[derive(clap::Args, Debug, Clone)]
pub struct LocksArgs {
    /// A trace recorded with `topwaits record --why` to read instead of tracing,
    /// or the seconds to trace (without it, until Ctrl-C).
    #[arg(value_name = "FILE|DURATION")]
    pub what: Option<String>,

    #[command(flatten)]
    pub trace: TraceArgs,
}

impl LocksConfig {
    pub fn from_args(mut a: LocksArgs) -> Result<Self, ConfigError> {
        let no_labels = a.trace.no_labels;
        let by = grouping(&mut a.trace, ConfigError::Locks, "locks")?;
        match file_or_trace(a.what, a.trace, ConfigError::Locks, "locks ranks")? {
            Source::File(file, view) => Ok(LocksConfig::File { file, by, view }),
            Source::Trace(_) if no_labels => {
                Err(ConfigError::Locks("--no-labels: locks are found by their labels".into()))
            }
            Source::Trace(mut c) => {
                c.view = View::Locks { by };
                Ok(LocksConfig::Trace(c))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser as _;

    use super::super::{Args, Command, Output};
    use super::*;

    fn locks(argv: &[&str]) -> Result<LocksConfig, ConfigError> {
        let a = Args::try_parse_from(["topwaits", "locks"].into_iter().chain(argv.iter().copied()))
            .expect("parses");
        let Some(Command::Locks(l)) = a.command else { panic!("not locks") };
        LocksConfig::from_args(l)
    }

    #[test]
    fn a_number_is_a_duration_and_anything_else_a_recording() {
        let LocksConfig::Trace(c) = locks(&["-p", "7", "2.5", "-f"]).unwrap() else {
            panic!("not a trace")
        };
        assert_eq!(c.duration, Some(Duration::from_millis(2500)));
        assert!(c.waker && c.events_over_us == Some(1) && c.labels);
        assert_eq!(c.view, View::Locks { by: By::Comm });
        let LocksConfig::File { file, by, view } =
            locks(&["inc.twr", "--json", "--by", "thread"]).unwrap()
        else {
            panic!("not a file")
        };
        assert_eq!(
            (file, by, view.output),
            ("inc.twr".into(), By::Thread, Output::Json { limit: 0 })
        );
        assert!(
            matches!(locks(&["--by", "what", "3"]), Err(ConfigError::Locks(m)) if m.contains("--by what"))
        );
        assert!(
            matches!(locks(&["--by", "cgroup", "3"]), Err(ConfigError::Locks(m)) if m.contains("--by cgroup"))
        );
        assert!(
            matches!(locks(&["-i", "1", "3"]), Err(ConfigError::Locks(m)) if m.contains("--interval"))
        );
        assert!(
            matches!(locks(&["--no-labels", "3"]), Err(ConfigError::Locks(m)) if m.contains("labels"))
        );
    }
}
