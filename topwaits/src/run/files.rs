//! The files a trace or a report writes beside stdout (`--svg`, `--timeline`,
//! `--pprof`, `--perfetto`, and the record file): prepared before anything loads,
//! so that a bad path fails at once, and written from the finished report.

use anyhow::Result;

use crate::model::Report;
use crate::report::{self, Format as _};
use crate::settings::{ValueKind, View, ViewConfig};
use crate::util::outfile::OutputFile;

/// The files of one view, each created and still empty.
pub struct ViewFiles {
    svg: Option<OutputFile>,
    timeline: Option<OutputFile>,
    pprof: Option<OutputFile>,
    perfetto: Option<OutputFile>,
    record: Option<OutputFile>,
    value: ValueKind,
    what: bool,
    cgroup_frames: Option<bool>,
    timeline_limit: usize,
    /// What the svg draws: a trace's flame graph, `why --for TID`'s critical
    /// path, or the locks' waiters under their locks.
    shown: View,
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
            what: view.what,
            cgroup_frames: view.cgroup_frames,
            timeline_limit: view.timeline_limit,
            shown: View::OffCpu,
        })
    }

    /// Draws the svg as `shown` views the trace: `why --for`'s critical path,
    /// or the locks' waiters; any other view's svg is the flame graph.
    pub fn shown(mut self, shown: View) -> Self {
        self.shown = shown;
        self
    }

    /// Whether a file needs the processes' mappings ([`Report::objects`]).
    pub fn need_objects(&self) -> bool {
        self.pprof.is_some() || self.record.is_some()
    }

    /// Writes every file from the report (per thread, as the trace saw it).
    pub fn write(self, report: &Report) -> Result<()> {
        if let Some(file) = self.svg {
            match self.shown {
                View::Why { for_tid: Some(for_tid), by } => {
                    file.write(|out| report::why::PathSvg { for_tid, by }.write(report, out))?
                }
                View::Locks { by } => {
                    file.write(|out| report::locks::LocksSvg { by }.write(report, out))?
                }
                _ => file.write(|out| {
                    report::svg::FlameSvg {
                        value: self.value,
                        what: self.what,
                        cgroup: self.cgroup_frames,
                    }
                    .write(report, out)
                })?,
            }
        }
        if let Some(file) = self.timeline {
            let t = report::timeline::Timeline { limit: self.timeline_limit };
            file.write(|out| t.write(report, out))?;
        }
        if let Some(file) = self.pprof {
            file.write(|out| {
                report::pprof::Pprof { cgroup: self.cgroup_frames }.write(report, out)
            })?;
        }
        if let Some(file) = self.perfetto {
            file.write(|out| report::perfetto::Perfetto.write(report, out))?;
        }
        if let Some(file) = self.record {
            file.write(|out| crate::model::recording::write(report, out))?;
        }
        Ok(())
    }
}
