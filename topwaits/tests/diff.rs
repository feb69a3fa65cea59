//! Kernel tests of `topwaits diff` and its gate: two recordings of a loop, the
//! second with an added sleep, and a rerun of the first.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// The loop's own wait, in both versions. (The two functions differ in what
/// they hand `black_box`, so that the linker cannot fold them into one.)
#[inline(never)]
fn tw_loop_base(d: Duration) {
    nanosleep(d);
    std::hint::black_box(1u64);
}

/// The wait the second version adds.
#[inline(never)]
fn tw_added_sleep(d: Duration) {
    nanosleep(d);
    std::hint::black_box(2u64);
}

/// Iterations of the loop.
const ROUNDS: u32 = 150;

/// One round of the loop: 2 ms of work and a 5 ms sleep, with `added` after.
fn round(added: Option<Duration>) {
    let spin = Instant::now() + Duration::from_millis(2);
    while Instant::now() < spin {
        std::hint::black_box(0u64);
    }
    tw_loop_base(Duration::from_millis(5));
    if let Some(d) = added {
        tw_added_sleep(d);
    }
}

/// Records a loop of `ROUNDS` rounds, from before its first round to after its last.
fn record(name: &str, added: Option<Duration>) -> String {
    let file = format!("{}/diff-{name}.twr", env!("CARGO_TARGET_TMPDIR"));
    let w = Workload::spawn("tw-loop", move || {
        for _ in 0..ROUNDS {
            round(added);
        }
    });
    let tid = w.tid.to_string();
    finish(Tracer::start_learned(&["record", "-o", &file, "-t", &tid, "60"]), w);
    file
}

/// Records for `why` (every wait and its waker) the same loop handing each
/// round's end to a consumer thread, which waits for it: the loop's sleeps are
/// what holds the consumer up.
fn record_why(name: &str, added: Option<Duration>) -> String {
    let file = format!("{}/diff-why-{name}.twr", env!("CARGO_TARGET_TMPDIR"));
    let w = Workload::spawn("tw-producer", move || {
        let (tx, rx) = std::sync::mpsc::sync_channel::<u32>(0);
        let consumer = std::thread::Builder::new()
            .name("tw-consumer".into())
            .spawn(move || while rx.recv().is_ok() {})
            .unwrap();
        for i in 0..ROUNDS {
            round(added);
            tx.send(i).unwrap();
        }
        drop(tx);
        consumer.join().unwrap();
    });
    let pid = std::process::id().to_string();
    finish(Tracer::start_learned(&["record", "--why", "-o", &file, "-p", &pid, "60"]), w);
    file
}

/// Runs the workload under the started trace, and ends the trace after it.
fn finish(t: Tracer, w: Workload) {
    w.go();
    w.join();
    std::thread::sleep(Duration::from_millis(100));
    t.signal(libc::SIGINT);
    let f = t.finish();
    assert!(f.status.success(), "{}", f.stderr);
}

#[test]
fn an_added_sleep_ranks_first_with_its_growth_and_crosses_the_gate_a_rerun_does_not() {
    require_bpf!();
    let base = record("base", None);
    let added = record("added", Some(Duration::from_millis(10)));
    let rerun = record("rerun", None);

    let doc = json(&run(&["diff", &base, &added, "--json"]));
    let first = &doc["rows"][0];
    let user: Vec<String> = first["user_stack"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    assert!(
        user.iter().any(|f| f.contains("tw_added_sleep")),
        "the added sleep first: {:#}",
        doc["rows"]
    );
    assert_eq!(first["status"], "new");
    // What the workload added: a 10 ms sleep a round.
    let added_ns = f64::from(ROUNDS) * 10e6;
    let delta = first["delta_ns"].as_f64().unwrap();
    assert!(
        (delta - added_ns).abs() <= 0.1 * added_ns,
        "grew by {delta} ns for {added_ns} ns of added sleep"
    );
    // By label: the sleeps, all one label, grew by the same.
    let sleep = doc["labels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["label"] == "sleep")
        .expect("a sleep label row");
    let grew = sleep["delta_ns"].as_f64().unwrap();
    assert!(
        (grew - added_ns).abs() <= 0.1 * added_ns,
        "sleep grew by {grew} ns: {:#}",
        doc["labels"]
    );
    assert!(doc["causes"].is_null(), "no causes without recordings for why");

    let gate = ["--fail-if-stack-grows", "300", "--fail-if-grows", "50%"];
    let failed = run(&[&["diff", &base, &added][..], &gate].concat());
    assert_eq!(
        failed.status.code(),
        Some(3),
        "the gate fails on the added sleep: {}",
        failed.stderr
    );
    assert!(
        failed.stderr.contains("gate crossed") && failed.stderr.contains("tw_added_sleep"),
        "{}",
        failed.stderr
    );
    let passed = run(&[&["diff", &base, &rerun][..], &gate].concat());
    assert_eq!(
        passed.status.code(),
        Some(0),
        "a rerun passes: {}\n{}",
        passed.stderr,
        passed.stdout
    );
    assert!(passed.stdout.contains("stacks in both"), "{}", passed.stdout);

    // The differential flame graph: the added sleep red.
    let svg = format!("{}/diff.svg", env!("CARGO_TARGET_TMPDIR"));
    let f = run(&["diff", &base, &added, "--svg", &svg, "-f"]);
    assert!(f.status.success(), "{}", f.stderr);
    assert!(
        f.stdout.lines().any(|l| l.contains("tw_added_sleep") && l.split(' ').nth(1) == Some("0")),
        "{}",
        f.stdout
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("tw_added_sleep"), "the graph draws the new stack");
}

#[test]
fn recordings_for_why_compare_their_causes() {
    require_bpf!();
    let base = record_why("base", None);
    let added = record_why("added", Some(Duration::from_millis(10)));
    let doc = json(&run(&["diff", &base, &added, "--json"]));
    let causes = doc["causes"].as_array().unwrap_or_else(|| panic!("causes compared: {doc:#}"));
    let names = |r: &serde_json::Value| {
        r["user_stack"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let grown = causes.iter().find(|r| names(r).iter().any(|f| f.contains("tw_added_sleep")));
    let grown = grown.unwrap_or_else(|| panic!("a cause at the added sleep: {causes:#?}"));
    assert_eq!(grown["status"], "new", "{grown:#}");
    // It holds the consumer up for most of its 10 ms a round.
    let ns = grown["delta_ns"].as_f64().unwrap();
    let added_ns = f64::from(ROUNDS) * 10e6;
    assert!(
        ns > 0.5 * added_ns && ns < 1.2 * added_ns,
        "the added sleep explains {ns} ns of {added_ns}: {grown:#}"
    );
    assert_eq!(grown["comm"], "tw-producer");
    let text = run(&["diff", &base, &added]);
    assert!(
        text.stdout.contains("By why's causes") && text.stdout.contains("By what they waited on"),
        "{}",
        text.stdout
    );
}
