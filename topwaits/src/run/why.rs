//! `topwaits why`: a trace of every wait and its waker, shown as causes or a
//! critical path (see `report::why`), or a recorded one shown so, without root.

use anyhow::{bail, Result};

use crate::model::Report;
use crate::settings::{By, View, ViewConfig, WhyConfig};

pub fn run(c: WhyConfig) -> Result<()> {
    match c {
        WhyConfig::Trace(config) => super::trace::run(&config),
        WhyConfig::File { file, for_tid, by, view } => {
            let shown = View::Why { for_tid, by };
            let files = super::files::ViewFiles::create(&view, None)?.shown(shown);
            let report = recorded(&file, view.max_record_mib)?;
            show(&report, shown, &view, files)
        }
    }
}

/// A trace recorded with `record --why`: every wait, with its waker.
pub(super) fn recorded(file: &std::path::Path, max_mib: u64) -> Result<Report> {
    let report = crate::model::recording::read(file, max_mib)?;
    if !report.info.waker || report.events.is_empty() {
        bail!(
            "{} holds no waits with their wakers: record it with `topwaits record --why`",
            file.display()
        );
    }
    Ok(report)
}

/// Shows a recorded trace as `shown` says, writes its files, and says its warnings.
pub(super) fn show(
    report: &Report,
    shown: View,
    view: &ViewConfig,
    files: super::files::ViewFiles,
) -> Result<()> {
    super::report::show(report, shown, &view.output, By::Thread)?;
    files.write(report)?;
    for w in report.counters.warnings() {
        crate::util::stderr::say!("topwaits: warning: {w}");
    }
    Ok(())
}
