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

/// More distinct rows than the aggregate holds (`--max-entries 2048`, a
/// thread per sleep for 6 s): the rows are taken out while tracing each time
/// the map is half full, so none is lost, with wakers or without, and every
/// wait recorded is in a record.
#[test]
fn more_rows_than_the_aggregate_holds_are_all_kept() {
    require_bpf!();
    for waker in [false, true] {
        let w = start_with("python3", &["-c", THREAD_PER_SLEEP]);
        let pid = w.0.id().to_string();
        let mut args = vec!["-p", &pid, "--max-entries", "2048", "--json", "6"];
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
        assert!(threads.len() > 2048, "-w {waker}: {} threads' records", threads.len());
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
