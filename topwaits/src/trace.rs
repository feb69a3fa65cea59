//! One trace from start to report: checks before loading, waiting for the duration
//! or a signal, draining, symbolizing and writing the chosen format.

use std::io::{self, BufWriter, Write};
use std::time::Duration;

use anyhow::{Context as _, Result};

use crate::bpf::{ProcEvents, Tracer, WaitEvents};
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

/// Why tracing ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    Duration,
    Signal(&'static str),
    /// Every process of `-p` has exited.
    TargetsExited,
}

/// Process file descriptors of the `-p` processes: each becomes readable when its
/// process exits. A process already gone gets none.
pub fn pidfds(threads: &Threads) -> Vec<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd as _;
    let Threads::Pids(pids) = threads else { return Vec::new() };
    pids.iter()
        .filter_map(|&p| {
            // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p as libc::pid_t, 0) };
            // SAFETY: a non-negative return is a new fd that nothing else owns.
            (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
        })
        .collect()
}

/// The index of the first pidfd that is readable (its process exited); pending
/// while none is, or there are none.
fn first_ready(
    fds: &[tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>],
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<(std::io::Result<()>, usize)> {
    for (i, fd) in fds.iter().enumerate() {
        if let std::task::Poll::Ready(r) = fd.poll_read_ready(cx) {
            return std::task::Poll::Ready((r.map(drop), i));
        }
    }
    std::task::Poll::Pending
}

/// Waits for the duration, or SIGINT, SIGTERM or SIGHUP, or (with `targets`, the
/// pidfds of `-p`) until every target process has exited, handing process events
/// to `on_event` as they arrive and calling `tick` once a second.
pub fn wait(
    duration: Option<Duration>,
    targets: &mut Vec<std::os::fd::OwnedFd>,
    events_slot: &mut Option<ProcEvents>,
    waits_slot: &mut Option<WaitEvents>,
    on_event: &mut dyn FnMut(topwaits_common::ProcEvent),
    tick: &mut dyn FnMut(),
) -> Result<End> {
    use tokio::io::unix::AsyncFd;
    use tokio::signal::unix::{signal, SignalKind};
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("failed to start the async runtime")?;
    rt.block_on(async {
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut hup = signal(SignalKind::hangup())?;
        // Handled from here on: one that came while attaching is delivered now.
        hold_signals(false);
        let mut events = match events_slot.take() {
            // SAFETY: the ring buffer owns its map fd, which stays open and the same
            // for as long as the AsyncFd holds it.
            Some(e) => Some(unsafe { AsyncFd::register_with_interest(e, tokio::io::Interest::READABLE) }.map_err(|e| e.into_parts().1)?),
            None => None,
        };
        let mut long = match waits_slot.take() {
            // SAFETY: as for the process events above.
            Some(w) => Some(unsafe { AsyncFd::register_with_interest(w, tokio::io::Interest::READABLE) }.map_err(|e| e.into_parts().1)?),
            None => None,
        };
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let sleep = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(sleep);
        let watch = !targets.is_empty();
        let mut alive = Vec::new();
        for fd in targets.drain(..) {
            // SAFETY: the AsyncFd owns the pidfd, which stays open and the same for
            // as long as it is registered.
            alive.push(unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.map_err(|e| e.into_parts().1)?);
        }
        let end = loop {
            let readable = async {
                match events.as_mut() {
                    Some(fd) => fd.readable_mut().await.map(Some),
                    None => std::future::pending().await,
                }
            };
            // Long-wait events wake no one: read when the kernel says the buffer
            // is half full, else every 100 ms.
            let long_pulled = async {
                match long.as_mut() {
                    Some(fd) => {
                        let woken = match tokio::time::timeout(Duration::from_millis(100), fd.readable_mut()).await {
                            Ok(Ok(mut guard)) => {
                                guard.get_inner_mut().pull();
                                guard.clear_ready();
                                true
                            }
                            _ => false,
                        };
                        if !woken {
                            fd.get_mut().pull();
                        }
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut sleep => break End::Duration,
                _ = long_pulled => {}
                _ = int.recv() => break End::Signal("SIGINT"),
                _ = term.recv() => break End::Signal("SIGTERM"),
                _ = hup.recv() => break End::Signal("SIGHUP"),
                _ = ticker.tick() => tick(),
                (res, i) = std::future::poll_fn(|cx| first_ready(&alive, cx)) => {
                    res?;
                    alive.swap_remove(i);
                    if watch && alive.is_empty() {
                        break End::TargetsExited;
                    }
                }
                guard = readable => {
                    if let Some(mut guard) = guard? {
                        guard.get_inner_mut().drain(&mut *on_event);
                        guard.clear_ready();
                    }
                }
            }
        };
        // Processes still alive are watched again in the next interval.
        targets.extend(alive.into_iter().map(AsyncFd::into_inner));
        // Hand the event stream back for the next interval, with what is pending.
        if let Some(fd) = events {
            let mut inner = fd.into_inner();
            inner.drain(&mut *on_event);
            *events_slot = Some(inner);
        }
        if let Some(fd) = long {
            let mut inner = fd.into_inner();
            inner.pull();
            *waits_slot = Some(inner);
        }
        Ok(end)
    })
}

/// The one-line status on a terminal's stderr, rewritten in place.
struct Status {
    on: bool,
    started: std::time::Instant,
    total: Option<Duration>,
}

impl Status {
    fn new(total: Option<Duration>) -> Self {
        // SAFETY: isatty has no preconditions.
        let on = unsafe { libc::isatty(2) } == 1;
        Status { on, started: std::time::Instant::now(), total }
    }

    fn show(&self, c: &crate::model::Counters) {
        if !self.on {
            return;
        }
        let el = self.started.elapsed().as_secs_f64();
        let left = match self.total {
            Some(t) => format!(", {:.0} s left", (t.as_secs_f64() - el).max(0.0)),
            None => String::new(),
        };
        let mut err = io::stderr();
        let _ = write!(err, "\r\x1b[Ktopwaits: {el:.0} s{left}, {} waits recorded, {} lost", c.recorded, c.lost_total());
        let _ = err.flush();
    }

    fn clear(&self) {
        if self.on {
            let mut err = io::stderr();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}

/// Holds (blocks) or releases SIGINT, SIGTERM and SIGHUP on this thread. They are
/// held from before attaching until [`wait`] handles them, so that a Ctrl-C right
/// after the "Tracing..." line still ends the trace with a report.
pub fn hold_signals(hold: bool) {
    // SAFETY: sigset operations on a local set, and a mask change of this thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        let how = if hold { libc::SIG_BLOCK } else { libc::SIG_UNBLOCK };
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

/// Loads the kernel stack learners, whose verification takes tens of
/// milliseconds, while this thread keeps reading the process events: a process
/// first seen meanwhile gets its maps kept before it can exit.
fn load_learners(tracer: &mut Tracer, events: &mut Option<ProcEvents>, remember: &mut dyn FnMut(topwaits_common::ProcEvent)) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let done = AtomicBool::new(false);
    let loaded = std::thread::scope(|s| {
        let loading = s.spawn(|| {
            let r = tracer.load_learner();
            done.store(true, Ordering::Release);
            r
        });
        while !done.load(Ordering::Acquire) {
            if let Some(e) = events.as_mut() {
                e.drain(&mut *remember);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        loading.join()
    });
    match loaded {
        Ok(Ok(())) => log::debug!("kernel stack learners in place"),
        // Stacks stay exact, only every one is unwound.
        Ok(Err(e)) => log::warn!("kernel stacks will not be reused: {}", crate::stderr::error_line(&e)),
        Err(_) => log::warn!("kernel stacks will not be reused: the loading thread panicked"),
    }
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

/// Runs one whole trace, or one report per `--interval`.
pub fn run(config: &Config) -> Result<()> {
    hold_signals(true);
    preflight(&config.threads)?;
    // Watched from before attaching: a process that exits meanwhile ends the trace.
    let mut targets = pidfds(&config.threads);
    let mut files = Some(crate::outputs::ViewFiles::create(&config.shown, config.record.as_deref())?);
    if config.stacks != crate::cli::Stacks::UserOnly && crate::sys::kallsyms::addresses_hidden_in_sys() {
        crate::stderr::say!(
            "topwaits: warning: the kernel hides its symbol addresses from this process (it lacks CAP_SYSLOG; kernel.kptr_restrict={}): kernel frames will show as [unknown]; run as root or add CAP_SYSLOG",
            std::fs::read_to_string("/proc/sys/kernel/kptr_restrict").map(|v| v.trim().to_string()).unwrap_or_else(|_| "?".into())
        );
    }
    let clock = ClockPair::sample();
    let mut tracer = Tracer::start(config)?;
    let start_mono = tracer.attached_mono();
    let target = config.target();
    let what = match config.view {
        crate::cli::View::Wakeups => "wakeups",
        crate::cli::View::OffCpu if config.waker => "off-CPU waits and their wakers",
        crate::cli::View::OffCpu => "off-CPU waits",
    };
    match config.duration {
        Some(d) => crate::stderr::say!("Tracing {what} of {target} for {:.1} s...", d.as_secs_f64()),
        None => crate::stderr::say!("Tracing {what} of {target}... Hit Ctrl-C to end."),
    }
    let mut symbolizer = BlazeSymbolizer::default();
    if config.stacks != crate::cli::Stacks::UserOnly {
        symbolizer.warm_kernel();
    }
    let mut events = tracer.take_events()?;
    load_learners(&mut tracer, &mut events, &mut |e| symbolizer.on_event(e));
    let mut long = tracer.take_wait_events()?;
    let status = Status::new(config.duration);
    let t0 = std::time::Instant::now();
    let deadline = config.duration.map(|d| t0 + d);
    let format = report::for_output(config.view, &config.shown.output);
    let (mut interval_start, mut before) = (start_mono, crate::model::Counters::default());
    let mut total = crate::model::Counters::default();
    let mut snapshots = crate::snapshot::Snapshotter::default();
    for round in 0usize.. {
        // Interval ends are on a fixed grid from the start, so the time spent
        // reporting one interval does not delay the next.
        let now = std::time::Instant::now();
        let left = deadline.map(|d| d.saturating_duration_since(now));
        let next = config.interval.map(|i| (t0 + i * (round as u32 + 1)).saturating_duration_since(now));
        let slice = match (next, left) {
            (Some(i), Some(l)) => Some(i.min(l)),
            (i, l) => i.or(l),
        };
        let end = {
            let tracer = &tracer;
            wait(slice, &mut targets, &mut events, &mut long, &mut |e| symbolizer.on_event(e), &mut || {
                if let Ok(c) = tracer.counters() {
                    status.show(&c);
                }
            })?
        };
        status.clear();
        let finished = config.interval.is_none()
            || matches!(end, End::Signal(_) | End::TargetsExited)
            || deadline.is_some_and(|d| std::time::Instant::now() >= d);
        match end {
            End::Signal(s) => log::info!("{s}: ending the trace early"),
            End::TargetsExited => crate::stderr::say!("topwaits: {target}: every traced process has exited; ending the trace"),
            End::Duration => {}
        }
        if finished {
            second_interrupt_quits();
            // Events were recorded until the programs were detached.
            tracer.stop(config.open_waits);
        }
        let end_mono = monotonic_now();
        let open_at = config.open_waits.then_some(end_mono);
        // Long waits sent until the programs were detached, as one-wait records.
        let (event_raws, event_states): (Vec<_>, Vec<u32>) = long
            .as_mut()
            .map(|l| {
                l.pull();
                std::mem::take(&mut l.got)
            })
            .unwrap_or_default()
            .iter()
            .map(|e| crate::longwaits::raw(e, config.waker))
            .unzip();
        let mut capture = if finished { tracer.drain(open_at, &event_raws)? } else { tracer.drain_and_clear(open_at)? };
        if config.open_waits {
            let span = crate::open::Span { start: start_mono, end: end_mono };
            crate::open::add_waits_before_trace(config, &mut capture, &mut snapshots, span, std::process::id());
        }
        total = capture.counters;
        // Events are symbolized with the records, then split off again.
        let aggregate = capture.records.len();
        capture.records.extend(event_raws);
        let mut resolved = resolve(&capture, &mut symbolizer);
        // The raw rows and stacks are named now: free them for the report.
        (capture.records, capture.stacks) = Default::default();
        let events = crate::longwaits::events(resolved.records.split_off(aggregate), &event_states);
        let mut counters = capture.counters.since(&before);
        counters.user_stacks_cut = resolved.user_stacks_cut;
        // Records alike in all a report shows are one; the graphs keep threads apart.
        let records = crate::reduce::merge(resolved.records, crate::reduce::By::Thread);
        let mut report = Report {
            info: TraceInfo {
                clock,
                start_mono: interval_start,
                end_mono,
                attach: tracer.attach_kind(),
                target: target.clone(),
                utc_offset_s: local_offset_s(clock.wall(start_mono)),
                waker: config.waker,
                by: crate::reduce::By::Thread,
                state_filter: config.state,
            },
            counters,
            records,
            objects: Default::default(),
            events,
        };
        let grouped = crate::reduce::grouped(&report, config.shown.by);
        write_quietly(|out| {
            if !config.print {
                return Ok(());
            }
            let shown = grouped.as_ref().unwrap_or(&report);
            if config.interval.is_some() {
                interval_frame(out, &config.shown.output, round, shown)?;
            }
            format.write(shown, out)
        })?;
        if !finished {
            (interval_start, before) = (end_mono, capture.counters);
            continue;
        }
        if let Some(files) = files.take() {
            if files.need_objects() {
                report.objects = crate::objects::Objects::default().of_records(&report.records, |t| symbolizer.file_maps(t));
            }
            files.write(&report)?;
        }
        break;
    }
    drop(tracer);
    // Losses are said once, for the whole trace, with their fixes.
    for w in total.warnings() {
        crate::stderr::say!("topwaits: warning: {w}");
    }
    Ok(())
}

/// What separates interval reports: a header with the interval's wall-clock end in
/// the top view, a blank line between folded blocks, nothing in JSON (one document
/// per line).
pub fn interval_frame(out: &mut dyn Write, output: &crate::cli::Output, round: usize, report: &Report) -> io::Result<()> {
    use crate::cli::Output;
    match output {
        Output::Top { .. } => writeln!(
            out,
            "{}=== interval ending {} {} ===",
            if round > 0 { "\n" } else { "" },
            crate::clock::date(report.info.clock.wall(report.info.end_mono), report.info.utc_offset_s),
            crate::clock::hms_millis(report.info.clock.wall(report.info.end_mono), report.info.utc_offset_s)
        ),
        Output::Folded { .. } if round > 0 => writeln!(out),
        _ => Ok(()),
    }
}

/// The end of a threads window: now, or the deadline set ahead if that has passed
/// (the kernel stopped recording at it).
pub fn window_end(now: u64, deadline: Option<u64>) -> u64 {
    deadline.map_or(now, |d| d.min(now))
}

/// Runs `topwaits threads`: the profile, the dependencies, and the rt-app file.
pub fn run_threads(config: &ThreadsConfig) -> Result<()> {
    hold_signals(true);
    preflight(&config.threads)?;
    let rt_app_file = crate::outfile::OutputFile::create_opt(config.rt_app.as_deref())?;
    let mut tracer = Tracer::start_threads(config)?;
    let start_mono = tracer.attached_mono();
    // The kernel ends the window at the requested instant, even if this process
    // cannot run then (SCHED_FIFO threads hogging every CPU once made a 2 s trace
    // a 2.51 s window).
    let deadline = config.duration.map(|d| start_mono + d.as_nanos() as u64);
    if let Some(end) = deadline {
        tracer.end_threads_at(end)?;
    }
    let target = config.threads.describe();
    match config.duration {
        Some(d) => crate::stderr::say!("Tracing threads of {target} for {:.1} s...", d.as_secs_f64()),
        None => crate::stderr::say!("Tracing threads of {target}... Hit Ctrl-C to end."),
    }
    wait(config.duration, &mut pidfds(&config.threads), &mut None, &mut None, &mut |_| {}, &mut || {})?;
    second_interrupt_quits();
    // The window ends when the programs stop recording, not when detaching ends.
    let end_mono = window_end(monotonic_now(), deadline);
    tracer.end_threads_at(end_mono)?;
    tracer.stop(false);
    let mut capture = tracer.drain_threads(end_mono)?;
    drop(tracer);
    capture.threads.retain(|t| t.observed_ns() > 0);
    let sleeps: std::collections::HashMap<u32, u64> = capture.threads.iter().map(|t| (t.tid, t.sleep_events)).collect();
    let groups = crate::deps::reduce(&crate::deps::driving(&capture.edges, &sleeps));
    let duration_s = end_mono.saturating_sub(start_mono) as f64 / 1e9;
    let mut warnings = Vec::new();
    if capture.lost_threads > 0 {
        warnings.push(format!("{} thread events did not fit into the full thread map; narrow the trace with -p/-t", capture.lost_threads));
    }
    if capture.lost_deps > 0 {
        warnings
            .push(format!("{} wake dependencies did not fit into the full dependency map; narrow the trace with -p/-t", capture.lost_deps));
    }
    for w in &warnings {
        crate::stderr::say!("topwaits: warning: {w}");
    }
    let report = crate::report::threads::ThreadsReport {
        threads: &capture.threads,
        edges: &capture.edges,
        groups: &groups,
        duration_s,
        target: &target,
        warnings: &warnings,
    };
    if let (Some(path), Some(file)) = (&config.rt_app, rt_app_file) {
        let secs = config.rt_app_duration.unwrap_or_else(|| crate::rtapp::replay_seconds(duration_s));
        let demand = if config.rt_app_wanted { crate::rtapp::Demand::Wanted } else { crate::rtapp::Demand::OnCpu };
        let replay = crate::rtapp::Replay { duration_s: secs, demand, calibration: config.rt_app_calibration };
        let doc = crate::rtapp::document(&capture.threads, &groups, &capture.edges, replay);
        file.write_quiet(|out| out.write_all(doc.render().as_bytes()))?;
        crate::stderr::say!("Wrote the rt-app reproducer to {} ({secs} s); run it with: rt-app {}", path.display(), path.display());
    }
    write_quietly(|out| {
        if config.json {
            crate::report::threads::write_json(&report, out)
        } else {
            crate::report::threads::write_table(&report, out)
        }
    })
}
