//! Helpers for the kernel tests: the BPF gate, running the binary until it has
//! attached, workloads with known wait patterns, and JSON/time helpers.
#![allow(dead_code)]

pub mod programs;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_topwaits");

/// Whether BPF tests can run here. With TOPWAITS_REQUIRE_BPF=1 a missing capability
/// fails the test instead of skipping it.
pub fn bpf_available(test: &str) -> bool {
    let reason = if unsafe { libc::geteuid() } != 0 {
        Some("not running as root".to_string())
    } else if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        Some("no /sys/kernel/btf/vmlinux".to_string())
    } else {
        None
    };
    present(test, "BPF", reason)
}

/// Whether what `test` needs (`what`) is here: `missing` says why not. With
/// TOPWAITS_REQUIRE_BPF=1 (CI, where setup installs everything) a missing piece
/// fails the test; elsewhere the test skips with the reason printed.
pub fn present(test: &str, what: &str, missing: Option<String>) -> bool {
    match missing {
        None => true,
        Some(r) if std::env::var("TOPWAITS_REQUIRE_BPF").as_deref() == Ok("1") => {
            panic!("{test}: {what} is required (TOPWAITS_REQUIRE_BPF=1) but unavailable: {r}")
        }
        Some(r) => {
            eprintln!("skipped {test}: {r}");
            false
        }
    }
}

macro_rules! require_bpf {
    () => {
        if !common::bpf_available(module_path!()) {
            return;
        }
    };
}
pub(crate) use require_bpf;

/// The attach path the kernel suites run with: `TOPWAITS_TEST_ATTACH` (set by
/// `cargo xtask test` for its second pass), or the automatic choice.
pub fn expected_attach() -> String {
    std::env::var("TOPWAITS_TEST_ATTACH").unwrap_or_else(|_| "raw_tp".into())
}

/// Adds `--attach $TOPWAITS_TEST_ATTACH` unless the test chose a path itself.
pub fn with_attach(args: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    if let Ok(a) = std::env::var("TOPWAITS_TEST_ATTACH") {
        // `blocked` and `report` attach nothing.
        if !args.contains(&"--attach") && !matches!(args.first(), Some(&"blocked" | &"report")) {
            let at = usize::from(matches!(
                args.first(),
                Some(&"threads" | &"record" | &"why" | &"locks" | &"serve")
            ));
            v.splice(at..at, ["--attach".to_string(), a]);
        }
    }
    v
}

/// A language runtime (python, node, java) running a test script, killed
/// when dropped, its perf map and the directory it ran in (where node leaves
/// its logs) removed, so that a failing test leaves nothing.
pub struct Script(pub Child, std::path::PathBuf);

impl Drop for Script {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_file(format!("/tmp/perf-{}.map", self.0.id()));
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

/// Runs `runtime` with `flags` on `script`, in a directory of its own, once
/// it prints "ready".
pub fn start_script(runtime: &str, flags: &[&str], script: &str) -> Script {
    static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let cwd = std::env::temp_dir().join(format!("topwaits-script-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&cwd).unwrap();
    let mut child = Command::new(runtime)
        .args(flags)
        .arg(script)
        .current_dir(&cwd)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{runtime} starts: {e}"));
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    let started = Script(child, cwd);
    assert!(line.starts_with("ready"), "{runtime}: {line:?}");
    started
}

/// A process killed (and reaped) when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether `cmd` is on PATH.
pub fn installed(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A running topwaits that has printed its "Tracing" line, i.e. has attached.
pub struct Tracer {
    pub child: Child,
    stderr_rx: mpsc::Receiver<String>,
    pub stderr_head: String,
}

pub struct Finished {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Tracer {
    /// Starts topwaits and waits until it is attached (at most 20 s).
    pub fn start(args: &[&str]) -> Tracer {
        Self::start_env(args, &[])
    }

    /// Starts with extra environment variables.
    pub fn start_env(args: &[&str], env: &[(&str, &str)]) -> Tracer {
        Self::start_until(args, env, "Tracing")
    }

    /// Starts and waits (at most 20 s) for a line of stderr that begins with
    /// `ready`, the line the command prints once it has attached.
    pub fn start_until(args: &[&str], env: &[(&str, &str)], ready: &str) -> Tracer {
        let mut child = Command::new(BIN)
            .args(with_attach(args))
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("failed to start topwaits");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut head = String::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(20)) {
                Ok(line) => {
                    head.push_str(&line);
                    head.push('\n');
                    if line.starts_with(ready) {
                        break;
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    let mut out = String::new();
                    let _ = child.stdout.take().unwrap().read_to_string(&mut out);
                    panic!("topwaits {args:?} did not attach; stderr:\n{head}\nstdout:\n{out}");
                }
            }
        }
        Tracer { child, stderr_rx: rx, stderr_head: head }
    }

    /// Starts, then waits until the kernel stack learners are loaded (they load
    /// after the trace starts; until then every stack is unwound and none reused).
    pub fn start_learned(args: &[&str]) -> Tracer {
        let mut t = Self::start_env(args, &[("RUST_LOG", "topwaits::run::trace=debug")]);
        t.wait_for_line("kernel stack learners in place");
        t
    }

    /// Waits (at most 20 s) for a line of stderr that contains `needle`.
    pub fn wait_for_line(&mut self, needle: &str) {
        loop {
            match self.stderr_rx.recv_timeout(Duration::from_secs(20)) {
                Ok(line) => {
                    self.stderr_head.push_str(&line);
                    self.stderr_head.push('\n');
                    if line.contains(needle) {
                        return;
                    }
                }
                Err(_) => panic!("no line with {needle:?} on stderr:\n{}", self.stderr_head),
            }
        }
    }

    /// Waits for exit and collects the output.
    pub fn finish(mut self) -> Finished {
        let mut stdout = String::new();
        self.child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
        let status = self.child.wait().unwrap();
        let mut stderr = self.stderr_head;
        while let Ok(l) = self.stderr_rx.recv_timeout(Duration::from_millis(200)) {
            stderr.push_str(&l);
            stderr.push('\n');
        }
        Finished { status, stdout, stderr }
    }

    pub fn signal(&self, sig: i32) {
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }
}

/// Runs topwaits for `secs` seconds from when its kernel stack learners are in
/// place too (they load after the trace begins): for tests that hold every
/// stack of the window to be whole and reused alike.
pub fn run_walked(args: &[&str], secs: f64) -> Finished {
    let t = Tracer::start_learned(args);
    std::thread::sleep(Duration::from_secs_f64(secs));
    t.signal(libc::SIGINT);
    t.finish()
}

/// Runs topwaits to completion without waiting for attach.
pub fn run(args: &[&str]) -> Finished {
    let out = Command::new(BIN).args(with_attach(args)).output().expect("failed to run topwaits");
    Finished {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub fn json(f: &Finished) -> Value {
    assert!(f.status.success(), "topwaits failed: {}\n{}", f.status, f.stderr);
    serde_json::from_str(&f.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {}", f.stdout))
}

pub fn tid() -> u32 {
    unsafe { libc::gettid() as u32 }
}

/// Waits (at most 2 s) until thread `tid` of this process sleeps (state S), so
/// that what wakes it next really ends a wait.
pub fn until_sleeping(tid: u32) {
    let path = format!("/proc/self/task/{tid}/stat");
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while std::time::Instant::now() < deadline {
        let stat = std::fs::read_to_string(&path).unwrap_or_default();
        // The state follows the comm, which ends at the last ')'.
        if stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('S')) {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    panic!("thread {tid} never went to sleep");
}

/// Waits (at most 2 s) until thread `tid` of this process sleeps in `read`: a
/// thread that has just been started may still sleep elsewhere (waiting to be let
/// go), and a byte written then would be read without a wait.
pub fn until_reading(tid: u32) {
    let path = format!("/proc/self/task/{tid}/syscall");
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while std::time::Instant::now() < deadline {
        until_sleeping(tid);
        let nr = std::fs::read_to_string(&path).unwrap_or_default();
        if nr.split_whitespace().next() == Some(libc::SYS_read.to_string().as_str()) {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    panic!("thread {tid} never blocked in read");
}

pub fn now_wall_ns() -> i128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i128
}

/// Sleeps with nanosleep(2) from a frame-pointer-built function.
#[inline(never)]
pub fn nanosleep(d: Duration) {
    let ts = libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
    std::hint::black_box(());
}

/// The off-CPU span, in microseconds, a single nanosleep of `asked` may show.
/// The kernel arms the timer before the thread switches out, so on a virtual
/// machine a stalled vCPU between the two shortens the span by that stall:
/// 61 µs was seen in CI. 2 ms below the ask allows for that and no more; the
/// top allows for a busy CPU after the wakeup.
pub fn sleep_span_us(asked: Duration) -> std::ops::Range<u64> {
    let us = asked.as_micros() as u64;
    us - 2_000..us + 100_000
}

/// The function the long-sleep workload waits in.
#[inline(never)]
pub fn tw_known_long_sleep(d: Duration) {
    nanosleep(d);
    std::hint::black_box(());
}

/// The function the short-sleeps workload waits in.
#[inline(never)]
pub fn tw_known_short_sleeps(n: usize, d: Duration) {
    for _ in 0..n {
        nanosleep(d);
    }
    std::hint::black_box(());
}

/// A thread that reports its tid, waits for `go`, runs `work`, then exits.
pub struct Workload {
    pub tid: u32,
    go: mpsc::Sender<()>,
    handle: thread::JoinHandle<()>,
}

impl Workload {
    pub fn spawn(name: &str, work: impl FnOnce() + Send + 'static) -> Workload {
        let (tid_tx, tid_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let handle = thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                tid_tx.send(tid()).unwrap();
                if go_rx.recv().is_ok() {
                    work();
                }
            })
            .unwrap();
        let tid = tid_rx.recv().unwrap();
        Workload { tid, go: go_tx, handle }
    }

    pub fn go(&self) {
        self.go.send(()).unwrap();
    }

    pub fn join(self) {
        self.handle.join().unwrap();
    }
}

/// Records whose user stack names `func`.
pub fn records_in<'a>(doc: &'a Value, func: &str) -> Vec<&'a Value> {
    doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| stack_names(&r["user_stack"]).iter().any(|s| s.contains(func)))
        .collect()
}

/// The records of waits in a call that `func` made (its sleep, read, ...): those
/// with `func` in the user stack below the leaf. A wait with `func` itself as the
/// leaf is the thread preempted, or faulting, in `func`'s own code, which a busy
/// VM makes now and then.
pub fn calls_in<'a>(doc: &'a Value, func: &str) -> Vec<&'a Value> {
    records_in(doc, func)
        .into_iter()
        .filter(|r| !stack_names(&r["user_stack"]).first().is_some_and(|s| s.contains(func)))
        .collect()
}

/// The records of `func`'s sleeps themselves: of its calls, those labelled a
/// sleep. A thread woken from its sleep may also be preempted on its way back
/// to user space, a wait with the same user stack that is labelled run queue.
pub fn sleeps_in<'a>(doc: &'a Value, func: &str) -> Vec<&'a Value> {
    calls_in(doc, func).into_iter().filter(|r| r["waits_on"]["kind"] == "sleep").collect()
}

pub fn stack_names(stack: &Value) -> Vec<String> {
    stack
        .as_array()
        .map(|a| a.iter().map(|f| f["symbol"].as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default()
}

/// Parses `YYYY-MM-DDTHH:MM:SS.ffffff+HH:MM` into Unix nanoseconds.
pub fn parse_rfc3339(s: &str) -> i128 {
    let num =
        |a: usize, b: usize| -> i64 { s[a..b].parse().unwrap_or_else(|_| panic!("bad time {s}")) };
    let (y, mo, d) = (num(0, 4), num(5, 7), num(8, 10));
    let (h, mi, sec) = (num(11, 13), num(14, 16), num(17, 19));
    let frac_end = s[20..].find(['+', '-', 'Z']).map(|i| i + 20).unwrap();
    let frac = &s[20..frac_end];
    let frac_ns: i64 = format!("{frac:0<9}")[..9].parse().unwrap();
    let off_s = if &s[frac_end..] == "Z" {
        0
    } else {
        let sign = if &s[frac_end..frac_end + 1] == "-" { -1 } else { 1 };
        sign * (num(frac_end + 1, frac_end + 3) * 3600 + num(frac_end + 4, frac_end + 6) * 60)
    };
    // days from civil (Howard Hinnant's algorithm)
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - off_s;
    secs as i128 * 1_000_000_000 + frac_ns as i128
}

/// Names of our programs currently loaded in the kernel.
pub fn our_loaded_programs() -> Vec<String> {
    let out = Command::new("bpftool")
        .args(["prog", "show"])
        .output()
        .expect("bpftool is needed (cargo xtask setup)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().skip_while(|w| *w != "name").nth(1).map(String::from))
        .filter(|n| {
            [
                "sched_switch_",
                "sched_waking_",
                "sched_wakeup_n",
                "sched_process_",
                "finish_task_sw",
                "sys_enter_fute",
                "sys_exit_futex",
                "learn_stack_",
                "learn_waker_",
            ]
            .iter()
            .any(|p| n.starts_with(p))
        })
        .collect()
}

/// Our programs still loaded once the kernel has finished freeing those of exited
/// tracers: the release of tracepoint links and programs is deferred (RCU), so an
/// exited process's programs can linger for a moment. Waits up to 5 s.
pub fn programs_left_after_exit() -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let left = our_loaded_programs();
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Whether Perfetto's own reader (pip's perfetto package) is here; the test
/// skips, with the reason printed, where it is not.
pub fn perfetto_reader(test: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", "from perfetto.protos.perfetto.trace import perfetto_trace_pb2"])
        .output()
        .is_ok_and(|o| o.status.success());
    let missing = (!ok).then(|| {
        "pip's perfetto package (and protobuf) is not installed: run cargo xtask setup".to_string()
    });
    present(test, "the Perfetto reader", missing)
}

/// A Perfetto trace file read back by Perfetto's own schema
/// (tests/tools/perfetto_decode.py): its thread tracks, other named tracks and
/// track events.
pub fn decode_perfetto(path: &std::path::Path) -> Value {
    let out = Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/perfetto_decode.py"))
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "the reader failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}
