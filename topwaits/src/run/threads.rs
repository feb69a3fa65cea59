//! `topwaits threads`: the per-thread profile, the wake dependencies, the
//! rt-app reproducer, and with `--on-cpu` each thread's hottest running stacks.

use anyhow::Result;

use super::interval;
use super::tables::Unwinder;
use super::wait::{hold_signals, pidfds, second_interrupt_quits, wait};
use super::{preflight, write_quietly};
use crate::analysis::reduce::By;
use crate::bpf::Tracer;
use crate::model::TraceInfo;
use crate::report::{threads, Format};
use crate::settings::ThreadsConfig;
use crate::stacks::symbolize::BlazeSymbolizer;
use crate::util::clock::monotonic_now;

/// How many running stacks each thread shows with `--on-cpu`.
const HOT_STACKS: usize = 3;

/// The end of a threads window: now, or the deadline set ahead if that has passed
/// (the kernel stopped recording at it).
pub fn window_end(now: u64, deadline: Option<u64>) -> u64 {
    deadline.map_or(now, |d| d.min(now))
}

/// What the report of the on-CPU samples (at `hz`) and the goroutines' waits
/// says of the window.
fn sampled_info(
    config: &ThreadsConfig,
    clock: crate::util::clock::ClockPair,
    attach: crate::model::AttachKind,
    (start_mono, end_mono): (u64, u64),
    hz: Option<u32>,
) -> TraceInfo {
    TraceInfo {
        clock,
        start_mono,
        end_mono,
        attach,
        target: config.threads.describe(),
        utc_offset_s: crate::util::clock::local_offset_s(clock.wall(start_mono)),
        waker: false,
        by: By::Thread,
        state_filter: None,
        on_cpu_hz: hz,
        cgroup_target: matches!(config.threads, crate::settings::Threads::Cgroup(..)),
        goroutines: None,
    }
}

/// The losses of the profile, said on stderr and returned for the report.
fn say_warnings(
    capture: &crate::model::profile::ThreadsCapture,
    sampled: Option<&crate::model::Report>,
    unwinder: &Unwinder,
) -> Vec<String> {
    let mut warnings = Vec::new();
    if capture.lost_threads > 0 {
        warnings.push(format!(
            "{} thread events did not fit into the full thread map; narrow the trace with -p/-t",
            capture.lost_threads
        ));
    }
    if capture.lost_deps > 0 {
        warnings.push(format!(
            "{} wake dependencies did not fit into the full dependency map; narrow the trace with -p/-t",
            capture.lost_deps
        ));
    }
    if let Some(r) = sampled {
        warnings.extend(r.counters.warnings());
    }
    warnings.extend(unwinder.warnings());
    for w in &warnings {
        crate::util::stderr::say!("topwaits: warning: {w}");
    }
    warnings
}

/// Writes the rt-app reproducer of the profile, and says how to run it.
fn write_rt_app(
    config: &ThreadsConfig,
    path: &std::path::Path,
    file: crate::util::outfile::OutputFile,
    capture: &crate::model::profile::ThreadsCapture,
    groups: &[crate::analysis::deps::Group],
    duration_s: f64,
) -> Result<()> {
    use crate::analysis::rtapp;
    let secs = config.rt_app_duration.unwrap_or_else(|| rtapp::replay_seconds(duration_s));
    let demand = if config.rt_app_wanted { rtapp::Demand::Wanted } else { rtapp::Demand::OnCpu };
    let replay = rtapp::Replay { duration_s: secs, demand, calibration: config.rt_app_calibration };
    let doc = rtapp::document(&capture.threads, groups, &capture.edges, replay);
    file.write_quiet(|out| out.write_all(doc.render().as_bytes()))?;
    crate::util::stderr::say!(
        "Wrote the rt-app reproducer to {} ({secs} s); run it with: rt-app {}",
        path.display(),
        path.display()
    );
    Ok(())
}

/// Runs `topwaits threads`: the profile, the dependencies, and the rt-app file.
pub fn run(config: &ThreadsConfig) -> Result<()> {
    hold_signals();
    preflight(&config.threads)?;
    let rt_app_file = crate::util::outfile::OutputFile::create_opt(config.rt_app.as_deref())?;
    let clock = crate::util::clock::ClockPair::sample();
    // With --on-cpu, the samples' user stacks are walked as a trace's are.
    let cache = config.on_cpu.and_then(|_| super::tables::open_cache(config.cache.as_deref()));
    let (mut tracer, unwinder) =
        Tracer::start_threads(config, |maps| Unwinder::start(maps, &config.threads, cache))?;
    let unwinder = std::cell::RefCell::new(unwinder);
    let mut symbolizer = BlazeSymbolizer::default();
    let mut events = tracer.take_events()?;
    if config.on_cpu.is_some() {
        symbolizer.warm_kernel();
    }
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
        Some(d) => {
            crate::util::stderr::say!("Tracing threads of {target} for {:.1} s...", d.as_secs_f64())
        }
        None => crate::util::stderr::say!("Tracing threads of {target}... Hit Ctrl-C to end."),
    }
    let end = wait(
        config.duration,
        &mut pidfds(&config.threads),
        &mut events,
        &mut None,
        &mut |e| {
            super::between::hook_goroutines(&mut tracer, e);
            // The samples' stacks want every process's maps kept and tables
            // built; goroutines alone want only the Go execs hooked.
            let sampled = config.on_cpu.is_some();
            sampled.then(|| super::between::on_event(&mut symbolizer, &unwinder, e)).flatten()
        },
        &mut || {
            unwinder.borrow_mut().sweep();
            std::time::Duration::from_secs(1)
        },
    )?;
    second_interrupt_quits(&end);
    // The window ends when the programs stop recording, not when detaching ends.
    let end_mono = window_end(monotonic_now(), deadline);
    tracer.end_threads_at(end_mono)?;
    tracer.stop(false);
    let mut capture = tracer.drain_threads(end_mono)?;
    // The samples and the goroutines' waits share the aggregate.
    let go = !tracer.goroutines().traced.is_empty();
    let sampled = match (config.on_cpu, go) {
        (None, false) => None,
        (hz, _) => {
            let mut info =
                sampled_info(config, clock, tracer.attach_kind(), (start_mono, end_mono), hz);
            info.goroutines = tracer.goroutines().describe();
            let drained = tracer.drain(None, &[])?;
            let none = Default::default();
            let mut resolver = crate::analysis::what::procfs::ProcResolver::default();
            let labels = go.then_some(&mut resolver as &mut dyn crate::analysis::what::Resolve);
            let before = Default::default();
            Some(interval::report(drained, none, &before, info, &mut symbolizer, labels))
        }
    };
    drop(tracer);
    capture.threads.retain(|t| t.observed_ns() > 0);
    let sleeps: std::collections::HashMap<u32, u64> =
        capture.threads.iter().map(|t| (t.tid, t.sleep_events)).collect();
    let groups =
        crate::analysis::deps::reduce(&crate::analysis::deps::driving(&capture.edges, &sleeps));
    let duration_s = end_mono.saturating_sub(start_mono) as f64 / 1e9;
    let warnings = say_warnings(&capture, sampled.as_ref(), &unwinder.borrow());
    let hot = sampled
        .as_ref()
        .map(|r| crate::analysis::timeshare::hottest(r, HOT_STACKS))
        .unwrap_or_default();
    let goroutines = sampled
        .as_ref()
        .map(|r| crate::analysis::goprofile::profiles(&r.records))
        .unwrap_or_default();
    let report = crate::report::threads::ThreadsReport {
        threads: &capture.threads,
        edges: &capture.edges,
        groups: &groups,
        duration_s,
        target: &target,
        warnings: &warnings,
        hot: sampled.as_ref().zip(config.on_cpu).map(|(_, hz)| (hz, &hot)),
        goroutines: (&goroutines.0, goroutines.1),
    };
    if let (Some(path), Some(file)) = (&config.rt_app, rt_app_file) {
        write_rt_app(config, path, file, &capture, &groups, duration_s)?;
    }
    let format: &dyn Format<_> = if config.json { &threads::Json } else { &threads::Table };
    write_quietly(|out| format.write(&report, out))
}
