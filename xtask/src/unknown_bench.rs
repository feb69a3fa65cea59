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

/// (total µs, µs with an unresolved user frame, stacks) of offcputime's default
/// output: each stack's frames (kernel then user, leaf first), a `-  comm (pid)`
/// line, and its value in µs.
pub fn offcputime_share(text: &str) -> (u64, u64, usize) {
    let (mut total, mut unknown, mut stacks) = (0, 0, 0);
    let mut frames: Vec<&str> = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let t = line.trim();
        if t.starts_with("- ") || t == "-" {
            let value: u64 = lines.next().and_then(|v| v.trim().parse().ok()).unwrap_or(0);
            let user = frames.iter().rposition(|f| is_entry(f)).map_or(&frames[..0], |i| &frames[i + 1..]);
            total += value;
            if user.iter().any(|f| *f == "[unknown]") {
                unknown += value;
            }
            stacks += 1;
            frames.clear();
        } else if line.starts_with("    ") && !t.is_empty() {
            frames.push(t);
        } else {
            frames.clear();
        }
    }
    (total, unknown, stacks)
}

/// The same for topwaits' JSON document.
pub fn topwaits_share(doc: &Value) -> (u64, u64, usize) {
    let records = doc["records"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let (mut total, mut unknown) = (0, 0);
    for r in records {
        let v = r["total_us"].as_u64().unwrap_or(0);
        total += v;
        let frames = r["user_stack"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        if frames.iter().any(|f| f["symbol"] == "[unknown]") {
            unknown += v;
        }
    }
    (total, unknown, records.len())
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
    let ours = Command::new(bin).args(["--json", "--open-waits", "no", "-p", &pid, WINDOW]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
    let peer = Command::new("/usr/sbin/offcputime").args(["-p", &pid, WINDOW]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
    let (ours, peer) = (ours.wait_with_output()?, peer.wait_with_output()?);
    if !ours.status.success() || !peer.status.success() {
        bail!("a tracer failed: topwaits {}, offcputime {}", ours.status, peer.status);
    }
    let doc: Value = serde_json::from_slice(&ours.stdout).context("topwaits' JSON")?;
    let (t_total, t_unknown, t_n) = topwaits_share(&doc);
    let (o_total, o_unknown, o_n) = offcputime_share(&String::from_utf8_lossy(&peer.stdout));
    if t_total == 0 || o_total == 0 {
        bail!("no off-CPU time seen: topwaits {t_total} us, offcputime {o_total} us");
    }
    let (ts, os) = (pct(t_unknown, t_total), pct(o_unknown, o_total));
    Ok(format!(
        "\nUser stacks: a Python HTTP server under a client loop, {WINDOW} s, traced by both tools at once: off-CPU time with an unresolved user frame, topwaits {ts:.1}% ({t_n} records) vs offcputime {os:.1}% ({o_n} stacks): {}.\n",
        if ts <= os { "no higher, as required" } else { "HIGHER than offcputime" }
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
        assert_eq!(offcputime_share(text), (1050, 300, 3), "an [unknown] kernel frame is not a user frame");
    }

    #[test]
    fn topwaits_records_count_by_their_user_frames() {
        let doc = serde_json::json!({"records": [
            {"total_us": 10, "user_stack": [{"symbol": "read"}, {"symbol": "[unknown]"}]},
            {"total_us": 30, "user_stack": [{"symbol": "read"}]},
            {"total_us": 60, "user_stack": []},
        ]});
        assert_eq!(topwaits_share(&doc), (100, 10, 3));
        assert_eq!(pct(10, 100), 10.0);
        assert_eq!(pct(1, 0), 0.0);
    }
}
