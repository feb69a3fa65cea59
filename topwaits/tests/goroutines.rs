//! Kernel tests of goroutine waits (programs/turns.go, built with Debian's
//! golang-go): goroutines taking turns on a sync.Mutex while one sleeps inside
//! it have that sleep as `why`'s first cause, and their time blocked on the
//! mutex agrees with the runtime's own execution trace of the same program; a
//! goroutine waiting on a channel carries its sender's stack as its waker.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::programs::start_with;
use common::*;
use serde_json::Value;

/// Whether `go` is here to build the program with.
fn have_go() -> bool {
    let have = Command::new("go").arg("version").output().is_ok_and(|o| o.status.success());
    present(
        module_path!(),
        "go (golang-go; cargo xtask setup installs it)",
        (!have).then(|| "go is not installed".to_string()),
    )
}

/// Builds programs/turns.go into the test's temporary directory; None
/// (the test skips, with the reason printed) without go.
fn build() -> Option<String> {
    if !have_go() {
        return None;
    }
    let dir = format!("{}/turns-go", env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&dir).unwrap();
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/turns.go");
    std::fs::copy(src, format!("{dir}/turns.go")).unwrap();
    std::fs::write(format!("{dir}/go.mod"), "module turns\n\ngo 1.19\n").unwrap();
    let out = format!("{dir}/turns");
    let status = Command::new("go")
        .args(["build", "-o", &out, "."])
        .current_dir(&dir)
        .status()
        .expect("go build runs");
    assert!(status.success(), "go build of {src} failed");
    Some(out)
}

/// Whether a record's (or a cause's) user stack passes through `f`.
fn through(stack: &Value, f: &str) -> bool {
    stack_names(stack).iter().any(|n| n.split(" (").next() == Some(f))
}

/// Asserts that a goroutine's `ran_on_tids` name threads of process `pid`,
/// at least one (a Go program's threads live as long as it does).
fn ran_on_threads_of(pid: &str, goroutine: &Value) {
    let tasks: Vec<u64> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let ran_on = goroutine["ran_on_tids"].as_array().unwrap_or_else(|| panic!("{goroutine:#}"));
    assert!(!ran_on.is_empty(), "{goroutine:#}");
    let theirs = ran_on.iter().all(|t| t.as_u64().is_some_and(|t| tasks.contains(&t)));
    assert!(theirs, "threads of {pid}: {tasks:?}; {goroutine:#}");
}

/// The eight goroutines of `turns mutex 8` in a `threads --json` report: each
/// first waits on the sync.Mutex in `main.twHandle`, parked for a share of the
/// window within `parked`.
fn turns_goroutines(doc: &Value, parked: std::ops::RangeInclusive<f64>) -> Vec<&Value> {
    let goroutines = doc["goroutines"].as_array().unwrap_or_else(|| panic!("{doc:#}"));
    let on_mutex: Vec<&Value> =
        goroutines.iter().filter(|g| g["waits_on"][0]["reason"] == "sync.Mutex").collect();
    assert_eq!(on_mutex.len(), 8, "{doc:#}");
    let window_us = doc["duration_s"].as_f64().unwrap() * 1e6;
    for g in &on_mutex {
        assert_eq!(g["site"], "main.twHandle", "{g:#}");
        let share = g["parked_us"].as_f64().unwrap() / window_us;
        assert!(parked.contains(&share), "{share:.3} of {window_us} us parked: {g:#}");
    }
    on_mutex
}

/// The milliseconds of `go tool pprof -top` on `file`'s header line
/// ("... 100% of 41782.11ms total").
fn pprof_total_ms(file: &str) -> f64 {
    let out = Command::new("go")
        .args(["tool", "pprof", "-top", "-unit=ms", file])
        .output()
        .expect("go tool pprof runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains(" total")).unwrap_or_else(|| panic!("{text}"));
    let total = line.rsplit(" of ").next().unwrap().trim_end_matches(" total");
    total.trim_end_matches("ms").parse().unwrap_or_else(|_| panic!("{line}"))
}

/// Eight goroutines take turns on one sync.Mutex and sleep 2 ms holding it:
/// the threads' own waits are the Go scheduler's idle, and the answer is the
/// sleep inside the lock. The program traces itself with runtime/trace for
/// its first 6 s; topwaits traces 3 s of them.
#[test]
fn goroutines_behind_a_sleep_in_a_mutex_agree_with_the_runtimes_own_trace() {
    require_bpf!();
    let Some(exe) = build() else { return };
    let trace = format!("{}/turns-go/trace.out", env!("CARGO_TARGET_TMPDIR"));
    let _ = std::fs::remove_file(&trace);
    let mut w = start_with(&exe, &["mutex", "8", "6", &trace]);
    let pid = w.0.id().to_string();
    let why = json(&run(&["why", "-p", &pid, "--json", "2"]));
    let first = &why["causes"][0];
    assert!(through(&first["user_stack"], "main.twSleepHoldingTheLock"), "{why:#}");
    assert!(first["share"].as_f64().unwrap() >= 0.5, "under half of the waiting: {why:#}");
    let text = serde_json::to_string(&why["causes"]).unwrap();
    assert!(!text.contains("findRunnable") && !text.contains("epollwait"), "{why:#}");

    let doc = json(&run(&["-w", "-p", &pid, "--json", "3"]));
    assert_eq!(
        doc["records_total"].as_u64(),
        Some(doc["records"].as_array().unwrap().len() as u64)
    );
    let on_mutex = |r: &&Value| r["waits_on"]["reason"] == "sync.Mutex";
    let records = doc["records"].as_array().unwrap();
    let blocked_ms: f64 =
        records.iter().filter(on_mutex).map(|r| r["blocked_us"].as_f64().unwrap() / 1e3).sum();
    assert!(records.iter().filter(on_mutex).all(|r| through(&r["user_stack"], "main.twHandle")));
    let ours = blocked_ms / doc["duration_s"].as_f64().unwrap();
    assert!(doc["counters"]["go_scheduler_idle_ns"].as_u64().unwrap() > 0, "{}", doc["counters"]);

    // The runtime's trace ends 6 s after the start.
    let mut line = String::new();
    BufReader::new(w.0.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "traced");
    let sync = format!("{trace}.sync.pprof");
    let out = Command::new("go")
        .args(["tool", "trace", "-pprof=sync", &trace])
        .stderr(Stdio::inherit())
        .output()
        .expect("go tool trace runs");
    std::fs::write(&sync, &out.stdout).unwrap();
    let theirs = pprof_total_ms(&sync) / 6.0;
    let ratio = ours / theirs;
    eprintln!("blocked on the mutex: topwaits {ours:.0} ms/s, runtime/trace {theirs:.0} ms/s");
    assert!((0.8..=1.2).contains(&ratio), "topwaits {ours:.0} ms/s, the runtime {theirs:.0} ms/s");
}

/// A consumer waits on a channel for a producer that sleeps 2 ms between
/// sends: its waits are "chan receive", woken by the producer's send.
#[test]
fn a_channel_wait_carries_its_sending_goroutines_stack() {
    require_bpf!();
    let Some(exe) = build() else { return };
    let w = start_with(&exe, &["chan"]);
    let pid = w.0.id().to_string();
    let doc = json(&run(&["-w", "-p", &pid, "--json", "2"]));
    let recv = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["waits_on"]["reason"] == "chan receive" && through(&r["user_stack"], "main.twConsume")
        })
        .max_by_key(|r| r["total_ns"].as_u64().unwrap())
        .unwrap_or_else(|| panic!("no channel wait: {doc:#}"));
    assert!(recv["count"].as_u64().unwrap() >= 100, "{recv:#}");
    assert!(through(&recv["waker"]["user_stack"], "main.twProduce"), "{recv:#}");
    assert!(through(&recv["waker"]["user_stack"], "runtime.chansend"), "{recv:#}");
    // Each goroutine's record names the threads it ran on.
    ran_on_threads_of(&pid, recv);
    let goroutines =
        doc["records"].as_array().unwrap().iter().filter(|r| r["ran_on_tids"].is_array());
    assert!(goroutines.count() >= 2, "consumer and producer: {doc:#}");
    let text = run(&["-p", &pid, "1"]);
    assert!(text.stdout.contains("goroutine "), "{}", text.stdout);
    assert!(text.stdout.contains("  ran on tid "), "{}", text.stdout);
    drop(w);
}

/// The same mutex in `locks`: one sync.Mutex, held while its holders slept in
/// the function that sleeps inside it, waited for by goroutines.
#[test]
fn locks_names_the_sync_mutex_and_what_its_holders_did() {
    require_bpf!();
    let Some(exe) = build() else { return };
    let w = start_with(&exe, &["mutex", "8", "0", "-"]);
    let pid = w.0.id().to_string();
    let doc = json(&run(&["locks", "-p", &pid, "--json", "2"]));
    let first = &doc["locks"][0];
    assert_eq!(first["label"], "sync.Mutex", "{doc:#}");
    assert!(first["share"].as_f64().unwrap_or(0.0) >= 0.9, "{doc:#}");
    let held = first["held_while"].as_array().unwrap_or_else(|| panic!("{doc:#}"));
    let sleeping = held.iter().find(|h| through(&h["user_stack"], "main.twSleepHoldingTheLock"));
    assert!(sleeping.is_some(), "no holder slept inside the lock: {doc:#}");
    let text = run(&["locks", "-p", &pid, "1"]).stdout;
    assert!(text.contains("by 8 goroutines"), "{text}");
    drop(w);
}

/// `threads` on the same program lists its goroutines after its threads:
/// eight parked nearly all the time, most of it on the mutex in the handler,
/// each on threads of the program.
#[test]
fn threads_lists_the_goroutines_and_what_they_waited_on() {
    require_bpf!();
    let Some(exe) = build() else { return };
    let w = start_with(&exe, &["mutex", "8", "0", "-"]);
    let pid = w.0.id().to_string();
    let doc = json(&run(&["threads", "-p", &pid, "--json", "2"]));
    // Parked but for the moments it ran: the mutex and the sleep in it.
    for g in turns_goroutines(&doc, 0.8..=1.02) {
        ran_on_threads_of(&pid, g);
    }
    // The program's threads are listed as always, before them.
    assert!(doc["threads"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["tgid"].as_u64() == pid.parse().ok()));
    let text = run(&["threads", "-p", &pid, "1"]).stdout;
    assert!(text.contains("Goroutines, by time parked"), "{text}");
    let off = run(&["threads", "-p", &pid, "--no-goroutines", "--json", "1"]);
    assert_eq!(json(&off)["goroutines"], serde_json::json!([]), "--no-goroutines");
    drop(w);
}

/// `blocked` on the same program: its goroutines parked right now, read from
/// the runtime's list of all goroutines, most of them on the mutex.
#[test]
fn blocked_lists_the_goroutines_parked_on_the_mutex() {
    require_bpf!();
    let Some(exe) = build() else { return };
    let w = start_with(&exe, &["mutex", "8", "0", "-"]);
    let pid = w.0.id().to_string();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let doc = json(&run(&["blocked", "-p", &pid, "--json"]));
    let go = &doc["go_processes"][0];
    assert!(go["go_version"].as_str().is_some_and(|v| v.starts_with("go1.")), "{doc:#}");
    let mutex = doc["goroutines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["waits_on"] == "sync.Mutex")
        .unwrap_or_else(|| panic!("no goroutine on the mutex: {doc:#}"));
    assert!(mutex["count"].as_u64().unwrap() >= 4, "{doc:#}");
    assert!(through(&mutex["user_stack"], "main.twHandle"), "{doc:#}");
    let text = run(&["blocked", "-p", &pid]).stdout;
    assert!(text.contains("goroutines on sync.Mutex (goroutine "), "{text}");
    drop(w);
}

/// A Go program started after a system-wide trace began (as under `serve`,
/// which runs for days) has its goroutines traced from its exec on: its
/// goroutines' waits on the mutex are records of their own.
#[test]
fn a_go_program_started_during_the_trace_has_its_goroutines_traced() {
    require_bpf!();
    let Some(exe) = build() else { return };
    let tracer = Tracer::start(&["--json", "4"]);
    let w = start_with(&exe, &["mutex", "8", "6", "-"]);
    let pid = u64::from(w.0.id());
    let done = tracer.finish();
    drop(w);
    assert!(done.status.success(), "{}", done.stderr);
    let doc = json(&done);
    let on_mutex: u64 = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["tgid"].as_u64() == Some(pid) && r["waits_on"]["reason"] == "sync.Mutex")
        .filter(|r| through(&r["user_stack"], "main.twHandle"))
        .map(|r| r["total_ns"].as_u64().unwrap())
        .sum();
    // Seven goroutines wait while one sleeps 2 ms holding it: about 7 s a
    // second of goroutine blocking, for the 3 s or more the program ran.
    assert!(on_mutex > 3_000_000_000, "{on_mutex} ns on the mutex: {doc:#}");
    assert!(doc["goroutines"].as_str().is_some_and(|g| g.contains("Go program")), "{doc:#}");
}

/// Under `-p`, a selected process that execs a Go program (a wrapper's
/// `exec server`) has its goroutines traced from the exec on.
#[test]
fn a_selected_process_that_execs_a_go_program_has_its_goroutines_traced() {
    require_bpf!();
    let Some(exe) = build() else { return };
    let script = format!("echo ready; sleep 2; exec {exe} mutex 8 6 -");
    let w = start_with("sh", &["-c", &script]);
    let pid = w.0.id().to_string();
    let done = run(&["-p", &pid, "--json", "5"]);
    drop(w);
    assert!(done.status.success(), "{}", done.stderr);
    let doc = json(&done);
    let on_mutex: u64 = records_in(&doc, "main.twHandle")
        .iter()
        .filter(|r| r["waits_on"]["reason"] == "sync.Mutex" && r["tid"].as_u64() > Some(1 << 30))
        .map(|r| r["total_ns"].as_u64().unwrap())
        .sum();
    // Seven goroutines wait while one holds it, for the 3 s the program ran
    // within the trace.
    assert!(on_mutex > 3_000_000_000, "{on_mutex} ns on the mutex: {doc:#}");
    assert!(doc["goroutines"].as_str().is_some_and(|g| g.contains("Go program")), "{doc:#}");
}

/// `threads` on a wrapper that execs a Go program within the window: the
/// goroutines of the program it became are hooked at the exec and listed.
#[test]
fn threads_hooks_a_go_program_exec_d_within_its_window() {
    require_bpf!();
    let Some(exe) = build() else { return };
    let script = format!("echo ready; sleep 1; exec {exe} mutex 8 6 -");
    let w = start_with("sh", &["-c", &script]);
    let pid = w.0.id().to_string();
    let doc = json(&run(&["threads", "-p", &pid, "--json", "3"]));
    drop(w);
    // Parked from soon after the exec, under a second into the window, to
    // its end.
    turns_goroutines(&doc, 0.4..=0.9);
}

/// The exports carry goroutines as Go's and Perfetto's own readers show them:
/// pprof samples labelled with the goroutine and the threads it ran on (read
/// back by `go tool pprof`), and Perfetto slices on a track per goroutine,
/// under its process, named by where it waited, with the threads it ran on.
#[test]
fn pprof_and_perfetto_carry_each_goroutine_and_the_threads_it_ran_on() {
    require_bpf!();
    let Some(exe) = build() else { return };
    let w = start_with(&exe, &["mutex", "8", "0", "-"]);
    let pid = w.0.id().to_string();
    let dir = format!("{}/turns-go", env!("CARGO_TARGET_TMPDIR"));
    let (pprof, perfetto) = (format!("{dir}/g.pb.gz"), format!("{dir}/g.pftrace"));
    let done = run(&[
        "-p",
        &pid,
        "--pprof",
        &pprof,
        "--perfetto",
        &perfetto,
        "--events-over",
        "1000",
        "2",
    ]);
    assert!(done.status.success(), "{}", done.stderr);
    let raw = Command::new("go").args(["tool", "pprof", "-raw", &pprof]).output().unwrap();
    let raw = String::from_utf8_lossy(&raw.stdout);
    // A sample's labels: "goroutine:[9] max_wait:[...] pid:[...] ran_on_tid:[6191 6193]".
    let ran_on: Vec<&str> = raw
        .lines()
        .filter(|l| l.contains("goroutine:["))
        .filter_map(|l| l.split("ran_on_tid:[").nth(1)?.split(']').next())
        .collect();
    assert!(ran_on.len() >= 8, "eight goroutines on the mutex, with their threads: {raw}");
    for tids in &ran_on {
        let g = serde_json::json!({"ran_on_tids": tids.split(' ').map(|t| t.parse::<u64>().unwrap()).collect::<Vec<_>>()});
        ran_on_threads_of(&pid, &g);
    }
    if !perfetto_reader(module_path!()) {
        return;
    }
    let t = decode_perfetto(std::path::Path::new(&perfetto));
    let tracks = t["tracks"].as_object().unwrap();
    let goroutine_tracks: Vec<&String> = tracks
        .iter()
        .filter(|(_, d)| d["name"].as_str().is_some_and(|n| n.starts_with("goroutine ")))
        .map(|(uuid, _)| uuid)
        .collect();
    assert!(goroutine_tracks.len() >= 8, "a track per goroutine: {tracks:?}");
    let in_handler: Vec<&Value> = t["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "TYPE_SLICE_BEGIN" && e["name"] == "main.twHandle")
        .filter(|e| goroutine_tracks.iter().any(|u| e["track"].as_str() == Some(u.as_str())))
        .collect();
    assert!(in_handler.len() >= 8, "slices named past the runtime's parking: {t:#}");
    for e in in_handler {
        let tids = e["notes"]["ran_on_tids"].as_str().unwrap_or_else(|| panic!("{e:#}"));
        let tids: Vec<u64> = tids.split(", ").map(|t| t.parse().unwrap()).collect();
        ran_on_threads_of(&pid, &serde_json::json!({ "ran_on_tids": tids }));
    }
    drop(w);
}

/// A server's way: a goroutine per request, each with a new id. With a small
/// aggregate (`--max-entries 256`), rows one per goroutine would overflow it
/// within the trace; past half of it, goroutine waits are kept by stack
/// ("goroutines"), so that nothing is lost, the request's sleep keeps its
/// stack, and the consumer's channel wait keeps its waker's. The goroutines
/// kept one by one name the threads they ran on.
#[test]
fn goroutines_by_the_thousand_are_kept_by_stack_once_the_aggregate_is_half_full() {
    require_bpf!();
    let Some(exe) = build() else { return };
    let w = start_with(&exe, &["spawn"]);
    let pid = w.0.id().to_string();
    let done = run(&["-w", "-p", &pid, "--max-entries", "256", "--json", "2"]);
    let doc = json(&done);
    assert_eq!(doc["lost"]["aggregate_full"], 0, "{:#}", doc["lost"]);
    assert_eq!(doc["lost"]["chain_map_full"], 0, "{:#}", doc["lost"]);
    let counters = &doc["counters"];
    let merged = counters["goroutine_waits_by_stack"].as_u64().unwrap();
    assert!(merged > 0 && merged <= counters["goroutine_waits"].as_u64().unwrap(), "{counters}");
    assert!(done.stderr.contains("kept by stack"), "{}", done.stderr);
    let records = doc["records"].as_array().unwrap();
    let by_stack = |f: &str| {
        records
            .iter()
            .filter(|r| r["tid"].as_u64() == Some(1 << 30) && through(&r["user_stack"], f))
            .collect::<Vec<_>>()
    };
    // About a thousand requests a second: most of them after the switch.
    let sleeps: u64 = by_stack("main.twRequest")
        .iter()
        .filter(|r| r["waits_on"]["label"] == "sleep")
        .map(|r| r["count"].as_u64().unwrap())
        .sum();
    assert!(sleeps >= 500, "{sleeps} request sleeps kept by stack: {doc:#}");
    let received = by_stack("main.twConsume");
    let woken = received.iter().find(|r| through(&r["waker"]["user_stack"], "main.twRequest"));
    assert!(woken.is_some_and(|r| r["count"].as_u64().unwrap() >= 500), "{doc:#}");
    assert!(records.len() <= 256, "{} records", records.len());
    // The threads goroutines ran on are counted only while rows name one
    // goroutine: the table of pairs, as small as the aggregate, never fills,
    // and every goroutine of its own names the threads it ran on.
    assert_eq!(doc["lost"]["goroutine_threads"], 0, "{:#}", doc["lost"]);
    let own: Vec<&Value> =
        records.iter().filter(|r| r["tid"].as_u64().is_some_and(|t| t > 1 << 30)).collect();
    assert!(!own.is_empty(), "no goroutine of its own: {doc:#}");
    for g in own {
        ran_on_threads_of(&pid, g);
    }
    drop(w);
}
