//! Kernel tests of `topwaits serve`, read by the clients a fleet points at it:
//! Debian's Prometheus scraping /metrics, `go tool pprof` fetching a profile
//! over HTTP, and an OTLP receiver that parses with OpenTelemetry's own
//! classes. Then its errors, a clean SIGTERM, and memory over a long run with
//! processes coming and going.

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// A port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The body of GET `url`, with curl.
fn get(url: &str) -> String {
    let out = Command::new("curl").args(["-s", "--max-time", "10", url]).output().expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The HTTP status of GET `url`.
fn status(url: &str) -> u16 {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", url])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0)
}

/// The sum of a family's series in a /metrics page whose line has `with` in it.
fn sample(page: &str, name: &str, with: &str) -> f64 {
    page.lines()
        .filter(|l| {
            !l.starts_with('#') && l.split(['{', ' ']).next() == Some(name) && l.contains(with)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A thread blocked reading a pipe that nobody writes until it is dropped:
/// one second of waiting every second, in a function of its own.
struct Blocked {
    workload: Option<Workload>,
    write_end: i32,
}

#[inline(never)]
fn tw_served_block(fd: i32) {
    let mut b = [0u8; 1];
    // SAFETY: reads into a local buffer from a pipe this test owns.
    unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) };
    std::hint::black_box(b);
}

impl Blocked {
    fn start(name: &str) -> Blocked {
        let mut fds = [0i32; 2];
        // SAFETY: fds is a valid array of two ints.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let read_end = fds[0];
        let w = Workload::spawn(name, move || {
            tw_served_block(read_end);
            // SAFETY: this thread owns the read end from here.
            unsafe { libc::close(read_end) };
        });
        w.go();
        until_reading(w.tid);
        Blocked { workload: Some(w), write_end: fds[1] }
    }

    fn tid(&self) -> String {
        self.workload.as_ref().unwrap().tid.to_string()
    }
}

impl Drop for Blocked {
    fn drop(&mut self) {
        // SAFETY: writes one byte to, then closes, the pipe this test owns.
        unsafe {
            libc::write(self.write_end, b"x".as_ptr().cast(), 1);
            libc::close(self.write_end);
        }
        if let Some(w) = self.workload.take() {
            w.join();
        }
    }
}

/// A running `topwaits serve`, killed if a failed assertion leaves it running.
struct Served(Option<Tracer>);

impl Served {
    fn head(&self) -> &str {
        &self.0.as_ref().unwrap().stderr_head
    }

    fn pid(&self) -> u32 {
        self.0.as_ref().unwrap().child.id()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut t) = self.0.take() {
            let _ = t.child.kill();
            let _ = t.child.wait();
        }
    }
}

/// Starts `topwaits serve ARGS` and waits until it serves.
fn serve(args: &[&str]) -> Served {
    let argv: Vec<&str> = ["serve"].into_iter().chain(args.iter().copied()).collect();
    Served(Some(Tracer::start_until(&argv, &[], "Serving")))
}

/// Ends a serve with SIGTERM: it exits 0 and says it stopped.
fn stop(mut s: Served) -> Finished {
    let t = s.0.take().unwrap();
    t.signal(libc::SIGTERM);
    let f = t.finish();
    assert!(
        f.status.success(),
        "serve did not exit cleanly on SIGTERM: {}\n{}",
        f.status,
        f.stderr
    );
    assert!(f.stderr.contains("serve: SIGTERM; stopped"), "{}", f.stderr);
    f
}

/// A Prometheus instant query's single value.
fn promql(api: &str, query: &str) -> Option<f64> {
    let out = Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "10",
            "-G",
            &format!("{api}/api/v1/query"),
            "--data-urlencode",
            &format!("query={query}"),
        ])
        .output()
        .expect("curl");
    let doc: Value = serde_json::from_slice(&out.stdout).ok()?;
    let result = doc["data"]["result"].as_array()?;
    assert!(result.len() <= 1, "{query}: {doc}");
    result.first()?["value"][1].as_str()?.parse().ok()
}

/// The Prometheus of the distribution scrapes serve every second; the rate of
/// a thread that is blocked the whole time is one second a second, and a
/// profile fetched by `go tool pprof` holds the seconds it asked for, named.
#[test]
fn prometheus_and_go_tool_pprof_read_what_serve_exposes() {
    require_bpf!();
    let missing = ["prometheus", "curl", "go"]
        .iter()
        .find(|c| !installed(c))
        .map(|c| format!("{c} is not installed"));
    if !present(
        module_path!(),
        "prometheus, curl and go (cargo xtask setup installs them)",
        missing,
    ) {
        return;
    }
    let blocked = Blocked::start("tw-served");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let t = serve(&["--listen", &port.to_string(), "-t", &blocked.tid()]);
    assert!(t.head().contains(&format!("{base}/metrics")), "{}", t.head());

    let dir = std::env::temp_dir().join(format!("tw-prom-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: topwaits\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    )
    .unwrap();
    let prom_port = free_port();
    let api = format!("http://127.0.0.1:{prom_port}");
    let _prometheus = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts"),
    );
    let scraping = Instant::now();

    // Meanwhile: a 3 s profile over HTTP, as `go tool pprof` fetches it.
    let pprof_dir = dir.join("pprof");
    std::fs::create_dir_all(&pprof_dir).unwrap();
    let out = Command::new("go")
        .args(["tool", "pprof", "-symbolize=none", "-top", "-unit=ms"])
        .arg(format!("{base}/debug/pprof/offcpu?seconds=3"))
        .env("PPROF_TMPDIR", &pprof_dir)
        .env("HOME", &dir)
        .output()
        .expect("go runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "go tool pprof failed: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.lines().any(|l| l.trim() == "Type: off_cpu"), "{text}");
    // Whole steps of 1 s from the request on: three of them, give or take a
    // late drain on a busy machine.
    let span: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("Duration: ")?.split(['s', ',']).next()?.parse().ok())
        .unwrap_or_else(|| panic!("no duration in {text}"));
    assert!((2.9..=3.5).contains(&span), "the profile spans the seconds asked for: {text}");
    let shown: f64 = text
        .lines()
        .find_map(|l| l.split("% of ").nth(1)?.strip_suffix("ms total")?.parse().ok())
        .unwrap_or_else(|| panic!("no total in {text}"));
    let share = shown / (span * 1000.0);
    assert!(
        (0.95..=1.05).contains(&share),
        "one blocked thread waits all of the {span} s: {shown} ms: {text}"
    );
    assert!(text.contains("tw_served_block"), "{text}");
    assert_eq!(
        status(&format!("{base}/debug/pprof/offwake?seconds=1")),
        404,
        "no wakers without -w"
    );
    assert_eq!(status(&format!("{base}/debug/pprof/offcpu?seconds=0")), 400);
    assert_eq!(status(&format!("{base}/nothing")), 404);

    // Prometheus: one second a second, labelled by comm and wait kind, over a
    // window its scrapes fill (a series younger than the window reads low).
    while promql(&api, "up{job=\"topwaits\"}") != Some(1.0) {
        assert!(scraping.elapsed() < Duration::from_secs(30), "Prometheus never scraped serve");
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_secs(13));
    let rate = promql(
        &api,
        "sum(rate(topwaits_offcpu_seconds_total{comm=\"tw-served\",what=\"pipe\"}[10s]))",
    );
    let rate = rate.unwrap_or_else(|| {
        panic!("no series of tw-served; /metrics:\n{}", get(&format!("{base}/metrics")))
    });
    assert!(
        (0.9..=1.1).contains(&rate),
        "a thread blocked throughout waits 1 s a second, Prometheus says {rate}"
    );
    let page = get(&format!("{base}/metrics"));
    assert!(sample(&page, "process_resident_memory_bytes", "") > 0.0, "{page}");
    assert!(sample(&page, "topwaits_drains_total", "") >= 13.0, "{page}");
    stop(t);
    let left = programs_left_after_exit();
    assert!(left.is_empty(), "serve left programs loaded after SIGTERM: {left:?}");
    drop(blocked);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The receiver's JSON lines, read as they come.
struct Receiver {
    _child: Killed,
    lines: std::sync::mpsc::Receiver<Value>,
}

impl Receiver {
    fn start(port: u16) -> Receiver {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/tools/otlp_receive.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(serde_json::from_str(&line).unwrap_or(Value::String(line)));
            }
        });
        let first = rx.recv_timeout(Duration::from_secs(20)).expect("the receiver starts");
        assert_eq!(first["listening"], port, "{first}");
        Receiver { _child: Killed(child), lines: rx }
    }
}

fn otlp_reader() -> bool {
    let have = Command::new("python3")
        .args([
            "-c",
            "import opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    present(
        module_path!(),
        "opentelemetry-proto",
        (!have).then(|| "python3 has no opentelemetry-proto; run cargo xtask setup".into()),
    )
}

/// A receiver that comes up late still gets every interval (they were
/// queued), each parsed by OpenTelemetry's classes: the blocked thread's
/// off-CPU time is its profile's duration, in its own function, with what it
/// waited for and its waker as attributes.
#[test]
fn otlp_profiles_reach_a_receiver_that_comes_up_late() {
    require_bpf!();
    if !otlp_reader() {
        return;
    }
    let blocked = Blocked::start("tw-otlp");
    let (port, rport) = (free_port(), free_port());
    let pid = std::process::id();
    let t = serve(&[
        "--listen",
        &port.to_string(),
        "-p",
        &pid.to_string(),
        "-w",
        "--otlp-endpoint",
        &format!("http://127.0.0.1:{rport}"),
        "--otlp-interval",
        "2",
    ]);
    assert!(t.head().contains("cannot be reached now"), "the receiver is down: {}", t.head());
    let started = now_wall_ns() as u64;
    std::thread::sleep(Duration::from_secs(5));
    let failed = sample(
        &get(&format!("http://127.0.0.1:{port}/metrics")),
        "topwaits_otlp_profiles_total",
        "result=\"failed\"",
    );
    assert!(failed >= 1.0, "posts to a receiver that is down are counted as failed");
    let receiver = Receiver::start(rport);
    let mut requests = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while requests.len() < 4 && Instant::now() < deadline {
        if let Ok(r) = receiver.lines.recv_timeout(Duration::from_secs(1)) {
            requests.push(r);
        }
    }
    let f = stop(t);
    assert!(requests.len() >= 4, "four intervals of 2 s in 30 s: {requests:?}\n{}", f.stderr);
    let mut earliest = u64::MAX;
    for r in &requests {
        let resources = r["resources"].as_array().unwrap();
        let ours = resources
            .iter()
            .find(|x| x["resource"]["process.pid"].as_i64() == Some(pid.into()))
            .unwrap_or_else(|| panic!("no resource of pid {pid}: {r}"));
        assert!(ours["resource"]["host.name"].as_str().is_some_and(|h| !h.is_empty()), "{ours}");
        let profiles = ours["profiles"].as_array().unwrap();
        let off = profiles
            .iter()
            .find(|p| p["type"] == "off_cpu")
            .unwrap_or_else(|| panic!("no off_cpu profile: {ours}"));
        assert_eq!(off["unit"], "nanoseconds");
        let duration = off["duration_nano"].as_u64().unwrap();
        earliest = earliest.min(off["time_unix_nano"].as_u64().unwrap());
        let mine: Vec<&Value> = off["samples"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["attributes"]["thread.name"] == "tw-otlp")
            .collect();
        let waited: u64 = mine.iter().map(|s| s["values"][0].as_u64().unwrap()).sum();
        let share = waited as f64 / duration as f64;
        assert!(
            (0.9..=1.1).contains(&share),
            "blocked throughout: {waited} ns of {duration}: {mine:?}"
        );
        assert!(
            mine.iter().any(|s| s["frames"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f.as_str().is_some_and(|f| f.ends_with("tw_served_block")))),
            "{mine:?}"
        );
        assert!(mine.iter().all(|s| s["attributes"]["topwaits.wait.kind"] == "pipe"), "{mine:?}");
        assert!(
            mine.iter().all(|s| s["attributes"]["topwaits.waker"].is_string()),
            "-w names a waker: {mine:?}"
        );
        let counts = profiles
            .iter()
            .find(|p| p["type"] == "waits")
            .unwrap_or_else(|| panic!("no waits profile: {ours}"));
        assert_eq!(
            counts["samples"].as_array().unwrap().len(),
            off["samples"].as_array().unwrap().len()
        );
    }
    assert!(
        earliest < started + 2_000_000_000,
        "the intervals before the receiver came up were kept and sent"
    );
    drop(blocked);
}

/// A busy port ends serve at once with one line that says what to do; so
/// does an endpoint it cannot use.
#[test]
fn a_busy_port_or_a_bad_endpoint_is_a_one_line_error() {
    require_bpf!();
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let f = run(&["serve", "--listen", &port]);
    assert!(!f.status.success());
    let err = f.stderr.trim();
    assert!(
        err.contains("cannot listen on 127.0.0.1:")
            && err.contains("--listen")
            && !err.contains('\n'),
        "{err}"
    );
    let f = run(&["serve", "--otlp-endpoint", "ftp://127.0.0.1:4318"]);
    assert_eq!(f.status.code(), Some(2), "{}", f.stderr);
    assert_eq!(f.stderr.trim().lines().count(), 1, "{}", f.stderr);
}

/// The resident memory of `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")?.trim().strip_suffix(" kB")?.trim().parse::<u64>().ok()
        })
        .unwrap_or(0)
        * 1024
}

/// Ninety seconds of processes and threads coming and going, with stack maps
/// small enough to fill: stacks age out, the symbolizer forgets the dead,
/// and memory stays flat, well under 100 MB.
///
/// Flat is judged by the floor: serve keeps what it frees in the heap for
/// reuse and gives it back every few seconds, so a single reading swings by
/// 15 MB or more with where it falls in that cycle. The least resident size in
/// a window of ten seconds is what serve still holds after giving back; a leak
/// raises it.
#[test]
fn ninety_seconds_of_churn_keep_memory_flat() {
    require_bpf!();
    let port = free_port();
    let t = serve(&["--listen", &port.to_string(), "-w", "--stack-storage-size", "1024"]);
    let pid = t.pid();
    let start = Instant::now();
    let mut samples: Vec<(Duration, u64)> = Vec::new();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_secs(90) {
        // New processes (each its own address space, so their stacks are new)
        // and named threads that live a moment.
        let mut kids: Vec<Child> = (0..4)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "sleep 0.01; echo x | cat >/dev/null"])
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let name = format!("tw-churn-{}", n % 1000);
        std::thread::Builder::new()
            .name(name)
            .spawn(|| nanosleep(Duration::from_millis(5)))
            .unwrap()
            .join()
            .unwrap();
        kids.iter_mut().for_each(|k| {
            let _ = k.wait();
        });
        n += 1;
        samples.push((start.elapsed(), rss(pid)));
        std::thread::sleep(Duration::from_millis(50));
    }
    let page = get(&format!("http://127.0.0.1:{port}/metrics"));
    stop(t);
    // The least resident size over a span: right after one of the trims that
    // each sweep (every 5 s) makes. Between them the heap swings by a third, so
    // each span holds five sweeps, and a leak shows as a floor that rises.
    let floor = |from: u64, to: u64| {
        let span = Duration::from_secs(from)..Duration::from_secs(to);
        samples.iter().filter(|(at, _)| span.contains(at)).map(|s| s.1).min().unwrap_or(0)
    };
    let most = samples.iter().map(|s| s.1).max().unwrap_or(0);
    let (at_half, at_end) = (floor(20, 45), floor(65, 90));
    let floors: Vec<u64> = (0..9).map(|k| floor(k * 10, k * 10 + 10) >> 20).collect();
    assert!(most < 100 << 20, "at most {} MB resident", most >> 20);
    assert!(
        at_half > 0 && at_end <= at_half + at_half / 10,
        "the floor of the resident size grew from {at_half} bytes (20-45 s) to {at_end} \
         (65-90 s); MB by 10 s: {floors:?}"
    );
    assert!(
        sample(&page, "topwaits_aged_total", "kind=\"stack\"") > 0.0,
        "1024 stacks filled and aged: {page}"
    );
    assert!(sample(&page, "topwaits_offcpu_seconds_total", "comm=\"tw-churn-") > 0.0, "{page}");
    eprintln!(
        "serve churn: {n} rounds, {} MB at most, floor {at_half} → {at_end} bytes, \
         MB by 10 s: {floors:?}",
        most >> 20
    );
}

/// The capabilities docs/SERVE.md's systemd unit bounds serve to, as setpriv
/// takes them: `+bpf,+perfmon,...`.
fn documented_capabilities() -> String {
    let doc =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/SERVE.md"))
            .unwrap();
    let line = doc
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("a CapabilityBoundingSet line");
    line.split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Deployed as docs/SERVE.md says, with only the capabilities it names,
/// serve still gives whole stacks, named, and says what a wait was for.
#[test]
fn the_documented_capabilities_are_enough() {
    require_bpf!();
    let missing =
        ["setpriv", "go"].iter().find(|c| !installed(c)).map(|c| format!("{c} is not installed"));
    if !present(module_path!(), "setpriv and go (cargo xtask setup installs them)", missing) {
        return;
    }
    let caps = documented_capabilities();
    assert!(caps.contains("+bpf") && caps.contains("+perfmon"), "{caps}");
    let blocked = Blocked::start("tw-capped");
    let port = free_port();
    let bounded = format!("-all,{caps}");
    let argv = [
        "--bounding-set",
        &bounded,
        BIN,
        "serve",
        "--listen",
        &port.to_string(),
        "-p",
        &std::process::id().to_string(),
    ];
    let mut child = Command::new("setpriv")
        .args(argv)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv runs");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let _child = Killed(child);
    assert!(line.starts_with("Serving"), "serve under {bounded}: {line}");
    let dir = std::env::temp_dir().join(format!("tw-caps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new("go")
        .args(["tool", "pprof", "-symbolize=none", "-traces"])
        .arg(format!("http://127.0.0.1:{port}/debug/pprof/offcpu?seconds=2"))
        .env("PPROF_TMPDIR", &dir)
        .env("HOME", &dir)
        .output()
        .expect("go runs");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    // The blocked thread's stack, kernel frames then ours, down to the thread's start.
    let trace = text
        .split("-----------+")
        .find(|t| t.contains("tw_served_block"))
        .unwrap_or_else(|| panic!("{text}"));
    for f in ["anon_pipe_read", "tw_served_block", "start_thread"] {
        assert!(trace.contains(f), "{f} missing under {bounded}: {trace}");
    }
    let page = get(&format!("http://127.0.0.1:{port}/metrics"));
    assert!(
        sample(&page, "topwaits_offcpu_seconds_total", "comm=\"tw-capped\",what=\"pipe\"") > 0.0,
        "{page}"
    );
    drop(blocked);
}
