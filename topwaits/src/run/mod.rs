//! One runner per subcommand, each reading top to bottom in the order data flows:
//! validated options → load → wait → drain → symbolize → merge → report. `trace`
//! runs a trace and `record` (a trace with a record file), `threads`, `blocked`,
//! `report` and `why` their own; what they share (checks before loading, waiting,
//! the status line, the files beside stdout, the unwind tables, stdout itself) is here.

pub mod blocked;
pub mod diff;
mod files;
pub mod interval;
pub mod locks;
pub mod report;
pub mod serve;
mod status;
mod tables;
pub mod threads;
pub mod trace;
mod wait;
pub mod why;

use std::io::{self, BufWriter, Write};

use anyhow::{Context as _, Result};

use crate::cli::{self, ConfigError, Threads};
use crate::sys::{caps, procfs};
use crate::util::error::UserError;

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
