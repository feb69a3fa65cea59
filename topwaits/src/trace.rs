//! One trace from start to report: checks before loading, waiting for the duration
//! or a signal, draining, symbolizing and writing the chosen format.

use std::io::{self, BufWriter, Write};
use std::time::Duration;

use anyhow::{Context as _, Result};

use crate::bpf::{ProcEvents, Tracer};
use crate::cli::{Config, Threads, ThreadsConfig};
use crate::clock::{local_offset_s, monotonic_now, ClockPair};
use crate::error::UserError;
use crate::model::{Report, TraceInfo};
use crate::report;
use crate::symbolize::{resolve, BlazeSymbolizer};
use crate::sys::{caps, procfs};

/// Checks privilege and that every named pid/tid exists, before anything loads.
pub fn preflight(threads: &Threads) -> Result<(), UserError> {
    if !caps::this_process_is_privileged() {
        return Err(UserError::NoPrivilege);
    }
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

/// Why tracing ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    Duration,
    Signal(&'static str),
}

/// Waits for the duration, or SIGINT, SIGTERM or SIGHUP, handing process events
/// to `on_event` as they arrive.
pub fn wait(duration: Option<Duration>, events: Option<ProcEvents>, on_event: &mut dyn FnMut(u32, u32)) -> Result<End> {
    use tokio::io::unix::AsyncFd;
    use tokio::signal::unix::{signal, SignalKind};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    rt.block_on(async {
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut hup = signal(SignalKind::hangup())?;
        let mut events = match events {
            // SAFETY: the ring buffer owns its map fd, which stays open and the same
            // for as long as the AsyncFd holds it.
            Some(e) => Some(unsafe { AsyncFd::register_with_interest(e, tokio::io::Interest::READABLE) }.map_err(|e| e.into_parts().1)?),
            None => None,
        };
        let sleep = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(sleep);
        loop {
            let readable = async {
                match events.as_mut() {
                    Some(fd) => fd.readable_mut().await.map(Some),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut sleep => return Ok(End::Duration),
                _ = int.recv() => return Ok(End::Signal("SIGINT")),
                _ = term.recv() => return Ok(End::Signal("SIGTERM")),
                _ = hup.recv() => return Ok(End::Signal("SIGHUP")),
                guard = readable => {
                    if let Some(mut guard) = guard? {
                        guard.get_inner_mut().drain(&mut *on_event);
                        guard.clear_ready();
                    }
                }
            }
        }
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
    preflight(&config.threads)?;
    let clock = ClockPair::sample();
    let mut tracer = Tracer::start(config)?;
    let start_mono = tracer.attached_mono();
    let target = config.target();
    match config.duration {
        Some(d) => crate::say!("Tracing off-CPU waits of {target} for {:.1} s...", d.as_secs_f64()),
        None => crate::say!("Tracing off-CPU waits of {target}... Hit Ctrl-C to end."),
    }
    let mut symbolizer = BlazeSymbolizer::default();
    let events = tracer.take_events()?;
    let end = wait(config.duration, events, &mut |tgid, _kind| symbolizer.remember(tgid))?;
    second_interrupt_quits();
    if let End::Signal(s) = end {
        log::info!("{s}: ending the trace early");
    }
    tracer.stop();
    // Events were recorded until the programs were detached.
    let end_mono = monotonic_now();
    let capture = tracer.drain()?;
    let attach = tracer.attach_kind();
    drop(tracer);
    let records = resolve(&capture, &mut symbolizer);
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
        crate::say!("topwaits: warning: {w}");
    }
    let format = report::for_output(config.view, &config.output);
    write_quietly(|out| format.write(&report, out))
}

/// Human description of a thread selection.
fn describe(threads: &Threads) -> String {
    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    match threads {
        Threads::Pids(v) => format!("PID {}", list(v)),
        Threads::Tids(v) => format!("TID {}", list(v)),
        _ => "all threads".to_string(),
    }
}

/// Runs `topwaits threads`: the profile, the dependencies, and the rt-app file.
pub fn run_threads(config: &ThreadsConfig) -> Result<()> {
    preflight(&config.threads)?;
    let mut tracer = Tracer::start_threads(config)?;
    let start_mono = tracer.attached_mono();
    let target = describe(&config.threads);
    match config.duration {
        Some(d) => crate::say!("Tracing threads of {target} for {:.1} s...", d.as_secs_f64()),
        None => crate::say!("Tracing threads of {target}... Hit Ctrl-C to end."),
    }
    wait(config.duration, None, &mut |_, _| {})?;
    second_interrupt_quits();
    tracer.stop();
    let end_mono = monotonic_now();
    let mut capture = tracer.drain_threads(end_mono)?;
    drop(tracer);
    capture.threads.retain(|t| t.observed_ns() > 0);
    let groups = crate::deps::reduce(&capture.edges);
    let duration_s = end_mono.saturating_sub(start_mono) as f64 / 1e9;
    let mut warnings = Vec::new();
    if capture.lost_threads > 0 {
        warnings.push(format!("{} thread events did not fit into the full thread map; narrow the trace with -p/-t", capture.lost_threads));
    }
    if capture.lost_deps > 0 {
        warnings.push(format!("{} wake dependencies did not fit into the full dependency map; narrow the trace with -p/-t", capture.lost_deps));
    }
    for w in &warnings {
        crate::say!("topwaits: warning: {w}");
    }
    let report = crate::report::threads::ThreadsReport {
        threads: &capture.threads,
        edges: &capture.edges,
        groups: &groups,
        duration_s,
        target: &target,
        warnings: &warnings,
    };
    if let Some(path) = &config.rt_app {
        let secs = config.rt_app_duration.unwrap_or_else(|| duration_s.ceil().max(1.0) as u32);
        let demand = if config.rt_app_wanted { crate::rtapp::Demand::Wanted } else { crate::rtapp::Demand::OnCpu };
        let doc = crate::rtapp::document(&capture.threads, &groups, &capture.edges, secs, demand);
        std::fs::write(path, doc.render()).with_context(|| format!("failed to write {}", path.display()))?;
        crate::say!("Wrote the rt-app reproducer to {} ({secs} s); run it with: rt-app {}", path.display(), path.display());
    }
    write_quietly(|out| {
        if config.json {
            crate::report::threads::write_json(&report, out)
        } else {
            crate::report::threads::write_table(&report, out)
        }
    })
}
