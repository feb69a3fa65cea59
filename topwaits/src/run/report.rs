//! `topwaits report FILE`: a recorded trace shown again, without root, in any
//! view and with any of the files a trace writes.

use anyhow::Result;

use super::files::ViewFiles;
use crate::model::Report;
use crate::report;

/// Prints a report's view on stdout, its records merged as `--by` asks.
pub fn show(
    report: &Report,
    view: crate::settings::View,
    output: &crate::settings::Output,
    by: crate::settings::By,
) -> Result<()> {
    let grouped = crate::analysis::reduce::grouped(report, by);
    let format = report::for_output(view, output);
    super::write_quietly(|out| format.write(grouped.as_ref().unwrap_or(report), out))
}

/// `topwaits report FILE`: shows a saved trace as the trace itself would have,
/// with the files asked for, and the warnings of its losses.
pub fn run(c: &crate::settings::ReportConfig) -> Result<()> {
    let files = ViewFiles::create(&c.view, None)?;
    let report = crate::model::recording::read(&c.file, c.view.max_record_mib)?;
    if c.view.perfetto.is_some() && report.events.is_empty() {
        anyhow::bail!(
            "{} holds no long-wait events for --perfetto: record with --events-over or --perfetto",
            c.file.display()
        );
    }
    if c.wakeups && !report.info.waker {
        anyhow::bail!(
            "{} was recorded without wakers: --wakeups needs a trace recorded with -w",
            c.file.display()
        );
    }
    let view =
        if c.wakeups { crate::settings::View::Wakeups } else { crate::settings::View::OffCpu };
    show(&report, view, &c.view.output, c.view.by)?;
    files.write(&report)?;
    for w in report.counters.warnings() {
        crate::util::stderr::say!("topwaits: warning: {w}");
    }
    Ok(())
}
