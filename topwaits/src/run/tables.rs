//! The unwind tables while a trace runs: the loader (`cfi::loader`) fed with
//! process events and writing into the walker's maps, and the Python
//! interpreters and V8s found in the processes it reads; nothing
//! with `--unwind fp`.

use std::time::Duration;

use anyhow::Result;
use topwaits_common::{proc_event, ProcEvent};

use crate::bpf::UnwindMaps;
use crate::settings::Threads;
use crate::stacks::cfi::cache::Cache;
use crate::stacks::cfi::loader::{Loader, Stats};
use crate::stacks::jit;
use crate::stacks::python::Tracker;
use crate::sys::procfs;

use super::wait::{sooner, BEAT};

/// How often the tables that the builder has finished are looked for, while
/// some are being read or built (the builder's thread cannot write the
/// kernel's maps itself). At [`BEAT`], a program started during the trace had
/// its first waits walked while its tables sat built for up to 20 ms.
const TABLE_BEAT: Duration = Duration::from_millis(2);

/// How long a trace of named processes waits at its start for their tables, so
/// that their first waits are walked whole.
const TARGETS_SETTLE: Duration = Duration::from_secs(2);

/// The loader and the maps it fills, when user stacks are walked from tables.
pub struct Unwinder(Option<(Loader, Trackers, UnwindMaps)>);

/// The language runtimes found in the processes the loader reads.
#[derive(Default)]
struct Trackers {
    python: Tracker,
    jit: jit::Tracker,
}

impl Trackers {
    /// A process's mappings were read.
    fn on_maps(&mut self, tgid: u32, code: &[procfs::Mapping], maps: &mut UnwindMaps) {
        self.python.on_maps(tgid, code, maps);
        self.jit.on_maps(tgid, code, maps);
    }
}

impl Unwinder {
    /// Fills the walker's maps (None with `--unwind fp`), given before the
    /// programs attach: the processes of `-p`/`-t` are read at once, and their
    /// tables waited for (up to [`TARGETS_SETTLE`]), so that their first waits
    /// are walked whole.
    pub fn start(
        maps: Option<UnwindMaps>,
        threads: &Threads,
        cache: Option<Cache>,
    ) -> Result<Unwinder> {
        let Some(mut maps) = maps else { return Ok(Unwinder(None)) };
        let mut loader = Loader::new(&mut maps, cache)?;
        let mut runtimes = Trackers::default();
        let tgids: Vec<u32> = match threads {
            Threads::Pids(p) => p.clone(),
            Threads::Tids(t) => t.iter().filter_map(|&t| procfs::tgid_of(t)).collect(),
            Threads::Cgroup(cg, _) => {
                let mut p: Vec<u32> = crate::sys::cgroup::threads_in(cg)
                    .into_iter()
                    .filter_map(procfs::tgid_of)
                    .collect();
                p.sort_unstable();
                p.dedup();
                p
            }
            _ => Vec::new(),
        };
        for tgid in tgids {
            loader.on_event(
                Some(ProcEvent { tgid, kind: proc_event::SEEN, ..Default::default() }),
                &mut maps,
            );
        }
        loader.settle(TARGETS_SETTLE, &mut maps);
        for (tgid, code) in loader.take_fresh() {
            runtimes.on_maps(tgid, &code, &mut maps);
        }
        Ok(Unwinder(Some((loader, runtimes, maps))))
    }

    /// Takes one process event (None: a beat); how soon it wants the next beat.
    pub fn on_event(&mut self, e: Option<ProcEvent>) -> Option<Duration> {
        let (loader, runtimes, maps) = self.0.as_mut()?;
        match e.map(|e| (e.kind, e)) {
            Some((proc_event::EXEC, e)) => {
                runtimes.python.on_exec(e.tgid, maps);
                runtimes.jit.forget(e.tgid, maps);
            }
            Some((proc_event::FORK, e)) => {
                runtimes.python.on_fork(e.tgid, e.parent, maps);
                runtimes.jit.on_fork(e.tgid, e.parent);
            }
            _ => {}
        }
        let tables = loader.on_event(e, maps);
        for (tgid, code) in loader.take_fresh() {
            runtimes.on_maps(tgid, &code, maps);
        }
        // An interpreter not ready yet is looked at again when its retry is due,
        // not at every beat.
        let interpreters = runtimes.python.beat(maps);
        // A table being read or built is put in place soon after: the first
        // waits of a program just started are walked meanwhile.
        let beat = if loader.idle() { BEAT } else { TABLE_BEAT };
        let reopen =
            loader.next_reopen().map(|at| at.saturating_duration_since(std::time::Instant::now()));
        sooner(sooner(tables.then_some(beat), interpreters), reopen)
    }

    /// The JVM processes whose Java the walker met since last asked.
    pub fn take_jvms(&mut self) -> Vec<u32> {
        self.0.as_mut().map_or_else(Vec::new, |(_, runtimes, _)| runtimes.jit.take_jvms())
    }

    /// Forgets the processes that have exited (asked once a second; done when
    /// enough have come or time has passed).
    pub fn sweep(&mut self) {
        if let Some((loader, runtimes, maps)) = self.0.as_mut() {
            for tgid in loader.sweep(maps) {
                runtimes.python.forget(tgid, maps);
                runtimes.jit.forget(tgid, maps);
            }
        }
    }

    /// What the tables cost, and what did not fit.
    pub fn stats(&self) -> Option<&Stats> {
        self.0.as_ref().map(|(l, _, _)| &l.stats)
    }

    /// Files known whose code no walk met: their tables were never built.
    pub fn unbuilt(&self) -> usize {
        self.0.as_ref().map_or(0, |(l, _, _)| l.unbuilt())
    }

    /// What did not fit, and the interpreters whose frames could not be named.
    pub fn warnings(&self) -> Vec<String> {
        self.0
            .as_ref()
            .map(|(l, p, _)| l.stats.warnings().into_iter().chain(p.python.warnings()).collect())
            .unwrap_or_default()
    }
}

/// The unwind table cache in `dir`, or none (said once) where it cannot be
/// used: tables are then built afresh each run.
pub fn open_cache(dir: Option<&std::path::Path>) -> Option<Cache> {
    let dir = dir?;
    match Cache::open(dir, crate::stacks::cfi::cache::DEFAULT_LIMIT) {
        Ok(c) => Some(c),
        Err(e) => {
            crate::util::stderr::say!("topwaits: warning: unwind tables are built afresh, not cached: {e:#} (--cache-dir DIR moves the cache, --no-cache quiets this)");
            None
        }
    }
}
