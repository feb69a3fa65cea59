//! topwaits: a Linux off-CPU and wakeup profiler. The binary is glue; the work lives
//! in these modules, and data flows one way: options (`cli`) → kernel maps (`bpf`)
//! → `model` → `symbolize` → `reduce` → `report`, each subcommand's runner in `run`
//! reading top to bottom in that order. Modules import only those below them in
//! the layer order that `layering` checks.

pub mod blocked;
pub mod bpf;
pub mod cfi;
pub mod cli;
pub mod clock;
pub mod deps;
pub mod diff;
pub mod error;
pub mod fasthash;
pub mod interrupts;
pub mod label;
#[cfg(test)]
mod layering;
pub mod locks;
pub mod longwaits;
pub mod model;
pub mod objects;
pub mod open;
pub mod outfile;
pub mod profile;
pub mod python;
pub mod recording;
pub mod reduce;
pub mod report;
pub mod rtapp;
pub mod run;
pub mod snapshot;
mod stderr;
pub mod symbolize;
pub mod sys;
pub mod timeshare;
pub mod unwind;
pub mod waitfor;
pub mod what;
pub mod why;

use clap::Parser as _;

use stderr::say;

/// Parses the command line, runs, and returns the process exit code. Errors are
/// printed as one line, with their causes joined by `: `.
pub fn main_entry() -> i32 {
    sys::heap::tune();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).format_timestamp(None).init();
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
        Err(e) if e.downcast_ref::<error::GateCrossed>().is_some() => {
            say!("topwaits: diff: {e}");
            error::GATE_EXIT
        }
        Err(e) => {
            say!("topwaits: error: {}", stderr::error_line(&e));
            1
        }
    }
}
