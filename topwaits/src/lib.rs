//! topwaits: a Linux off-CPU and wakeup profiler. The binary is glue; the work lives
//! in these modules, and data flows one way: kernel maps → `bpf` → `model` →
//! `symbolize` → `reduce` → `report`.

pub mod blocked;
pub mod bpf;
pub mod cfi;
pub mod cli;
pub mod clock;
pub mod deps;
pub mod error;
pub mod fasthash;
pub mod interrupts;
#[cfg(test)]
mod layering;
pub mod longwaits;
pub mod model;
pub mod objects;
pub mod open;
pub mod outfile;
pub mod profile;
pub mod recording;
pub mod reduce;
pub mod report;
pub mod rtapp;
pub mod run;
pub mod snapshot;
mod stderr;
pub mod symbolize;
pub mod sys;
pub mod unwind;
pub mod waitfor;

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
    let result = match args.command.clone() {
        Some(cli::Command::Threads(t)) => cli::ThreadsConfig::from_args(t).map(|c| run::threads::run(&c)),
        Some(cli::Command::Blocked(b)) => cli::BlockedConfig::from_args(b).map(|c| run::blocked::run(&c)),
        Some(cli::Command::Record(r)) => cli::Config::for_record(r).map(|c| run::trace::run(&c)),
        Some(cli::Command::Report(r)) => cli::ReportConfig::from_args(r).map(|c| run::report::run(&c)),
        None => cli::Config::from_args(args.trace).map(|c| run::trace::run(&c)),
    };
    let result = match result {
        Ok(r) => r,
        Err(e) => {
            say!("topwaits: error: {e}");
            return 2;
        }
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            say!("topwaits: error: {}", stderr::error_line(&e));
            1
        }
    }
}
