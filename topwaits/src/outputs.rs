//! The files a trace or a report writes beside stdout (`--svg`, `--timeline`,
//! `--pprof`, and the record file): created before anything loads, so that a bad
//! path fails at once, and written from the finished report.

use anyhow::Result;

use crate::cli::ValueKind;
use crate::model::Report;
use crate::report::{self, Format as _};
use crate::trace::OutputFile;

/// The files of one view, each created and still empty.
pub struct ViewFiles {
    svg: Option<OutputFile>,
    timeline: Option<OutputFile>,
    pprof: Option<OutputFile>,
    perfetto: Option<OutputFile>,
    record: Option<OutputFile>,
}

/// Where each file goes, when asked for.
pub struct Paths<'a> {
    pub svg: Option<&'a std::path::Path>,
    pub timeline: Option<&'a std::path::Path>,
    pub pprof: Option<&'a std::path::Path>,
    pub perfetto: Option<&'a std::path::Path>,
    pub record: Option<&'a std::path::Path>,
}

impl ViewFiles {
    /// Creates every file asked for, or fails in one line naming the first that
    /// cannot be.
    pub fn create(p: Paths<'_>) -> Result<Self> {
        Ok(ViewFiles {
            svg: OutputFile::create_opt(p.svg)?,
            timeline: OutputFile::create_opt(p.timeline)?,
            pprof: OutputFile::create_opt(p.pprof)?,
            perfetto: OutputFile::create_opt(p.perfetto)?,
            record: OutputFile::create_opt(p.record)?,
        })
    }

    /// Whether a file needs the processes' mappings ([`Report::objects`]).
    pub fn need_objects(&self) -> bool {
        self.pprof.is_some() || self.record.is_some()
    }

    /// Writes every file from the report (per thread, as the trace saw it).
    pub fn write(self, report: &Report, value: ValueKind, timeline_limit: usize) -> Result<()> {
        if let Some(file) = self.svg {
            let svg = report::svg::FlameSvg { value };
            file.write(|out| svg.write(report, out))?;
        }
        if let Some(file) = self.timeline {
            let t = report::timeline::Timeline { limit: timeline_limit };
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
    let grouped = (by != crate::cli::By::Thread).then(|| Report {
        info: crate::model::TraceInfo { by, ..report.info.clone() },
        counters: report.counters,
        records: crate::reduce::merge(report.records.clone(), by),
        objects: Default::default(),
        events: report.events.clone(),
    });
    let format = report::for_output(view, output);
    crate::trace::write_quietly(|out| format.write(grouped.as_ref().unwrap_or(report), out))
}

/// `topwaits report FILE`: shows a saved trace as the trace itself would have,
/// with the files asked for, and the warnings of its losses.
pub fn run_report(c: &crate::cli::ReportConfig) -> Result<()> {
    let files = ViewFiles::create(Paths {
        svg: c.view.svg.as_deref(),
        timeline: c.view.timeline.as_deref(),
        pprof: c.view.pprof.as_deref(),
        perfetto: c.view.perfetto.as_deref(),
        record: None,
    })?;
    let report = crate::recording::read(&c.file)?;
    if c.view.perfetto.is_some() && report.events.is_empty() {
        anyhow::bail!("{} holds no long-wait events for --perfetto: record with --events-over or --perfetto", c.file.display());
    }
    if c.wakeups && !report.info.waker {
        anyhow::bail!("{} was recorded without wakers: --wakeups needs a trace recorded with -w", c.file.display());
    }
    let view = if c.wakeups { crate::cli::View::Wakeups } else { crate::cli::View::OffCpu };
    show(&report, view, &c.view.output, c.view.by)?;
    files.write(&report, c.view.value, c.view.timeline_limit)?;
    for w in report.counters.warnings() {
        crate::stderr::say!("topwaits: warning: {w}");
    }
    Ok(())
}
