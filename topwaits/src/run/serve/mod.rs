//! `topwaits serve`: one trace until stopped, drained every step into
//! increments (see `analysis::increments`) that feed the Prometheus counters,
//! the pprof requests waiting for their window, and the OTLP pusher. Memory
//! stays bounded: the aggregate is cleared each step, stacks age out of the
//! kernel's maps, the symbolizer forgets processes gone, and profiles are
//! built only for a request or a push.

mod http;
mod otlp;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use super::between::Waiting;
use super::interval;
use super::tables::Unwinder;
use super::trace::{seed_waits, symbolizer_and_learners, trace_info};
use super::wait::{hold_signals, pidfds, End};
use crate::analysis::increments::Increments;
use crate::analysis::metrics::Metrics;
use crate::analysis::reduce::By;
use crate::bpf::Tracer;
use crate::model::{Counters, Report, TraceInfo};
use crate::report::prometheus::Own;
use crate::settings::ServeConfig;
use crate::util::clock::{local_offset_s, monotonic_now, ClockPair};

/// Steps between checks of how full the stack maps are.
const AGE_EVERY: u64 = 30;

/// A pprof request's window: the reports of the steps that overlap it,
/// gathered until a step ends at or past its end.
struct Window {
    id: u64,
    from_mono: u64,
    until_mono: u64,
    parts: Vec<Arc<Report>>,
    done: bool,
}

/// What the serving threads share with the tracing loop.
pub(super) struct Shared {
    metrics: Mutex<Metrics>,
    own: Mutex<Own>,
    windows: Mutex<Vec<Window>>,
    gathered: Condvar,
    stop: AtomicBool,
    waker: bool,
    step: Duration,
}

impl Shared {
    fn new(c: &ServeConfig, clock: ClockPair) -> Shared {
        Shared {
            metrics: Mutex::new(Metrics::new(c.max_series)),
            own: Mutex::new(Own {
                start_time_seconds: clock.wall(monotonic_now()) as f64 / 1e9,
                ..Default::default()
            }),
            windows: Mutex::new(Vec::new()),
            gathered: Condvar::new(),
            stop: AtomicBool::new(false),
            waker: c.trace.waker,
            step: c.step,
        }
    }

    /// Waits for the reports of the next `secs` seconds, merged into one; None
    /// when serving ends first.
    fn next_seconds(&self, secs: u64) -> Option<Report> {
        static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id = IDS.fetch_add(1, Ordering::Relaxed);
        let from_mono = monotonic_now();
        let until_mono = from_mono + secs * 1_000_000_000;
        let mut windows = self.windows.lock().ok()?;
        windows.push(Window { id, from_mono, until_mono, parts: Vec::new(), done: false });
        // The step in progress, the window, and some slack, at most.
        let give_up =
            Instant::now() + Duration::from_secs(secs) + self.step * 2 + Duration::from_secs(5);
        loop {
            let i = windows.iter().position(|w| w.id == id)?;
            if windows[i].done || self.stop.load(Ordering::Relaxed) || Instant::now() >= give_up {
                let w = windows.swap_remove(i);
                return (w.done || !w.parts.is_empty()).then(|| merged(&w.parts)).flatten();
            }
            windows = self.gathered.wait_timeout(windows, Duration::from_millis(500)).ok()?.0;
        }
    }

    /// Hands one step's report to the windows it belongs to: a window takes
    /// whole steps, from the first that begins after the request, until they
    /// span the seconds asked for (within half a step), so that a profile of
    /// N seconds spans N seconds, not N and the step in progress.
    fn gather(&self, report: &Arc<Report>) {
        let Ok(mut windows) = self.windows.lock() else { return };
        let half_step = self.step.as_nanos() as u64 / 2;
        for w in windows.iter_mut().filter(|w| !w.done) {
            if w.parts.is_empty() {
                if report.info.start_mono + half_step < w.from_mono {
                    continue;
                }
                // The window runs from this step's start.
                w.until_mono = report.info.start_mono + (w.until_mono - w.from_mono);
                w.from_mono = report.info.start_mono;
            }
            w.parts.push(report.clone());
            w.done = report.info.end_mono + half_step >= w.until_mono;
        }
        self.gathered.notify_all();
    }
}

/// Several steps' reports as one: the span from the first's start to the
/// last's end, rows alike merged.
pub(super) fn merged(parts: &[Arc<Report>]) -> Option<Report> {
    let (first, last) = (parts.first()?, parts.last()?);
    let records = parts.iter().flat_map(|p| p.records.iter().cloned()).collect();
    Some(Report {
        info: TraceInfo {
            start_mono: first.info.start_mono,
            end_mono: last.info.end_mono,
            ..first.info.clone()
        },
        counters: Counters::default(),
        records: crate::analysis::reduce::merge(records, By::Thread),
        objects: Default::default(),
        events: Vec::new(),
        samples: Vec::new(),
    })
}

/// Runs `serve` until a signal (or, with `-p`, until every process has exited).
pub fn run(c: &ServeConfig) -> Result<()> {
    let config = &*c.trace;
    hold_signals();
    super::preflight(&config.threads)?;
    let listener = listen(c)?;
    let targets = pidfds(&config.threads);
    let clock = ClockPair::sample();
    let cache = super::tables::open_cache(config.cache.as_deref());
    let (mut tracer, unwinder) =
        Tracer::start(config, |maps| Unwinder::start(maps, &config.threads, cache.clone()))?;
    let unwinder = std::cell::RefCell::new(unwinder);
    tracer.count_seeded_open();
    seed_waits(&mut tracer, cache);
    let (mut symbolizer, events) = symbolizer_and_learners(config, &mut tracer, &unwinder)?;
    symbolizer.refresh_every(super::trace::REFRESH_EVERY);
    let shared = Arc::new(Shared::new(c, clock));
    // Started while the signals are held, so that they block them too.
    let server = http::Server::start(listener, shared.clone())?;
    let pusher = c.otlp.clone().map(|o| otlp::Pusher::start(o, shared.clone()));
    let target = config.target();
    announce(c, server.addr(), &target);
    let mut increments = Increments::default();
    let (mut interval_start, mut before) = (tracer.attached_mono(), Counters::default());
    let mut lost_stacks = 0;
    let t0 = Instant::now();
    let mut waiting = Waiting::new(targets, events, None);
    let mut last_sweep = Instant::now();
    // Kept across steps: it reads the kernel's symbols once. Every output
    // of serve shows labels in their short form.
    let mut resolver = crate::analysis::what::procfs::ProcResolver::brief();
    let ended = 'serve: {
        for round in 1u64.. {
            let next = (t0 + c.step * round as u32).saturating_duration_since(Instant::now());
            let end =
                waiting.wait(Some(next), &mut tracer, &mut symbolizer, &unwinder, &mut |_| {})?;
            match end {
                End::Signal(s) => break 'serve s.to_string(),
                End::TargetsExited => break 'serve format!("every process of {target} has exited"),
                End::Duration => {}
            }
            let end_mono = monotonic_now();
            let mut capture = tracer.drain_and_clear(Some(end_mono))?;
            waiting.absorb_spilled(&mut capture);
            increments.step(&mut capture.records);
            let total = capture.counters;
            let mut info = trace_info(config, clock, tracer.attach_kind(), &target);
            info.goroutines = tracer.goroutines().describe();
            (info.start_mono, info.end_mono) = (interval_start, end_mono);
            (info.utc_offset_s, info.on_cpu_hz) = (local_offset_s(clock.wall(end_mono)), None);
            resolver.next_interval();
            let labels =
                config.labels.then_some(&mut resolver as &mut dyn crate::analysis::what::Resolve);
            let report = Arc::new(interval::report(
                capture,
                interval::Events::default(),
                &before,
                info,
                &mut symbolizer,
                labels,
            ));
            (interval_start, before) = (end_mono, total);
            if let Ok(mut m) = shared.metrics.lock() {
                m.add(&report, &total);
            }
            shared.gather(&report);
            if let Some(p) = &pusher {
                p.send(report);
            }
            let lost = total.lost_kernel_stacks + total.lost_user_stacks + total.chains_full;
            if round % AGE_EVERY == 0 || lost > lost_stacks {
                lost_stacks = lost;
                age(&mut tracer, &shared);
            }
            if last_sweep.elapsed() >= super::trace::FORGET_AFTER {
                last_sweep = Instant::now();
                symbolizer.forget_gone();
                crate::sys::heap::for_report();
                crate::sys::heap::for_tracing();
            }
        }
        unreachable!("the steps never run out")
    };
    log::info!("serve: {ended}: ending");
    shared.stop.store(true, Ordering::Relaxed);
    shared.gathered.notify_all();
    server.stop();
    if let Some(p) = pusher {
        p.finish();
    }
    drop(tracer);
    say_ending(&shared, &unwinder.borrow(), &ended);
    Ok(())
}

/// The warnings of the whole run, and that it stopped.
fn say_ending(shared: &Shared, unwinder: &Unwinder, ended: &str) {
    let warnings = shared.metrics.lock().map(|m| m.counters.warnings()).unwrap_or_default();
    for w in warnings.into_iter().chain(unwinder.warnings()) {
        crate::util::stderr::say!("topwaits: warning: {w}");
    }
    crate::util::stderr::say!("topwaits: serve: {ended}; stopped");
}

/// The port first: a busy one ends serve before anything loads; and the OTLP
/// receiver, which is only warned about.
fn listen(c: &ServeConfig) -> Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(c.listen).map_err(|e| {
        anyhow!("serve: cannot listen on {}: {e}; choose another address with --listen", c.listen)
    })?;
    if let Some(o) = &c.otlp {
        otlp::check_reachable(o);
    }
    Ok(listener)
}

/// Says where serve answers, and where it pushes.
fn announce(c: &ServeConfig, addr: std::net::SocketAddr, target: &str) {
    let offwake = if c.trace.waker { ", /debug/pprof/offwake" } else { "" };
    let pushing = c
        .otlp
        .as_ref()
        .map(|o| {
            let every = o.interval.as_secs_f64();
            format!("; pushing OTLP profiles to {} every {every:.0} s", o.url)
        })
        .unwrap_or_default();
    crate::util::stderr::say!(
        "Serving the waits of {target} on http://{addr}/metrics and /debug/pprof/offcpu{offwake}{pushing}... Hit Ctrl-C to end."
    );
}

/// Ages out of the kernel's full stack and chain maps what nothing in flight
/// names, and counts it.
fn age(tracer: &mut Tracer, shared: &Shared) {
    match tracer.age_stacks() {
        Ok(a) if a.stacks + a.chains > 0 => {
            log::info!(
                "aged {} stacks and {} waker chains out of the kernel's maps",
                a.stacks,
                a.chains
            );
            if let Ok(mut own) = shared.own.lock() {
                own.stacks_aged += a.stacks;
                own.chains_aged += a.chains;
            }
        }
        Ok(_) => {}
        Err(e) => log::warn!("stacks could not be aged: {}", crate::util::stderr::error_line(&e)),
    }
}
