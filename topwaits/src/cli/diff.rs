//! Options of `topwaits diff`: two traces compared, and the thresholds of its
//! gate for CI.

use std::path::PathBuf;

use super::ConfigError;
use crate::settings::*;

pub(super) const DIFF_EXAMPLES: &str = "\
Examples:
  topwaits diff base.twr new.twr              what waits more, and less, in new.twr
  topwaits diff base.json new.json --json     two --json outputs, the change as JSON
  topwaits diff base.twr new.twr --svg d.svg  a differential flame graph (red: grew)
  topwaits diff base.twr new.twr --fail-if-grows 10%   exit 3 if the waiting grew by 10%

Exit status: 0 when no threshold is crossed, 3 when one is (the rows that crossed
it are printed), 1 when a file cannot be read, 2 for a bad option.";

/// Options of `topwaits diff`.
#[derive(clap::Args, Debug, Clone)]
pub struct DiffArgs {
    /// The trace before: a `topwaits record` file, or a `topwaits --json` output.
    #[arg(value_name = "BEFORE", value_hint = clap::ValueHint::FilePath)]
    pub before: PathBuf,
    /// The trace after, compared with BEFORE.
    #[arg(value_name = "AFTER", value_hint = clap::ValueHint::FilePath)]
    pub after: PathBuf,
    /// Print the change as one JSON document, its `rows` ranked by the change.
    #[arg(long, conflicts_with = "folded")]
    pub json: bool,
    /// Print folded stacks with two values (before and after, µs), the input of
    /// a differential flame graph (inferno-flamegraph, flamegraph.pl).
    #[arg(short = 'f', long)]
    pub folded: bool,
    /// Also write a differential flame graph (SVG) of the after trace, red where
    /// it waits more than before, blue where less.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Show the N largest changes (0 = all; default 20, all in JSON).
    #[arg(short = 'n', long, value_name = "N")]
    pub top: Option<usize>,
    /// Scale the before trace to the after trace's length first, for two traces
    /// of different durations.
    #[arg(long)]
    pub normalise: bool,
    /// Exit 3 if the whole waiting grew by more than PCT percent.
    #[arg(long, value_name = "PCT", value_parser = percent)]
    pub fail_if_grows: Option<f64>,
    /// Exit 3 if one stack's waiting grew by more than MS milliseconds.
    #[arg(long, value_name = "MS", value_parser = millis)]
    pub fail_if_stack_grows: Option<u64>,
    /// Exit 3 if a stack not seen before waits more than MS milliseconds in all.
    #[arg(long, value_name = "MS", value_parser = millis)]
    pub fail_if_new: Option<u64>,
    /// Read a recording only up to this size in MiB, compressed or expanded.
    #[arg(long, value_name = "MIB", default_value_t = DEFAULT_MAX_RECORD_MIB, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_record_size: u64,
}

/// `10%` or `10`: a percentage, at least 0.
fn percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("{s:?} is not a percentage (e.g. 10%)"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("{s:?}: a percentage of at least 0"));
    }
    Ok(v)
}

/// `250` or `250ms`: milliseconds, as ns.
fn millis(s: &str) -> Result<u64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches("ms")
        .parse()
        .map_err(|_| format!("{s:?} is not a number of milliseconds"))?;
    if !v.is_finite() || !(0.0..=1e12).contains(&v) {
        return Err(format!("{s:?}: milliseconds from 0"));
    }
    Ok((v * 1e6).round() as u64)
}

impl DiffConfig {
    pub fn from_args(a: DiffArgs) -> Result<Self, ConfigError> {
        let output = if a.json {
            DiffOutput::Json { limit: a.top.unwrap_or(0) }
        } else if a.folded {
            if a.top.is_some() {
                return Err(ConfigError::Diff("-n: -f folds every stack".into()));
            }
            DiffOutput::Folded
        } else {
            DiffOutput::Top { limit: a.top.unwrap_or(super::DEFAULT_TOP) }
        };
        Ok(DiffConfig {
            before: a.before,
            after: a.after,
            output,
            svg: a.svg,
            normalise: a.normalise,
            gate: Gate {
                grows_pct: a.fail_if_grows,
                stack_grows_ns: a.fail_if_stack_grows,
                new_ns: a.fail_if_new,
            },
            max_record_mib: a.max_record_size,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::super::{Args, Command};
    use super::*;

    fn diff(argv: &[&str]) -> Result<DiffConfig, String> {
        let a = Args::try_parse_from(["topwaits", "diff"].into_iter().chain(argv.iter().copied()))
            .map_err(|e| e.to_string())?;
        let Some(Command::Diff(d)) = a.command else { panic!("not diff") };
        DiffConfig::from_args(d).map_err(|e| e.to_string())
    }

    #[test]
    fn two_files_an_output_and_the_gate() {
        let c = diff(&["a.twr", "b.json"]).unwrap();
        assert_eq!((c.before, c.after), ("a.twr".into(), "b.json".into()));
        assert_eq!(
            (c.output, c.gate, c.normalise),
            (DiffOutput::Top { limit: 20 }, Gate::default(), false)
        );
        let c = diff(&[
            "a",
            "b",
            "--json",
            "--fail-if-grows",
            "10%",
            "--fail-if-stack-grows",
            "5",
            "--fail-if-new",
            "2.5ms",
            "--normalise",
        ])
        .unwrap();
        assert_eq!(c.output, DiffOutput::Json { limit: 0 });
        assert_eq!(
            c.gate,
            Gate {
                grows_pct: Some(10.0),
                stack_grows_ns: Some(5_000_000),
                new_ns: Some(2_500_000)
            }
        );
        assert!(c.normalise);
        assert_eq!(diff(&["a", "b", "-f"]).unwrap().output, DiffOutput::Folded);
        assert_eq!(diff(&["a", "b", "--fail-if-grows", "7"]).unwrap().gate.grows_pct, Some(7.0));
        for bad in [
            &["a"][..],
            &["a", "b", "--fail-if-grows", "x"],
            &["a", "b", "--fail-if-grows", "-3%"],
            &["a", "b", "--fail-if-new", "soon"],
            &["a", "b", "-f", "-n", "3"],
            &["a", "b", "-f", "--json"],
        ] {
            assert!(diff(bad).is_err(), "{bad:?}");
        }
    }
}
