//! The unwind tables while a trace runs: the loader (`cfi::loader`) fed with
//! process events and writing into the walker's maps, or nothing with
//! `--unwind fp`.

use std::time::Duration;

use anyhow::Result;
use topwaits_common::{proc_event, ProcEvent};

use crate::bpf::UnwindMaps;
use crate::cfi::loader::{Loader, Stats};
use crate::cli::{Config, Threads};
use crate::sys::procfs;

/// How long a trace of named processes waits at its start for their tables, so
/// that their first waits are walked whole.
const TARGETS_SETTLE: Duration = Duration::from_secs(2);

/// The loader and the maps it fills, when user stacks are walked from tables.
pub struct Unwinder(Option<(Loader, UnwindMaps)>);

impl Unwinder {
    /// Fills the walker's maps (None with `--unwind fp`), given before the
    /// programs attach: the processes of `-p`/`-t` are read at once, and their
    /// tables waited for (up to [`TARGETS_SETTLE`]), so that their first waits
    /// are walked whole.
    pub fn start(maps: Option<UnwindMaps>, config: &Config) -> Result<Unwinder> {
        let Some(mut maps) = maps else { return Ok(Unwinder(None)) };
        let mut loader = Loader::new(&mut maps)?;
        let tgids: Vec<u32> = match &config.threads {
            Threads::Pids(p) => p.clone(),
            Threads::Tids(t) => t.iter().filter_map(|&t| procfs::tgid_of(t)).collect(),
            _ => Vec::new(),
        };
        for tgid in tgids {
            loader.on_event(Some(ProcEvent { tgid, kind: proc_event::SEEN, parent: 0 }), &mut maps);
        }
        loader.settle(TARGETS_SETTLE, &mut maps);
        Ok(Unwinder(Some((loader, maps))))
    }

    /// Takes one process event (None: a beat); whether it wants beats.
    pub fn on_event(&mut self, e: Option<ProcEvent>) -> bool {
        self.0.as_mut().is_some_and(|(loader, maps)| loader.on_event(e, maps))
    }

    /// Forgets the processes that have exited (asked once a second; done when
    /// enough have come or time has passed).
    pub fn sweep(&mut self) {
        if let Some((loader, maps)) = self.0.as_mut() {
            loader.sweep(maps);
        }
    }

    /// What the tables cost, and what did not fit.
    pub fn stats(&self) -> Option<&Stats> {
        self.0.as_ref().map(|(l, _)| &l.stats)
    }
}
