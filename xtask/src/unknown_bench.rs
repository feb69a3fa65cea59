//! The bench's user-stack check: a Python HTTP server under a client loop, traced
//! by topwaits and libbpf-tools offcputime at once (same process, same window); for
//! each, the share of off-CPU time whose user stack has an unresolved (`[unknown]`)
//! frame.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use serde_json::Value;

/// Seconds both tracers trace.
const WINDOW: &str = "5";
const PORT: u16 = 18_173;

/// Kernel frames where a user thread entered the kernel: the frames after the last
/// of them are user frames in offcputime's output, which has no delimiter.
fn is_entry(frame: &str) -> bool {
    frame.starts_with("entry_SYSCALL") || frame.starts_with("asm_") || frame.starts_with("ret_from_fork")
}

/// What one tool saw: total µs, µs with an unresolved user frame, stacks, and the
/// sum over stacks of µs × named user frames (for the time-weighted mean depth).
#[derive(Debug, Default, PartialEq)]
pub struct Share {
    pub total: u64,
    pub unknown: u64,
    pub stacks: usize,
    pub named_us: u64,
}

impl Share {
    fn add(&mut self, value: u64, user: &[&str]) {
        self.total += value;
        if user.contains(&"[unknown]") {
            self.unknown += value;
        }
        self.stacks += 1;
        self.named_us += value * user.iter().filter(|f| **f != "[unknown]").count() as u64;
    }

    /// Named user frames per wait, weighted by time.
    fn depth(&self) -> f64 {
        self.named_us as f64 / self.total.max(1) as f64
    }
}

/// [`Share`] of offcputime's default output: each stack's frames (kernel then
/// user, leaf first), a `-  comm (pid)` line, and its value in µs.
pub fn offcputime_share(text: &str) -> Share {
    let mut share = Share::default();
    let mut frames: Vec<&str> = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let t = line.trim();
        if t.starts_with("- ") || t == "-" {
            let value: u64 = lines.next().and_then(|v| v.trim().parse().ok()).unwrap_or(0);
            let user = frames.iter().rposition(|f| is_entry(f)).map_or(&frames[..0], |i| &frames[i + 1..]);
            share.add(value, user);
            frames.clear();
        } else if line.starts_with("    ") && !t.is_empty() {
            frames.push(t);
        } else {
            frames.clear();
        }
    }
    share
}

/// The same for topwaits' JSON document.
pub fn topwaits_share(doc: &Value) -> Share {
    let mut share = Share::default();
    for r in doc["records"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let frames = r["user_stack"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        let names: Vec<&str> = frames.iter().filter_map(|f| f["symbol"].as_str()).collect();
        share.add(r["total_us"].as_u64().unwrap_or(0), &names);
    }
    share
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

struct Killed(Vec<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One markdown paragraph.
pub fn user_stacks(bin: &str) -> Result<String> {
    let dir = std::env::temp_dir().join("topwaits-bench-http");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("index.html"), "hello\n".repeat(200))?;
    let server = Command::new("python3")
        .args(["-m", "http.server", &PORT.to_string(), "--bind", "127.0.0.1"])
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("python3 is needed")?;
    let mut children = Killed(vec![server]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", PORT)).is_err() {
        if Instant::now() > deadline {
            bail!("the Python HTTP server did not listen on port {PORT}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let client = format!(
        "import time, urllib.request\nend = time.time() + 9\nwhile time.time() < end:\n    urllib.request.urlopen('http://127.0.0.1:{PORT}/').read()\n"
    );
    children.0.push(Command::new("python3").args(["-c", &client]).stdout(Stdio::null()).stderr(Stdio::null()).spawn()?);
    let pid = children.0[0].id().to_string();
    let topwaits = |extra: &[&str]| {
        Command::new(bin)
            .args(["--json", "--open-waits", "no"])
            .args(extra)
            .args(["-p", &pid, WINDOW])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
    };
    let (ours, leaf) = (topwaits(&[])?, topwaits(&["--leaf-callers"])?);
    let peer = Command::new("/usr/sbin/offcputime").args(["-p", &pid, WINDOW]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
    let (ours, leaf, peer) = (ours.wait_with_output()?, leaf.wait_with_output()?, peer.wait_with_output()?);
    if !ours.status.success() || !leaf.status.success() || !peer.status.success() {
        bail!("a tracer failed: topwaits {}, with --leaf-callers {}, offcputime {}", ours.status, leaf.status, peer.status);
    }
    let t = topwaits_share(&serde_json::from_slice(&ours.stdout).context("topwaits' JSON")?);
    let l = topwaits_share(&serde_json::from_slice(&leaf.stdout).context("topwaits' JSON")?);
    let o = offcputime_share(&String::from_utf8_lossy(&peer.stdout));
    if t.total == 0 || o.total == 0 || l.total == 0 {
        bail!("no off-CPU time seen: topwaits {} us, with --leaf-callers {} us, offcputime {} us", t.total, l.total, o.total);
    }
    let (ts, ls, os) = (pct(t.unknown, t.total), pct(l.unknown, l.total), pct(o.unknown, o.total));
    // The cost per switch on this workload without frame pointers (Debian's
    // python3 and libc), each tracer alone and system-wide, under a new client loop.
    let costs = python_costs(bin, &client)?;
    Ok(format!(
        "\nUser stacks: a Python HTTP server under a client loop, {WINDOW} s, traced by three tracers at once. Off-CPU time with an unresolved user frame: topwaits {ts:.1}% ({} records), with `--leaf-callers` {ls:.1}%, offcputime {os:.1}% ({} stacks): {}. Named user frames per wait (time-weighted): topwaits {:.2}, with `--leaf-callers` {:.2}, offcputime {:.2}.\n",
        t.stacks,
        o.stacks,
        if ts <= os { "no higher, as required" } else { "HIGHER than offcputime" },
        t.depth(),
        l.depth(),
        o.depth()
    ) + &costs)
}

/// Per-switch cost of topwaits (tables and Python frames), of `--unwind fp` and
/// of offcputime, each alone and system-wide while `client` loads the server.
fn python_costs(bin: &str, client: &str) -> Result<String> {
    let tracers = [
        crate::tracers::Tracer { name: "topwaits", cmd: Some(vec![bin.into(), "-f".into()]) },
        crate::tracers::Tracer { name: "topwaits --unwind fp", cmd: Some(vec![bin.into(), "-f".into(), "--unwind".into(), "fp".into()]) },
        crate::tracers::Tracer { name: "offcputime", cmd: Some(vec!["/usr/sbin/offcputime".into()]) },
    ];
    let mut ns = Vec::new();
    for t in &tracers {
        let cost = crate::tracers::cost_during(t, || {
            let short = client.replace("time.time() + 9", "time.time() + 3");
            let status = Command::new("python3").args(["-c", &short]).stdout(Stdio::null()).stderr(Stdio::null()).status()?;
            if !status.success() {
                bail!("the client loop failed: {status}");
            }
            Ok(())
        })?;
        ns.push(cost);
    }
    Ok(format!(
        "Per switch on that workload (Debian's python3 and libc, no frame pointers; 3 s of the client loop, each tracer alone, system-wide): topwaits {:.0} ns ({:.2}x offcputime), `--unwind fp` {:.0} ns ({:.2}x), offcputime {:.0} ns.\n",
        ns[0],
        ns[0] / ns[2],
        ns[1],
        ns[1] / ns[2],
        ns[2]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offcputime_blocks_split_at_the_entry_frame() {
        let text = "Tracing off-CPU time (us) of PID 7... Hit Ctrl-C to end.\n\
            \x20   schedule\n    do_sys_poll\n    entry_SYSCALL_64_after_hwframe\n    __poll\n    [unknown]\n    -                python3 (7)\n        300\n\n\
            \x20   schedule\n    entry_SYSCALL_64_after_hwframe\n    read\n    main\n    -                python3 (7)\n        700\n\n\
            \x20   schedule\n    [unknown]\n    worker_thread\n    -                kworker (9)\n        50\n";
        let s = offcputime_share(text);
        assert_eq!((s.total, s.unknown, s.stacks), (1050, 300, 3), "an [unknown] kernel frame is not a user frame");
        assert_eq!(s.named_us, 300 + 2 * 700, "named user frames weighted by time");
    }

    #[test]
    fn topwaits_records_count_by_their_user_frames() {
        let doc = serde_json::json!({"records": [
            {"total_us": 10, "user_stack": [{"symbol": "read"}, {"symbol": "[unknown]"}]},
            {"total_us": 30, "user_stack": [{"symbol": "read"}]},
            {"total_us": 60, "user_stack": []},
        ]});
        let s = topwaits_share(&doc);
        assert_eq!((s.total, s.unknown, s.stacks, s.named_us), (100, 10, 3, 10 + 30));
        assert!((s.depth() - 0.4).abs() < 1e-9);
        assert_eq!(pct(10, 100), 10.0);
        assert_eq!(pct(1, 0), 0.0);
    }
}
