//! `topwaits why`'s views of a trace's every wait (its events, with wakers):
//! the causes ranked with the idle threads and knots apart, or with `--for` one
//! thread's critical path; as text, JSON, or folded paths for flame graphs.

use std::collections::HashMap;
use std::io::{self, Write};

use serde_json::{json, Value};

use super::{interrupt_handler, json::stack as json_stack, secs, Format};
use crate::cli::Output;
use crate::model::{comm_text, Hop, Report, Stack, WakeKind};
use crate::why::{critical_path, Cause, Findings, Segment, Tid, Trace, Wait, Waker, What};

/// The `why` view of a report.
pub struct Why {
    pub output: Output,
    pub for_tid: Option<Tid>,
}

/// Where a wait or a wakeup happened: its kernel and user stacks.
struct Site {
    kernel: Stack,
    user: Stack,
}

/// The trace's waits as the analysis takes them, and what names their ids.
struct Input {
    trace: Trace,
    /// Site `i + 1` (0: none).
    sites: Vec<Site>,
    threads: HashMap<Tid, (u32, String)>,
    waits: usize,
    /// What the waits at a site were for (the first labelled one's label).
    labels: HashMap<u64, String>,
    /// The lock each thread waited on longest, where it waited on one.
    locks: HashMap<Tid, String>,
}

impl Input {
    fn of(report: &Report) -> Input {
        let mut sites = Vec::new();
        let mut index: HashMap<(Vec<u64>, Vec<u64>), u64> = HashMap::new();
        let mut site = |kernel: &Stack, user: &Stack| -> u64 {
            let addrs = |s: &Stack| s.frames().iter().map(|f| f.addr).collect::<Vec<u64>>();
            *index.entry((addrs(kernel), addrs(user))).or_insert_with(|| {
                sites.push(Site { kernel: kernel.clone(), user: user.clone() });
                sites.len() as u64
            })
        };
        let mut threads = HashMap::new();
        let mut waits = Vec::new();
        let mut labels = HashMap::new();
        let mut locked: HashMap<Tid, HashMap<String, u64>> = HashMap::new();
        for e in &report.events {
            let r = &e.record;
            threads.insert(r.tid, (r.tgid, comm_text(&r.comm)));
            let (start, end) = (e.start_mono(), e.end_mono());
            let (waker, woken, waker_site) = match &r.wake {
                Some(w) if w.kind == WakeKind::Preempted => (Waker::Preempted, None, 0),
                Some(w) if w.kind == WakeKind::Woken && !w.hops.is_empty() => {
                    let h = &w.hops[0];
                    let by = if h.interrupt { Waker::Device(device(h)) } else { Waker::Thread(h.tid) };
                    if !h.interrupt {
                        threads.entry(h.tid).or_insert_with(|| (h.tgid, comm_text(&h.comm)));
                    }
                    (by, Some(start + w.blocked_ns), site(&h.kernel, &h.user))
                }
                _ => (Waker::Unknown, None, 0),
            };
            let own = site(&r.kernel, &r.user);
            if let Some(w) = &r.waits_on {
                labels.entry(own).or_insert_with(|| w.short());
                if w.is_lock() {
                    *locked.entry(r.tid).or_default().entry(w.lock().short()).or_default() += r.max_ns;
                }
            }
            waits.push(Wait { tid: r.tid, start, woken, end, waker, site: own, waker_site });
        }
        // Waits still open at the end: a pool thread that waited all along.
        for r in report.records.iter().filter(|r| r.open.is_some()) {
            let start = r.max_end_mono.saturating_sub(r.max_ns).max(report.info.start_mono);
            threads.entry(r.tid).or_insert_with(|| (r.tgid, comm_text(&r.comm)));
            let s = site(&r.kernel, &r.user);
            waits.push(Wait { tid: r.tid, start, woken: None, end: report.info.end_mono, waker: Waker::Unknown, site: s, waker_site: 0 });
        }
        let n = waits.len();
        let locks = locked.into_iter().filter_map(|(t, m)| Some((t, m.into_iter().max_by_key(|(l, ns)| (*ns, l.clone()))?.0))).collect();
        Input { trace: Trace::new(waits), sites, threads, waits: n, labels, locks }
    }

    fn site(&self, id: u64) -> Option<&Site> {
        id.checked_sub(1).and_then(|i| self.sites.get(i as usize))
    }

    /// `comm (tid N)`.
    fn thread(&self, tid: Tid) -> String {
        match self.threads.get(&tid) {
            Some((_, comm)) => format!("{comm} (tid {tid})"),
            None => format!("tid {tid}"),
        }
    }

    /// A site's innermost functions, user side first: `f <- g <- h`.
    fn place(&self, id: u64) -> String {
        let Some(s) = self.site(id) else { return "[no stack]".into() };
        let user: Vec<&str> = s.user.frames().iter().take(4).map(|f| f.name()).collect();
        let kernel: Vec<&str> = s.kernel.frames().iter().take(3).map(|f| f.name()).collect();
        match (user.is_empty(), kernel.is_empty()) {
            (false, _) => user.join(" <- "),
            (true, false) => kernel.join(" <- "),
            (true, true) => "[no stack]".into(),
        }
    }

    fn json_site(&self, id: u64) -> (Value, Value) {
        match self.site(id) {
            Some(s) => (json_stack(&s.kernel).0, json_stack(&s.user).0),
            None => (json!([]), json!([])),
        }
    }

    fn json_thread(&self, tid: Tid) -> Value {
        let (tgid, comm) = self.threads.get(&tid).cloned().unwrap_or((0, String::new()));
        json!({"tid": tid, "tgid": tgid, "comm": comm})
    }
}

/// What a device wakeup is called: its class and the handler.
fn device(h: &Hop) -> String {
    let Some(handler) = interrupt_handler(h) else { return "an interrupt".into() };
    let class = if handler.contains("timer") || handler.contains("timeout") || handler.contains("it_real_fn") {
        "timer"
    } else if handler.starts_with("blk_") || handler.starts_with("bio_") || handler.contains("_end_io") || handler.contains("nvme") {
        "disk"
    } else if handler.contains("net_rx") || handler.contains("napi") || handler.starts_with("tcp_") || handler.starts_with("sock_") {
        "network"
    } else {
        "interrupt"
    };
    format!("{class} ({handler})")
}

fn waker_text(w: &Waker) -> String {
    match w {
        Waker::Thread(t) => format!("thread {t} (path too deep)"),
        Waker::Device(d) => d.clone(),
        Waker::Preempted => "a CPU".into(),
        Waker::Unknown => "no wakeup seen".into(),
    }
}

/// One line saying what a cause is.
fn describe(input: &Input, c: &Cause) -> String {
    let who = input.thread(c.tid);
    match &c.what {
        What::Blocked { site, on } => {
            let what = input.labels.get(site).map(|l| format!(" ({l})")).unwrap_or_default();
            format!("{who} blocked on {} in {}{what}", waker_text(on), input.place(*site))
        }
        What::Running { site: 0 } => format!("{who} running"),
        What::Running { site } => format!("{who} running (it woke the waiter from {})", input.place(*site)),
        What::RunQueue => format!("{who} runnable, waiting for a CPU"),
        What::Cycle => format!("{who} in a cycle of waits"),
    }
}

fn kind(w: &What) -> &'static str {
    match w {
        What::Blocked { .. } => "blocked",
        What::Running { .. } => "running",
        What::RunQueue => "run_queue",
        What::Cycle => "cycle",
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
        let input = Input::of(report);
        match self.for_tid {
            Some(tid) => {
                let path = critical_path(&input.trace, tid, report.info.start_mono, report.info.end_mono);
                match self.output {
                    Output::Json { .. } => path_json(&input, report, tid, &path, out),
                    Output::Folded { .. } => path_folded(&input, &path, out),
                    Output::Top { .. } => path_text(&input, report, tid, &path, out),
                }
            }
            None => {
                let found = input.trace.why(&[]);
                match self.output {
                    Output::Json { .. } => causes_json(&input, report, &found, limit(&self.output), out),
                    _ => causes_text(&input, report, &found, limit(&self.output), out),
                }
            }
        }
    }
}

fn causes_text(input: &Input, report: &Report, f: &Findings, limit: usize, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "Why {} waited ({:.1} s, {} waits): {} of waiting that other threads depended on.",
        report.info.target,
        report.info.duration_s(),
        input.waits,
        secs(f.waiting_ns)
    )?;
    if f.causes.is_empty() {
        writeln!(out, "\nNo thread's waits held up another's.")?;
    } else {
        writeln!(out, "\nCauses, the first to fix first (each moment a thread waited, followed to what it waited behind):\n")?;
    }
    let shown = if limit == 0 { f.causes.len() } else { limit.min(f.causes.len()) };
    for (i, c) in f.causes.iter().take(shown).enumerate() {
        writeln!(out, "{:>3}. {:>5.1}%  {:>11}  {}", i + 1, c.share * 100.0, secs(c.ns), describe(input, &c.cause))?;
        let others: Vec<String> = c.waiters.iter().filter(|&&t| t != c.cause.tid).map(|&t| input.thread(t)).collect();
        if !others.is_empty() {
            let more = if others.len() > 4 { format!(" and {} more", others.len() - 4) } else { String::new() };
            // The lock they waited on, when they all waited on one the most.
            let mut locks = c.waiters.iter().filter(|&&t| t != c.cause.tid).map(|t| input.locks.get(t));
            let first = locks.next().flatten();
            let on = match first {
                Some(l) if locks.all(|x| x == Some(l)) => format!(" on {l}"),
                _ => String::new(),
            };
            writeln!(
                out,
                "{:>26}{} waited behind it{on}: {}{}",
                "",
                crate::cli::plural(others.len(), "thread"),
                others[..others.len().min(4)].join(", "),
                more
            )?;
        }
    }
    if shown < f.causes.len() {
        writeln!(out, "     ... {} more causes ({} in all; -n 0 shows every one)", f.causes.len() - shown, f.causes.len())?;
    }
    if !f.knots.is_empty() {
        writeln!(out, "\nKnots (threads that waited only on each other):")?;
        for k in &f.knots {
            writeln!(out, "  {}", k.iter().map(|&t| input.thread(t)).collect::<Vec<_>>().join(", "))?;
        }
    }
    if !f.idle.is_empty() {
        writeln!(out, "\nIdle (woke no other thread after any of their waits, so they held nobody up; not ranked):")?;
        // Threads of one name idle in one place (a pool) share a line.
        let mut groups: Vec<(String, String, Vec<&crate::why::Idle>)> = Vec::new();
        for i in &f.idle {
            let name = input.threads.get(&i.tid).map(|(_, c)| c.clone()).unwrap_or_default();
            let place = input.place(i.site);
            match groups.iter_mut().find(|g| g.0 == name && g.1 == place) {
                Some(g) => g.2.push(i),
                None => groups.push((name, place, vec![i])),
            }
        }
        for (_, place, members) in &groups {
            let longest = members.iter().map(|i| i.ns).max().unwrap_or(0);
            let who = match members.as_slice() {
                [one] => input.thread(one.tid),
                many => format!("{} threads like {}", many.len(), input.thread(many[0].tid)),
            };
            writeln!(out, "  {:>11}  {who} in {place}", secs(longest))?;
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

fn causes_json(input: &Input, report: &Report, f: &Findings, limit: usize, out: &mut dyn Write) -> io::Result<()> {
    let take = if limit == 0 { f.causes.len() } else { limit.min(f.causes.len()) };
    let causes: Vec<Value> = f.causes[..take]
        .iter()
        .map(|c| {
            let site = match &c.cause.what {
                What::Blocked { site, .. } | What::Running { site } => *site,
                _ => 0,
            };
            let (kernel, user) = input.json_site(site);
            let mut v = json!({
                "share": c.share,
                "ns": c.ns,
                "kind": kind(&c.cause.what),
                "thread": input.json_thread(c.cause.tid),
                "kernel_stack": kernel,
                "user_stack": user,
                "waiters": c.waiters.iter().map(|&t| input.json_thread(t)).collect::<Vec<_>>(),
                "description": describe(input, &c.cause),
            });
            if let What::Blocked { on, site } = &c.cause.what {
                v["on"] = json!(waker_text(on));
                v["waits_on"] = json!(input.labels.get(site));
            }
            v
        })
        .collect();
    let idle: Vec<Value> = f
        .idle
        .iter()
        .map(|i| {
            let (kernel, user) = input.json_site(i.site);
            json!({"thread": input.json_thread(i.tid), "ns": i.ns, "kernel_stack": kernel, "user_stack": user})
        })
        .collect();
    let doc = json!({
        "view": "why",
        "target": report.info.target,
        "duration_s": report.info.duration_s(),
        "waits": input.waits,
        "waiting_ns": f.waiting_ns,
        "idle_waits_ns": f.idle_waits_ns,
        "causes_total": f.causes.len(),
        "causes": causes,
        "idle": idle,
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

fn path_names(input: &Input, s: &Segment) -> Vec<String> {
    s.path.iter().map(|&t| input.threads.get(&t).map(|(_, c)| c.clone()).unwrap_or_else(|| format!("tid {t}"))).collect()
}

fn path_text(input: &Input, report: &Report, tid: Tid, path: &[Segment], out: &mut dyn Write) -> io::Result<()> {
    let window = report.info.end_mono.saturating_sub(report.info.start_mono);
    writeln!(out, "Where {}'s {} went (its critical path):\n", input.thread(tid), secs(window))?;
    for s in path {
        let what = match &s.what {
            What::Blocked { site, on } => format!("blocked on {} in {}", waker_text(on), input.place(*site)),
            What::Running { site } if *site != 0 => format!("running (from {})", input.place(*site)),
            w => state(w).to_string(),
        };
        let share = if window == 0 { 0.0 } else { s.ns as f64 * 100.0 / window as f64 };
        writeln!(out, "  {:>5.1}%  {:>11}  {}: {}", share, secs(s.ns), path_names(input, s).join(" -> "), what)?;
    }
    Ok(())
}

fn path_json(input: &Input, report: &Report, tid: Tid, path: &[Segment], out: &mut dyn Write) -> io::Result<()> {
    let segments: Vec<Value> = path
        .iter()
        .map(|s| {
            let site = match &s.what {
                What::Blocked { site, .. } | What::Running { site } => *site,
                _ => 0,
            };
            let (kernel, user) = input.json_site(site);
            let mut v = json!({
                "ns": s.ns,
                "path": s.path.iter().map(|&t| input.json_thread(t)).collect::<Vec<_>>(),
                "state": state(&s.what),
                "kernel_stack": kernel,
                "user_stack": user,
            });
            if let What::Blocked { on, .. } = &s.what {
                v["on"] = json!(waker_text(on));
            }
            v
        })
        .collect();
    let doc = json!({
        "view": "why",
        "target": report.info.target,
        "duration_s": report.info.duration_s(),
        "critical_path": {"thread": input.json_thread(tid), "window_ns": report.info.end_mono.saturating_sub(report.info.start_mono), "segments": segments},
    });
    serde_json::to_writer(&mut *out, &doc)?;
    writeln!(out)
}

/// Folded lines: the path of threads, then the last one's state and stack
/// (outermost frame first), then nanoseconds.
fn path_folded(input: &Input, path: &[Segment], out: &mut dyn Write) -> io::Result<()> {
    for line in folded_lines(input, path) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn folded_lines(input: &Input, path: &[Segment]) -> Vec<String> {
    let mut lines = Vec::new();
    for s in path {
        let mut parts: Vec<String> = path_names(input, s).iter().map(|n| n.replace([';', ' '], "_")).collect();
        parts.push(format!("[{}]", state(&s.what).replace(' ', "_")));
        let site = match &s.what {
            What::Blocked { site, .. } | What::Running { site } => *site,
            _ => 0,
        };
        if let Some(st) = input.site(site) {
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
}

impl Format for PathSvg {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        use inferno::flamegraph;
        let input = Input::of(report);
        let path = critical_path(&input.trace, self.for_tid, report.info.start_mono, report.info.end_mono);
        let lines = folded_lines(&input, &path);
        let mut opts = flamegraph::Options::default();
        opts.title = format!("Critical path of {} over {:.1} s", input.thread(self.for_tid), report.info.duration_s());
        opts.subtitle = Some(format!("{}: each stretch followed to the thread or device that ended it", report.info.target));
        opts.count_name = "ns".into();
        opts.deterministic = true;
        super::svg::draw(&mut opts, &lines, "[nothing traced]", out)
    }
}
