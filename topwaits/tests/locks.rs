//! Kernel tests of `topwaits locks` on workloads whose answer is known: a pthread
//! mutex whose holder sleeps while it holds it (holder.c) ranks first, its waits
//! add up to those the trace labelled with it, its release stack names the
//! holder's function, and it says that the holder slept while holding it; and the
//! mmap_lock of mmaplock.c is one kernel rwsem with readers and writers.

mod common;

use common::programs::{compile, start};
use common::*;
use serde_json::Value;

fn names(site: &Value, stack: &str) -> Vec<String> {
    stack_names(&site[stack])
}

#[test]
fn a_mutex_held_across_a_sleep_ranks_first_and_says_so() {
    require_bpf!();
    let w = start(&compile("holder"));
    let pid = w.0.id().to_string();
    // Live: the contended mutex first; the pool's condition variable is no lock.
    let live = run(&["locks", "-p", &pid, "2"]);
    assert!(live.status.success(), "{}", live.stderr);
    let first = live.stdout.lines().find(|l| l.starts_with("1. ")).unwrap_or_default();
    assert!(first.starts_with("1. mutex 0x"), "{}", live.stdout);
    // Held while sleeping, with the holder's stack under it.
    let lines: Vec<&str> = live.stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("held while sleeping by tw_holder"))
        .unwrap_or_else(|| panic!("{}", live.stdout));
    assert!(lines[at + 1].contains("tw_sleep_holding_the_lock"), "{}", live.stdout);
    assert!(!live.stdout.contains("condition variable"), "{}", live.stdout);
    // From a recording: the numbers against the trace's own labelled records.
    let file = format!("{}/locks.twr", env!("CARGO_TARGET_TMPDIR"));
    let rec = run(&["record", "--why", "-o", &file, "-p", &pid, "2"]);
    assert!(rec.status.success(), "{}", rec.stderr);
    drop(w);
    let doc = json(&run(&["locks", &file, "--json"]));
    let lock = &doc["locks"][0];
    assert_eq!(lock["waits_on"]["kind"], "mutex", "{doc:#}");
    let addr = lock["waits_on"]["addr"].as_u64().unwrap();
    let trace = json(&run(&["report", &file, "--json"]));
    let labelled: u64 = trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["waits_on"]["kind"] == "mutex" && e["waits_on"]["addr"].as_u64() == Some(addr)
        })
        .map(|e| e["total_ns"].as_u64().unwrap())
        .sum();
    let total = lock["total_ns"].as_u64().unwrap();
    assert!(
        labelled > 0 && (total as f64 - labelled as f64).abs() <= 0.05 * labelled as f64,
        "lock {total} ns, trace {labelled} ns"
    );
    let waiters: Vec<&str> =
        lock["waiters"].as_array().unwrap().iter().map(|s| s["comm"].as_str().unwrap()).collect();
    assert!(waiters.contains(&"tw_worker"), "{lock:#}");
    // The holder's release stack names its function.
    let holder = lock["holders"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["comm"] == "tw_holder")
        .expect("tw_holder released it");
    assert!(names(holder, "user_stack").iter().any(|n| n == "holder"), "{holder:#}");
    // What the holder waited on while holding it: its sleep, first.
    let held = &lock["held_while"][0];
    assert_eq!(held["waits_on"]["kind"], "sleep", "{lock:#}");
    assert_eq!(held["function"], "tw_sleep_holding_the_lock", "{lock:#}");
    assert!(
        names(held, "user_stack").iter().any(|n| n == "holder"),
        "the holder's whole stack: {held:#}"
    );
    // Its own sleeps' length (2 ms each), not 0 (issue: "0 ns on average").
    let mean = held["mean_wait_ns"].as_u64().unwrap();
    assert!((1_900_000..10_000_000).contains(&mean), "{held:#}");
    assert!(
        held["waits_on"]["description"].as_str().unwrap_or("").contains("2 ms asked"),
        "{held:#}"
    );
    assert!(held["ns"].as_u64().unwrap() as f64 > 0.2 * total as f64, "{lock:#}");
    // -f: the lock at the root of each line; --svg draws the same.
    let folded = run(&["locks", &file, "-f"]);
    assert!(
        folded.status.success() && folded.stdout.lines().all(|l| l.starts_with("[mutex_0x")),
        "{}",
        folded.stdout
    );
    let svg = format!("{}/locks.svg", env!("CARGO_TARGET_TMPDIR"));
    let _ = std::fs::remove_file(&svg);
    let drawn = run(&["locks", &file, "--svg", &svg]);
    assert!(drawn.status.success(), "{}", drawn.stderr);
    let svg = std::fs::read_to_string(&svg).expect("the svg is written");
    assert!(
        svg.contains("[mutex_0x") && svg.contains("tw_take_the_lock"),
        "{}",
        &svg[..svg.len().min(400)]
    );
}

#[test]
fn the_mmap_lock_is_one_kernel_rwsem_with_readers_and_writers() {
    require_bpf!();
    let w = start(&compile("mmaplock"));
    let doc = json(&run(&["locks", "-p", &w.0.id().to_string(), "--json", "2"]));
    let lock = doc["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["waits_on"]["kind"] == "kernel_lock" && l["waits_on"]["name"] == "mmap_lock")
        .unwrap_or_else(|| panic!("no mmap_lock: {doc:#}"));
    assert_eq!(lock["waits_on"]["lock"], "rwsem");
    let modes: Vec<&str> =
        lock["waiters"].as_array().unwrap().iter().filter_map(|s| s["mode"].as_str()).collect();
    assert!(modes.contains(&"read") && modes.contains(&"write"), "{lock:#}");
    assert!(!lock["holders"].as_array().unwrap().is_empty(), "{lock:#}");
}

/// Locks a program builds itself (homemade.c), on a semaphore, a condition
/// variable and a pipe: each is a lock, whose waiters wait in its taking
/// function and whose holders release it in its giving one, and what they held
/// it while is their 2 ms nap.
#[test]
fn locks_built_on_a_semaphore_a_condition_variable_and_a_pipe_are_locks() {
    require_bpf!();
    let w = start(&compile("homemade"));
    let doc = json(&run(&["locks", "-p", &w.0.id().to_string(), "--json", "2"]));
    drop(w);
    let locks = doc["locks"].as_array().unwrap();
    for (kind, comm, take, give) in [
        ("semaphore", "tw_sem", "tw_sem_take", "tw_sem_give"),
        ("condition variable", "tw_cv", "tw_cv_take", "tw_cv_give"),
        ("pipe", "tw_pipe", "tw_pipe_take", "tw_pipe_give"),
    ] {
        let lock = locks
            .iter()
            .find(|l| l["kind"] == kind && l["waiters"][0]["comm"] == comm)
            .unwrap_or_else(|| panic!("no {kind} lock of {comm}: {doc:#}"));
        let waiter = &lock["waiters"][0];
        assert!(
            names(waiter, "user_stack").iter().any(|n| n == take),
            "{kind}: waiters wait in {take}: {lock:#}"
        );
        let holders = lock["holders"].as_array().unwrap();
        assert!(!holders.is_empty(), "{kind}: holders: {lock:#}");
        assert!(
            names(&holders[0], "user_stack").iter().any(|n| n == give),
            "{kind}: released in {give}: {lock:#}"
        );
        assert_eq!(holders[0]["comm"], comm, "{kind}: {lock:#}");
        let held = &lock["held_while"][0];
        assert_eq!(
            (held["waits_on"]["kind"].as_str(), held["function"].as_str()),
            (Some("sleep"), Some("tw_nap_holding")),
            "{lock:#}"
        );
        // Two threads take turns, each holding it ~2 ms of every ~2.2 ms: the
        // other waits most of the trace.
        assert!(lock["total_ns"].as_u64().unwrap() > 500_000_000, "{kind}: {lock:#}");
    }
}
