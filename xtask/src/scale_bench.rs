//! The scale part of `cargo xtask bench`: per-switch cost as the number of traced
//! threads grows (10, 1,000, 10,000 sleeping threads), and under `perf bench sched
//! messaging -g 20` (800 tasks), for topwaits against offcputime in the same run.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _, Result};

use crate::tracers::{cost_during, median, Tracer};

/// Wakeups per second the thread workload aims at, whatever its thread count: the
/// load stays the same, so only the number of threads (and map entries) changes.
const WAKEUPS_PER_SEC: u64 = 40_000;
const SECS: u64 = 3;

/// The helper workload: `n` threads, each sleeping in a loop for as long as keeps
/// the whole at [`WAKEUPS_PER_SEC`], for [`SECS`] seconds once stdin closes.
pub fn thread_workload(n: usize) {
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    let nap = Duration::from_nanos(1_000_000_000 * n as u64 / WAKEUPS_PER_SEC);
    let end = Instant::now() + Duration::from_secs(SECS);
    let threads: Vec<_> = (0..n)
        .map(|_| {
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    while Instant::now() < end {
                        std::thread::sleep(nap);
                    }
                })
                .expect("failed to start a thread")
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

/// Runs the thread workload with `n` threads under `tracer`; returns ns per switch.
fn threads_cost(tracer: &Tracer, n: usize) -> Result<f64> {
    let xtask = std::env::current_exe()?;
    cost_during(tracer, || {
        let mut work = Command::new(&xtask)
            .args(["thread-workload", &n.to_string()])
            .stdin(Stdio::piped())
            .spawn()
            .context("failed to start the thread workload")?;
        // Closing stdin starts it; the tracer has attached by then.
        drop(work.stdin.take());
        let status = work.wait()?;
        if !status.success() {
            return Err(anyhow!("the thread workload with {n} threads failed: {status}"));
        }
        Ok(())
    })
}

/// Runs `perf bench sched messaging -g 20` under `tracer`; returns ns per switch.
fn wide_cost(tracer: &Tracer) -> Result<f64> {
    cost_during(tracer, || {
        let out = Command::new("perf")
            .args(["bench", "sched", "messaging", "-g", "20", "-l", "100"])
            .output()?;
        if !out.status.success() {
            return Err(anyhow!(
                "perf bench sched messaging -g 20 failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    })
}

/// The scale table, as markdown.
pub fn scale(bin: &str, rounds: usize) -> Result<String> {
    let tracers = [
        Tracer::new("topwaits", &[bin, "-f"]),
        Tracer::new("topwaits --waker", &[bin, "-f", "--waker"]),
        Tracer::new("libbpf-tools offcputime", &["/usr/sbin/offcputime"]),
    ];
    let cases: [(&str, Option<usize>); 4] = [
        ("10 threads", Some(10)),
        ("1,000 threads", Some(1000)),
        ("10,000 threads", Some(10_000)),
        ("messaging -g 20 (800 tasks)", None),
    ];
    let mut out = format!(
        "\nScale: ns per switch as the traced threads grow (each case {SECS} s of sleeping threads at about {WAKEUPS_PER_SEC} wakeups/s in all, so the load stays the same), and under `perf bench sched messaging -g 20 -l 100`; medians of {rounds} rounds.\n\n| case |"
    );
    for t in &tracers {
        out.push_str(&format!(" {} |", t.name));
    }
    out.push_str(" topwaits vs offcputime |\n|---|");
    out.push_str(&"---|".repeat(tracers.len() + 1));
    out.push('\n');
    for (name, threads) in cases {
        let mut costs = Vec::new();
        for t in &tracers {
            let mut v = Vec::new();
            for round in 0..rounds {
                eprintln!("bench: scale {name} round {}/{rounds} {}", round + 1, t.name);
                v.push(match threads {
                    Some(n) => threads_cost(t, n)?,
                    None => wide_cost(t)?,
                });
            }
            costs.push(median(&mut v));
        }
        out.push_str(&format!("| {name} |"));
        for c in &costs {
            out.push_str(&format!(" {c:.0} |"));
        }
        out.push_str(&format!(" {:.2}x |\n", costs[0] / costs[tracers.len() - 1]));
    }
    Ok(out)
}
