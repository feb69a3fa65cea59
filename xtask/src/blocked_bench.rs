//! The bench's `topwaits blocked` case: a snapshot of a process of 1,000 threads
//! blocked on one mutex, against the floor of reading each thread's kernel stack
//! with a shell loop (what a user would do by hand).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context as _, Result};

use crate::root;

fn median_ms(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn timed(cmd: &mut Command) -> Result<f64> {
    let t = Instant::now();
    let out = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).output()?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

/// One markdown paragraph with the medians of five runs each.
pub fn blocked_snapshot(bin: &str) -> Result<String> {
    let exe = root().join("target/bench-stuck");
    let src = root().join("topwaits/tests/programs/stuck.c");
    crate::run(
        Command::new("cc")
            .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o"])
            .arg(&exe)
            .arg(&src),
    )?;
    let mut work = Command::new(&exe)
        .args(["many", "1000"])
        .stdout(Stdio::piped())
        .spawn()
        .context("failed to start the workload")?;
    let mut line = String::new();
    BufReader::new(work.stdout.take().context("no stdout")?).read_line(&mut line)?;
    let pid = work.id().to_string();
    let result = (|| -> Result<String> {
        if !line.starts_with("ready") {
            bail!("the 1,000-thread workload said {line:?}");
        }
        let mut ours = Vec::new();
        let mut floor = Vec::new();
        for _ in 0..5 {
            ours.push(timed(Command::new(bin).args(["blocked", "--json", "-p", &pid]))?);
            let script = format!("for t in /proc/{pid}/task/*; do cat $t/stack > /dev/null; done");
            floor.push(timed(Command::new("sh").args(["-c", &script]))?);
        }
        let (ours, floor) = (median_ms(ours), median_ms(floor));
        Ok(format!(
            "\nBlocked snapshot: `topwaits blocked --json -p PID` of 1,000 threads blocked on one mutex (stacks, syscalls, owners, wait-for graph): {ours:.0} ms (target < 1,000 ms); a shell loop that only reads each thread's /proc stack takes {floor:.0} ms ({:.2}x).\n",
            ours / floor
        ))
    })();
    let _ = work.kill();
    let _ = work.wait();
    result
}
