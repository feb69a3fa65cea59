//! Options of `topwaits record` (a trace saved to a file) and `topwaits report`
//! (a saved trace shown again, without root).

use std::path::PathBuf;

use super::{ConfigError, TraceArgs, ViewArgs};
use crate::settings::*;

pub(super) const RECORD_EXAMPLES: &str = "\
Examples:
  topwaits record -o db.twr -p 1234 30      trace process 1234 for 30 s into db.twr
  topwaits record -o all.twr -w 10          the whole system with wakers
  topwaits record --why -o inc.twr -p 1234 10   for `topwaits why inc.twr`
  topwaits report db.twr                    the top view, later, anywhere, without root
  topwaits report db.twr -f | flamegraph.pl > db.svg
  topwaits report db.twr --pprof db.pb.gz   the same trace for go tool pprof or Pyroscope";

pub(super) const REPORT_EXAMPLES: &str = "\
Examples:
  topwaits report db.twr                    longest waits first, as the trace would print
  topwaits report db.twr --json -n 50       the 50 longest-waiting stacks as JSON
  topwaits report db.twr --by process       one record per process and stack
  topwaits report db.twr --svg g.svg --timeline t.svg --pprof p.pb.gz";

/// Options of `topwaits record`: every option of a trace, and the file.
#[derive(clap::Args, Debug, Clone)]
pub struct RecordArgs {
    /// The record file to write (replaced if it exists). It holds the symbolized
    /// trace: `topwaits report FILE` shows it again on any machine, without root.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,

    /// Record what `topwaits why FILE` needs: every wait as an event, with its
    /// waker (as `-w --events-over 1`).
    #[arg(long)]
    pub why: bool,

    #[command(flatten)]
    pub trace: TraceArgs,
}

/// Options of `topwaits report`: a record file and how to show it.
#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    /// A file written by `topwaits record`.
    #[arg(value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub file: PathBuf,

    /// Show the wakeup view (like wakeuptime) of a trace recorded with wakers.
    #[arg(long)]
    pub wakeups: bool,

    #[command(flatten)]
    pub view: ViewArgs,
}

impl ReportConfig {
    pub fn from_args(a: ReportArgs) -> Result<Self, ConfigError> {
        let view = a.view.config()?;
        if a.wakeups {
            if let Some(name) = [
                ("--timeline", view.timeline.is_some()),
                ("--pprof", view.pprof.is_some()),
                ("--perfetto", view.perfetto.is_some()),
            ]
            .iter()
            .find(|f| f.1)
            .map(|f| f.0)
            {
                return Err(ConfigError::FileWithWakeups(name));
            }
        }
        Ok(ReportConfig { file: a.file, wakeups: a.wakeups, view })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::super::{Args, Command, Config, Output};
    use super::*;

    fn parse(argv: &[&str]) -> Result<Command, String> {
        let a = Args::try_parse_from(std::iter::once("topwaits").chain(argv.iter().copied()))
            .map_err(|e| e.to_string())?;
        a.command.ok_or_else(|| "no subcommand".to_string())
    }

    #[test]
    fn record_takes_every_trace_option_and_the_file() {
        let Command::Record(r) =
            parse(&["record", "-o", "x.twr", "-p", "5", "-w", "--json", "3"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(r.output, PathBuf::from("x.twr"));
        let c = Config::from_args(r.trace).unwrap();
        assert!(c.waker);
        assert_eq!(c.duration, Some(std::time::Duration::from_secs(3)));
        assert_eq!(c.shown.output, Output::Json { limit: 0 });
        assert!(parse(&["record", "5"]).unwrap_err().contains("--output"), "the file is required");
    }

    #[test]
    fn report_takes_a_file_and_view_options_only() {
        let Command::Report(r) =
            parse(&["report", "x.twr", "-f", "--value", "max", "--pprof", "p.pb.gz"]).unwrap()
        else {
            panic!()
        };
        let c = ReportConfig::from_args(r).unwrap();
        assert_eq!(c.file, PathBuf::from("x.twr"));
        assert!(matches!(c.view.output, Output::Folded { .. }));
        assert_eq!(c.view.pprof, Some(PathBuf::from("p.pb.gz")));
        assert!(parse(&["report", "x.twr", "-p", "5"]).is_err(), "no trace options");
        assert!(parse(&["report"]).is_err(), "the file is required");
        let Command::Report(r) = parse(&["report", "x.twr", "--wakeups", "--pprof", "p"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            ReportConfig::from_args(r).unwrap_err(),
            ConfigError::FileWithWakeups("--pprof")
        );
    }
}
