//! `topwaits why`: a trace of every wait and its waker, shown as causes or a
//! critical path (see `report::why`), or a recorded one shown so, without root.

use anyhow::{bail, Result};

use crate::cli::{By, View, WhyConfig};

pub fn run(c: WhyConfig) -> Result<()> {
    match c {
        WhyConfig::Trace(config) => super::trace::run(&config),
        WhyConfig::File { file, for_tid, view } => {
            let files = super::files::ViewFiles::create(&view, None)?.critical_path(for_tid);
            let report = crate::recording::read(&file)?;
            if !report.info.waker || report.events.is_empty() {
                bail!("{} holds no waits with their wakers: record it with `topwaits record --why`", file.display());
            }
            super::report::show(&report, View::Why { for_tid }, &view.output, By::Thread)?;
            files.write(&report)?;
            for w in report.counters.warnings() {
                crate::stderr::say!("topwaits: warning: {w}");
            }
            Ok(())
        }
    }
}
