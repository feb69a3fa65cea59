//! One trace from start to report: checks before loading, waiting for the duration
//! or a signal, draining, symbolizing and writing the chosen format.

use std::io::{self, BufWriter, Write};
use std::time::Duration;

use anyhow::{Context as _, Result};

use crate::bpf::Tracer;
use crate::cli::{Config, Threads};
use crate::clock::{local_offset_s, monotonic_now, ClockPair};
use crate::error::UserError;
use crate::model::{Report, TraceInfo};
use crate::report;
use crate::symbolize::{resolve, BlazeSymbolizer};
use crate::sys::{caps, procfs};

/// Checks privilege and that every named pid/tid exists, before anything loads.
pub fn preflight(config: &Config) -> Result<(), UserError> {
    if !caps::this_process_is_privileged() {
        return Err(UserError::NoPrivilege);
    }
    match &config.threads {
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

/// Why tracing ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    Duration,
    Signal(&'static str),
}

/// Waits for the duration, or SIGINT, SIGTERM or SIGHUP.
pub fn wait(duration: Option<Duration>) -> Result<End> {
    use tokio::signal::unix::{signal, SignalKind};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    rt.block_on(async {
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut hup = signal(SignalKind::hangup())?;
        let sleep = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        Ok(tokio::select! {
            _ = sleep => End::Duration,
            _ = int.recv() => End::Signal("SIGINT"),
            _ = term.recv() => End::Signal("SIGTERM"),
            _ = hup.recv() => End::Signal("SIGHUP"),
        })
    })
}

/// Lets a second Ctrl-C during the report end the process at once.
fn second_interrupt_quits() {
    // SAFETY: restoring the default disposition of a signal is always allowed.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
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

/// Runs one whole trace.
pub fn run(config: &Config) -> Result<()> {
    preflight(config)?;
    let clock = ClockPair::sample();
    let mut tracer = Tracer::start(config)?;
    let start_mono = monotonic_now();
    let target = config.target();
    match config.duration {
        Some(d) => eprintln!("Tracing off-CPU waits of {target} for {:.1} s...", d.as_secs_f64()),
        None => eprintln!("Tracing off-CPU waits of {target}... Hit Ctrl-C to end."),
    }
    let end = wait(config.duration)?;
    let end_mono = monotonic_now();
    second_interrupt_quits();
    if let End::Signal(s) = end {
        log::info!("{s}: ending the trace early");
    }
    tracer.stop();
    let capture = tracer.drain()?;
    let attach = tracer.attach_kind();
    drop(tracer);
    let records = resolve(&capture, &mut BlazeSymbolizer::default());
    let report = Report {
        info: TraceInfo {
            clock,
            start_mono,
            end_mono,
            attach,
            target,
            utc_offset_s: local_offset_s(clock.wall(start_mono)),
            waker: config.waker,
        },
        counters: capture.counters,
        records,
    };
    for w in report.counters.warnings() {
        eprintln!("topwaits: warning: {w}");
    }
    let format = report::for_output(config.view, &config.output);
    write_quietly(|out| format.write(&report, out))
}
