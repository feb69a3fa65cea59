//! `topwaits` and `topwaits record`: one trace from start to report, or one report
//! per `--interval`: checks, load, wait, drain, symbolize, merge, print, and the
//! files beside stdout (`record -o` among them).

use std::io::{self, Write};
use std::time::Duration;

use anyhow::Result;

use super::between::{hook_goroutines, on_event, Waiting};
use super::files::ViewFiles;
use super::interval;
use super::status::Status;
use super::tables::Unwinder;
use super::wait::{hold_signals, pidfds, second_interrupt_quits, End};
use super::{preflight, write_quietly};
use crate::analysis::reduce::By;
use crate::bpf::{ProcEvents, Tracer};
use crate::model::{Report, TraceInfo};
use crate::report;
use crate::settings::Config;
use crate::stacks::symbolize::BlazeSymbolizer;
use crate::util::clock::{local_offset_s, monotonic_now, ClockPair};

/// Loads the kernel stack learners, whose verification takes tens of
/// milliseconds, while this thread keeps reading the process events: a process
/// first seen meanwhile gets its maps kept before it can exit.
fn load_learners(
    tracer: &mut Tracer,
    events: &mut Option<ProcEvents>,
    remember: &mut dyn FnMut(Option<topwaits_common::ProcEvent>) -> Option<Duration>,
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let done = AtomicBool::new(false);
    // Processes that exec'd meanwhile, for the goroutine hooks once the
    // tracer is free again.
    let mut execs = Vec::new();
    let loaded = std::thread::scope(|s| {
        let loading = s.spawn(|| {
            let r = tracer.load_after_start();
            done.store(true, Ordering::Release);
            r
        });
        while !done.load(Ordering::Acquire) {
            if let Some(e) = events.as_mut() {
                e.drain(|ev| {
                    if ev.kind == topwaits_common::proc_event::EXEC {
                        execs.push(ev);
                    }
                    remember(Some(ev));
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        loading.join()
    });
    match loaded {
        Ok(Ok(())) => log::debug!("kernel stack learners in place"),
        // Stacks stay exact, only every one is unwound.
        Ok(Err(e)) => {
            log::warn!("kernel stacks will not be reused: {}", crate::util::stderr::error_line(&e))
        }
        Err(_) => log::warn!("kernel stacks will not be reused: the loading thread panicked"),
    }
    for e in execs {
        hook_goroutines(tracer, Some(e));
    }
}

/// Records the waits in progress as the trace begins, from its start, and
/// walks their user stacks from the unwind tables while they still wait: a
/// blocked thread's stack does not change until it runs again, and the kernel
/// takes a walk only for the wait it was walked in (see `bpf::seed`). A wait
/// that ends first keeps a stack marked cut while starting, counted. Without
/// the walker (`--unwind fp`, `-K`) nothing is walked, and nothing seeded.
pub(super) fn seed_waits(tracer: &mut Tracer, cache: Option<crate::stacks::cfi::cache::Cache>) {
    if !tracer.walks_user_stacks() {
        return;
    }
    let seeded = match tracer.seed_waits() {
        Ok(s) => s,
        Err(e) => {
            log::warn!(
                "the waits in progress as the trace begins are not recorded: {}",
                crate::util::stderr::error_line(&e)
            );
            return;
        }
    };
    let t0 = std::time::Instant::now();
    let mut walker = crate::analysis::snapshot::Snapshotter::default();
    walker.set_cache(cache);
    let mut handed = 0;
    for w in &seeded {
        let frames = walker.user_stack(w.tgid, w.tid, (w.ip, w.sp, w.bp));
        match tracer.hand_back(w, &frames) {
            Ok(true) => handed += 1,
            Ok(false) => {}
            Err(e) => log::debug!(
                "the stack of tid {} was not handed back: {}",
                w.tid,
                crate::util::stderr::error_line(&e)
            ),
        }
    }
    log::debug!(
        "{} waits in progress at the start, {handed} user stacks walked in {:?}",
        seeded.len(),
        t0.elapsed()
    );
}

/// Once attached: the symbolizer (the kernel's symbols read on a thread of
/// their own), the process events taken, and the learners loaded while they
/// are handed on.
pub(super) fn symbolizer_and_learners(
    config: &Config,
    tracer: &mut Tracer,
    unwinder: &std::cell::RefCell<Unwinder>,
) -> Result<(BlazeSymbolizer, Option<ProcEvents>)> {
    let mut symbolizer = BlazeSymbolizer::default();
    if config.stacks != crate::settings::Stacks::UserOnly {
        symbolizer.warm_kernel();
    }
    let mut events = tracer.take_events()?;
    // The programs are loaded (the kernel's BTF parsed): tables are built from here.
    crate::sys::heap::for_tracing();
    load_learners(tracer, &mut events, &mut |e| on_event(&mut symbolizer, unwinder, e));
    Ok((symbolizer, events))
}

/// A trace attached, with what reads its stacks.
struct Started {
    tracer: Tracer,
    unwinder: std::cell::RefCell<Unwinder>,
    symbolizer: BlazeSymbolizer,
    events: Option<ProcEvents>,
    snapshots: crate::analysis::snapshot::Snapshotter,
}

/// Loads and attaches, with the unwind tables of -p/-t processes built first
/// (before the programs attach), so that their waits are walked whole from
/// the first; then says what is traced.
fn start(config: &Config, target: &str) -> Result<Started> {
    let cache = super::tables::open_cache(config.cache.as_deref());
    let (mut tracer, unwinder) =
        Tracer::start(config, |maps| Unwinder::start(maps, &config.threads, cache.clone()))?;
    let unwinder = std::cell::RefCell::new(unwinder);
    seed_waits(&mut tracer, cache.clone());
    announce(config, target);
    say_goroutines(tracer.goroutines());
    let (symbolizer, events) = symbolizer_and_learners(config, &mut tracer, &unwinder)?;
    let mut snapshots = crate::analysis::snapshot::Snapshotter::default();
    snapshots.set_cache(cache);
    Ok(Started { tracer, unwinder, symbolizer, events, snapshots })
}

/// How often a trace that runs for long forgets the processes gone.
pub(super) const FORGET_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a live process's maps and cgroup, read for one report of a
/// trace that reports again and again (`--interval`, `serve`), serve the
/// next: at one report a second, reading them at every report was a fifth
/// of `serve`'s own CPU on an idle machine.
pub(super) const REFRESH_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs one whole trace, or one report per `--interval`.
pub fn run(config: &Config) -> Result<()> {
    hold_signals();
    preflight(&config.threads)?;
    // Watched from before attaching: a process that exits meanwhile ends the trace.
    let targets = pidfds(&config.threads);
    let mut files =
        Some(ViewFiles::create(&config.shown, config.record.as_deref())?.shown(config.view));
    warn_if_kernel_symbols_hidden(config);
    let clock = ClockPair::sample();
    let target = config.target();
    let Started { mut tracer, unwinder, mut symbolizer, events, mut snapshots } =
        start(config, &target)?;
    let start_mono = tracer.attached_mono();
    let lost_at_start =
        if config.open_waits { crate::sys::schedclock::lost_ns() } else { Default::default() };
    let long = tracer.take_wait_events()?;
    let mut waiting = Waiting::new(targets, events, long);
    let status = Status::new(config.duration);
    // An interval is as long as asked and the trace as its duration.
    let t0 = instant_of(start_mono);
    let deadline = config.duration.map(|d| t0 + d);
    let format = report::for_output(config.view, &config.shown.output);
    if config.interval.is_some() {
        symbolizer.refresh_every(REFRESH_EVERY);
    }
    let (mut interval_start, mut before) = (start_mono, crate::model::Counters::default());
    let mut total = crate::model::Counters::default();
    let mut last_sweep = std::time::Instant::now();
    // Kept across intervals: it reads the kernel's symbols once.
    let mut resolver = crate::analysis::what::procfs::ProcResolver::default();
    for round in 0usize.. {
        // Interval ends are on a fixed grid from the start, so the time spent
        // reporting one interval does not delay the next.
        let slice = next_slice(t0, round, config.interval, deadline);
        crate::sys::heap::for_tracing();
        let end = waiting.wait(slice, &mut tracer, &mut symbolizer, &unwinder, &mut |tracer| {
            if let Ok(c) = tracer.counters() {
                status.show(&c);
            }
        })?;
        status.clear();
        crate::sys::heap::for_report();
        let finished = config.interval.is_none()
            || matches!(end, End::Signal(_) | End::TargetsExited)
            || deadline.is_some_and(|d| std::time::Instant::now() >= d);
        say_end(&end, &target);
        if finished {
            second_interrupt_quits(&end);
            // Events were recorded until the programs were detached.
            tracer.stop(config.open_waits);
        }
        let end_mono = monotonic_now();
        let open_at = config.open_waits.then_some(end_mono);
        let (mut capture, sent) =
            drained(config, &mut tracer, waiting.long.as_mut(), finished, open_at)?;
        waiting.absorb_spilled(&mut capture);
        if config.open_waits {
            let span = crate::analysis::open::Span {
                start: start_mono,
                end: end_mono,
                lost_at_start: lost_at_start.clone(),
            };
            add_open_waits(config, &mut tracer, &mut snapshots, &mut capture, span);
        }
        total = capture.counters;
        let mut info = trace_info(config, clock, tracer.attach_kind(), &target);
        info.goroutines = tracer.goroutines().describe();
        (info.start_mono, info.end_mono) = (interval_start, end_mono);
        info.utc_offset_s = local_offset_s(clock.wall(start_mono));
        resolver.next_interval();
        let labels =
            config.labels.then_some(&mut resolver as &mut dyn crate::analysis::what::Resolve);
        let mut report = interval::report(capture, sent, &before, info, &mut symbolizer, labels);
        if config.print {
            print_report(config, format.as_ref(), round, &report)?;
        }
        if !finished {
            (interval_start, before) = (end_mono, total);
            // An interval trace runs for long: the processes gone since the
            // sweep before last are not kept (every report since named them).
            if last_sweep.elapsed() >= FORGET_AFTER {
                symbolizer.forget_gone();
                last_sweep = std::time::Instant::now();
            }
            continue;
        }
        if let Some(files) = files.take() {
            write_files(files, &mut report, &symbolizer)?;
        }
        break;
    }
    drop(tracer);
    say_losses(&unwinder.borrow(), waiting.long.as_ref(), &total);
    Ok(())
}

/// The `Instant` of a CLOCK_MONOTONIC time just past: the duration and the
/// interval grid count from the attach, not from the end of the loading.
fn instant_of(mono: u64) -> std::time::Instant {
    let since = Duration::from_nanos(monotonic_now().saturating_sub(mono));
    std::time::Instant::now().checked_sub(since).unwrap_or_else(std::time::Instant::now)
}

/// Says why a trace ended, where the user did not end it.
fn say_end(end: &End, target: &str) {
    match end {
        End::Signal(s) => log::info!("{s}: ending the trace early"),
        End::TargetsExited => crate::util::stderr::say!(
            "topwaits: {target}: every traced process has exited; ending the trace"
        ),
        End::Duration => {}
    }
}

/// Prints one report (one interval's, framed, with `-i`) as `--by` groups it.
fn print_report(
    config: &Config,
    format: &dyn report::Format,
    round: usize,
    report: &crate::model::Report,
) -> Result<()> {
    let grouped = crate::analysis::reduce::grouped(report, config.shown.by);
    write_quietly(|out| {
        let shown = grouped.as_ref().unwrap_or(report);
        if config.interval.is_some() {
            interval_frame(out, &config.shown.output, round, shown)?;
        }
        format.write(shown, out)
    })
}

/// Writes the files beside stdout, with the mappings of the processes their
/// frames lie in where a file needs them.
fn write_files(
    files: ViewFiles,
    report: &mut crate::model::Report,
    symbolizer: &BlazeSymbolizer,
) -> Result<()> {
    if files.need_objects() {
        report.objects = crate::stacks::objects::Objects::default()
            .of_records(&report.records, |t| symbolizer.file_maps(t));
    }
    files.write(report)
}

/// The losses of a whole trace, said once with their fixes.
fn say_losses(
    unwinder: &Unwinder,
    long: Option<&crate::bpf::WaitEvents>,
    total: &crate::model::Counters,
) {
    let unwinding = unwinder.stats().cloned().unwrap_or_default();
    log::info!(
        "unwind tables: {} files ({} from the cache), {} KiB in the kernel, the first after {:?}; {} files without unwind information; {} files never met by a walk; {} forks given their parent's mappings by the kernel alone",
        unwinding.files_ready,
        unwinding.files_from_cache,
        unwinding.table_bytes / 1024,
        unwinding.first_table_after,
        unwinding.files_without_tables,
        unwinder.unbuilt(),
        unwinding.forks_copied
    );
    if let Some(dropped) = long.map(|l| l.dropped).filter(|&d| d > 0) {
        crate::util::stderr::say!(
            "topwaits: warning: {dropped} wait events were dropped after the first {} of a report (a bound on memory); trace for less time, or narrow it with -p/-t or a larger --events-over",
            crate::bpf::MAX_HELD_EVENTS
        );
    }
    for w in total.warnings().into_iter().chain(unwinder.warnings()) {
        crate::util::stderr::say!("topwaits: warning: {w}");
    }
}

/// Warns when the kernel hides its symbols' addresses: kernel frames are then
/// unnamed.
fn warn_if_kernel_symbols_hidden(config: &Config) {
    if config.stacks == crate::settings::Stacks::UserOnly
        || !crate::sys::kallsyms::addresses_hidden_in_sys()
    {
        return;
    }
    let restrict = std::fs::read_to_string("/proc/sys/kernel/kptr_restrict")
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    crate::util::stderr::say!(
        "topwaits: warning: the kernel hides its symbol addresses from this process (it lacks CAP_SYSLOG; kernel.kptr_restrict={restrict}): kernel frames will show as [unknown]; run as root or add CAP_SYSLOG"
    );
}

/// The line that says what is traced, for how long.
fn announce(config: &Config, target: &str) {
    use crate::settings::View;
    let what = match config.view {
        View::Wakeups => "wakeups",
        View::Why { .. } | View::Locks { .. } => "every wait and its waker",
        View::OffCpu if config.waker => "off-CPU waits and their wakers",
        View::OffCpu => "off-CPU waits",
    };
    match config.duration {
        Some(d) => {
            crate::util::stderr::say!("Tracing {what} of {target} for {:.1} s...", d.as_secs_f64())
        }
        None => crate::util::stderr::say!("Tracing {what} of {target}... Hit Ctrl-C to end."),
    }
}

/// Which Go programs' goroutines are traced, and the ones that could not be.
fn say_goroutines(g: &crate::bpf::Goroutines) {
    if let Some(traced) = g.describe() {
        crate::util::stderr::say!(
            "Goroutines of {traced} traced, by uprobes costing a few us per goroutine switch; their threads' idle in the Go scheduler is left out (--no-goroutines: the threads only, at no such cost)."
        );
    }
    for f in &g.failed {
        crate::util::stderr::say!("topwaits: warning: goroutines not traced in {f}");
    }
}

/// How long to wait next: to the next interval's end on a fixed grid from the
/// start (so reporting one interval does not delay the next), or the deadline.
fn next_slice(
    t0: std::time::Instant,
    round: usize,
    interval: Option<Duration>,
    deadline: Option<std::time::Instant>,
) -> Option<Duration> {
    let now = std::time::Instant::now();
    let left = deadline.map(|d| d.saturating_duration_since(now));
    let next = interval.map(|i| (t0 + i * (round as u32 + 1)).saturating_duration_since(now));
    match (next, left) {
        (Some(i), Some(l)) => Some(i.min(l)),
        (i, l) => i.or(l),
    }
}

/// What a round drained: the aggregate (cleared after, but for the last
/// round), and the events sent, which the last round's drain takes in too.
fn drained(
    config: &Config,
    tracer: &mut Tracer,
    long: Option<&mut crate::bpf::WaitEvents>,
    finished: bool,
    open_at: Option<u64>,
) -> Result<(crate::model::Capture, interval::Events)> {
    let (rows, states, samples) = sent_records(config, long);
    let capture = if finished {
        tracer.drain(open_at, &[&rows[..], &samples[..]].concat())?
    } else {
        tracer.drain_and_clear(open_at)?
    };
    Ok((capture, interval::Events { rows, states, samples }))
}

/// The long waits sent until the programs were detached, as one-wait records
/// (with their states), and the on-CPU samples sent with them, as one-sample
/// records.
fn sent_records(
    config: &Config,
    long: Option<&mut crate::bpf::WaitEvents>,
) -> (Vec<crate::model::RawRecord>, Vec<u32>, Vec<crate::model::RawRecord>) {
    let (got, sent_samples) = long
        .map(|l| {
            l.pull();
            (std::mem::take(&mut l.got), std::mem::take(&mut l.samples))
        })
        .unwrap_or_default();
    let (rows, states): (Vec<_>, Vec<u32>) =
        got.iter().map(|e| crate::analysis::longwaits::raw(e, config.waker)).unzip();
    let period = config.on_cpu.map(crate::bpf::period_ns).unwrap_or(0);
    let one = |at: u64| topwaits_common::SampleVal { count: 1, last_ns: at };
    let samples = sent_samples
        .iter()
        .map(|e| crate::bpf::sample_record(&e.key, &one(e.at), period))
        .collect();
    (rows, states, samples)
}

/// Adds the waits of target threads blocked since before the trace, walked
/// from their frame pointers where the kernel gives them.
fn add_open_waits(
    config: &Config,
    tracer: &mut Tracer,
    snapshots: &mut crate::analysis::snapshot::Snapshotter,
    capture: &mut crate::model::Capture,
    span: crate::analysis::open::Span,
) {
    if !crate::analysis::open::any_unseen(&config.threads, capture, std::process::id()) {
        return;
    }
    match tracer.task_regs() {
        Ok(regs) => snapshots.set_regs(regs),
        Err(e) => log::info!(
            "no task registers: stacks needing a frame pointer are cut ({})",
            crate::util::stderr::error_line(&e)
        ),
    }
    let wanted = crate::analysis::open::Wanted::of(config);
    crate::analysis::open::add_waits_before_trace(
        &wanted,
        capture,
        snapshots,
        span,
        std::process::id(),
    );
}

/// What a report of this trace says about it; its span is the caller's to set.
pub(super) fn trace_info(
    config: &Config,
    clock: ClockPair,
    attach: crate::model::AttachKind,
    target: &str,
) -> TraceInfo {
    TraceInfo {
        clock,
        start_mono: 0,
        end_mono: 0,
        attach,
        target: target.to_string(),
        utc_offset_s: 0,
        waker: config.waker,
        by: By::Thread,
        state_filter: config.state,
        on_cpu_hz: config.on_cpu,
        cgroup_target: matches!(config.threads, crate::settings::Threads::Cgroup(..)),
        goroutines: None,
    }
}

/// What separates interval reports: a header with the interval's wall-clock end in
/// the top view, a blank line between folded blocks, nothing in JSON (one document
/// per line).
pub fn interval_frame(
    out: &mut dyn Write,
    output: &crate::settings::Output,
    round: usize,
    report: &Report,
) -> io::Result<()> {
    use crate::settings::Output;
    match output {
        Output::Top { .. } => writeln!(
            out,
            "{}=== interval ending {} {} ===",
            if round > 0 { "\n" } else { "" },
            crate::util::clock::date(
                report.info.clock.wall(report.info.end_mono),
                report.info.utc_offset_s
            ),
            crate::util::clock::hms_millis(
                report.info.clock.wall(report.info.end_mono),
                report.info.utc_offset_s
            )
        ),
        Output::Folded { .. } if round > 0 => writeln!(out),
        _ => Ok(()),
    }
}
