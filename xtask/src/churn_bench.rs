//! The bench's process churn: each tracer's own CPU while a shell loop starts
//! short processes (`sh -c 'sleep 0.01; echo x | cat'`, four at a time), what
//! every process arriving costs a tracer's user side: its maps, its unwind
//! tables, the runtime probes, and for `serve` its names in each step.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use crate::tracers::{cpu_ns, median, settle, start, stop};

/// How long each tracer watches the churn, per round.
const CHURN_SECS: u64 = 8;

/// The last pid the kernel handed out (`/proc/loadavg`'s last field): the
/// difference over a run is how many tasks started.
fn last_pid() -> u64 {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().last().and_then(|p| p.parse().ok()).unwrap_or(0)
}

/// Runs the shell loop for `secs`; returns the tasks started meanwhile.
fn churn_for(secs: u64) -> Result<u64> {
    let first = last_pid();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        let kids: Vec<_> = (0..4)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "sleep 0.01; echo x | cat >/dev/null"])
                    .stdout(Stdio::null())
                    .spawn()
                    .context("starting sh")
            })
            .collect::<Result<_>>()?;
        for mut k in kids {
            k.wait()?;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Pids wrap at pid_max; a wrap during the run is rare, and then the
    // run counts as one with no task started.
    Ok(last_pid().saturating_sub(first))
}

/// One markdown table: each tracer's own CPU in every round, its median, and
/// per task started.
pub fn churn(bin: &str, rounds: usize) -> Result<String> {
    let tw = |extra: &[&str]| -> Vec<String> {
        std::iter::once(bin).chain(extra.iter().copied()).map(String::from).collect()
    };
    let tracers: Vec<(&str, Vec<String>)> = vec![
        ("topwaits", tw(&[])),
        ("topwaits -w", tw(&["-w"])),
        ("topwaits why", tw(&["why"])),
        ("topwaits serve", tw(&["serve", "--listen", "127.0.0.1:0"])),
        ("libbpf-tools offcputime", vec!["/usr/sbin/offcputime".to_string()]),
    ];
    // Per tracer: (own CPU in % of a core, µs per task started) of each round.
    let mut got: Vec<Vec<(f64, f64)>> = vec![Vec::new(); tracers.len()];
    let mut tasks = Vec::new();
    for round in 0..rounds {
        for (i, (name, cmd)) in tracers.iter().enumerate() {
            eprintln!("bench: round {}/{rounds} churn {name}", round + 1);
            let r = start(cmd, &[])?;
            let pid = r.child.id();
            settle(pid);
            let (cpu0, t0) = (cpu_ns(pid), Instant::now());
            let started = churn_for(CHURN_SECS);
            let (own, secs) = (cpu_ns(pid).saturating_sub(cpu0), t0.elapsed().as_secs_f64());
            stop(r)?;
            let started = started?.max(1);
            tasks.push(started as f64 / secs);
            got[i].push((own as f64 / 1e9 / secs * 100.0, own as f64 / 1e3 / started as f64));
        }
    }
    let mut out = format!(
        "\nProcess churn: a shell loop starting short processes (`sh -c 'sleep 0.01; echo x | cat'`, four at a time; about {:.0} tasks a second), {CHURN_SECS} s per tracer and round, each tracer alone:\n\n| tracer | own CPU (% of a core), each round | median | µs per task started |\n|---|---|---|---|\n",
        median(&mut tasks)
    );
    for ((name, _), runs) in tracers.iter().zip(&got) {
        let each: Vec<String> = runs.iter().map(|(c, _)| format!("{c:.2}%")).collect();
        let mut cpu: Vec<f64> = runs.iter().map(|r| r.0).collect();
        let mut per: Vec<f64> = runs.iter().map(|r| r.1).collect();
        out.push_str(&format!(
            "| {name} | {} | {:.2}% | {:.0} |\n",
            each.join(", "),
            median(&mut cpu),
            median(&mut per)
        ));
    }
    Ok(out)
}
