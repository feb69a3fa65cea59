//! Kernel tests of `--on-cpu`: a thread's sampled running time beside its waits.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Spins on the CPU for `d`.
#[inline(never)]
fn tw_known_compute(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::hint::black_box(0u64);
    }
}

/// Sleeps for `d`.
#[inline(never)]
fn tw_known_rest(d: Duration) {
    nanosleep(d);
    std::hint::black_box(());
}

#[test]
fn a_thread_that_spins_half_the_time_is_sampled_running_half_the_time_at_its_stacks() {
    require_bpf!();
    let w = Workload::spawn("tw-halfspin", || {
        let end = Instant::now() + Duration::from_millis(4500);
        while Instant::now() < end {
            tw_known_compute(Duration::from_millis(5));
            tw_known_rest(Duration::from_millis(5));
        }
    });
    let tid_num = u64::from(w.tid);
    let tid = w.tid.to_string();
    w.go();
    // 997 Hz: ~1500 samples over the 3 s, so that chance moves the share by
    // well under the 5% asked.
    let perfetto = format!("{}/oncpu.pftrace", env!("CARGO_TARGET_TMPDIR"));
    let doc = json(&run(&["--json", "--on-cpu=997", "--perfetto", &perfetto, "-t", &tid, "3"]));
    w.join();
    // Each sample an instant on the thread's track, with its stacks.
    let trace = std::fs::read(&perfetto).unwrap();
    let named = trace.windows(b"running: ".len()).filter(|w| *w == b"running: ").count();
    assert!(named >= 100, "{named} sample instants in the Perfetto trace");
    assert!(trace.windows(b"tw_known_compute".len()).any(|w| w == b"tw_known_compute"), "their stacks in the trace");
    assert_eq!(doc["on_cpu_hz"], 997);
    let wall = doc["duration_s"].as_f64().unwrap() * 1e9;
    let times = doc["thread_times"].as_array().expect("thread_times with --on-cpu");
    let t = times.iter().find(|t| t["tid"].as_u64() == Some(tid_num)).unwrap_or_else(|| panic!("{doc:#}"));
    let ns = |k: &str| t[k].as_u64().unwrap() as f64;
    let (running, off) = (ns("running_ns") / wall, (ns("runnable_ns") + ns("blocked_ns")) / wall);
    eprintln!("running {running:.3}, off the CPU {off:.3} of {wall:.0} ns");
    assert!((0.45..=0.55).contains(&running), "running {running:.3} of the window: {t:#}");
    assert!((0.45..=0.55).contains(&off), "off the CPU {off:.3} of the window: {t:#}");
    assert!((0.95..=1.05).contains(&(running + off)), "the time adds up to {:.3} of the window", running + off);

    // Where: the running time in the spin, the blocked time in the rest.
    let records = doc["records"].as_array().unwrap();
    let share_in = |kind: &dyn Fn(&str) -> bool, func: &str| {
        let rs: Vec<_> = records.iter().filter(|r| kind(r["waits_on"]["kind"].as_str().unwrap_or(""))).collect();
        let all: u64 = rs.iter().map(|r| r["total_ns"].as_u64().unwrap()).sum();
        let at: u64 = rs
            .iter()
            .filter(|r| stack_names(&r["user_stack"]).iter().any(|f| f.contains(func)))
            .map(|r| r["total_ns"].as_u64().unwrap())
            .sum();
        at as f64 / all.max(1) as f64
    };
    let running_in_compute = share_in(&|k| k == "running", "tw_known_compute");
    assert!(running_in_compute >= 0.9, "{running_in_compute:.3} of the running time in tw_known_compute");
    let sleeping_in_rest = share_in(&|k| k == "sleep", "tw_known_rest");
    assert!(sleeping_in_rest >= 0.9, "{sleeping_in_rest:.3} of the sleeping in tw_known_rest");
    for r in records.iter().filter(|r| r["waits_on"]["kind"] == "running") {
        assert!(r["samples"].as_u64().unwrap() >= 1 && r["total_ns"].as_u64().unwrap() % 1_003_009 == 0, "time is samples x period: {r:#}");
    }
}
