//! The formats of `topwaits blocked`: text for a terminal, one JSON document
//! (threads, edges, chains, cycles), and the wait-for graph for Graphviz.

use std::io::{self, Write};

use serde_json::{json, Value};

use super::{secs, Format};
use crate::analysis::blocked::classify::WaitOn;
use crate::analysis::blocked::{Blocked, Report};
use crate::analysis::waitfor::End;
use crate::model::{comm_text, Stack};
use crate::util::clock::{date, hms_millis, rfc3339};

/// JSON schema version of the document.
pub const VERSION: u32 = 2;

/// `comm (tid N)`.
fn who(report: &Report, tid: u32) -> String {
    format!("{} (tid {tid})", comm_text(&report.comm(tid)))
}

fn syscall_text(t: &Blocked) -> Option<String> {
    let (info, call) = t.syscall.as_ref()?;
    let name = info.map(|i| i.name.to_string()).unwrap_or_else(|| format!("syscall {}", call.nr));
    let args: Vec<String> = call.args.iter().take(3).map(|a| format!("{a:#x}")).collect();
    Some(format!("{name}({}, ...)", args.join(", ")))
}

fn write_stack(out: &mut dyn Write, label: &str, s: &Stack) -> io::Result<()> {
    match s {
        Stack::Frames(f) => {
            writeln!(out, "    {label}:")?;
            for fr in f.iter() {
                writeln!(out, "      {}", fr.describe())?;
            }
            Ok(())
        }
        Stack::Missing => writeln!(out, "    {label}: [unreadable]"),
        Stack::None => Ok(()),
    }
}

/// How long a thread has been blocked, marked as an estimate.
fn blocked_for(report: &Report, t: &Blocked) -> String {
    match (t.blocked_ns(report.taken_mono), t.snap.since) {
        (Some(ns), Some(since)) => {
            format!(
                "blocked ~{} (estimated, since {})",
                secs(ns),
                hms_millis(report.clock.wall(since), report.utc_offset_s)
            )
        }
        _ => "blocked for an unknown time".to_string(),
    }
}

fn write_thread(out: &mut dyn Write, report: &Report, t: &Blocked) -> io::Result<()> {
    let s = &t.snap;
    writeln!(
        out,
        "{}  pid {}  state {}  {}",
        who(report, s.tid),
        s.tgid,
        s.state,
        blocked_for(report, t)
    )?;
    let what = match &t.wait {
        WaitOn::Sleep => "sleeps for a set time".to_string(),
        WaitOn::Child => "waits for a child process".to_string(),
        WaitOn::Other(s) => format!("waits {s}"),
        WaitOn::NoSyscall(s) => s.clone(),
        other => format!("waits on {}", other.describe()),
    };
    writeln!(out, "    {what}")?;
    if let WaitOn::Fd { holders, .. } = &t.wait {
        for (pid, comm, access) in holders {
            writeln!(
                out,
                "      also open in {} (pid {pid}) for {}",
                comm_text(comm),
                access_word(access)
            )?;
        }
    }
    if let Some(text) = syscall_text(t) {
        writeln!(out, "    syscall {text}")?;
    }
    write_stack(out, "kernel stack", &t.kernel)?;
    write_stack(out, "user stack", &t.user)?;
    writeln!(out)
}

fn access_word(a: &str) -> &'static str {
    match a {
        "r" => "reading",
        "w" => "writing",
        "rw" => "reading and writing",
        _ => "unknown access",
    }
}

/// The text view of `topwaits blocked`: every blocked thread, then the chains and
/// the deadlocks.
pub struct Text;

/// `topwaits blocked --json`: one document of threads, edges, chains and cycles.
pub struct Json;

/// `topwaits blocked --dot`: the wait-for graph for Graphviz.
pub struct Dot;

impl Format<Report> for Text {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        write_text(report, out)
    }
}

impl Format<Report> for Json {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        write_json(report, out)
    }
}

impl Format<Report> for Dot {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        write_dot(report, out)
    }
}

/// The text view: every blocked thread, then the chains and the deadlocks.
fn write_text(report: &Report, out: &mut dyn Write) -> io::Result<()> {
    let wall = report.clock.wall(report.taken_mono);
    writeln!(
        out,
        "Blocked threads of {} at {} {}: {} blocked, {} waiting on a lock with an owner, {} deadlock{}.",
        report.target,
        date(wall, report.utc_offset_s),
        hms_millis(wall, report.utc_offset_s),
        report.threads.len(),
        report.edges.len(),
        report.graph.cycles.len(),
        if report.graph.cycles.len() == 1 { "" } else { "s" }
    )?;
    writeln!(out)?;
    for t in &report.threads {
        write_thread(out, report, t)?;
    }
    if !report.graph.chains.is_empty() {
        writeln!(out, "Wait-for chains:")?;
        for c in &report.graph.chains {
            let mut line = who(report, c.edges[0].waiter);
            for e in &c.edges {
                line.push_str(&format!(" -> [{}] -> {}", e.lock, who(report, e.owner)));
            }
            let tail = match c.end {
                End::Root(r) => format!("; {} is {}", who(report, r), report.doing(r)),
                End::OwnerGone(o) => {
                    format!("; tid {o} no longer exists: it exited holding the lock")
                }
                End::Cycle(i) => format!("; DEADLOCK #{}", i + 1),
            };
            writeln!(out, "  {line}{tail}")?;
        }
        writeln!(out)?;
    }
    for (i, c) in report.graph.cycles.iter().enumerate() {
        writeln!(out, "DEADLOCK #{}: {} threads, {} locks", i + 1, c.threads.len(), c.locks.len())?;
        for (k, (&tid, lock)) in c.threads.iter().zip(&c.locks).enumerate() {
            let next = c.threads[(k + 1) % c.threads.len()];
            writeln!(out, "  {} waits on {lock}, held by {}", who(report, tid), who(report, next))?;
        }
        writeln!(out)?;
    }
    write_goroutines(out, report)?;
    if report.threads.is_empty() {
        writeln!(
            out,
            "No thread is blocked{}.",
            if report.target == "all threads" {
                " in D state (use -S for S state too)"
            } else {
                ""
            }
        )?;
    }
    Ok(())
}

/// Goroutines listed of a group before "and N more".
const GOIDS_SHOWN: usize = 8;

/// Each Go program's parked goroutines, by group: a line, then its stack.
fn write_goroutines(out: &mut dyn Write, report: &Report) -> io::Result<()> {
    for p in &report.go {
        let version = p.version.as_deref().unwrap_or("Go version not known");
        writeln!(
            out,
            "Goroutines of {} (pid {}, {version}): {} parked of {} listed, {} of them the runtime's own.",
            comm_text(&p.comm),
            p.tgid,
            p.parked,
            p.listed,
            p.runtime_own
        )?;
        for g in report.goroutines.iter().filter(|g| g.tgid == p.tgid) {
            let mut ids: Vec<String> =
                g.goids.iter().take(GOIDS_SHOWN).map(|id| id.to_string()).collect();
            if g.goids.len() > GOIDS_SHOWN {
                ids.push(format!("and {} more", g.goids.len() - GOIDS_SHOWN));
            }
            let n = crate::util::text::plural(g.goids.len(), "goroutine");
            writeln!(out, "  {n} on {} (goroutine {})", g.waits_on, ids.join(", "))?;
            write_stack(out, "user stack", &g.user)?;
        }
        writeln!(out)?;
    }
    Ok(())
}

fn wait_json(w: &WaitOn) -> Value {
    let mut v = match w {
        WaitOn::Futex { addr, kind, owner, private } => {
            use crate::analysis::blocked::classify::FutexKind;
            let mut v = json!({
                "kind": "futex",
                "futex": format!("{addr:#x}"),
                "lock": match kind {
                    FutexKind::Mutex => "mutex",
                    FutexKind::LikelyMutex => "mutex_by_layout",
                    FutexKind::PiLock => "pi_lock",
                    FutexKind::Named(n) => n,
                    FutexKind::Runtime(n) => n,
                    FutexKind::JavaMonitor { entering: true, .. } => "java_monitor",
                    FutexKind::JavaMonitor { entering: false, .. } => "java_object_wait",
                    FutexKind::Join => "thread_join",
                    FutexKind::Unknown => "unknown",
                },
                "owner_tid": owner,
                "private": private,
            });
            if let FutexKind::JavaMonitor { object, .. } = kind {
                v["object"] = json!(object);
            }
            v
        }
        WaitOn::Fd { fd, target, holders } => json!({
            "kind": "fd",
            "fd": fd,
            "target": target,
            "holders": holders.iter().map(|(pid, comm, access)| json!({"pid": pid, "comm": comm_text(comm), "access": access})).collect::<Vec<_>>(),
        }),
        WaitOn::Poll { via, fds, more } => json!({
            "kind": "poll",
            "via": via,
            "fds": fds.iter().map(|(fd, target)| json!({"fd": fd, "target": target})).collect::<Vec<_>>(),
            "more_fds": more,
        }),
        WaitOn::Sleep => json!({ "kind": "sleep" }),
        WaitOn::Child => json!({ "kind": "child" }),
        WaitOn::Other(_) => json!({ "kind": "other" }),
        WaitOn::NoSyscall(_) => json!({ "kind": "no_syscall" }),
    };
    v["description"] = json!(w.describe());
    v
}

fn thread_json(report: &Report, t: &Blocked) -> Value {
    let s = &t.snap;
    let (ks, kstatus) = super::json::stack(&t.kernel);
    let (us, ustatus) = super::json::stack(&t.user);
    json!({
        "tgid": s.tgid,
        "tid": s.tid,
        "comm": comm_text(&s.comm),
        "state": s.state.to_string(),
        "blocked_since": s.since.map(|m| rfc3339(report.clock.wall(m), report.utc_offset_s)),
        "blocked_since_estimated": true,
        "blocked_us": t.blocked_ns(report.taken_mono).map(|n| n / 1000),
        "syscall": t.syscall.as_ref().map(|(info, c)| json!({
            "nr": c.nr,
            "name": info.map(|i| i.name),
            "args": c.args.iter().map(|a| format!("{a:#x}")).collect::<Vec<_>>(),
        })),
        "waits_on": wait_json(&t.wait),
        "kernel_stack": ks,
        "kernel_stack_status": kstatus,
        "user_stack": us,
        "user_stack_status": ustatus,
    })
}

/// One JSON document: threads, edges, chains, cycles, owners outside the list.
fn write_json(report: &Report, out: &mut dyn Write) -> io::Result<()> {
    let chains: Vec<Value> = report
        .graph
        .chains
        .iter()
        .map(|c| {
            let mut tids = vec![c.edges[0].waiter];
            tids.extend(c.edges.iter().map(|e| e.owner));
            let end = match c.end {
                End::Root(r) => json!({ "kind": "root", "tid": r, "doing": report.doing(r) }),
                End::OwnerGone(o) => json!({ "kind": "owner_gone", "tid": o }),
                End::Cycle(i) => json!({ "kind": "cycle", "cycle": i }),
            };
            json!({ "threads": tids, "locks": c.edges.iter().map(|e| &e.lock).collect::<Vec<_>>(), "end": end })
        })
        .collect();
    let doc = json!({
        "version": VERSION,
        "taken_at": rfc3339(report.clock.wall(report.taken_mono), report.utc_offset_s),
        "target": report.target,
        "threads": report.threads.iter().map(|t| thread_json(report, t)).collect::<Vec<_>>(),
        "others": report.others.values().map(|o| json!({"tgid": o.tgid, "tid": o.tid, "comm": comm_text(&o.comm), "state": o.state.to_string()})).collect::<Vec<_>>(),
        "edges": report.edges.iter().map(|e| json!({"waiter": e.waiter, "owner": e.owner, "lock": e.lock})).collect::<Vec<_>>(),
        "chains": chains,
        "cycles": report.graph.cycles.iter().map(|c| json!({"threads": c.threads, "locks": c.locks})).collect::<Vec<_>>(),
        "go_processes": report.go.iter().map(|p| json!({"pid": p.tgid, "comm": comm_text(&p.comm), "go_version": p.version, "goroutines": p.listed, "parked": p.parked, "runtime_own": p.runtime_own})).collect::<Vec<_>>(),
        "goroutines": report.goroutines.iter().map(|g| json!({"pid": g.tgid, "waits_on": g.waits_on, "count": g.goids.len(), "goids": g.goids, "user_stack": super::json::stack(&g.user).0})).collect::<Vec<_>>(),
        "warnings": report.warnings,
    });
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)
}

/// A Graphviz string literal.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The wait-for graph: a node per thread in it, an edge per lock from waiter to
/// owner, deadlock edges in red.
fn write_dot(report: &Report, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "digraph waitfor {{")?;
    writeln!(out, "  rankdir=LR; node [shape=box, fontname=monospace];")?;
    let mut tids: Vec<u32> = report.edges.iter().flat_map(|e| [e.waiter, e.owner]).collect();
    tids.sort_unstable();
    tids.dedup();
    for tid in tids {
        let label = format!("{}\ntid {tid}\n{}", comm_text(&report.comm(tid)), report.doing(tid));
        writeln!(out, "  t{tid} [label={}];", quoted(&label))?;
    }
    for e in &report.edges {
        let in_cycle = report
            .graph
            .cycles
            .iter()
            .any(|c| c.threads.contains(&e.waiter) && c.threads.contains(&e.owner));
        let colour = if in_cycle { ", color=red, fontcolor=red" } else { "" };
        writeln!(out, "  t{} -> t{} [label={}{colour}];", e.waiter, e.owner, quoted(&e.lock))?;
    }
    writeln!(out, "}}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::blocked::classify::FutexKind;
    use crate::analysis::snapshot::Snapshot;
    use crate::analysis::waitfor::{analyze, Edge};
    use crate::util::clock::ClockPair;

    fn thread(tid: u32, comm: &str, wait: WaitOn) -> Blocked {
        Blocked {
            snap: Snapshot {
                tgid: 100,
                tid,
                comm: comm.as_bytes().to_vec(),
                state: 'S',
                flags: 0,
                since: Some(1_000_000_000),
                cpu: 0,
                kernel: Ok(vec![]),
                user: vec![],
                syscall: Err("n/a".into()),
            },
            kernel: crate::report::fixtures::frames(&["futex_wait", "do_futex"]),
            user: crate::report::fixtures::frames(&[
                "__lll_lock_wait",
                "pthread_mutex_lock",
                "worker",
            ]),
            syscall: None,
            wait,
        }
    }

    fn mutex(addr: u64, owner: u32) -> WaitOn {
        WaitOn::Futex { addr, kind: FutexKind::Mutex, owner: Some(owner), private: true }
    }

    /// An ABBA deadlock between 101 and 102.
    fn abba() -> Report {
        let threads =
            vec![thread(101, "alpha", mutex(0xb0, 102)), thread(102, "beta", mutex(0xa0, 101))];
        let edges: Vec<Edge> = threads
            .iter()
            .map(|t| Edge {
                waiter: t.snap.tid,
                owner: match t.wait {
                    WaitOn::Futex { owner: Some(o), .. } => o,
                    _ => 0,
                },
                lock: t.wait.lock_name(),
            })
            .collect();
        let graph = analyze(&edges, &[101, 102].into_iter().collect());
        Report {
            clock: ClockPair { mono_ns: 1_000_000_000, wall_ns: 1_700_000_000_000_000_000 },
            taken_mono: 13_500_000_000,
            utc_offset_s: 0,
            target: "PID 100".into(),
            threads,
            others: Default::default(),
            edges,
            graph,
            go: vec![],
            goroutines: vec![],
            warnings: vec![],
        }
    }

    #[test]
    fn a_go_programs_parked_goroutines_are_listed_by_group() {
        use crate::analysis::blocked::goroutines::{GoProcess, Group};
        use crate::model::Frame;
        let mut r = abba();
        r.go = vec![GoProcess {
            tgid: 100,
            comm: b"srv".to_vec(),
            version: Some("go1.22.1".into()),
            listed: 12,
            parked: 10,
            runtime_own: 4,
        }];
        let frames = vec![
            Frame { symbol: Some("runtime.gopark".into()), ..Frame::unknown(1) },
            Frame { symbol: Some("main.handle".into()), ..Frame::unknown(2) },
        ];
        let goids: Vec<u64> = (20..30).collect();
        r.goroutines = vec![Group {
            tgid: 100,
            waits_on: "sync.Mutex".into(),
            goids,
            user: Stack::of(frames),
        }];
        let mut text = Vec::new();
        Text.write(&r, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("Goroutines of srv (pid 100, go1.22.1): 10 parked of 12 listed"));
        assert!(text.contains(
            "10 goroutines on sync.Mutex (goroutine 20, 21, 22, 23, 24, 25, 26, 27, and 2 more)"
        ));
        assert!(text.contains("      main.handle"));
        let mut doc = Vec::new();
        Json.write(&r, &mut doc).unwrap();
        let doc: Value = serde_json::from_slice(&doc).unwrap();
        assert_eq!(doc["goroutines"][0]["count"], 10);
        assert_eq!(doc["goroutines"][0]["user_stack"][1]["symbol"], "main.handle");
        assert_eq!(doc["go_processes"][0]["runtime_own"], 4);
    }

    #[test]
    fn text_names_the_deadlock_threads_and_locks() {
        let mut out = Vec::new();
        write_text(&abba(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with(
                "Blocked threads of PID 100 at 2023-11-14 22:13:32.500: 2 blocked, 2 waiting on a lock with an owner, 1 deadlock.\n"
            ),
            "{text}"
        );
        assert!(text.contains("alpha (tid 101)  pid 100  state S  blocked ~12.500 s (estimated, since 22:13:20.000)\n    waits on mutex 0xb0 held by tid 102\n"), "{text}");
        assert!(text.contains("DEADLOCK #1: 2 threads, 2 locks\n  alpha (tid 101) waits on mutex 0xb0, held by beta (tid 102)\n  beta (tid 102) waits on mutex 0xa0, held by alpha (tid 101)\n"), "{text}");
        assert!(text.contains("      pthread_mutex_lock\n"), "{text}");
    }

    #[test]
    fn json_has_threads_edges_chains_and_cycles() {
        let mut out = Vec::new();
        write_json(&abba(), &mut out).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["threads"].as_array().unwrap().len(), 2);
        assert_eq!(v["threads"][0]["waits_on"]["owner_tid"], 102);
        assert_eq!(v["threads"][0]["waits_on"]["lock"], "mutex");
        assert_eq!(v["threads"][0]["blocked_us"], 12_500_000);
        assert_eq!(v["cycles"][0]["threads"], json!([101, 102]));
        assert_eq!(
            v["cycles"][0]["locks"],
            json!(["mutex 0xb0", "mutex 0xa0"]),
            "101 waits on 0xb0, 102 on 0xa0"
        );
        assert_eq!(v["chains"][0]["end"]["kind"], "cycle");
    }

    #[test]
    fn dot_draws_deadlock_edges_red_and_escapes_names() {
        let mut r = abba();
        r.threads[0].snap.comm = b"we\"ird".to_vec();
        let mut out = Vec::new();
        write_dot(&r, &mut out).unwrap();
        let dot = String::from_utf8(out).unwrap();
        assert!(dot.starts_with("digraph waitfor {"), "{dot}");
        assert!(
            dot.contains("t101 -> t102 [label=\"mutex 0xb0\", color=red, fontcolor=red];"),
            "{dot}"
        );
        assert!(dot.contains("we\\\"ird"), "{dot}");
        assert!(dot.trim_end().ends_with('}'));
    }

    #[test]
    fn a_chain_to_a_running_root_says_what_the_root_does() {
        let mut r = abba();
        r.threads.truncate(1);
        r.edges.truncate(1);
        r.others.insert(
            102,
            crate::analysis::blocked::Other {
                tgid: 100,
                tid: 102,
                comm: b"beta".to_vec(),
                state: 'R',
            },
        );
        r.graph = analyze(&r.edges, &[101, 102].into_iter().collect());
        let mut out = Vec::new();
        write_text(&r, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains(
                "alpha (tid 101) -> [mutex 0xb0] -> beta (tid 102); beta (tid 102) is running\n"
            ),
            "{text}"
        );
    }
}
