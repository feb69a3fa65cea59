//! The bench's user-stack check: a Python HTTP server under a client loop, traced
//! by topwaits and libbpf-tools offcputime at once (same process, same window); for
//! each, the share of off-CPU time whose user stack has an unresolved (`[unknown]`)
//! frame. Also, on the same server, the unwind tables' memory and how soon a new
//! topwaits gives its first whole user stack.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _, Result};
use serde_json::Value;

/// Debian's own python3 (and libc), built without frame pointers: whatever a
/// `python3` first on the PATH may be (a pyenv build, say), this is the one the
/// results name.
const PYTHON: &str = "/usr/bin/python3";
/// Seconds both tracers trace.
const WINDOW: &str = "5";
const PORT: u16 = 18_173;

/// Kernel frames where a user thread entered the kernel: the frames after the last
/// of them are user frames in offcputime's output, which has no delimiter.
fn is_entry(frame: &str) -> bool {
    frame.starts_with("entry_SYSCALL")
        || frame.starts_with("asm_")
        || frame.starts_with("ret_from_fork")
}

/// What one tool saw: total µs, µs with an unresolved user frame, µs with a frame
/// known only by its file and offset (code of a stripped binary with no symbol,
/// such as Debian python3.11's static functions), stacks, and the sum over stacks
/// of µs × named user frames (for the time-weighted mean depth).
#[derive(Debug, Default, PartialEq)]
pub struct Share {
    pub total: u64,
    pub unknown: u64,
    pub unnamed_in_file: u64,
    pub stacks: usize,
    pub named_us: u64,
}

/// A user frame with no symbol but a known file, as [`topwaits_share`] passes it.
const IN_FILE: &str = "[unknown in its file]";

impl Share {
    fn add(&mut self, value: u64, user: &[&str]) {
        self.total += value;
        if user.contains(&"[unknown]") {
            self.unknown += value;
        }
        if user.contains(&IN_FILE) {
            self.unnamed_in_file += value;
        }
        self.stacks += 1;
        self.named_us +=
            value * user.iter().filter(|f| **f != "[unknown]" && **f != IN_FILE).count() as u64;
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
            let user =
                frames.iter().rposition(|f| is_entry(f)).map_or(&frames[..0], |i| &frames[i + 1..]);
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
        let names: Vec<&str> = frames
            .iter()
            .filter_map(|f| match f["symbol"].as_str() {
                Some("[unknown]") if f["module"].is_string() => Some(IN_FILE),
                name => name,
            })
            .collect();
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
    let server = Command::new(PYTHON)
        .args(["-m", "http.server", &PORT.to_string(), "--bind", "127.0.0.1"])
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("/usr/bin/python3 is needed")?;
    let mut children = Killed(vec![server]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", PORT)).is_err() {
        if Instant::now() > deadline {
            bail!("the Python HTTP server did not listen on port {PORT}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    children.0.push(
        Command::new(PYTHON)
            .args(["-c", &client_loop(9)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
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
    let peer = Command::new("/usr/sbin/offcputime")
        .args(["-p", &pid, WINDOW])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let (ours, leaf, peer) =
        (ours.wait_with_output()?, leaf.wait_with_output()?, peer.wait_with_output()?);
    if !ours.status.success() || !leaf.status.success() || !peer.status.success() {
        bail!(
            "a tracer failed: topwaits {}, with --leaf-callers {}, offcputime {}",
            ours.status,
            leaf.status,
            peer.status
        );
    }
    let t = topwaits_share(&serde_json::from_slice(&ours.stdout).context("topwaits' JSON")?);
    let l = topwaits_share(&serde_json::from_slice(&leaf.stdout).context("topwaits' JSON")?);
    let o = offcputime_share(&String::from_utf8_lossy(&peer.stdout));
    if t.total == 0 || o.total == 0 || l.total == 0 {
        bail!(
            "no off-CPU time seen: topwaits {} us, with --leaf-callers {} us, offcputime {} us",
            t.total,
            l.total,
            o.total
        );
    }
    let (ts, ls, os) = (pct(t.unknown, t.total), pct(l.unknown, l.total), pct(o.unknown, o.total));
    let tables = first_whole_stack(bin, &pid)?;
    // The cost per switch on this workload without frame pointers (Debian's
    // python3 and libc), each tracer alone and system-wide, under a new client loop.
    let costs = python_costs(bin)?;
    Ok(format!(
        "\nUser stacks: a Python HTTP server (Debian's python3) under a client loop, {WINDOW} s, traced by three tracers at once. Off-CPU time with an unresolved user frame: topwaits {ts:.1}% ({} records), with `--leaf-callers` {ls:.1}%, offcputime {os:.1}% ({} stacks): {}. With a frame known only by its file and offset (a stripped binary's code without a symbol): topwaits {:.1}%. Named user frames per wait (time-weighted): topwaits {:.2}, with `--leaf-callers` {:.2}, offcputime {:.2}.\n",
        t.stacks,
        o.stacks,
        if ts <= os { "no higher, as required" } else { "HIGHER than offcputime" },
        pct(t.unnamed_in_file, t.total),
        t.depth(),
        l.depth(),
        o.depth()
    ) + &tables
        + &costs)
}

/// A Python program that fetches the server's page in a loop for `secs` seconds.
fn client_loop(secs: u32) -> String {
    format!(
        "import time, urllib.request\nend = time.time() + {secs}\nwhile time.time() < end:\n    urllib.request.urlopen('http://127.0.0.1:{PORT}/').read()\n"
    )
}

/// Seconds since the Unix epoch of an RFC 3339 time in UTC as topwaits writes it
/// (`2026-11-26T13:25:39.879906+00:00`).
fn epoch_seconds(s: &str) -> Option<f64> {
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.strip_suffix("+00:00").or_else(|| time.strip_suffix('Z'))?.splitn(3, ':');
    let (h, min, sec) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    // Days since 1970-01-01 in the proleptic Gregorian calendar, counted from
    // March so that a leap day ends its year: 400-year eras of 146,097 days.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    Some((days * 86_400 + h * 3_600 + min * 60) as f64 + sec)
}

/// The start of the first wait in `doc`'s events whose user stack is whole, in
/// seconds since the Unix epoch.
fn first_whole(doc: &Value) -> Option<f64> {
    doc["events"]
        .as_array()?
        .iter()
        .filter(|e| e["user_stack_status"] == "ok")
        .filter_map(|e| epoch_seconds(e["max_start"].as_str()?))
        .min_by(f64::total_cmp)
}

/// The files and KiB of the info line topwaits writes at its end about its
/// unwind tables (`unwind tables: 13 files (2 from the cache), 1680 KiB in the
/// kernel, ...`).
fn tables_line(stderr: &str) -> Option<(u64, u64)> {
    let rest = stderr.lines().find_map(|l| l.split_once("unwind tables: ").map(|(_, r)| r))?;
    let (files, rest) = rest.split_once(" files")?;
    let kib = rest.split_once(" KiB")?.0.rsplit(' ').next()?;
    Some((files.parse().ok()?, kib.parse().ok()?))
}

/// A new topwaits on the server under a new client loop, every wait an event: how
/// long from its exec to the first wait with a whole user stack (its tables must
/// first be built, for python3, libc and the rest), and the tables' memory.
fn first_whole_stack(bin: &str, pid: &str) -> Result<String> {
    let _client = Killed(vec![Command::new(PYTHON)
        .args(["-c", &client_loop(6)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?]);
    std::thread::sleep(Duration::from_millis(300));
    let exec = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    let out = Command::new(bin)
        .env("RUST_LOG", "info")
        .args(["--json", "--open-waits", "no", "--events-over", "1", "-p", pid, "3"])
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        bail!("topwaits failed on the server: {}", out.status);
    }
    let doc: Value = serde_json::from_slice(&out.stdout).context("topwaits' JSON")?;
    let first = first_whole(&doc).context("no wait with a whole user stack in 3 s")?;
    let (files, kib) = tables_line(&String::from_utf8_lossy(&out.stderr))
        .context("topwaits wrote no line about its unwind tables")?;
    Ok(format!(
        "Unwind tables on that server: a new topwaits (3 s, every wait an event) built {files} files' tables, {kib} KiB in the kernel; its first wait with a whole user stack began {:.0} ms after its exec.\n",
        (first - exec) * 1000.0
    ))
}

/// Per-switch cost of topwaits (tables and Python frames), of `--unwind fp` and
/// of offcputime, each alone and system-wide while a 3-s client loop loads the
/// server.
fn python_costs(bin: &str) -> Result<String> {
    let tracers = [
        crate::tracers::Tracer { name: "topwaits", cmd: Some(vec![bin.into(), "-f".into()]) },
        crate::tracers::Tracer {
            name: "topwaits --unwind fp",
            cmd: Some(vec![bin.into(), "-f".into(), "--unwind".into(), "fp".into()]),
        },
        crate::tracers::Tracer {
            name: "offcputime",
            cmd: Some(vec!["/usr/sbin/offcputime".into()]),
        },
    ];
    let mut ns = Vec::new();
    for t in &tracers {
        let cost = crate::tracers::cost_during(t, || {
            let status = Command::new(PYTHON)
                .args(["-c", &client_loop(3)])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()?;
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
        assert_eq!(
            (s.total, s.unknown, s.stacks),
            (1050, 300, 3),
            "an [unknown] kernel frame is not a user frame"
        );
        assert_eq!(s.named_us, 300 + 2 * 700, "named user frames weighted by time");
    }

    #[test]
    fn rfc3339_times_are_read_as_seconds_since_the_epoch() {
        assert_eq!(epoch_seconds("1970-01-01T00:00:00+00:00"), Some(0.0));
        assert_eq!(epoch_seconds("2000-02-29T23:59:59Z"), Some(951_868_799.0));
        let t = epoch_seconds("2026-11-26T13:25:39.879906+00:00").unwrap();
        assert!((t - 1_795_699_539.879_906).abs() < 1e-5, "{t}");
        assert_eq!(epoch_seconds("2026-11-26 13:25:39"), None);
        assert_eq!(epoch_seconds("2026-11-26T13:25:39+02:00"), None, "only UTC is written");
    }

    #[test]
    fn the_first_whole_stack_is_the_earliest_ok_event() {
        let doc = serde_json::json!({"events": [
            {"max_start": "2026-11-26T00:00:02+00:00", "user_stack_status": "ok"},
            {"max_start": "2026-11-26T00:00:01+00:00", "user_stack_status": "cut"},
            {"max_start": "2026-11-26T00:00:01.5+00:00", "user_stack_status": "ok"},
        ]});
        let day = epoch_seconds("2026-11-26T00:00:00+00:00").unwrap();
        assert_eq!(first_whole(&doc).map(|t| t - day), Some(1.5));
        assert_eq!(first_whole(&serde_json::json!({"events": []})), None);
    }

    #[test]
    fn the_tables_line_gives_files_and_kib() {
        let err = "[INFO  topwaits::run::trace] unwind tables: 13 files, 1680 KiB in the kernel, the first after Some(18ms); 0 files without unwind information\n";
        assert_eq!(tables_line(err), Some((13, 1680)));
        assert_eq!(tables_line("topwaits: warning: something\n"), None);
        let cached = "unwind tables: 13 files (2 from the cache), 1680 KiB in the kernel, the first after Some(3ms)";
        assert_eq!(tables_line(cached), Some((13, 1680)));
    }

    #[test]
    fn topwaits_records_count_by_their_user_frames() {
        let doc = serde_json::json!({"records": [
            {"total_us": 10, "user_stack": [{"symbol": "read"}, {"symbol": "[unknown]"}]},
            {"total_us": 30, "user_stack": [{"symbol": "read"}]},
            {"total_us": 60, "user_stack": []},
            {"total_us": 100, "user_stack": [{"symbol": "[unknown]", "module": "python3.11"}, {"symbol": "main"}]},
        ]});
        let s = topwaits_share(&doc);
        assert_eq!(
            (s.total, s.unknown, s.unnamed_in_file, s.stacks, s.named_us),
            (200, 10, 100, 4, 10 + 30 + 100)
        );
        assert!((s.depth() - 0.7).abs() < 1e-9);
        assert_eq!(pct(10, 100), 10.0);
        assert_eq!(pct(1, 0), 0.0);
    }
}
