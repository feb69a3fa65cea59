//! `topwaits blocked`: a snapshot of the threads blocked right now, on what and
//! held by whom, with no trace at all.

use anyhow::Result;

use crate::analysis::blocked::collect;
use crate::report::{blocked, Format};
use crate::settings::BlockedConfig;

/// Runs `topwaits blocked`: the snapshot, printed as text or JSON, and the graph
/// written for Graphviz. Every output file is opened before any work.
pub fn run(config: &BlockedConfig) -> Result<()> {
    if !crate::sys::caps::this_process_is_privileged() {
        crate::util::stderr::say!("topwaits: warning: not root: kernel stacks, syscalls and other processes' memory are unreadable");
    }
    super::check_targets(&config.threads)?;
    let dot = crate::util::outfile::OutputFile::create_opt(config.dot.as_deref())?;
    let target = config.threads.describe();
    // The threads' frame pointers, which /proc does not show: without them a
    // stack through code built with frame pointers is cut where it needs one.
    let regs = crate::sys::caps::this_process_is_privileged()
        .then(crate::bpf::TaskRegsNow::load)
        .and_then(|loaded| loaded.map_err(|e| no_regs(&e)).ok())
        .map(|mut iter| -> crate::analysis::snapshot::RegsReader {
            Box::new(move || {
                iter.read().unwrap_or_else(|e| {
                    no_regs(&e);
                    Default::default()
                })
            })
        });
    let report = collect(config, target, regs, super::tables::open_cache(config.cache.as_deref()))?;
    for w in &report.warnings {
        crate::util::stderr::say!("topwaits: warning: {w}");
    }
    if let Some(file) = dot {
        file.write(|w| blocked::Dot.write(&report, w))?;
    }
    let format: &dyn Format<_> = if config.json { &blocked::Json } else { &blocked::Text };
    super::write_quietly(|out| format.write(&report, out))
}

/// Says in the log why the task iterator gave no registers: stacks through
/// frame-pointer code are then cut where they need one.
fn no_regs(e: &anyhow::Error) {
    log::info!("no task registers: {}", crate::util::stderr::error_line(e));
}
