//! Kernel test of the user side's own cost: during a busy, fork-heavy trace the
//! topwaits process stays within its CPU budget (read from /proc, not timed), and
//! the processes that came and went during it keep their names.

mod common;

use std::process::Command;

use common::*;

/// The budget: 1% of one core, over the workload's wall time.
const BUDGET: f64 = 0.01;

/// CPU time, in ns, of every thread of `pid` (the scheduler's exact sum, not ticks).
fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn perf() -> bool {
    let have = Command::new("perf")
        .args(["bench", "sched", "messaging", "-h"])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty() || !o.stderr.is_empty());
    present(
        module_path!(),
        "perf (linux-perf)",
        (!have).then(|| "perf is not installed; run cargo xtask setup".to_string()),
    )
}

/// Regression: under `perf bench sched messaging` the topwaits process used about
/// 8% of a core, reading the memory maps of every process the benchmark forks.
#[test]
fn the_user_side_stays_within_one_percent_of_a_core_under_messaging() {
    require_bpf!();
    if !perf() {
        return;
    }
    let tracer = Tracer::start_learned(&["--json", "-m", "1000"]);
    let pid = tracer.child.id();
    // One short run first: building perf's and libc's unwind tables, once per
    // file, is start-up work, measured by the bench, not the steady cost here.
    // It lasts long enough (about 0.3 s) for perf's mappings to be read before
    // it exits; a shorter one could end first, and the tables be built in the
    // measured window.
    let warm = Command::new("perf")
        .args(["bench", "sched", "messaging", "-g", "1", "-l", "300"])
        .output()
        .expect("perf runs");
    assert!(warm.status.success(), "{}", String::from_utf8_lossy(&warm.stderr));
    // Start-up work (reading the kernel's symbols and building the tables on
    // threads of their own) ends first.
    let settled = std::time::Instant::now();
    loop {
        let before = cpu_ns(pid);
        std::thread::sleep(std::time::Duration::from_millis(200));
        if cpu_ns(pid) - before < 1_000_000 || settled.elapsed().as_secs() > 10 {
            break;
        }
    }
    let (cpu0, t0) = (cpu_ns(pid), std::time::Instant::now());
    let bench = Command::new("perf")
        .args(["bench", "sched", "messaging", "-g", "5", "-l", "1000"])
        .output()
        .expect("perf runs");
    let (cpu1, wall) = (cpu_ns(pid), t0.elapsed());
    assert!(bench.status.success(), "{}", String::from_utf8_lossy(&bench.stderr));
    tracer.signal(libc::SIGINT);
    let doc = json(&tracer.finish());
    let share = (cpu1 - cpu0) as f64 / wall.as_nanos() as f64;
    eprintln!(
        "topwaits used {:.2} ms of CPU over {:.2} s of messaging: {:.3}% of a core",
        (cpu1 - cpu0) as f64 / 1e6,
        wall.as_secs_f64(),
        share * 100.0
    );
    assert!(
        share <= BUDGET,
        "the user side used {:.2}% of a core, over the {:.0}% budget",
        share * 100.0,
        BUDGET * 100.0
    );
    // The benchmark's 200 processes exited before the report: their frames are
    // still resolved to their files (named, or module+offset in a stripped
    // library). Waits in exit, after the memory is gone, have no user stack.
    let (mut resolved, mut all) = (0u64, 0u64);
    let mut unresolved = Vec::new();
    for r in doc["records"].as_array().unwrap().iter().filter(|r| r["comm"] == "sched-messaging") {
        let Some(first) = r["user_stack"].as_array().and_then(|s| s.first()) else { continue };
        let ns = r["total_ns"].as_u64().unwrap();
        all += ns;
        if first["symbol"].as_str().is_some_and(|s| s != "[unknown]") || first["module"].is_string()
        {
            resolved += ns;
        } else {
            unresolved.push(r);
        }
    }
    assert!(all > 0, "the trace saw the benchmark");
    assert!(
        resolved as f64 >= 0.999 * all as f64,
        "{:.2}% of the exited processes' wait time has a resolved first user frame; unresolved: {:#}",
        100.0 * resolved as f64 / all as f64,
        serde_json::Value::Array(unresolved.into_iter().take(5).cloned().collect())
    );
}
