//! topwaits: a Linux off-CPU and wakeup profiler. The binary is glue; the work
//! lives in these modules, listed here in the order the data flows and the
//! order of their layers (each imports only those below it; `layering` checks):
//!
//! - `run`: one runner per subcommand, from the options to the output;
//! - `report`: the formats (top view, folded, JSON, SVG, pprof, Perfetto);
//! - `analysis`: what the waits mean (why, locks, what, blocked, threads and
//!   rt-app, diff, the grouping of records);
//! - `bpf`: the only module that touches aya: loads, attaches, reads the maps;
//! - `stacks`: user stacks and names: unwind tables, Python, symbolization;
//! - `model`: the data every layer shares: records, labels, recordings;
//! - `cli`: the options, checked into a configuration;
//! - `sys`: the readers of `/proc`, `/sys`, ELF files and the kernel's BTF;
//! - `util`: small shared helpers (clock, hashing, errors, output files).

pub mod analysis;
pub mod bpf;
pub mod cli;
#[cfg(test)]
mod layering;
pub mod model;
pub mod report;
pub mod run;
pub mod stacks;
pub mod sys;
pub mod util;

use clap::Parser as _;

use util::stderr::{self, say};

/// Parses the command line, runs, and returns the process exit code. Errors are
/// printed as one line, with their causes joined by `: `.
pub fn main_entry() -> i32 {
    // With RUST_BACKTRACE set (some shells and CI machines set it), anyhow
    // captures a backtrace for every error made, and a trace makes and
    // handles errors as processes come and go: it raised the tracer's own CPU
    // under `perf bench sched messaging` from about 0.5% to 1.3% of a core.
    // Errors are reported as one line without their backtrace, so only
    // panics keep theirs. Set before any thread starts.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
    sys::heap::tune();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp(None)
        .init();
    let args = match cli::Args::try_parse() {
        Ok(a) => a,
        Err(e) if !e.use_stderr() => {
            // --help and --version go to stdout as clap renders them.
            let _ = e.print();
            return 0;
        }
        Err(e) => {
            say!("topwaits: {}", cli::one_line(&e.to_string()));
            return 2;
        }
    };
    let result = match run::command(args) {
        Ok(r) => r,
        Err(e) => {
            say!("topwaits: error: {e}");
            return 2;
        }
    };
    match result {
        Ok(()) => 0,
        Err(e) if e.downcast_ref::<util::error::GateCrossed>().is_some() => {
            say!("topwaits: diff: {e}");
            util::error::GATE_EXIT
        }
        Err(e) => {
            say!("topwaits: error: {}", stderr::error_line(&e));
            1
        }
    }
}
