//! `topwaits locks`: a trace of every wait and its waker, shown as the locks that
//! made threads wait (see `report::locks`), or a recorded one shown so, without root.

use anyhow::{bail, Result};

use crate::settings::{LocksConfig, View};

pub fn run(c: LocksConfig) -> Result<()> {
    match c {
        LocksConfig::Trace(config) => super::trace::run(&config),
        LocksConfig::File { file, by, view } => {
            let files = super::files::ViewFiles::create(&view, None)?.shown(View::Locks { by });
            let report = super::why::recorded(&file, view.max_record_mib)?;
            if report.events.iter().all(|e| e.record.waits_on.is_none()) {
                bail!("{} was recorded before waits had labels: record it again with `topwaits record --why`", file.display());
            }
            super::why::show(&report, View::Locks { by }, &view, files)
        }
    }
}
