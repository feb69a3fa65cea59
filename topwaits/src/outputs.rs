//! The files a trace or a report writes beside stdout (`--svg`, `--timeline`,
//! `--pprof`, `--perfetto`, and the record file): created before anything loads, so that a bad
//! path fails at once, and written from the finished report.

use anyhow::Result;

use crate::cli::{ValueKind, ViewConfig};
use crate::model::Report;
use crate::outfile::OutputFile;
use crate::report::{self, Format as _};

/// The files of one view, each created and still empty.
pub struct ViewFiles {
    svg: Option<OutputFile>,
    timeline: Option<OutputFile>,
    pprof: Option<OutputFile>,
    perfetto: Option<OutputFile>,
    record: Option<OutputFile>,
    value: ValueKind,
    timeline_limit: usize,
}

impl ViewFiles {
    /// Creates every file the view asks for, and the record file if any, or fails
    /// in one line naming the first that cannot be.
    pub fn create(view: &ViewConfig, record: Option<&std::path::Path>) -> Result<Self> {
        Ok(ViewFiles {
            svg: OutputFile::create_opt(view.svg.as_deref())?,
            timeline: OutputFile::create_opt(view.timeline.as_deref())?,
            pprof: OutputFile::create_opt(view.pprof.as_deref())?,
            perfetto: OutputFile::create_opt(view.perfetto.as_deref())?,
            record: OutputFile::create_opt(record)?,
            value: view.value,
            timeline_limit: view.timeline_limit,
        })
    }

    /// Whether a file needs the processes' mappings ([`Report::objects`]).
    pub fn need_objects(&self) -> bool {
        self.pprof.is_some() || self.record.is_some()
    }

    /// Writes every file from the report (per thread, as the trace saw it).
    pub fn write(self, report: &Report) -> Result<()> {
        if let Some(file) = self.svg {
            let svg = report::svg::FlameSvg { value: self.value };
            file.write(|out| svg.write(report, out))?;
        }
        if let Some(file) = self.timeline {
            let t = report::timeline::Timeline { limit: self.timeline_limit };
            file.write(|out| t.write(report, out))?;
        }
        if let Some(file) = self.pprof {
            file.write(|out| report::pprof::Pprof.write(report, out))?;
        }
        if let Some(file) = self.perfetto {
            file.write(|out| report::perfetto::Perfetto.write(report, out))?;
        }
        if let Some(file) = self.record {
            file.write(|out| crate::recording::write(report, out))?;
        }
        Ok(())
    }
}

/// Prints a report's view on stdout, its records merged as `--by` asks.
pub fn show(report: &Report, view: crate::cli::View, output: &crate::cli::Output, by: crate::cli::By) -> Result<()> {
    let grouped = crate::reduce::grouped(report, by);
    let format = report::for_output(view, output);
    crate::trace::write_quietly(|out| format.write(grouped.as_ref().unwrap_or(report), out))
}

/// `topwaits report FILE`: shows a saved trace as the trace itself would have,
/// with the files asked for, and the warnings of its losses.
pub fn run_report(c: &crate::cli::ReportConfig) -> Result<()> {
    let files = ViewFiles::create(&c.view, None)?;
    let report = crate::recording::read(&c.file)?;
    if c.view.perfetto.is_some() && report.events.is_empty() {
        anyhow::bail!("{} holds no long-wait events for --perfetto: record with --events-over or --perfetto", c.file.display());
    }
    if c.wakeups && !report.info.waker {
        anyhow::bail!("{} was recorded without wakers: --wakeups needs a trace recorded with -w", c.file.display());
    }
    let view = if c.wakeups { crate::cli::View::Wakeups } else { crate::cli::View::OffCpu };
    show(&report, view, &c.view.output, c.view.by)?;
    files.write(&report)?;
    for w in report.counters.warnings() {
        crate::stderr::say!("topwaits: warning: {w}");
    }
    Ok(())
}
