//! The bench's goroutine cost: a Go HTTP server whose handlers hand each
//! request to worker goroutines over a channel, under a Go client, with no
//! tracer, under topwaits (goroutines traced, and with `--no-goroutines`), and
//! under the runtime's own execution tracer; interleaved rounds, medians of
//! the requests per second, and the BPF time of the goroutine hooks per
//! goroutine switch.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

use crate::tracers::{median, progs, spent_counting};

const PORT: &str = "18174";
/// Client connections and seconds of load per run.
const CONNS: &str = "16";
const SECS: &str = "5";

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Untraced,
    Goroutines,
    ThreadsOnly,
    RuntimeTrace,
}

const MODES: [(Mode, &str); 4] = [
    (Mode::Untraced, "no tracer"),
    (Mode::Goroutines, "topwaits (goroutines)"),
    (Mode::ThreadsOnly, "topwaits --no-goroutines"),
    (Mode::RuntimeTrace, "runtime/trace"),
];

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        // SIGINT, so that topwaits detaches and reports.
        let _ = Command::new("kill").args(["-INT", &self.0.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Builds the server into a temporary directory; None without `go`.
fn build() -> Result<Option<String>> {
    if Command::new("go").arg("version").output().map_or(true, |o| !o.status.success()) {
        return Ok(None);
    }
    let dir = std::env::temp_dir().join("topwaits-bench-go");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("main.go"), include_str!("goserver.go"))?;
    std::fs::write(dir.join("go.mod"), "module goserver\n\ngo 1.19\n")?;
    let out = dir.join("goserver").to_string_lossy().into_owned();
    let ok = Command::new("go").args(["build", "-o", &out, "."]).current_dir(&dir).status()?;
    if !ok.success() {
        bail!("go build of the bench's Go server failed");
    }
    Ok(Some(out))
}

/// Starts a child and waits for a line of its `stream` starting with `ready`.
fn started(mut cmd: Command, ready: &str, stderr: bool) -> Result<Killed> {
    if stderr {
        cmd.stderr(Stdio::piped()).stdout(Stdio::null());
    } else {
        cmd.stdout(Stdio::piped()).stderr(Stdio::null());
    }
    let mut child = Killed(cmd.spawn().context("failed to start a bench process")?);
    let lines: Box<dyn std::io::Read + Send> = if stderr {
        Box::new(child.0.stderr.take().context("stderr")?)
    } else {
        Box::new(child.0.stdout.take().context("stdout")?)
    };
    let mut lines = BufReader::new(lines).lines();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.starts_with(ready) => break,
            Some(Ok(_)) => continue,
            _ => bail!("a bench process ended before it said {ready:?}"),
        }
    }
    // Drained from here, so that it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Ok(child)
}

/// One run: requests per second, and (with topwaits) the goroutine hooks'
/// BPF time and goroutine switches (`runtime.execute` runs).
fn one(bin: &str, server: &str, mode: Mode) -> Result<(f64, u64, u64)> {
    let trace = std::env::temp_dir().join("topwaits-bench-go/trace.out");
    let mut cmd = Command::new(server);
    cmd.args(["serve", PORT]);
    if mode == Mode::RuntimeTrace {
        cmd.arg(&trace);
    }
    let srv = started(cmd, "ready", false)?;
    let pid = srv.0.id().to_string();
    let tracer = match mode {
        Mode::Goroutines | Mode::ThreadsOnly => {
            let mut t = Command::new(bin);
            t.args(["--json", "-p", &pid, "30"]);
            if mode == Mode::ThreadsOnly {
                t.arg("--no-goroutines");
            }
            Some(started(t, "Tracing", true)?)
        }
        _ => None,
    };
    // After "Tracing": the goroutine hooks are attached.
    std::thread::sleep(Duration::from_millis(300));
    let hooks = |p: &crate::tracers::Prog| p.name.starts_with("go_");
    let before: Vec<_> = progs()?.into_iter().filter(hooks).collect();
    let out = Command::new(server).args(["load", PORT, CONNS, SECS]).output()?;
    let after: Vec<_> = progs()?.into_iter().filter(hooks).collect();
    drop(tracer);
    drop(srv);
    let rate: f64 =
        String::from_utf8_lossy(&out.stdout).trim().parse().context("the load's rate")?;
    let (ns, switches) = spent_counting(&before, &after, "go_execute");
    let _ = std::fs::remove_file(&trace);
    Ok((rate, ns, switches))
}

/// One markdown paragraph and table.
pub fn go_server(bin: &str, rounds: usize) -> Result<String> {
    let Some(server) = build()? else {
        return Ok("\nGo server: go (golang-go) is not installed; left out.\n".into());
    };
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    let (mut ns, mut switches) = (0u64, 0u64);
    for round in 0..rounds {
        for (i, (mode, name)) in MODES.iter().enumerate() {
            eprintln!("bench: round {}/{rounds} Go server, {name}", round + 1);
            let (rate, n, s) = one(bin, &server, *mode)?;
            rates[i].push(rate);
            if *mode == Mode::Goroutines {
                (ns, switches) = (ns + n, switches + s);
            }
        }
    }
    let med: Vec<f64> = rates.iter_mut().map(|r| median(r)).collect();
    let mut out = format!(
        "\nGo server: a Go HTTP server handing each request to worker goroutines over a channel, under a Go client ({CONNS} connections, {SECS} s a run), medians of {rounds} interleaved rounds:\n\n| tracer | requests/s | vs no tracer | vs runtime/trace |\n|---|---|---|---|\n"
    );
    for (i, (_, name)) in MODES.iter().enumerate() {
        out.push_str(&format!(
            "| {name} | {:.0} | {:.2}x | {:.2}x |\n",
            med[i],
            med[i] / med[0],
            med[i] / med[3]
        ));
    }
    out.push_str(&format!(
        "\nThe goroutine hooks' own BPF time: {:.0} ns per goroutine switch ({} switches traced); the uprobe's trap into the kernel comes on top and is in the rates above.\n",
        ns as f64 / switches.max(1) as f64,
        switches
    ));
    Ok(out)
}
