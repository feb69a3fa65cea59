//! The `topwaits threads` report: a table sorted by run time, or JSON with the
//! threads, their wake dependencies and the producer/consumer groups, with
//! `--on-cpu` each thread's hottest running stacks, and a Go program's
//! goroutines.

use std::io::{self, Write};

use serde_json::{json, Value};

use super::Format;
use crate::analysis::deps::Group;
use crate::analysis::goprofile::GoroutineProfile;
use crate::analysis::timeshare::Hot;
use crate::model::comm_text;
use crate::model::profile::{Edge, ThreadProfile};

/// What the threads report shows.
pub struct ThreadsReport<'a> {
    pub threads: &'a [ThreadProfile],
    pub edges: &'a [Edge],
    pub groups: &'a [Group],
    pub duration_s: f64,
    pub target: &'a str,
    pub warnings: &'a [String],
    /// With `--on-cpu`: the sampling rate, and each thread's hottest stacks.
    pub hot: Option<(u32, &'a std::collections::HashMap<u32, Vec<Hot>>)>,
    /// The goroutines of the Go programs traced, most time parked first, and
    /// the time of goroutine waits kept by stack alone.
    pub goroutines: (&'a [GoroutineProfile], u64),
}

/// Most goroutines the table lists; JSON has them all.
const GOROUTINES_SHOWN: usize = 20;
/// Most reasons and threads a goroutine's line names.
const NAMED: usize = 2;

/// How many of a hot stack's frames the table shows.
const HOT_FRAMES: usize = 6;

/// A hot stack on one line, leaf first: its user frames, or its kernel ones
/// where it ran in the kernel only.
fn hot_line(h: &Hot) -> String {
    crate::analysis::diff::frames_line(&h.user, &h.kernel, HOT_FRAMES)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Threads by run time, longest first, then by tid.
pub fn by_run(threads: &[ThreadProfile]) -> Vec<&ThreadProfile> {
    let mut v: Vec<&ThreadProfile> = threads.iter().collect();
    v.sort_by(|a, b| b.run_ns.cmp(&a.run_ns).then(a.tid.cmp(&b.tid)));
    v
}

fn role(r: &ThreadsReport<'_>, tid: u32) -> String {
    for g in r.groups {
        if g.producer == tid {
            return format!("producer of {}", g.consumers.len());
        }
        if g.consumers.contains(&tid) {
            return format!("consumer of {}", g.producer);
        }
    }
    String::new()
}

/// The table view of `topwaits threads`.
pub struct Table;

/// The JSON document of `topwaits threads --json`.
pub struct Json;

impl<'a> Format<ThreadsReport<'a>> for Table {
    fn write(&self, r: &ThreadsReport<'a>, out: &mut dyn Write) -> io::Result<()> {
        write_table(r, out)
    }
}

impl<'a> Format<ThreadsReport<'a>> for Json {
    fn write(&self, r: &ThreadsReport<'a>, out: &mut dyn Write) -> io::Result<()> {
        write_json(r, out)
    }
}

fn write_table(r: &ThreadsReport<'_>, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "Threads of {} over {:.2} s, by run time (times in ms):",
        r.target, r.duration_s
    )?;
    if let Some((hz, _)) = r.hot {
        writeln!(out, "Under each thread, where it ran: its hottest stacks, sampled {hz} times a second (ms estimated from samples).")?;
    }
    writeln!(
        out,
        "{:>7} {:>7} {:<16} {:>9} {:>7} {:>7} {:>9} {:>9} {:>9} {:>7} {:>5} {:<12} NOTES",
        "TID",
        "PID",
        "COMM",
        "RUN",
        "STEAL",
        "RUNS",
        "RUNQ",
        "SLEEP",
        "IO",
        "SLEEPS",
        "NICE",
        "POLICY"
    )?;
    for t in by_run(r.threads) {
        let mut notes = Vec::new();
        if t.started {
            notes.push("started".to_string());
        }
        if t.exited {
            notes.push("exited".to_string());
        }
        let role = role(r, t.tid);
        if !role.is_empty() {
            notes.push(role);
        }
        writeln!(
            out,
            "{:>7} {:>7} {:<16} {:>9.1} {:>7} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>7} {:>5} {:<12} {}",
            t.tid,
            t.tgid,
            comm_text(&t.comm),
            ms(t.run_ns),
            t.stolen_ns().map_or_else(|| "-".to_string(), |s| format!("{:.1}", ms(s))),
            t.run_events,
            ms(t.preempt_ns),
            ms(t.sleep_ns),
            ms(t.io_ns),
            t.sleep_events,
            t.nice(),
            t.policy_name(),
            notes.join(", ")
        )?;
        for h in r.hot.and_then(|(_, hot)| hot.get(&t.tid)).into_iter().flatten() {
            writeln!(
                out,
                "{:>7} {:>7} ran ~{:.1} ms ({} samples) in {}",
                "",
                "",
                ms(h.running_ns),
                h.samples,
                hot_line(h)
            )?;
        }
    }
    let mut deps: Vec<&Edge> = r.edges.iter().filter(|e| e.futex).collect();
    deps.sort_by(|a, b| b.count.cmp(&a.count).then(a.cmp(b)));
    if !deps.is_empty() {
        writeln!(out, "\nFutex wake dependencies (waker -> sleeper: count):")?;
        for e in deps {
            writeln!(out, "  {} -> {}: {}", e.waker, e.sleeper, e.count)?;
        }
    }
    for g in r.groups {
        let c: Vec<String> = g.consumers.iter().map(u32::to_string).collect();
        writeln!(out, "Producer {} wakes consumers {}", g.producer, c.join(", "))?;
    }
    write_goroutines(r, out)
}

/// The goroutines' table: each one's time parked (until the scheduler ran it
/// again), what it waited on, where and on which threads it ran.
fn write_goroutines(r: &ThreadsReport<'_>, out: &mut dyn Write) -> io::Result<()> {
    let (goroutines, merged_ns) = r.goroutines;
    if goroutines.is_empty() && merged_ns == 0 {
        return Ok(());
    }
    writeln!(out, "\nGoroutines, by time parked until run again (times in ms):")?;
    writeln!(
        out,
        "{:>7} {:>7} {:<16} {:>9} {:>7} {:<28} {:<24} RAN ON",
        "GOID", "PID", "COMM", "PARKED", "WAITS", "ON", "IN"
    )?;
    for g in goroutines.iter().take(GOROUTINES_SHOWN) {
        let on: Vec<String> =
            g.on.iter()
                .take(NAMED)
                .map(|(reason, ns)| {
                    format!("{reason} {:.0}%", 100.0 * *ns as f64 / g.parked_ns.max(1) as f64)
                })
                .collect();
        let mut ran_on: Vec<String> =
            g.ran_on.iter().take(NAMED).map(|t| format!("tid {t}")).collect();
        if g.ran_on.len() > NAMED {
            ran_on.push(format!("+{}", g.ran_on.len() - NAMED));
        }
        writeln!(
            out,
            "{:>7} {:>7} {:<16} {:>9.1} {:>7} {:<28} {:<24} {}",
            g.goid,
            g.tgid,
            comm_text(&g.comm),
            ms(g.parked_ns),
            g.waits,
            on.join(", "),
            g.site.as_deref().unwrap_or("-"),
            ran_on.join(", ")
        )?;
    }
    if goroutines.len() > GOROUTINES_SHOWN {
        let more = goroutines.len() - GOROUTINES_SHOWN;
        writeln!(out, "  and {more} more goroutines (--json lists them all)")?;
    }
    if merged_ns > 0 {
        writeln!(
            out,
            "  and {:.1} ms of goroutine waits kept by stack alone, once the table of waits was half full",
            ms(merged_ns)
        )?;
    }
    Ok(())
}

/// Schema version of the `threads --json` document.
pub const VERSION: u32 = 1;

pub fn document(r: &ThreadsReport<'_>) -> Value {
    let threads: Vec<Value> = by_run(r.threads)
        .into_iter()
        .map(|t| {
            let mut v = json!({
                "tid": t.tid,
                "tgid": t.tgid,
                "comm": comm_text(&t.comm),
                "run_us": t.run_ns / 1000,
                "cpu_us": t.cpu_ns.map(|c| c / 1000),
                "stolen_us": t.stolen_ns().map(|s| s / 1000),
                "preempt_us": t.preempt_ns / 1000,
                "sleep_us": t.sleep_ns / 1000,
                "io_us": t.io_ns / 1000,
                "run_events": t.run_events,
                "sleep_events": t.sleep_events,
                "nice": t.nice(),
                "prio": t.prio,
                "policy": t.policy_name(),
                "rt_priority": t.rt_priority,
                "started": t.started,
                "exited": t.exited,
            });
            if let Some((_, hot)) = r.hot {
                let stacks: Vec<Value> = hot
                    .get(&t.tid)
                    .into_iter()
                    .flatten()
                    .map(|h| json!({"samples": h.samples, "running_us": h.running_ns / 1000, "user": h.user, "kernel": h.kernel}))
                    .collect();
                v["running_stacks"] = json!(stacks);
            }
            v
        })
        .collect();
    let mut edges: Vec<&Edge> = r.edges.iter().collect();
    edges.sort();
    let deps: Vec<Value> =
        edges.iter().map(|e| json!({ "waker": e.waker, "sleeper": e.sleeper, "count": e.count, "futex": e.futex })).collect();
    let groups: Vec<Value> = r
        .groups
        .iter()
        .map(|g| json!({ "producer": g.producer, "consumers": g.consumers }))
        .collect();
    let (goroutines, merged_ns) = r.goroutines;
    let goroutines: Vec<Value> = goroutines
        .iter()
        .map(|g| {
            let on: Vec<Value> =
                g.on.iter()
                    .map(|(reason, ns)| json!({"reason": reason, "us": ns / 1000}))
                    .collect();
            json!({
                "goid": g.goid,
                "tgid": g.tgid,
                "comm": comm_text(&g.comm),
                "parked_us": g.parked_ns / 1000,
                "waits": g.waits,
                "waits_on": on,
                "site": g.site,
                "ran_on_tids": g.ran_on,
            })
        })
        .collect();
    json!({
        "version": VERSION,
        "duration_s": (r.duration_s * 1000.0).round() / 1000.0,
        "target": r.target,
        "warnings": r.warnings,
        "threads": threads,
        "dependencies": deps,
        "groups": groups,
        "on_cpu_hz": r.hot.map(|(hz, _)| hz),
        "goroutines": goroutines,
        "goroutines_by_stack_us": merged_ns / 1000,
    })
}

fn write_json(r: &ThreadsReport<'_>, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer(&mut *out, &document(r))?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> (Vec<ThreadProfile>, Vec<Edge>, Vec<Group>) {
        let t = |tid, run_ms: u64, comm: &str| ThreadProfile {
            tid,
            tgid: 10,
            comm: comm.as_bytes().to_vec(),
            run_ns: run_ms * 1_000_000,
            preempt_ns: 1_000_000,
            sleep_ns: 500_000_000,
            run_events: 5,
            sleep_events: 4,
            static_prio: 120,
            ..Default::default()
        };
        let mut threads = vec![t(11, 20, "consumer"), t(10, 90, "producer")];
        threads[0].exited = true;
        threads[1].cpu_ns = Some(87_500_000);
        let edges = vec![
            Edge { waker: 10, sleeper: 11, count: 7, futex: true },
            Edge { waker: 11, sleeper: 10, count: 1, futex: false },
        ];
        let groups = vec![Group { producer: 10, consumers: vec![11] }];
        (threads, edges, groups)
    }

    fn report<'a>(
        threads: &'a [ThreadProfile],
        edges: &'a [Edge],
        groups: &'a [Group],
        hot: Option<(u32, &'a std::collections::HashMap<u32, Vec<Hot>>)>,
    ) -> ThreadsReport<'a> {
        ThreadsReport {
            threads,
            edges,
            groups,
            duration_s: 1.0,
            target: "PID 10",
            warnings: &[],
            hot,
            goroutines: (&[], 0),
        }
    }

    fn table(r: &ThreadsReport<'_>) -> String {
        let mut out = Vec::new();
        write_table(r, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn table_is_sorted_by_run_time_with_roles() {
        let (threads, edges, groups) = fixture();
        let r = report(&threads, &edges, &groups, None);
        let text = table(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].contains(" RUN   STEAL "), "{text}");
        assert!(
            lines[2].contains("producer") && lines[2].contains("90.0     2.5 "),
            "steal 2.5 ms: {text}"
        );
        assert!(lines[3].contains(" 20.0       - "), "unknown steal is a dash: {text}");
        assert!(lines[3].contains("exited, consumer of 10"), "{text}");
        assert!(text.contains("  10 -> 11: 7\n"), "{text}");
        assert!(!text.contains("11 -> 10"), "non-futex edges are not listed as futex dependencies");
        assert!(text.contains("Producer 10 wakes consumers 11"));
    }

    #[test]
    fn json_has_the_documented_keys() {
        let (threads, edges, groups) = fixture();
        let r = report(&threads, &edges, &groups, None);
        let v = document(&r);
        let t = &v["threads"][0];
        for k in [
            "tid",
            "tgid",
            "comm",
            "run_us",
            "preempt_us",
            "sleep_us",
            "io_us",
            "run_events",
            "sleep_events",
            "nice",
            "policy",
        ] {
            assert!(!t[k].is_null(), "missing {k}");
        }
        assert_eq!(t["tid"], 10);
        assert_eq!(t["run_us"], 90_000);
        assert_eq!((t["cpu_us"].clone(), t["stolen_us"].clone()), (json!(87_500), json!(2_500)));
        assert!(
            v["threads"][1]["cpu_us"].is_null() && v["threads"][1]["stolen_us"].is_null(),
            "unknown is null"
        );
        assert_eq!(t["policy"], "SCHED_OTHER");
        assert_eq!(
            v["dependencies"][0],
            json!({"waker": 10, "sleeper": 11, "count": 7, "futex": true})
        );
        assert_eq!(v["dependencies"][1]["futex"], false);
        assert_eq!(v["groups"][0]["consumers"], json!([11]));
        assert!(
            t.get("running_stacks").is_none() && v["on_cpu_hz"].is_null(),
            "no samples, no stacks"
        );
    }

    #[test]
    fn with_samples_each_thread_shows_where_it_ran() {
        let (threads, edges, groups) = fixture();
        let deep: Vec<String> = (0..8).map(|i| format!("f{i}")).collect();
        let hot = std::collections::HashMap::from([(
            10,
            vec![
                Hot { samples: 60, running_ns: 60_000_000, user: deep, kernel: vec![] },
                Hot {
                    samples: 3,
                    running_ns: 3_000_000,
                    user: vec![],
                    kernel: vec!["clear_page_erms".into(), "do_anonymous_page".into()],
                },
            ],
        )]);
        let r = report(&threads, &edges, &groups, Some((99, &hot)));
        let text = table(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].contains("sampled 99 times a second"), "{text}");
        assert!(lines[3].contains("producer"), "{text}");
        assert!(
            lines[4]
                .contains("ran ~60.0 ms (60 samples) in f0 <- f1 <- f2 <- f3 <- f4 <- f5 <- ..."),
            "{text}"
        );
        assert!(
            lines[5].contains("ran ~3.0 ms (3 samples) in clear_page_erms <- do_anonymous_page"),
            "kernel frames where no user ones: {text}"
        );
        assert!(lines[6].contains("consumer"), "a thread without samples gets no line: {text}");
        let v = document(&r);
        assert_eq!(v["on_cpu_hz"], 99);
        assert_eq!(v["threads"][0]["running_stacks"][0]["running_us"], 60_000);
        assert_eq!(v["threads"][0]["running_stacks"][1]["kernel"][0], "clear_page_erms");
        assert_eq!(v["threads"][1]["running_stacks"], json!([]), "sampled, but never seen running");
    }

    #[test]
    fn a_go_programs_goroutines_follow_its_threads() {
        let (threads, edges, groups) = fixture();
        let g = |goid: u32, parked_ns: u64, ran_on: Vec<u32>| GoroutineProfile {
            tgid: 10,
            goid,
            comm: b"server".to_vec(),
            parked_ns,
            waits: 4,
            on: vec![("sync.Mutex".into(), parked_ns * 3 / 4), ("sleep".into(), parked_ns / 4)],
            site: Some("main.handle".into()),
            ran_on,
        };
        let mut many: Vec<GoroutineProfile> =
            (0..22).map(|i| g(100 + i, 1_000_000, vec![11])).collect();
        many.insert(0, g(18, 40_000_000, vec![10, 11, 12]));
        let r = ThreadsReport {
            goroutines: (&many, 5_000_000),
            ..report(&threads, &edges, &groups, None)
        };
        let text = table(&r);
        let at = text.find("Goroutines, by time parked").unwrap_or_else(|| panic!("{text}"));
        let lines: Vec<&str> = text[at..].lines().collect();
        assert!(lines[1].contains("GOID") && lines[1].contains("RAN ON"), "{text}");
        assert!(lines[2].trim_start().starts_with("18      10 server"), "{text}");
        assert!(lines[2].contains("40.0       4 sync.Mutex 75%, sleep 25%"), "{text}");
        assert!(
            lines[2].contains("main.handle") && lines[2].ends_with("tid 10, tid 11, +1"),
            "{text}"
        );
        assert!(text.contains("  and 3 more goroutines (--json lists them all)"), "{text}");
        assert!(text.contains("and 5.0 ms of goroutine waits kept by stack alone"), "{text}");
        let v = document(&r);
        assert_eq!(v["goroutines"].as_array().unwrap().len(), 23);
        assert_eq!(
            v["goroutines"][0],
            json!({"goid": 18, "tgid": 10, "comm": "server", "parked_us": 40_000, "waits": 4,
                   "waits_on": [{"reason": "sync.Mutex", "us": 30_000}, {"reason": "sleep", "us": 10_000}],
                   "site": "main.handle", "ran_on_tids": [10, 11, 12]})
        );
        assert_eq!(v["goroutines_by_stack_us"], 5_000);
        // No Go program, no table.
        let plain = table(&report(&threads, &edges, &groups, None));
        assert!(!plain.contains("Goroutines"), "{plain}");
    }
}
