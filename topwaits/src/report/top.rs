//! The default "top waits" view: records sorted by their longest wait, each with the
//! wall-clock window of that wait, count, total and average, and its stacks; with
//! `--on-cpu`, each thread's time and the sampled running stacks first.

use std::io::{self, Write};

use super::{by_longest, hop_name, interrupt_handler, no_waker_label, take, who, Format};
use crate::analysis::timeshare::ThreadTime;
use crate::model::{Hop, OpenSince, Record, Report, Stack, TraceInfo, WakeInfo};
use crate::util::clock::{date, hms_millis};

pub struct Top {
    pub limit: usize,
    /// Put a `-` line between kernel and user frames.
    pub delimited: bool,
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

fn write_stack(out: &mut dyn Write, stack: &Stack, what: &str) -> io::Result<()> {
    match stack {
        Stack::Frames(f) => {
            for fr in f.iter() {
                writeln!(out, "      {}", fr.describe())?;
            }
        }
        Stack::Missing => writeln!(out, "      [missing {what} stack]")?,
        Stack::None => {}
    }
    Ok(())
}

/// A duration so far: seconds from one second up, else milliseconds.
fn so_far(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        super::secs(ns)
    } else {
        ms(ns)
    }
}

/// The header of a wait still in progress at the end of the trace.
fn open_header(r: &Record, since: OpenSince, info: &crate::model::TraceInfo) -> String {
    let when = |t: u64| hms_millis(info.clock.wall(t), info.utc_offset_s);
    match since {
        OpenSince::Exact(t) => format!("still waiting, >= {} since {}", so_far(r.max_ns), when(t)),
        OpenSince::Estimated(t) => {
            format!("still waiting, >= {} since {} (estimated)", so_far(r.max_ns), when(t))
        }
        OpenSince::BeforeTrace => {
            format!("still waiting, >= {}, since before the trace began", so_far(r.max_ns))
        }
    }
}

/// `all`: with `--by what`, the waiting of every record, which each one's share is of.
fn write_record(
    out: &mut dyn Write,
    rank: usize,
    r: &Record,
    report: &Report,
    delimited: bool,
    all: Option<u64>,
) -> io::Result<()> {
    let info = &report.info;
    let end = info.clock.wall(r.max_end_mono);
    let start = end - r.max_ns as i128;
    let avg = r.total_ns / r.count.max(1);
    if let Some(since) = r.open {
        writeln!(out, "#{rank:<3} {}", open_header(r, since, info))?;
    } else {
        writeln!(
            out,
            "#{rank:<3} longest {}  {} -> {}   count {}  total {}  avg {}",
            ms(r.max_ns),
            hms_millis(start, info.utc_offset_s),
            hms_millis(end, info.utc_offset_s),
            r.count,
            ms(r.total_ns),
            ms(avg)
        )?;
    }
    writeln!(out, "    {}", who(r, info.by))?;
    if let Some(all) = all {
        writeln!(
            out,
            "    {:.1}% of all the waiting shown",
            100.0 * r.total_ns as f64 / all.max(1) as f64
        )?;
    }
    if let Some(w) = &r.waits_on {
        writeln!(out, "    {}", w.sentence(avg))?;
    }
    write_stack(out, &r.kernel, "kernel")?;
    if delimited && !matches!(r.kernel, Stack::None) && !matches!(r.user, Stack::None) {
        writeln!(out, "      -")?;
    }
    write_stack(out, &r.user, "user")?;
    if matches!((&r.kernel, &r.user), (Stack::None, Stack::None)) {
        writeln!(out, "      [no stack]")?;
    }
    if let Some(w) = &r.wake {
        write_wake(out, w, delimited)?;
    }
    writeln!(out)
}

fn write_hop(out: &mut dyn Write, depth: usize, h: &Hop, delimited: bool) -> io::Result<()> {
    let lead = if depth == 0 {
        "woken by".to_string()
    } else {
        format!("{}which was woken by", "  ".repeat(depth))
    };
    if h.interrupt {
        writeln!(
            out,
            "    {lead} [interrupt] {}",
            interrupt_handler(h).unwrap_or("[unknown handler]")
        )?;
    } else {
        let tid = crate::util::text::tid_text(h.tid);
        writeln!(out, "    {lead} {}  pid {}  {tid}", hop_name(h), h.tgid)?;
    }
    write_stack(out, &h.kernel, "kernel")?;
    if delimited && !matches!(h.kernel, Stack::None) && !matches!(h.user, Stack::None) {
        writeln!(out, "      -")?;
    }
    write_stack(out, &h.user, "user")
}

fn write_wake(out: &mut dyn Write, w: &WakeInfo<Hop>, delimited: bool) -> io::Result<()> {
    writeln!(
        out,
        "    blocked {} (max {})  run queue {} (max {})",
        ms(w.blocked_ns),
        ms(w.max_blocked_ns),
        ms(w.runq_ns),
        ms(w.max_runq_ns)
    )?;
    if w.hops.is_empty() {
        return writeln!(out, "    woken by {}", no_waker_label(w.kind));
    }
    for (depth, h) in w.hops.iter().enumerate() {
        write_hop(out, depth, h, delimited)?;
    }
    Ok(())
}

impl Format for Top {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        let info = &report.info;
        let (running, waits): (Vec<&Record>, Vec<&Record>) =
            report.records.iter().partition(|r| r.on_cpu());
        let total = waits.len();
        let mut ranked = by_longest(waits);
        if report.info.by == crate::analysis::reduce::By::What {
            // What the waiting was for is ranked by how much of it there was.
            ranked.sort_by_key(|r| std::cmp::Reverse(r.total_ns));
        }
        let shown = take(ranked, self.limit);
        writeln!(
            out,
            "Off-CPU waits of {} for {:.2} s from {} {} ({}): {}, {} shown, {}.",
            info.target,
            info.duration_s(),
            date(info.clock.wall(info.start_mono), info.utc_offset_s),
            hms_millis(info.clock.wall(info.start_mono), info.utc_offset_s),
            info.attach.name(),
            crate::util::text::plural(total, "record"),
            shown.len(),
            if info.by == crate::analysis::reduce::By::What {
                "most waiting first"
            } else {
                "longest first"
            }
        )?;
        if let Some(g) = &info.goroutines {
            writeln!(out, "Goroutines of {g}: each goroutine's waits are its own records; their threads' idle in the Go scheduler is left out.")?;
        }
        writeln!(out)?;
        if let Some(times) = crate::analysis::timeshare::of(report) {
            write_times(out, &times, info)?;
            write_running(out, running, report, self)?;
            writeln!(
                out,
                "Off the CPU, {}:",
                if info.by == crate::analysis::reduce::By::What {
                    "most waiting first"
                } else {
                    "longest first"
                }
            )?;
            writeln!(out)?;
        }
        let all = (info.by == crate::analysis::reduce::By::What)
            .then(|| report.records.iter().filter(|x| !x.on_cpu()).map(|x| x.total_ns).sum());
        for (i, r) in shown.iter().enumerate() {
            write_record(out, i + 1, r, report, self.delimited, all)?;
        }
        if shown.len() < total {
            writeln!(
                out,
                "{} not shown; use -n 0 to show all.",
                crate::util::text::plural(total - shown.len(), "more record")
            )?;
        }
        Ok(())
    }
}

/// How many threads the time table shows.
const TIMES_SHOWN: usize = 12;

/// Each thread's time over the window (`--on-cpu`), most running first.
fn write_times(out: &mut dyn Write, times: &[ThreadTime], info: &TraceInfo) -> io::Result<()> {
    let wall = info.end_mono.saturating_sub(info.start_mono).max(1);
    writeln!(
        out,
        "Each thread's time over the {:.2} s (running: {} on-CPU samples a second, scaled to time):",
        info.duration_s(),
        info.on_cpu_hz.unwrap_or(0)
    )?;
    writeln!(
        out,
        "  {:>8}  {:<16} {:>16} {:>16} {:>16} {:>9}",
        "tid", "comm", "running", "runnable", "blocked", "accounted"
    )?;
    let pct = |ns: u64| format!("{} {:>3.0}%", ms(ns), 100.0 * ns as f64 / wall as f64);
    for t in times.iter().take(TIMES_SHOWN) {
        writeln!(
            out,
            "  {:>8}  {:<16} {:>16} {:>16} {:>16} {:>8.0}%",
            t.tid,
            crate::model::comm_text(&t.comm),
            pct(t.running_ns),
            pct(t.runnable_ns),
            pct(t.blocked_ns),
            100.0 * t.accounted_ns() as f64 / wall as f64
        )?;
    }
    if times.len() > TIMES_SHOWN {
        writeln!(
            out,
            "  ... {} more",
            crate::util::text::plural(times.len() - TIMES_SHOWN, "thread")
        )?;
    }
    writeln!(out)
}

/// The on-CPU sample records, most time first.
fn write_running(
    out: &mut dyn Write,
    running: Vec<&Record>,
    report: &Report,
    top: &Top,
) -> io::Result<()> {
    let info = &report.info;
    let all = running.len();
    let mut running = running;
    running.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(b.max_end_mono.cmp(&a.max_end_mono)));
    let running = take(running, top.limit);
    let wall = info.end_mono.saturating_sub(info.start_mono).max(1);
    writeln!(
        out,
        "On the CPU, most time first ({} of {} shown):",
        running.len(),
        crate::util::text::plural(all, "stack")
    )?;
    writeln!(out)?;
    for (i, r) in running.iter().enumerate() {
        writeln!(
            out,
            "#{:<3} running ~{}  {:.1}% of the window   {}",
            i + 1,
            ms(r.total_ns),
            100.0 * r.total_ns as f64 / wall as f64,
            crate::util::text::plural(r.count as usize, "sample")
        )?;
        writeln!(out, "    {}", who(r, info.by))?;
        write_stack(out, &r.kernel, "kernel")?;
        if top.delimited && !matches!(r.kernel, Stack::None) && !matches!(r.user, Stack::None) {
            writeln!(out, "      -")?;
        }
        write_stack(out, &r.user, "user")?;
        if matches!((&r.kernel, &r.user), (Stack::None, Stack::None)) {
            writeln!(out, "      [no stack]")?;
        }
        writeln!(out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::report;

    fn render(limit: usize, delimited: bool) -> String {
        let mut out = Vec::new();
        Top { limit, delimited }.write(&report(), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn on_cpu_shows_each_threads_time_then_the_running_stacks_then_the_waits() {
        let mut out = Vec::new();
        Top { limit: 0, delimited: false }
            .write(&crate::report::fixtures::on_cpu_report(), &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains(": 2 records, 2 shown, longest first."),
            "samples are no waits: {text}"
        );
        let (times, running, waits) = (
            text.find("Each thread's time").unwrap(),
            text.find("On the CPU").unwrap(),
            text.find("Off the CPU").unwrap(),
        );
        assert!(times < running && running < waits, "{text}");
        assert!(
            text.contains("#1   running ~2000.000 ms  40.0% of the window   200 samples"),
            "{text}"
        );
        let row = text.lines().find(|l| l.trim_start().starts_with("101 ")).unwrap();
        assert!(
            row.contains("2000.000 ms  40%")
                && row.contains("1000.500 ms  20%")
                && row.ends_with("60%"),
            "{row}"
        );
    }

    #[test]
    fn snapshot_longest_first_with_wall_clock_window() {
        assert_eq!(
            render(0, true),
            "Off-CPU waits of all threads for 5.00 s from 2023-11-14 22:13:20.000 (tp_btf): 2 records, 2 shown, longest first.\n\
             \n\
             #1   longest 250.000 ms  22:13:22.250 -> 22:13:22.500   count 10  total 1000.500 ms  avg 100.050 ms\n\
             \x20   sleeper  pid 100  tid 101\n\
             \x20     __schedule\n\
             \x20     schedule\n\
             \x20     do_nanosleep\n\
             \x20     -\n\
             \x20     clock_nanosleep\n\
             \x20     wait_here\n\
             \x20     main\n\
             \n\
             #2   longest 0.002 ms  22:13:20.999 -> 22:13:21.000   count 2  total 0.003 ms  avg 0.002 ms\n\
             \x20   kworker/0:1  pid 7  tid 7\n\
             \x20     [missing kernel stack]\n\
             \n"
        );
    }

    #[test]
    fn records_by_process_or_comm_are_headed_by_what_they_merge() {
        use crate::analysis::reduce::By;
        let mut rep = report();
        rep.records[0].threads = 40;
        for (by, want) in [
            (By::Thread, "    sleeper  pid 100  tid 101\n"),
            (By::Process, "    sleeper  pid 100  40 threads\n"),
            (By::Comm, "    sleeper  40 threads\n"),
        ] {
            rep.info.by = by;
            let mut out = Vec::new();
            Top { limit: 0, delimited: false }.write(&rep, &mut out).unwrap();
            let out = String::from_utf8(out).unwrap();
            assert!(out.contains(want), "{by:?}: {out}");
        }
    }

    #[test]
    fn waker_chain_is_shown_under_each_record() {
        use crate::report::fixtures::offwake_report;
        let mut out = Vec::new();
        Top { limit: 0, delimited: false }.write(&offwake_report(), &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        let first = out.split("\n\n").nth(1).unwrap();
        assert!(
            first.contains(
                "    blocked 1000.000 ms (max 249.900 ms)  run queue 0.500 ms (max 0.100 ms)\n"
            ),
            "{first}"
        );
        assert!(
            first.contains(
                "    woken by writer  pid 100  tid 102\n      try_to_wake_up\n      pipe_write\n"
            ),
            "{first}"
        );
        assert!(first.contains("      produce\n"), "{first}");
        assert!(
            first.contains(
                "      which was woken by [interrupt] hrtimer_wakeup\n      try_to_wake_up\n"
            ),
            "{first}"
        );
        assert!(out.contains("    woken by [preempted]\n"), "{out}");
    }

    #[test]
    fn open_waits_say_still_waiting_and_since_when() {
        let mut rep = report();
        rep.records[0].open = Some(OpenSince::Exact(2_000_000_000));
        rep.records[0].max_ns = 4_000_000_000;
        rep.records[0].max_end_mono = 6_000_000_000;
        rep.records[1].open = Some(OpenSince::Estimated(5_999_000_000));
        rep.records[1].max_ns = 1_000_000;
        let mut out = Vec::new();
        Top { limit: 0, delimited: false }.write(&rep, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains("#1   still waiting, >= 4.000 s since 22:13:21.000\n    sleeper  pid 100  tid 101\n"), "{out}");
        assert!(
            out.contains("#2   still waiting, >= 1.000 ms since 22:13:24.999 (estimated)\n"),
            "{out}"
        );
        rep.records[0].open = Some(OpenSince::BeforeTrace);
        let mut out = Vec::new();
        Top { limit: 1, delimited: false }.write(&rep, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.contains("#1   still waiting, >= 4.000 s, since before the trace began\n"),
            "{out}"
        );
    }

    #[test]
    fn limit_is_announced_not_silent() {
        let out = render(1, false);
        assert!(out.contains("2 records, 1 shown"), "{out}");
        assert!(out.ends_with("1 more record not shown; use -n 0 to show all.\n"), "{out}");
        assert!(!out.contains("kworker"));
    }
}
