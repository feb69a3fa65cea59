//! `topwaits locks`'s views of a trace's every wait (its events, with wakers):
//! the locks that made threads wait, ranked, each with its waiters, its holders
//! and what they did while holding it (see `crate::analysis::locks`); as text, JSON (a
//! ranked `locks` array), or folded lines and an svg of the waiters' stacks under
//! their lock.

use std::io::{self, Write};

use serde_json::{json, Value};

use super::{folded::clean, json::stack as json_stack, secs, Format};
use crate::analysis::locks::{analyze, Analysis, HeldWhile, Lock, Site, Unclassified};
use crate::model::label::WaitsOn;
use crate::model::{comm_text, Report, Stack};
use crate::settings::{By, Output};
use crate::util::text::{count_of, plural};

/// The `locks` view of a report.
pub struct Locks {
    pub output: Output,
    pub by: By,
}

fn ms(ns: u64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

/// What a holder did, in words: "sleeping", "waiting on disk vda", "running";
/// where it did it is its stack, shown beside.
fn doing(h: &HeldWhile) -> String {
    match &h.waits_on {
        None => "running or waiting for a CPU".to_string(),
        Some(WaitsOn::Sleep { .. }) => "sleeping".to_string(),
        Some(WaitsOn::RunQueue { .. }) => "preempted".to_string(),
        Some(WaitsOn::Other { what }) => format!("blocked {what}"),
        Some(w) => format!("waiting on {}", w.short()),
    }
}

/// A stack's frames as `a <- b <- c`, leaf first, at most `n` of them.
fn short_stack(s: &Stack, n: usize) -> String {
    let names: Vec<_> = s.frames().iter().take(n).map(|f| f.name()).collect();
    if names.is_empty() {
        "[no stack]".to_string()
    } else {
        names.join(" <- ")
    }
}

/// `comm (tid N)`, `comm (N threads)` or `comm (pid P, N threads)`.
fn who(
    comm: &[u8],
    tids: &std::collections::BTreeSet<u32>,
    pids: &std::collections::BTreeSet<u32>,
    mode: Option<&String>,
) -> String {
    let threads = if tids.len() == 1 {
        crate::util::text::tid_text(*tids.iter().next().unwrap_or(&0))
    } else {
        count_of(tids.len(), tids)
    };
    let pid = match pids.iter().collect::<Vec<_>>()[..] {
        [p] if tids.len() > 1 => format!("pid {p}, "),
        _ => String::new(),
    };
    let mode = mode.map(|m| format!(", to {m}")).unwrap_or_default();
    format!("{} ({pid}{threads}{mode})", comm_text(comm))
}

fn site_who(s: &Site) -> String {
    who(&s.comm, &s.tids, &s.pids, s.mode.as_ref())
}

/// Sites as the text shows them: their threads and their innermost frames;
/// sites alike in both (their stacks differ only deeper down) are one line,
/// with their counts and time added. (who, stack, count, ns), most time first.
fn said_once(sites: &[Site]) -> Vec<(String, String, u64, u64)> {
    let mut lines: Vec<(String, String, u64, u64)> = Vec::new();
    for s in sites {
        let (who, stack) = (site_who(s), short_stack(&s.user, 6));
        match lines.iter_mut().find(|l| l.0 == who && l.1 == stack) {
            Some(l) => (l.2, l.3) = (l.2 + s.count, l.3 + s.ns),
            None => lines.push((who, stack, s.count, s.ns)),
        }
    }
    lines.sort_by_key(|l| std::cmp::Reverse(l.3));
    lines
}

/// The waits another thread's wakeup ended that are no lock topwaits can
/// tell, in words: `120 waits (1.200 s) on sockets and poll`.
fn unclassified_text(u: &[Unclassified]) -> String {
    let (count, ns) = u.iter().fold((0, 0), |(c, n), u| (c + u.count, n + u.ns));
    let kinds: Vec<&str> = u.iter().take(4).map(|u| u.kind.as_str()).collect();
    format!("{} ({}) on {}", plural(count as usize, "wait"), secs(ns), kinds.join(", "))
}

fn text(report: &Report, found: &Analysis, limit: usize, out: &mut dyn Write) -> io::Result<()> {
    let locks = &found.locks;
    let total: u64 = locks.iter().map(|l| l.total_ns).sum();
    writeln!(
        out,
        "Locks that made {} wait ({:.1} s): {}, {} of contended waiting.",
        report.info.target,
        report.info.duration_s(),
        plural(locks.len(), "lock"),
        secs(total)
    )?;
    if locks.is_empty() && found.unclassified.is_empty() {
        return writeln!(
            out,
            "\nNo wait was on a lock, and no other thread's wakeup ended one: see `topwaits --by what` for what the threads waited on."
        );
    }
    if locks.is_empty() {
        return writeln!(
            out,
            "\nNo wait was on a lock topwaits can tell; another thread's wakeup ended {}: see `topwaits why` for what they waited behind.",
            unclassified_text(&found.unclassified)
        );
    }
    for (i, l) in locks.iter().take(if limit == 0 { usize::MAX } else { limit }).enumerate() {
        writeln!(out)?;
        writeln!(
            out,
            "{}. {}: {} waits by {}, total {} ({:.0}%), longest {}",
            i + 1,
            l.id.short(),
            l.count,
            count_of(l.waiter_threads(), l.waiters.iter().flat_map(|s| s.tids.iter())),
            secs(l.total_ns),
            100.0 * l.total_ns as f64 / total.max(1) as f64,
            ms(l.max_ns)
        )?;
        // What they did, each line once (held-whiles alike but deeper in
        // their stacks are one).
        let mut held: Vec<(String, String, std::collections::BTreeSet<u32>, u64)> = Vec::new();
        for h in &l.held_while {
            let line =
                format!("held while {} by {}", doing(h), who(&h.comm, &h.holders, &h.pids, None));
            let stack = if h.waits_on.is_some() { short_stack(&h.user, 6) } else { String::new() };
            match held.iter_mut().find(|x| x.0 == line && x.1 == stack) {
                Some(x) => {
                    x.2.extend(h.waiters.iter().copied());
                    x.3 += h.ns;
                }
                None => held.push((line, stack, h.waiters.clone(), h.ns)),
            }
        }
        held.sort_by_key(|h| std::cmp::Reverse(h.3));
        for (line, stack, waiters, ns) in held.iter().take(3) {
            let n = count_of(waiters.len(), waiters);
            writeln!(out, "   {line}: {n} waited {}", secs(*ns))?;
            if !stack.is_empty() {
                writeln!(out, "       {stack}")?;
            }
        }
        if l.unreleased_ns > 0 {
            writeln!(
                out,
                "   no release seen for {} of it (a timeout, or a wakeup not traced)",
                secs(l.unreleased_ns)
            )?;
        }
        writeln!(out, "   released by:")?;
        for (who, stack, count, ns) in said_once(&l.holders).into_iter().take(3) {
            writeln!(
                out,
                "     {who}: {}, ending {} of waiting",
                plural(count as usize, "release"),
                secs(ns)
            )?;
            writeln!(out, "       {stack}")?;
        }
        writeln!(out, "   waiters:")?;
        for (who, stack, count, ns) in said_once(&l.waiters).into_iter().take(3) {
            writeln!(out, "     {who}: {}, {}", plural(count as usize, "wait"), secs(ns))?;
            writeln!(out, "       {stack}")?;
        }
    }
    if !found.unclassified.is_empty() {
        writeln!(
            out,
            "\nNot taken for locks: another thread's wakeup also ended {}.",
            unclassified_text(&found.unclassified)
        )?;
    }
    Ok(())
}

fn site_json(s: &Site) -> Value {
    let (ks, kstatus) = json_stack(&s.kernel);
    let (us, ustatus) = json_stack(&s.user);
    json!({
        "mode": s.mode,
        "comm": comm_text(&s.comm),
        "tids": s.tids,
        "pids": s.pids,
        "count": s.count,
        "ns": s.ns,
        "kernel_stack": ks,
        "kernel_stack_status": kstatus,
        "user_stack": us,
        "user_stack_status": ustatus,
    })
}

fn lock_json(l: &Lock, total: u64) -> Value {
    let waits_on = l.id.waits_on().map(|w| super::json::waits_on(w, l.total_ns / l.count.max(1)));
    json!({
        "label": l.id.short(),
        "kind": l.id.kind(),
        "waits_on": waits_on,
        "count": l.count,
        "total_ns": l.total_ns,
        "max_ns": l.max_ns,
        "share": l.total_ns as f64 / total.max(1) as f64,
        "waiter_threads": l.waiter_threads(),
        "unreleased_ns": l.unreleased_ns,
        "held_while": l.held_while.iter().map(|h| {
            let (ks, kstatus) = json_stack(&h.kernel);
            let (us, ustatus) = json_stack(&h.user);
            json!({
                "doing": doing(h),
                "waits_on": h.waits_on.as_ref().map(|w| super::json::waits_on(w, h.mean_ns())),
                "function": h.function,
                "comm": comm_text(&h.comm),
                "holders": h.holders,
                "pids": h.pids,
                "waits": h.count,
                "mean_wait_ns": h.mean_ns(),
                "ns": h.ns,
                "waiters": h.waiters,
                "kernel_stack": ks,
                "kernel_stack_status": kstatus,
                "user_stack": us,
                "user_stack_status": ustatus,
            })
        }).collect::<Vec<_>>(),
        "holders": l.holders.iter().map(site_json).collect::<Vec<_>>(),
        "waiters": l.waiters.iter().map(site_json).collect::<Vec<_>>(),
    })
}

/// Folded lines: the lock, then each waiting site's thread name and user then
/// kernel frames, root first; the value is the waiting in µs.
fn folded_lines(locks: &[Lock], by: By) -> Vec<String> {
    let mut lines = Vec::new();
    for l in locks {
        for s in &l.waiters {
            // The waiters by name, or by process or thread as `--by` splits them.
            let name = if matches!(by, By::Comm | By::What | By::Cgroup) {
                comm_text(&s.comm)
            } else {
                site_who(s)
            };
            let mut frames = vec![clean(&format!("[{}]", l.id.short())), clean(&name)];
            frames.extend(s.user.frames().iter().rev().map(|f| clean(&f.name())));
            frames.extend(s.kernel.frames().iter().rev().map(|f| clean(&f.name())));
            lines.push(format!("{} {}", frames.join(";"), (s.ns / 1000).max(1)));
        }
    }
    lines
}

impl Format for Locks {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        let found = analyze(report, self.by);
        let locks = &found.locks;
        match &self.output {
            Output::Json { limit } => {
                let total: u64 = locks.iter().map(|l| l.total_ns).sum();
                let shown = if *limit == 0 { locks.len() } else { *limit };
                let doc = json!({
                    "target": report.info.target,
                    "duration_s": report.info.duration_s(),
                    "waits": report.events.len(),
                    "lock_waiting_ns": total,
                    "locks": locks.iter().take(shown).map(|l| lock_json(l, total)).collect::<Vec<_>>(),
                    "unclassified": found.unclassified.iter().map(|u| json!({"kind": u.kind, "count": u.count, "ns": u.ns})).collect::<Vec<_>>(),
                });
                serde_json::to_writer_pretty(&mut *out, &doc).map_err(io::Error::other)?;
                writeln!(out)
            }
            Output::Folded { .. } => {
                for l in folded_lines(locks, self.by) {
                    writeln!(out, "{l}")?;
                }
                Ok(())
            }
            Output::Top { limit, .. } => text(report, &found, *limit, out),
        }
    }
}

/// `locks --svg`: the waiters' stacks under their lock, as a flame graph.
pub struct LocksSvg {
    pub by: By,
}

impl Format for LocksSvg {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        use inferno::flamegraph;
        let lines = folded_lines(&analyze(report, self.by).locks, self.by);
        let mut opts = flamegraph::Options::default();
        opts.title =
            format!("Lock waits of {} over {:.1} s", report.info.target, report.info.duration_s());
        opts.subtitle = Some("each lock at the root, its waiters' stacks above it".into());
        opts.count_name = "us".into();
        opts.deterministic = true;
        super::svg::draw(&mut opts, &lines, "[no lock waits]", out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Frame;

    fn site(user: &[&str], tid: u32, count: u64, ns: u64) -> Site {
        let frames = user
            .iter()
            .map(|n| Frame { addr: 1, symbol: Some((*n).into()), module: None, offset: None })
            .collect();
        Site {
            mode: None,
            comm: b"postgres".to_vec(),
            kernel: Stack::None,
            user: Stack::of(frames),
            tids: [tid].into(),
            pids: [1].into(),
            count,
            ns,
        }
    }

    /// Two waiting sites that differ only below the sixth frame print one line;
    /// a third, another.
    #[test]
    fn sites_alike_in_what_is_shown_are_one_line() {
        let top = [
            "epoll_wait",
            "WaitEventSetWait",
            "WaitLatch",
            "ProcSleep",
            "WaitOnLock",
            "LockAcquireExtended",
        ];
        let deeper = |f: &'static str| top.iter().copied().chain([f]).collect::<Vec<_>>();
        let sites = vec![
            site(&deeper("heap_update"), 5, 3, 30),
            site(&deeper("heap_lock_tuple"), 5, 2, 50),
            site(&["sem_wait", "LWLockAcquire"], 5, 1, 40),
        ];
        let lines = said_once(&sites);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!((lines[0].2, lines[0].3), (5, 80));
        assert!(lines[0].1.starts_with("epoll_wait <- WaitEventSetWait"), "{lines:?}");
        assert_eq!(lines[1].3, 40);
    }
}
