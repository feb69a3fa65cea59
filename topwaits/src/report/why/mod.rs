//! `topwaits why`'s views of a trace's every wait (its events, with wakers):
//! the causes ranked with the idle threads, the waits no wakeup ended and the
//! knots apart, or with `--for` one thread's critical path; as text, JSON, or
//! folded paths for flame graphs. Causes and segments alike but for their
//! threads are one, grouped by name unless `--by` says otherwise.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::{self, Write};

use serde_json::{json, Value};

use super::{interrupt_handler, json::stack as json_stack, secs, Format};
use crate::analysis::reduce::{Fingerprints, StackKey};
use crate::analysis::why::{
    critical_path, group_causes, group_path, merge_alike, running_spans, Findings, Group,
    PathGroup, Tid, Trace, Wait, Waker, What,
};
use crate::model::label::WaitsOn;
use crate::model::{comm_text, Hop, Report, Stack, WakeKind};
use crate::settings::{By, Output};
use crate::util::fasthash::FastMap;

mod input;
use input::*;

/// The `why` view of a report.
pub struct Why {
    pub output: Output,
    pub for_tid: Option<Tid>,
    pub by: By,
}

/// What a device wakeup is called: its class (a timer, the disk, the
/// network), so that waits ended by one device are one cause whichever of its
/// handlers ran; an interrupt of no known class by its handler.
fn device(h: &Hop) -> String {
    let Some(handler) = interrupt_handler(h) else { return "an interrupt".into() };
    device_class(handler).map_or_else(|| format!("interrupt ({handler})"), str::to_string)
}

/// The class of an interrupt's wake-up handler, where its name tells it. A
/// page's or a buffer's wake-up bit is cleared in interrupt context when its
/// I/O completes.
fn device_class(handler: &str) -> Option<&'static str> {
    let has = |names: &[&str]| names.iter().any(|n| handler.contains(n));
    if has(&["timer", "timeout", "it_real_fn"]) {
        Some("timer")
    } else if handler.starts_with("blk_")
        || handler.starts_with("bio_")
        || has(&[
            "_end_io",
            "nvme",
            "wake_page_function",
            "wake_bit_function",
            "folio_wake",
            "end_buffer",
        ])
    {
        Some("disk")
    } else if has(&["net_rx", "napi"])
        || handler.starts_with("tcp_")
        || handler.starts_with("sock_")
    {
        Some("network")
    } else {
        None
    }
}

fn waker_text(w: &Waker) -> String {
    match w {
        Waker::Thread(t) => format!("thread {t} (path too deep)"),
        Waker::Device(d) => d.clone(),
        Waker::Preempted => "a CPU".into(),
        Waker::Unknown => "no wakeup seen".into(),
    }
}

/// What a group of threads was doing, in words, after who they were.
fn doing(input: &Input, what: &What) -> String {
    match what {
        What::Blocked { site, on } => {
            let label = input.labels.get(site).map(|l| format!(" ({l})")).unwrap_or_default();
            format!("blocked on {} in {}{label}", waker_text(on), input.place(*site))
        }
        What::Running { site: 0 } => "running".into(),
        What::Running { site } => {
            format!("running (it woke the waiter from {})", input.place(*site))
        }
        What::RunQueue => "runnable, waiting for a CPU".into(),
        What::Cycle => "in a cycle of waits".into(),
    }
}

/// What a group of threads was doing, in words, after who they were: a
/// running group says where it woke the waiters from, the first place and how
/// many more.
fn doing_group(input: &Input, g: &Group<Who>) -> String {
    match (&g.what, g.places.len()) {
        (What::Running { site }, n) if n > 1 && *site != 0 => {
            format!(
                "running (it woke the waiters from {}, and from {} more places)",
                input.place(*site),
                n - 1
            )
        }
        (what, _) => doing(input, what),
    }
}

/// One line saying what a cause is: who, then what they did.
fn describe(input: &Input, g: &Group<Who>) -> String {
    format!("{} {}", input.members(&g.who, &g.tids), doing_group(input, g))
}

fn kind(w: &What) -> &'static str {
    match w {
        What::Blocked { .. } => "blocked",
        What::Running { .. } => "running",
        What::RunQueue => "run_queue",
        What::Cycle => "cycle",
    }
}

/// The site a cause or segment shows stacks of (0: none).
fn site_of(w: &What) -> u64 {
    match w {
        What::Blocked { site, .. } | What::Running { site } => *site,
        _ => 0,
    }
}

fn limit(output: &Output) -> usize {
    match output {
        Output::Top { limit, .. } | Output::Json { limit } => *limit,
        Output::Folded { .. } => 0,
    }
}

impl Format for Why {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        let input = Input::of(report, self.by);
        match self.for_tid {
            Some(tid) => {
                let path = input.path(report, tid);
                match self.output {
                    Output::Json { .. } => path_json(&input, report, tid, &path, out),
                    Output::Folded { .. } => path_folded(&input, &path, out),
                    Output::Top { .. } => path_text(&input, report, tid, &path, out),
                }
            }
            None => {
                let found = input.trace.why(&[]);
                // Causes that would print the same line are one.
                let causes = merge_alike(group_causes(&found.causes, |t| input.who(t)), |g| {
                    format!("{}: {}", kind(&g.what), describe(&input, g))
                });
                match self.output {
                    Output::Json { .. } => {
                        causes_json(&input, report, &found, &causes, limit(&self.output), out)
                    }
                    _ => causes_text(&input, report, &found, &causes, limit(&self.output), out),
                }
            }
        }
    }
}

impl Input {
    /// Thread `tid`'s critical path over the trace, its segments grouped.
    fn path(&self, report: &Report, tid: Tid) -> Vec<PathGroup<Who>> {
        let segments =
            critical_path(&self.trace, tid, report.info.start_mono, report.info.end_mono);
        group_path(&segments, |t| self.who(t))
    }
}

/// Threads listed apart (idle, or waiting with no wakeup seen) that share a key
/// and a place: one line.
struct Apart {
    who: Who,
    place: String,
    tids: BTreeSet<Tid>,
    /// The longest of theirs.
    ns: u64,
}

/// Lines of threads listed apart, from `(tid, ns, site)`, in the order given.
fn apart(input: &Input, items: impl Iterator<Item = (Tid, u64, u64)>) -> Vec<Apart> {
    let mut lines: Vec<Apart> = Vec::new();
    for (tid, ns, site) in items {
        let (who, place) = (input.who(tid), input.place(site));
        match lines.iter_mut().find(|l| l.who == who && l.place == place) {
            Some(l) => {
                l.tids.insert(tid);
                l.ns = l.ns.max(ns);
            }
            None => lines.push(Apart { who, place, tids: BTreeSet::from([tid]), ns }),
        }
    }
    lines
}

fn causes_text(
    input: &Input,
    report: &Report,
    f: &Findings,
    causes: &[Group<Who>],
    limit: usize,
    out: &mut dyn Write,
) -> io::Result<()> {
    writeln!(
        out,
        "Why {} waited ({:.1} s, {} waits): {} of waiting that other threads depended on.",
        report.info.target,
        report.info.duration_s(),
        input.waits,
        secs(f.waiting_ns)
    )?;
    if f.lone && !causes.is_empty() {
        writeln!(
            out,
            "None of the traced threads woke another: each wait is ranked by what it waited behind (the thread that woke it, a device, the CPU)."
        )?;
    }
    if causes.is_empty() {
        writeln!(out, "\nNo thread's waits held up another's.")?;
    } else {
        writeln!(out, "\nCauses, the first to fix first (each moment a thread waited, followed to what it waited behind):\n")?;
    }
    let shown = if limit == 0 { causes.len() } else { limit.min(causes.len()) };
    for (i, c) in causes.iter().take(shown).enumerate() {
        cause_text(input, f, i, c, out)?;
    }
    if shown < causes.len() {
        writeln!(
            out,
            "     ... {} more causes ({} in all; -n 0 shows every one)",
            causes.len() - shown,
            causes.len()
        )?;
    }
    apart_text(input, f, out)
}

/// One ranked cause: its share and what it was, what it ran (sampled) if it
/// ran, and who waited behind it.
fn cause_text(
    input: &Input,
    f: &Findings,
    i: usize,
    c: &Group<Who>,
    out: &mut dyn Write,
) -> io::Result<()> {
    writeln!(
        out,
        "{:>3}. {:>5.1}%  {:>11}  {}",
        i + 1,
        c.share * 100.0,
        secs(c.ns),
        describe(input, c)
    )?;
    if matches!(c.what, What::Running { .. }) {
        let (sampled, holding) = input.sampled_holding(&c.tids, &f.running_spans);
        let what = if holding {
            "on the CPU while they held the waiters up (sampled)"
        } else {
            "on the CPU over the trace (sampled)"
        };
        sampled_line(input, &sampled, 26, what, out)?;
    }
    // One thread is not said to wait behind itself; a group's threads may
    // well have waited behind each other.
    let others: BTreeSet<Tid> =
        c.waiters.iter().copied().filter(|t| c.tids.len() > 1 || !c.tids.contains(t)).collect();
    if others.is_empty() {
        return Ok(());
    }
    // The lock they waited on, when they all waited on one the most.
    let mut locks = others.iter().map(|t| input.locks.get(t));
    let first = locks.next().flatten();
    let on = match first {
        Some(l) if locks.all(|x| x == Some(l)) => format!(" on {l}"),
        _ => String::new(),
    };
    let pronoun = if c.tids.len() > 1 { "them" } else { "it" };
    writeln!(
        out,
        "{:>26}{} waited behind {pronoun}{on}: {}",
        "",
        crate::util::text::count_of(others.len(), others.iter()),
        input.groups_of(others.iter().copied(), 4)
    )?;
    Ok(())
}

/// What is not ranked: knots, waits no wakeup ended, idle threads.
fn apart_text(input: &Input, f: &Findings, out: &mut dyn Write) -> io::Result<()> {
    if !f.knots.is_empty() {
        writeln!(out, "\nKnots (threads that waited only on each other):")?;
        for k in &f.knots {
            writeln!(out, "  {}", input.groups_of(k.iter().copied(), 8))?;
        }
    }
    if !f.unwoken.is_empty() {
        writeln!(out, "\nWaiting with no wakeup seen (nobody waited behind them; not ranked):")?;
        for l in apart(input, f.unwoken.iter().map(|u| (u.tid, u.ns, u.site))) {
            let still = if l.tids.iter().all(|t| input.open.contains(t)) {
                ", still waiting at the end"
            } else {
                ""
            };
            writeln!(
                out,
                "  {:>11}  {} in {}{still}",
                secs(l.ns),
                input.members(&l.who, &l.tids),
                l.place
            )?;
        }
    }
    if !f.idle.is_empty() {
        writeln!(out, "\nIdle (woke no other thread after any of their waits, so they held nobody up; not ranked):")?;
        for l in apart(input, f.idle.iter().map(|i| (i.tid, i.ns, i.site))) {
            writeln!(
                out,
                "  {:>11}  {} in {}",
                secs(l.ns),
                input.members(&l.who, &l.tids),
                l.place
            )?;
        }
    }
    if f.idle_waits_ns > 0 {
        writeln!(
            out,
            "\nNot ranked either: {} of idle waits (after which the thread woke nobody) in the threads above.",
            secs(f.idle_waits_ns)
        )?;
    }
    Ok(())
}

fn causes_json(
    input: &Input,
    report: &Report,
    f: &Findings,
    causes: &[Group<Who>],
    limit: usize,
    out: &mut dyn Write,
) -> io::Result<()> {
    let take = if limit == 0 { causes.len() } else { limit.min(causes.len()) };
    let causes_v: Vec<Value> = causes[..take]
        .iter()
        .map(|c| {
            let (kernel, user) = input.json_site(site_of(&c.what));
            let first = c.tids.iter().next().copied().unwrap_or(0);
            let mut v = json!({
                "share": c.share,
                "ns": c.ns,
                "kind": kind(&c.what),
                "thread": input.json_thread(first),
                "threads": c.tids.iter().map(|&t| input.json_thread(t)).collect::<Vec<_>>(),
                "kernel_stack": kernel,
                "user_stack": user,
                "waiters": c.waiters.iter().map(|&t| input.json_thread(t)).collect::<Vec<_>>(),
                "description": describe(input, c),
            });
            if let What::Blocked { on, site } = &c.what {
                v["on"] = json!(waker_text(on));
                v["waits_on"] = json!(input.labels.get(site));
            }
            if let Who::Cgroup(cg) = &c.who {
                v["cgroup"] = json!(cg);
            }
            if matches!(c.what, What::Running { .. }) {
                let (sampled, holding) = input.sampled_holding(&c.tids, &f.running_spans);
                v["sampled"] = sampled_json(input, &sampled);
                v["sampled_while_holding"] = json!(holding);
                let woke_from: Vec<Value> = c
                    .places
                    .iter()
                    .map(|&(site, ns)| {
                        let (kernel, user) = input.json_site(site);
                        json!({"ns": ns, "kernel_stack": kernel, "user_stack": user})
                    })
                    .collect();
                v["woke_from"] = json!(woke_from);
            }
            v
        })
        .collect();
    let apart = |tid: Tid, ns: u64, site: u64| {
        let (kernel, user) = input.json_site(site);
        json!({"thread": input.json_thread(tid), "ns": ns, "kernel_stack": kernel, "user_stack": user})
    };
    let idle: Vec<Value> = f.idle.iter().map(|i| apart(i.tid, i.ns, i.site)).collect();
    let unwoken: Vec<Value> = f
        .unwoken
        .iter()
        .map(|u| {
            let mut v = apart(u.tid, u.ns, u.site);
            v["open_at_end"] = json!(input.open.contains(&u.tid));
            v
        })
        .collect();
    let doc = json!({
        "view": "why",
        "target": report.info.target,
        "duration_s": report.info.duration_s(),
        "by": input.by.name(),
        "waits": input.waits,
        "waiting_ns": f.waiting_ns,
        "lone": f.lone,
        "idle_waits_ns": f.idle_waits_ns,
        "causes_total": causes.len(),
        "causes": causes_v,
        "idle": idle,
        "unwoken": unwoken,
        "knots": f.knots,
    });
    serde_json::to_writer(&mut *out, &doc)?;
    writeln!(out)
}

/// A segment's state, as text and as JSON's `state`.
fn state(w: &What) -> &'static str {
    match w {
        What::Running { .. } => "running",
        What::RunQueue => "run queue",
        What::Blocked { .. } => "blocked",
        What::Cycle => "cycle",
    }
}

fn path_names(input: &Input, s: &PathGroup<Who>) -> Vec<String> {
    s.path.iter().map(|w| input.who_name(w)).collect()
}

/// What a running cause or segment ran, from its samples: the first three
/// places by share, on one line indented by `indent`; nothing without samples.
/// The places `sampled` says most of a running stretch went to, said as
/// `what`: `on the CPU (sampled)` for a path's segment, and for a running
/// cause when its samples were taken (while its threads held the waiters up,
/// or, in a recording without timed samples, all the trace).
fn sampled_line(
    input: &Input,
    sampled: &[(u64, u64)],
    indent: usize,
    what: &str,
    out: &mut dyn Write,
) -> io::Result<()> {
    if sampled.is_empty() {
        return Ok(());
    }
    let all: u64 = sampled.iter().map(|s| s.0).sum();
    let top: Vec<String> = sampled
        .iter()
        .take(3)
        .map(|(ns, site)| format!("{:.0}% {}", 100.0 * *ns as f64 / all as f64, input.place(*site)))
        .collect();
    writeln!(out, "{:>indent$}{what}: {}", "", top.join("; "))
}

/// A running cause's or segment's samples as JSON: the first five places.
fn sampled_json(input: &Input, sampled: &[(u64, u64)]) -> Value {
    let all: u64 = sampled.iter().map(|s| s.0).sum();
    sampled
        .iter()
        .take(5)
        .map(|&(ns, site)| {
            let (kernel, user) = input.json_site(site);
            json!({"share": ns as f64 / all as f64, "ns": ns, "kernel_stack": kernel, "user_stack": user})
        })
        .collect()
}

fn path_text(
    input: &Input,
    report: &Report,
    tid: Tid,
    path: &[PathGroup<Who>],
    out: &mut dyn Write,
) -> io::Result<()> {
    let window = report.info.end_mono.saturating_sub(report.info.start_mono);
    writeln!(out, "Where {}'s {} went (its critical path):\n", input.thread(tid), secs(window))?;
    let samples = input.path_samples(report, tid, path);
    for (s, sampled) in path.iter().zip(&samples) {
        let what = match &s.what {
            What::Blocked { site, on } => {
                format!("blocked on {} in {}", waker_text(on), input.place(*site))
            }
            What::Running { site } if *site != 0 => {
                format!("running (from {})", input.place(*site))
            }
            w => state(w).to_string(),
        };
        let share = if window == 0 { 0.0 } else { s.ns as f64 * 100.0 / window as f64 };
        // A place of the path that stands for several threads says how many.
        let names: Vec<String> = path_names(input, s)
            .into_iter()
            .zip(&s.tids)
            .map(|(n, t)| if t.len() > 1 { format!("{n} ({} threads)", t.len()) } else { n })
            .collect();
        writeln!(out, "  {:>5.1}%  {:>11}  {}: {}", share, secs(s.ns), names.join(" -> "), what)?;
        sampled_line(input, sampled, 23, "on the CPU (sampled)", out)?;
    }
    Ok(())
}

fn path_json(
    input: &Input,
    report: &Report,
    tid: Tid,
    path: &[PathGroup<Who>],
    out: &mut dyn Write,
) -> io::Result<()> {
    let samples = input.path_samples(report, tid, path);
    let segments: Vec<Value> = path
        .iter()
        .zip(&samples)
        .map(|(s, sampled)| {
            let (kernel, user) = input.json_site(site_of(&s.what));
            let places: Vec<Value> = s
                .path
                .iter()
                .zip(&s.tids)
                .map(|(w, tids)| {
                    let comm = match w {
                        Who::Comm(c) | Who::Process(_, c) => c.clone(),
                        Who::Thread(_) | Who::Cgroup(_) => tids
                            .iter()
                            .next()
                            .and_then(|t| input.threads.get(t))
                            .map(|(_, c)| c.clone())
                            .unwrap_or_default(),
                    };
                    let pids: BTreeSet<u32> =
                        tids.iter().filter_map(|t| input.threads.get(t).map(|(p, _)| *p)).collect();
                    json!({"comm": comm, "tids": tids, "pids": pids})
                })
                .collect();
            let mut v = json!({
                "ns": s.ns,
                "path": places,
                "state": state(&s.what),
                "kernel_stack": kernel,
                "user_stack": user,
            });
            if let What::Blocked { on, .. } = &s.what {
                v["on"] = json!(waker_text(on));
            }
            if !sampled.is_empty() {
                v["sampled"] = sampled_json(input, sampled);
            }
            v
        })
        .collect();
    let doc = json!({
        "view": "why",
        "target": report.info.target,
        "duration_s": report.info.duration_s(),
        "by": input.by.name(),
        "critical_path": {"thread": input.json_thread(tid), "window_ns": report.info.end_mono.saturating_sub(report.info.start_mono), "segments": segments},
    });
    serde_json::to_writer(&mut *out, &doc)?;
    writeln!(out)
}

/// Folded lines: the path (as `--by` names it), then the last one's state and
/// stack (outermost frame first), then nanoseconds.
fn path_folded(input: &Input, path: &[PathGroup<Who>], out: &mut dyn Write) -> io::Result<()> {
    for line in folded_lines(input, path) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn folded_lines(input: &Input, path: &[PathGroup<Who>]) -> Vec<String> {
    let mut lines = Vec::new();
    for s in path {
        let mut parts: Vec<String> =
            path_names(input, s).iter().map(|n| n.replace([';', ' '], "_")).collect();
        parts.push(format!("[{}]", state(&s.what).replace(' ', "_")));
        if let Some(st) = input.site(site_of(&s.what)) {
            parts.extend(st.user.frames().iter().rev().map(|f| f.name().replace(';', ":")));
            parts.extend(st.kernel.frames().iter().rev().map(|f| f.name().replace(';', ":")));
        }
        lines.push(format!("{} {}", parts.join(";"), s.ns));
    }
    lines
}

/// `--svg` with `--for`: the critical path as a flame graph, the path of threads
/// at its root.
pub struct PathSvg {
    pub for_tid: Tid,
    pub by: By,
}

impl Format for PathSvg {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        use inferno::flamegraph;
        let input = Input::of(report, self.by);
        let lines = folded_lines(&input, &input.path(report, self.for_tid));
        let mut opts = flamegraph::Options::default();
        opts.title = format!(
            "Critical path of {} over {:.1} s",
            input.thread(self.for_tid),
            report.info.duration_s()
        );
        opts.subtitle = Some(format!(
            "{}: each stretch followed to the thread or device that ended it",
            report.info.target
        ));
        opts.count_name = "ns".into();
        opts.deterministic = true;
        super::svg::draw(&mut opts, &lines, "[nothing traced]", out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The WAL flush's waits end from three handlers of one disk: one cause.
    #[test]
    fn interrupts_are_named_by_their_device() {
        for h in ["blk_update_request", "wake_page_function", "wake_bit_function", "bio_endio"] {
            assert_eq!(device_class(h), Some("disk"), "{h}");
        }
        assert_eq!(device_class("hrtimer_wakeup"), Some("timer"));
        assert_eq!(device_class("net_rx_action"), Some("network"));
        assert_eq!(device_class("vp_interrupt"), None);
    }
}
