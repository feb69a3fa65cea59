//! Kernel tests of `topwaits why` on workloads whose answer is known: a lock
//! holder that sleeps while it holds the lock ranks first over an idle pool whose
//! waits are far longer, live and from a recording; and a request relayed
//! through two threads gives the client a critical path that adds up to its
//! window, split between the computing thread and the sleeping one as the
//! workload splits it; and workers that take turns holding one lock and sleep
//! inside it, in C and in Python, have that sleep as one cause, not one per
//! worker.

mod common;

use common::programs::{compile, start, start_with};
use common::*;
use serde_json::Value;

fn comm(v: &Value) -> &str {
    v["comm"].as_str().unwrap_or("")
}

/// The holder's sleep is the first cause; the pool is never a cause.
fn assert_holder_first(doc: &Value) {
    let causes = doc["causes"].as_array().unwrap();
    let first = &causes[0];
    assert_eq!(comm(&first["thread"]), "tw_holder", "{doc:#}");
    assert_eq!(first["kind"], "blocked", "{doc:#}");
    assert!(
        stack_names(&first["user_stack"]).iter().any(|n| n == "tw_sleep_holding_the_lock"),
        "{first:#}"
    );
    // Summed over every holder: a system-wide trace also sees the holders of the
    // tests running beside this one.
    let holders: f64 = causes
        .iter()
        .filter(|c| comm(&c["thread"]) == "tw_holder")
        .map(|c| c["share"].as_f64().unwrap())
        .sum();
    assert!(holders > 0.3, "{first:#}");
    let waiters: Vec<&str> = first["waiters"].as_array().unwrap().iter().map(comm).collect();
    assert_eq!(waiters.iter().filter(|&&c| c == "tw_worker").count(), 4, "{first:#}");
    assert!(causes.iter().all(|c| comm(&c["thread"]) != "tw_pool"), "{doc:#}");
}

/// ... and the pool, waiting all along (a wait still open at the end), is idle.
fn assert_pool_idle(doc: &Value) {
    let first = &doc["causes"][0];
    let idle = doc["idle"].as_array().unwrap();
    assert_eq!(idle.iter().filter(|i| comm(&i["thread"]) == "tw_pool").count(), 8, "{doc:#}");
    // The pool waited far longer than the holder slept: duration alone ranks it first.
    let pool_ns: u64 = idle
        .iter()
        .filter(|i| comm(&i["thread"]) == "tw_pool")
        .map(|i| i["ns"].as_u64().unwrap())
        .sum();
    assert!(pool_ns > first["ns"].as_u64().unwrap(), "{doc:#}");
}

#[test]
fn a_holder_sleeping_with_the_lock_ranks_first_over_a_longer_idle_pool() {
    require_bpf!();
    let w = start(&compile("holder"));
    let pid = w.0.id().to_string();
    let doc = json(&run(&["why", "--json", "-p", &pid, "2"]));
    assert_holder_first(&doc);
    assert_pool_idle(&doc);
    // The text view says the same, first line first.
    let text = run(&["why", "-p", &pid, "1"]);
    assert!(text.status.success(), "{}", text.stderr);
    let first = text.stdout.lines().find(|l| l.trim_start().starts_with("1.")).unwrap_or_default();
    assert!(
        first.contains("tw_holder") && first.contains("tw_sleep_holding_the_lock"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("Idle"), "{}", text.stdout);
}

#[test]
fn a_recording_made_for_why_is_explained_later_without_tracing() {
    require_bpf!();
    let w = start(&compile("holder"));
    let pid = w.0.id().to_string();
    let file = format!("{}/holder.twr", env!("CARGO_TARGET_TMPDIR"));
    let rec = run(&["record", "--why", "-o", &file, "-p", &pid, "2"]);
    assert!(rec.status.success(), "{}", rec.stderr);
    drop(w);
    let doc = json(&run(&["why", &file, "--json"]));
    assert_holder_first(&doc);
    assert_pool_idle(&doc);
    // What the holder and its waiters waited on, from their labels.
    assert_eq!(doc["causes"][0]["waits_on"], "sleep", "{doc:#}");
    let text = run(&["why", &file]);
    assert!(text.stdout.contains("4 threads waited behind it on mutex 0x"), "{}", text.stdout);
    // One worker's critical path drawn from the file: the holder is on it.
    let worker = doc["causes"][0]["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| comm(w) == "tw_worker")
        .unwrap()["tid"]
        .to_string();
    let svg = format!("{}/path.svg", env!("CARGO_TARGET_TMPDIR"));
    let _ = std::fs::remove_file(&svg);
    let drawn = run(&["why", &file, "--for", &worker, "--svg", &svg]);
    assert!(drawn.status.success(), "{}", drawn.stderr);
    let svg = std::fs::read_to_string(&svg).expect("the svg is written");
    assert!(
        svg.starts_with("<?xml") && svg.contains("Critical path of"),
        "{}",
        &svg[..svg.len().min(400)]
    );
    assert!(
        svg.contains("tw_holder") && svg.contains("tw_sleep_holding_the_lock"),
        "the holder's sleep is not on the worker's path"
    );
    // A recording without wakers cannot say why: one clear line.
    let plain = format!("{}/plain.twr", env!("CARGO_TARGET_TMPDIR"));
    let w = start(&compile("holder"));
    assert!(run(&["record", "-o", &plain, "-p", &w.0.id().to_string(), "1"]).status.success());
    let refused = run(&["why", &plain]);
    assert!(!refused.status.success());
    assert!(refused.stderr.contains("record --why"), "{}", refused.stderr);
}

#[test]
fn a_relayed_request_splits_the_clients_time_between_the_two_threads() {
    require_bpf!();
    let w = start(&compile("relay"));
    let client = w.1.trim_start_matches("ready client=").to_string();
    let pid = w.0.id().to_string();
    let doc = json(&run(&["why", "--json", "-p", &pid, "--for", &client, "2"]));
    let path = &doc["critical_path"];
    let window = path["window_ns"].as_u64().unwrap();
    let segments = path["segments"].as_array().unwrap();
    let sum: u64 = segments.iter().map(|s| s["ns"].as_u64().unwrap()).sum();
    assert!(
        (sum as f64 - window as f64).abs() <= 0.05 * window as f64,
        "segments {sum} ns of a {window} ns window: {doc:#}"
    );
    // Behind the server (computing 3 ms) and behind the sleeper (2 ms asleep):
    // 60% and 40% of the time the client spent behind either.
    let behind = |name: &str| -> u64 {
        segments
            .iter()
            .filter(|s| s["path"].as_array().unwrap().last().map(comm) == Some(name))
            .map(|s| s["ns"].as_u64().unwrap())
            .sum()
    };
    let (server, sleeper) = (behind("tw_server"), behind("tw_sleeper"));
    let share = server as f64 / (server + sleeper).max(1) as f64;
    assert!(
        (0.5..=0.7).contains(&share),
        "the server has {:.0}% of the relay, the sleeper the rest: {doc:#}",
        share * 100.0
    );
    // The sleeper's part is its sleep, named.
    let asleep = segments
        .iter()
        .find(|s| {
            s["state"] == "blocked"
                && stack_names(&s["user_stack"]).iter().any(|n| n == "tw_sleep_then_answer")
        })
        .unwrap_or_else(|| panic!("no sleep on the path: {doc:#}"));
    assert_eq!(comm(asleep["path"].as_array().unwrap().last().unwrap()), "tw_sleeper");
    assert!(asleep["ns"].as_u64().unwrap() as f64 > 0.25 * (server + sleeper) as f64, "{doc:#}");
    // Folded: one line per segment, the thread path first.
    let folded = run(&["why", "-f", "-p", &pid, "--for", &client, "1"]);
    assert!(folded.status.success(), "{}", folded.stderr);
    assert!(
        folded.stdout.lines().any(|l| l.starts_with("tw_client;tw_sleeper;tw_server;[running]")),
        "{}",
        folded.stdout
    );
}

#[test]
fn the_running_cause_of_a_relay_names_the_function_it_computed_in() {
    require_bpf!();
    let w = start(&compile("relay"));
    let pid = w.0.id().to_string();
    // From when the walker is in place: the samples before are cut short.
    let doc = json(&run_walked(&["why", "--json", "-p", &pid, "10"], 2.0));
    let server = doc["causes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "running" && comm(&c["thread"]) == "tw_server")
        .unwrap_or_else(|| panic!("no running cause for the server: {doc:#}"));
    // The wakeup is in tw_serve's write; what it ran is tw_compute.
    let sampled = server["sampled"].as_array().unwrap_or_else(|| panic!("no samples: {server:#}"));
    // Its samples by the innermost function of the program's own: tw_compute
    // leads (the rest is tw_serve's reads and writes).
    let mut by_fn: std::collections::BTreeMap<String, f64> = std::collections::BTreeMap::new();
    for s in sampled {
        let own = s["user_stack"].as_array().unwrap().iter().find(|f| f["module"] == "relay");
        let name = own.and_then(|f| f["symbol"].as_str()).unwrap_or("[elsewhere]").to_string();
        *by_fn.entry(name).or_default() += s["share"].as_f64().unwrap();
    }
    let top = by_fn.iter().max_by(|a, b| a.1.total_cmp(b.1)).unwrap();
    assert_eq!(top.0, "tw_compute", "the server ran in tw_compute most: {by_fn:?}");
    assert!(*top.1 >= 0.4, "{by_fn:?}");
    assert!(
        !stack_names(&server["user_stack"]).iter().any(|f| f == "tw_compute"),
        "the cause's own stack is where it woke: {server:#}"
    );
    // Without samples, no such list.
    let doc = json(&run(&["why", "--json", "--no-on-cpu", "-p", &pid, "1"]));
    assert!(
        doc["causes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["sampled"].as_array().is_none_or(|s| s.is_empty())),
        "{doc:#}"
    );
}

/// A running segment of a critical path shows what its thread ran in the
/// stretches it held the path, from the samples taken then, not the one stack
/// where it woke the next thread.
#[test]
fn a_critical_paths_running_segment_shows_what_ran_then() {
    require_bpf!();
    let w = start(&compile("relay"));
    let client = w.1.trim_start_matches("ready client=").to_string();
    let pid = w.0.id().to_string();
    let doc = json(&run_walked(&["why", "--json", "-p", &pid, "--for", &client, "10"], 2.0));
    let segments = doc["critical_path"]["segments"].as_array().unwrap();
    let server = segments
        .iter()
        .filter(|s| {
            s["state"] == "running"
                && s["path"].as_array().unwrap().last().map(comm) == Some("tw_server")
        })
        .max_by_key(|s| s["ns"].as_u64().unwrap())
        .unwrap_or_else(|| panic!("no running segment of the server: {doc:#}"));
    let sampled = server["sampled"].as_array().unwrap_or_else(|| panic!("no samples: {server:#}"));
    let mut by_fn: std::collections::BTreeMap<String, f64> = std::collections::BTreeMap::new();
    for s in sampled {
        let own = s["user_stack"].as_array().unwrap().iter().find(|f| f["module"] == "relay");
        *by_fn
            .entry(own.and_then(|f| f["symbol"].as_str()).unwrap_or("[elsewhere]").to_string())
            .or_default() += s["share"].as_f64().unwrap();
    }
    let top = by_fn.iter().max_by(|a, b| a.1.total_cmp(b.1)).unwrap();
    assert_eq!(top.0, "tw_compute", "the server ran in tw_compute on the client's path: {by_fn:?}");
    // The sleeper's part is asleep: no samples to show.
    assert!(
        segments.iter().filter(|s| s["state"] == "blocked").all(|s| s.get("sampled").is_none()),
        "{doc:#}"
    );
    let text = run(&["why", "-p", &pid, "--for", &client, "1"]);
    assert!(text.stdout.contains("on the CPU (sampled)"), "{}", text.stdout);
}

#[test]
fn system_wide_the_kernels_own_idle_waits_are_idle_not_causes() {
    require_bpf!();
    let _w = start(&compile("holder"));
    let doc = json(&run(&["why", "--json", "-n", "0", "2"]));
    assert_holder_first(&doc);
    let kernel = |c: &str| {
        ["kworker/", "migration/", "ksoftirqd/", "rcu_", "kcompactd", "khugepaged"]
            .iter()
            .any(|p| c.starts_with(p))
    };
    let idle = doc["idle"].as_array().unwrap();
    assert!(idle.iter().any(|i| kernel(comm(&i["thread"]))), "no kernel thread idle: {doc:#}");
    // A thread is idle or a cause, never both.
    let tid = |v: &Value| v["thread"]["tid"].as_u64();
    let causes = doc["causes"].as_array().unwrap();
    assert!(
        idle.iter().all(|i| causes.iter().all(|c| tid(c) != tid(i))),
        "a thread both idle and a cause: {doc:#}"
    );
    // What kernel threads explain of the workload's waiting (writeback ending
    // the fsyncs of the tests running beside this one, say) depends on what else
    // the machine does, but it stays below what the holders explain. Kernel
    // threads waiting on each other (a kworker flushing work another runs, as
    // when the last test's tracer freed its maps) are the kernel's own waiting,
    // whatever its size, and are left out.
    let for_workload =
        |c: &Value| c["threads"].as_array().unwrap().iter().any(|t| comm(t).starts_with("tw_"));
    let share = |f: &dyn Fn(&str) -> bool| -> f64 {
        causes
            .iter()
            .filter(|c| f(comm(&c["thread"])) && for_workload(c))
            .map(|c| c["share"].as_f64().unwrap())
            .sum()
    };
    let (kernel, holders) = (share(&kernel), share(&|c| c == "tw_holder"));
    assert!(
        kernel < holders,
        "kernel threads explain {:.0}% of the waiting, the holders {:.0}%: {doc:#}",
        kernel * 100.0,
        holders * 100.0
    );
}

/// Four workers take turns holding one lock and sleep 2 ms inside it: whoever
/// holds it, the others wait behind the same sleep, so it is one cause with
/// most of the ranked waiting (issue: four causes of 25% each), its threads
/// listed; `--by thread` splits it again.
#[test]
fn workers_taking_turns_with_a_sleep_inside_the_lock_are_one_cause() {
    require_bpf!();
    let c = compile("turns");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/turns.py");
    for (w, nap) in
        [(start(&c), "tw_nap"), (start_with("/usr/bin/python3", &[script]), "nap (turns.py:")]
    {
        let pid = w.0.id().to_string();
        let file = format!("{}/turns.twr", env!("CARGO_TARGET_TMPDIR"));
        let rec = run(&["record", "--why", "-o", &file, "-p", &pid, "2"]);
        assert!(rec.status.success(), "{}", rec.stderr);
        drop(w);
        let doc = json(&run(&["why", &file, "--json"]));
        let first = &doc["causes"][0];
        assert_eq!(first["kind"], "blocked", "{doc:#}");
        assert!(
            stack_names(&first["user_stack"]).iter().any(|n| n.starts_with(nap)),
            "{nap}: {first:#}"
        );
        assert!(
            first["share"].as_f64().unwrap() >= 0.6,
            "{nap}: the sleep has under 60% of the waiting: {doc:#}"
        );
        assert_eq!(first["threads"].as_array().unwrap().len(), 4, "{first:#}");
        assert_eq!(doc["by"], "comm");
        let split = json(&run(&["why", &file, "--json", "--by", "thread"]));
        let naps = split["causes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| stack_names(&c["user_stack"]).iter().any(|n| n.starts_with(nap)));
        assert_eq!(naps.count(), 4, "one per worker with --by thread: {split:#}");
        let text = run(&["why", &file]);
        let line =
            text.stdout.lines().find(|l| l.trim_start().starts_with("1.")).unwrap_or_default();
        assert!(
            line.contains("4 threads like") && line.contains(nap.split(' ').next().unwrap()),
            "{}",
            text.stdout
        );
    }
}

/// A holder computes in one function while another thread waits for the
/// mutex it holds, and in another while nobody waits for it
/// (programs/twophase.c): its running cause shows what it ran in the
/// stretches it held the waiter up, the first, not its whole profile.
#[test]
fn a_running_cause_shows_what_ran_while_others_waited_not_its_whole_profile() {
    require_bpf!();
    let w = start(&compile("twophase"));
    let pid = w.0.id().to_string();
    let doc = json(&run(&["why", "--json", "-p", &pid, "3"]));
    let holder = doc["causes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "running" && comm(&c["thread"]) == "tw_holder")
        .unwrap_or_else(|| panic!("no running cause for the holder: {doc:#}"));
    assert_eq!(holder["sampled_while_holding"], true, "{holder:#}");
    let share_in = |f: &str| -> f64 {
        holder["sampled"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| stack_names(&s["user_stack"]).iter().any(|n| n == f))
            .map(|s| s["share"].as_f64().unwrap())
            .sum()
    };
    let (holding, alone) = (share_in("tw_spin_holding"), share_in("tw_spin_alone"));
    assert!(holding >= 0.8 && alone <= 0.1, "holding {holding:.2}, alone {alone:.2}: {holder:#}");
    // Its whole profile is both, about half each: the samples were there to be shown.
    let times = json(&run(&[
        "--json",
        "--on-cpu=499",
        "-U",
        "-t",
        &holder["thread"]["tid"].to_string(),
        "1",
    ]));
    let running: Vec<&Value> = times["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["samples"].as_u64().is_some())
        .collect();
    let of = |f: &str| -> u64 {
        running
            .iter()
            .filter(|r| stack_names(&r["user_stack"]).iter().any(|n| n == f))
            .map(|r| r["samples"].as_u64().unwrap())
            .sum()
    };
    assert!(
        of("tw_spin_alone") * 4 >= of("tw_spin_holding"),
        "the holder runs alone a fair part of its time: {}",
        of("tw_spin_alone")
    );
}
