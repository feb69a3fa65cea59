//! One runner per subcommand, each reading top to bottom in the order data flows:
//! validated options → load → wait → drain → symbolize → merge → report. `trace`
//! runs a trace and `record` (a trace with a record file), `threads`, `blocked`,
//! `report` and `why` their own; what they share (checks before loading, waiting,
//! the status line, the files beside stdout, the unwind tables, stdout itself) is here.

mod between;
pub mod blocked;
pub mod diff;
mod files;
pub mod interval;
pub mod locks;
pub mod report;
pub mod serve;
mod spill;
mod status;
mod tables;
pub mod threads;
pub mod trace;
mod wait;
pub mod why;

use std::io::{self, BufWriter, Write};

use anyhow::{Context as _, Result};

use crate::cli::{self, ConfigError};
use crate::settings::Threads;
use crate::sys::{caps, procfs};
use crate::util::error::UserError;
use crate::util::stderr::say;

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
    crate::sys::heap::tune();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp(None)
        .init();
    let args = match <cli::Args as clap::Parser>::try_parse() {
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
    let result = match command(args) {
        Ok(r) => r,
        Err(e) => {
            say!("topwaits: error: {e}");
            return 2;
        }
    };
    match result {
        Ok(()) => 0,
        Err(e) if e.downcast_ref::<crate::util::error::GateCrossed>().is_some() => {
            say!("topwaits: diff: {e}");
            crate::util::error::GATE_EXIT
        }
        Err(e) => {
            say!("topwaits: error: {}", crate::util::stderr::error_line(&e));
            1
        }
    }
}

/// Validates the options of the subcommand asked for and runs it: a bad option is
/// the outer error (exit code 2), a failed run the inner one (exit code 1).
pub fn command(args: cli::Args) -> Result<Result<()>, ConfigError> {
    Ok(match args.validate()? {
        cli::Validated::Threads(t) => threads::run(&t),
        cli::Validated::Blocked(b) => blocked::run(&b),
        cli::Validated::Trace(c) => trace::run(&c),
        cli::Validated::Report(r) => report::run(&r),
        cli::Validated::Why(w) => why::run(w),
        cli::Validated::Locks(l) => locks::run(l),
        cli::Validated::Diff(d) => diff::run(&d),
        cli::Validated::Serve(s) => serve::run(&s),
        cli::Validated::Generate(dir) => cli::generate::generate(&dir),
    })
}

/// Checks privilege and that every named pid/tid exists, before anything loads.
pub fn preflight(threads: &Threads) -> Result<(), UserError> {
    if !caps::this_process_is_privileged() {
        return Err(UserError::NoPrivilege);
    }
    check_targets(threads)
}

/// Checks that every pid of `-p` is a live process and every tid of `-t` a live thread.
pub fn check_targets(threads: &Threads) -> Result<(), UserError> {
    match threads {
        Threads::Pids(ids) => {
            for &id in ids {
                match procfs::tgid_of(id) {
                    None => return Err(UserError::NoSuchPid(id)),
                    Some(tgid) if tgid != id => return Err(UserError::NotAProcess { id, tgid }),
                    Some(_) => {}
                }
            }
        }
        Threads::Tids(ids) => {
            if let Some(&id) = ids.iter().find(|&&id| procfs::tgid_of(id).is_none()) {
                return Err(UserError::NoSuchTid(id));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Writes with a broken pipe (e.g. `| head`) treated as a quiet success.
pub fn write_quietly(f: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<()> {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    match f(&mut out).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("failed to write the report"),
    }
}
