//! Kernel tests of `--on-cpu`: a thread's sampled running time beside its waits.

mod common;

use std::time::{Duration, Instant};

use common::programs::Started;
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

/// A thread that spins 5 ms and sleeps 5 ms in turn for `d` once let go.
fn halfspin(d: Duration) -> Workload {
    Workload::spawn("tw-halfspin", move || {
        let end = Instant::now() + d;
        while Instant::now() < end {
            tw_known_compute(Duration::from_millis(5));
            tw_known_rest(Duration::from_millis(5));
        }
    })
}

#[test]
fn a_thread_that_spins_half_the_time_is_sampled_running_half_the_time_at_its_stacks() {
    require_bpf!();
    let w = halfspin(Duration::from_millis(4500));
    let tid_num = u64::from(w.tid);
    let tid = w.tid.to_string();
    w.go();
    // 997 Hz: ~1500 samples over the 3 s, so that chance moves the share by
    // well under the 5% asked.
    let perfetto = format!("{}/oncpu.pftrace", env!("CARGO_TARGET_TMPDIR"));
    let lost = || topwaits::sys::schedclock::lost_ns().values().sum::<u64>();
    let lost_before = lost();
    let doc = json(&run(&["--json", "--on-cpu=997", "--perfetto", &perfetto, "-t", &tid, "3"]));
    let lost_during = lost().saturating_sub(lost_before);
    w.join();
    // Each sample an instant on the thread's track, with its stacks.
    let trace = std::fs::read(&perfetto).unwrap();
    let named = trace.windows(b"running: ".len()).filter(|w| *w == b"running: ").count();
    assert!(named >= 100, "{named} sample instants in the Perfetto trace");
    assert!(
        trace.windows(b"tw_known_compute".len()).any(|w| w == b"tw_known_compute"),
        "their stacks in the trace"
    );
    assert_eq!(doc["on_cpu_hz"], 997);
    let wall = doc["duration_s"].as_f64().unwrap() * 1e9;
    let times = doc["thread_times"].as_array().expect("thread_times with --on-cpu");
    let t = times
        .iter()
        .find(|t| t["tid"].as_u64() == Some(tid_num))
        .unwrap_or_else(|| panic!("{doc:#}"));
    let ns = |k: &str| t[k].as_u64().unwrap() as f64;
    let (running, off) = (ns("running_ns") / wall, (ns("runnable_ns") + ns("blocked_ns")) / wall);
    // On and off the CPU half the time each: the split of the time accounted
    // for, and the waits' share of the window, which they measure exactly.
    let on_share = running / (running + off);
    // A busy VM's CPUs lose time to the hypervisor and to interrupts, in which
    // the spinning thread, on the CPU as far as its waits tell, does not run and
    // is not sampled: that share of the window (each CPU's, averaged) may be
    // missing from the account.
    let cpus = topwaits::sys::schedclock::lost_ns().len().max(1) as f64;
    let stolen = lost_during as f64 / cpus / wall;
    eprintln!("running {running:.3}, off the CPU {off:.3} of {wall:.0} ns (on {on_share:.3} of the time accounted); {stolen:.3} lost to steal and interrupts");
    // Time stolen while it spun is neither sampled nor a wait: it can take
    // the running share below half by as much as the window it took.
    let on_floor = 0.45 - stolen / (running + off).max(0.5);
    assert!(
        (on_floor..=0.55).contains(&on_share),
        "on the CPU {on_share:.3} of the time ({stolen:.3} stolen): {t:#}"
    );
    assert!((0.45..=0.55).contains(&off), "off the CPU {off:.3} of the window: {t:#}");
    assert!(
        (0.95 - stolen..=1.05).contains(&(running + off)),
        "the time adds up to {:.3} of the window ({stolen:.3} stolen)",
        running + off
    );

    // Where: the running time in the spin, the blocked time in the rest.
    let records = doc["records"].as_array().unwrap();
    let share_in = |kind: &dyn Fn(&str) -> bool, func: &str| {
        let rs: Vec<_> =
            records.iter().filter(|r| kind(r["waits_on"]["kind"].as_str().unwrap_or(""))).collect();
        let all: u64 = rs.iter().map(|r| r["total_ns"].as_u64().unwrap()).sum();
        let at: u64 = rs
            .iter()
            .filter(|r| stack_names(&r["user_stack"]).iter().any(|f| f.contains(func)))
            .map(|r| r["total_ns"].as_u64().unwrap())
            .sum();
        at as f64 / all.max(1) as f64
    };
    let running_in_compute = share_in(&|k| k == "running", "tw_known_compute");
    assert!(
        running_in_compute >= 0.9,
        "{running_in_compute:.3} of the running time in tw_known_compute"
    );
    let sleeping_in_rest = share_in(&|k| k == "sleep", "tw_known_rest");
    assert!(sleeping_in_rest >= 0.9, "{sleeping_in_rest:.3} of the sleeping in tw_known_rest");
    for r in records.iter().filter(|r| r["waits_on"]["kind"] == "running") {
        assert!(
            r["samples"].as_u64().unwrap() >= 1 && r["total_ns"].as_u64().unwrap() % 1_003_009 == 0,
            "time is samples x period: {r:#}"
        );
    }
}

/// The user frames of each of a thread's `running_stacks` in a `threads --json`
/// document, hottest first.
fn running_stacks(doc: &serde_json::Value, tid: u64) -> Vec<(u64, Vec<String>)> {
    let t = doc["threads"].as_array().unwrap().iter().find(|t| t["tid"].as_u64() == Some(tid));
    let t = t.unwrap_or_else(|| panic!("tid {tid} missing: {doc:#}"));
    let stacks =
        t["running_stacks"].as_array().unwrap_or_else(|| panic!("no running_stacks: {t:#}"));
    stacks
        .iter()
        .map(|s| {
            (
                s["running_us"].as_u64().unwrap(),
                s["user"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| f.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn threads_on_cpu_shows_where_each_thread_ran() {
    require_bpf!();
    let w = halfspin(Duration::from_millis(3500));
    let tid = w.tid;
    w.go();
    let doc = json(&run(&["threads", "--json", "--on-cpu=499", "-t", &tid.to_string(), "2"]));
    w.join();
    assert_eq!(doc["on_cpu_hz"], 499);
    let t = doc["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == tid)
        .unwrap_or_else(|| panic!("{doc:#}"))
        .clone();
    let stacks = running_stacks(&doc, u64::from(tid));
    assert!(!stacks.is_empty() && stacks.len() <= 3, "{t:#}");
    assert!(
        stacks[0].1.iter().any(|f| f.contains("tw_known_compute")),
        "the hottest stack is the spin: {t:#}"
    );
    assert!(stacks.windows(2).all(|p| p[0].0 >= p[1].0), "hottest first: {t:#}");
    // The samples' time is an estimate of the run time the profile measures.
    let (sampled, run) =
        (stacks.iter().map(|s| s.0).sum::<u64>() as f64, t["run_us"].as_u64().unwrap() as f64);
    assert!(
        sampled > 0.3 * run && sampled < 1.3 * run,
        "{sampled} us sampled against {run} us run: {t:#}"
    );
}

#[test]
fn threads_on_cpu_walks_a_distribution_binary_whole() {
    require_bpf!();
    // gzip, as the distribution builds it: no frame pointers.
    let gzip = Started(
        std::process::Command::new("gzip")
            .arg("-c")
            .stdin(std::fs::File::open("/dev/zero").unwrap())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("gzip starts"),
        String::new(),
    );
    let pid = gzip.0.id();
    let doc = json(&run(&["threads", "--json", "--on-cpu=199", "-p", &pid.to_string(), "2"]));
    drop(gzip);
    let stacks = running_stacks(&doc, u64::from(pid));
    assert!(!stacks.is_empty(), "{doc:#}");
    // Unwound from its tables, through functions without frame pointers, to
    // libc's start; by frame pointers the walk would end at the first.
    let whole = stacks.iter().filter(|s| s.1.iter().any(|f| f.starts_with("__libc_start"))).count();
    assert!(whole * 2 > stacks.len(), "most hot stacks reach __libc_start_main: {stacks:#?}");
}
