//! Kernel tests of traces with more distinct rows than the aggregate map
//! holds: the rows are taken out while tracing, so none is lost.

mod common;

use common::programs::start_with;
use common::*;
use serde_json::Value;

/// A program that starts a thread for each 1 ms sleep, hundreds a second:
/// every thread a row of its own.
const THREAD_PER_SLEEP: &str = "import threading, time
print('ready', flush=True)
while True:
    t = threading.Thread(target=time.sleep, args=(0.001,))
    t.start()
    t.join()
";

/// Many more distinct rows than the aggregate holds (`--max-entries 1024`, a
/// thread per sleep for 6 s, thousands of rows a second with wakers): the rows
/// are taken out while tracing each time the map is half full, looked at
/// sooner the faster rows come, so none is lost, with wakers or without, from
/// the first moment on, and every wait recorded is in a record.
#[test]
fn more_rows_than_the_aggregate_holds_are_all_kept() {
    require_bpf!();
    for waker in [false, true] {
        let w = start_with("python3", &["-c", THREAD_PER_SLEEP]);
        let pid = w.0.id().to_string();
        let mut args = vec!["-p", &pid, "--max-entries", "1024", "--json", "6"];
        if waker {
            args.insert(0, "-w");
        }
        let doc = json(&run(&args));
        drop(w);
        assert_eq!(doc["lost"]["aggregate_full"], 0, "-w {waker}: {}", doc["lost"]);
        let closed: Vec<&Value> =
            doc["records"].as_array().unwrap().iter().filter(|r| r["open"] == false).collect();
        let threads: std::collections::HashSet<u64> =
            closed.iter().map(|r| r["tid"].as_u64().unwrap()).collect();
        assert!(threads.len() > 1024, "-w {waker}: {} threads' records", threads.len());
        // A wait added to a row in the instant the row is taken out is lost:
        // rare enough to leave at most a handful out.
        let counted: u64 = closed.iter().map(|r| r["count"].as_u64().unwrap()).sum();
        let recorded = doc["counters"]["recorded"].as_u64().unwrap();
        assert!(
            counted <= recorded && counted as f64 >= 0.999 * recorded as f64,
            "-w {waker}: {counted} waits in records of {recorded} recorded"
        );
    }
}

/// The same under `serve`: a step of 4 s makes more distinct rows than the
/// aggregate holds, and they are taken out during the step, so /metrics
/// counts none lost and every wait is served.
#[test]
fn serve_keeps_more_rows_a_step_than_the_aggregate_holds() {
    require_bpf!();
    if !present(module_path!(), "curl", (!installed("curl")).then(|| "no curl".to_string())) {
        return;
    }
    let w = start_with("python3", &["-c", THREAD_PER_SLEEP]);
    let pid = w.0.id().to_string();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let t = Tracer::start_until(
        &[
            "serve",
            "--listen",
            &port.to_string(),
            "-p",
            &pid,
            "--max-entries",
            "2048",
            "--step",
            "4",
        ],
        &[],
        "Serving",
    );
    // Two whole steps.
    std::thread::sleep(std::time::Duration::from_secs(9));
    let out = std::process::Command::new("curl")
        .args(["-s", "--max-time", "10", &format!("http://127.0.0.1:{port}/metrics")])
        .output()
        .expect("curl");
    let page = String::from_utf8_lossy(&out.stdout).into_owned();
    t.signal(libc::SIGTERM);
    let f = t.finish();
    drop(w);
    assert!(f.status.success(), "{}", f.stderr);
    let value = |line: &str| -> f64 {
        page.lines()
            .filter(|l| l.starts_with(line))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(
        value("topwaits_lost_total{reason=\"aggregate_full\"}"),
        0.0,
        "{}",
        page.lines().filter(|l| l.starts_with("topwaits_lost")).collect::<Vec<_>>().join("\n")
    );
    // A thread per 1 ms sleep: thousands of waits a step, far more rows than 2,048.
    let waits = value("topwaits_waits_total");
    assert!(waits > 4096.0, "{waits} waits served:\n{page}");
}
