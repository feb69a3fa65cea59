//! Kernel tests of the exports: the pprof profile read back by an independent
//! decoder and checked against the JSON report of the same trace.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// Where `cargo xtask setup` installs the test readers (npm's pprof-format).
fn test_tools() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-tools");
    let have_node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let reason = if !have_node {
        Some("node is not installed".to_string())
    } else if !dir.join("node_modules/pprof-format").exists() {
        Some(format!("{} has no pprof-format (run cargo xtask setup)", dir.display()))
    } else {
        None
    };
    present(module_path!(), "the pprof reader", reason).then_some(dir)
}

/// The profile at `path` as the independent reader decodes it.
fn decode_pprof(tools: &std::path::Path, path: &std::path::Path) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/tools/pprof_decode.js");
    let out = std::process::Command::new("node")
        .arg(script)
        .arg(tools)
        .arg(path)
        .output()
        .expect("node runs");
    assert!(out.status.success(), "the reader failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("the reader prints JSON")
}

#[inline(never)]
fn tw_pprof_sleep() {
    for _ in 0..6 {
        nanosleep(Duration::from_millis(30));
    }
    std::hint::black_box(());
}

/// A record's frames as (address, name) pairs, kernel then user, leaf first.
fn json_frames(r: &Value) -> Vec<(u64, Option<String>)> {
    ["kernel_stack", "user_stack"]
        .iter()
        .flat_map(|k| r[*k].as_array().cloned().unwrap_or_default())
        .map(|f| {
            let addr =
                u64::from_str_radix(f["addr"].as_str().unwrap().trim_start_matches("0x"), 16)
                    .unwrap();
            (addr, f["symbol"].as_str().map(str::to_string))
        })
        .collect()
}

#[test]
fn pprof_samples_agree_with_the_json_report() {
    require_bpf!();
    let Some(tools) = test_tools() else { return };
    let path = std::env::temp_dir().join(format!("tw-pprof-{}.pb.gz", std::process::id()));
    let w = Workload::spawn("tw-pprof", tw_pprof_sleep);
    let tid = w.tid.to_string();
    let tracer = Tracer::start_learned(&["--json", "--pprof", path.to_str().unwrap(), "-t", &tid]);
    w.go();
    w.join();
    tracer.signal(libc::SIGINT);
    let doc = json(&tracer.finish());
    let p = decode_pprof(&tools, &path);
    let _ = std::fs::remove_file(&path);
    let types: Vec<String> = p["sample_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t[0].as_str().unwrap().to_string())
        .collect();
    assert_eq!(types, ["off_cpu", "waits"]);
    assert_eq!(p["default_sample_type"].as_str(), Some("off_cpu"));
    // Every JSON record is one sample with the same values and frames.
    let records = doc["records"].as_array().unwrap();
    let samples = p["samples"].as_array().unwrap();
    assert_eq!(samples.len(), records.len(), "one sample per record");
    let mut by_stack: HashMap<(String, Vec<u64>), Vec<&Value>> = HashMap::new();
    for s in samples {
        let addrs = s["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["addr"].as_str().unwrap().parse().unwrap())
            .collect();
        by_stack
            .entry((s["labels"]["tid"].as_str().unwrap().to_string(), addrs))
            .or_default()
            .push(s);
    }
    for r in records {
        let frames = json_frames(r);
        let key = (r["tid"].to_string(), frames.iter().map(|f| f.0).collect::<Vec<_>>());
        let s = by_stack
            .get(&key)
            .and_then(|v| v.first())
            .unwrap_or_else(|| panic!("no sample for {r:#}"));
        let values: Vec<u64> = s["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().parse().unwrap())
            .collect();
        assert_eq!(
            values,
            [r["total_ns"].as_u64().unwrap(), r["count"].as_u64().unwrap()],
            "{r:#}"
        );
        assert_eq!(s["labels"]["max_wait"].as_str().unwrap(), r["max_ns"].to_string(), "{r:#}");
        for (f, (_, name)) in s["frames"].as_array().unwrap().iter().zip(&frames) {
            match (f["name"].as_str(), name) {
                // A frame no symbol names is left for pprof's reader to name
                // from its mapping; JSON writes its module and offset.
                (None, Some(name)) => {
                    assert!(name.contains("+0x"), "{name} unnamed in pprof: {s:#}")
                }
                (pprof, Some(name)) => assert_eq!(pprof, Some(name.as_str()), "{s:#}"),
                (_, None) => {}
            }
        }
        assert_eq!(s["labels"]["comm"], r["comm"]);
        assert_eq!(s["labels"]["pid"].as_str().unwrap(), r["tgid"].to_string());
    }
    // The sleeps, with the test binary's frames mapped to its file and build id.
    let sleep = samples
        .iter()
        .find(|s| {
            s["frames"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["name"].as_str().is_some_and(|n| n.ends_with("tw_pprof_sleep")))
        })
        .unwrap_or_else(|| panic!("no sample of tw_pprof_sleep: {p:#}"));
    // Six sleeps; a spurious wakeup can cut one in two.
    let waits: u64 = sleep["values"][1].as_str().unwrap().parse().unwrap();
    assert!((6..=8).contains(&waits), "six sleeps: {sleep:#}");
    let exe = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
    let size = std::fs::metadata(&exe).unwrap().len();
    let own = sleep["frames"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"].as_str().is_some_and(|n| n.ends_with("tw_pprof_sleep")))
        .unwrap();
    assert_eq!(own["file"].as_str(), exe.to_str(), "{own:#}");
    let id = own["build_id"].as_str().unwrap();
    assert!(id.len() >= 16 && id.chars().all(|c| c.is_ascii_hexdigit()), "build id {id:?}");
    let off: u64 = own["file_offset"].as_str().unwrap().parse().unwrap();
    assert!(off > 0 && off < size, "file offset {off} inside the {size}-byte file");
}

/// `go tool pprof` (Debian's golang-go, installed by `cargo xtask setup`), the
/// reader most users will open the file with.
fn go_pprof() -> bool {
    let have = std::process::Command::new("go")
        .args(["tool", "-n", "pprof"])
        .output()
        .is_ok_and(|o| o.status.success());
    present(
        module_path!(),
        "go tool pprof",
        (!have).then(|| "go (golang-go) is not installed; run cargo xtask setup".to_string()),
    )
}

#[inline(never)]
fn tw_go_pprof_sleep() {
    for _ in 0..5 {
        nanosleep(Duration::from_millis(40));
    }
    std::hint::black_box(());
}

/// Regression: with -w the last sample type (run-queue time) was what `go tool
/// pprof` showed, and `max_wait` was a value that pprof summed into nonsense.
#[test]
fn go_tool_pprof_shows_the_off_cpu_time_by_default_with_the_right_total() {
    require_bpf!();
    if !go_pprof() {
        return;
    }
    let path = std::env::temp_dir().join(format!("tw-gopprof-{}.pb.gz", std::process::id()));
    let w = Workload::spawn("tw-gopprof", tw_go_pprof_sleep);
    let tid = w.tid.to_string();
    let tracer = Tracer::start(&["--json", "-w", "--pprof", path.to_str().unwrap(), "-t", &tid]);
    w.go();
    w.join();
    tracer.signal(libc::SIGINT);
    let doc = json(&tracer.finish());
    let total: u64 =
        doc["records"].as_array().unwrap().iter().map(|r| r["total_ns"].as_u64().unwrap()).sum();
    assert!(total >= 200_000_000, "five 40 ms sleeps: {total} ns");
    let out = std::process::Command::new("go")
        .args(["tool", "pprof", "-symbolize=none", "-top", "-unit=ns"])
        .arg(&path)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("go runs");
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "go tool pprof failed: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.lines().any(|l| l.trim() == "Type: off_cpu"), "{text}");
    let shown: u64 = text
        .lines()
        .find_map(|l| l.split("% of ").nth(1)?.strip_suffix("ns total")?.parse().ok())
        .unwrap_or_else(|| panic!("no total in {text}"));
    assert_eq!(shown, total, "{text}");
    assert!(text.contains("tw_go_pprof_sleep"), "{text}");
}

#[inline(never)]
fn tw_record_sleep() {
    for _ in 0..4 {
        nanosleep(Duration::from_millis(25));
    }
    std::hint::black_box(());
}

/// A child process that sleeps in a known function and exits before the trace ends.
#[inline(never)]
fn tw_record_child() {
    nanosleep(Duration::from_millis(60));
    std::hint::black_box(());
}

#[test]
fn record_then_report_gives_the_same_json_without_root() {
    require_bpf!();
    let dir = std::env::temp_dir();
    let file = dir.join(format!("tw-record-{}.twr", std::process::id()));
    let w = Workload::spawn("tw-record", tw_record_sleep);
    // System-wide, so that the forked child is traced too.
    let tracer = Tracer::start(&["record", "-o", file.to_str().unwrap(), "--json", "-m", "1000"]);
    w.go();
    // SAFETY: the child only sleeps and _exits, both async-signal-safe.
    let child = unsafe { libc::fork() };
    if child == 0 {
        tw_record_child();
        unsafe { libc::_exit(0) };
    }
    unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
    w.join();
    tracer.signal(libc::SIGINT);
    let direct = tracer.finish();
    let doc = json(&direct);
    assert!(direct.stderr.contains(&format!("Wrote {}", file.display())), "{}", direct.stderr);
    assert!(!records_in(&doc, "tw_record_sleep").is_empty(), "the trace saw the sleeps: {doc:#}");
    // Read back by an unprivileged user: no BPF, no /proc of the traced process.
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            BIN,
            "report",
        ])
        .arg(&file)
        .arg("--json")
        .output()
        .expect("setpriv (util-linux) is needed");
    assert!(out.status.success(), "report failed: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        direct.stdout,
        "report prints the trace's JSON"
    );
    // The forked child, gone before the report, keeps its names.
    let child_recs: Vec<&Value> = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["tgid"].as_u64() == Some(child as u64))
        .collect();
    assert!(
        child_recs
            .iter()
            .any(|r| stack_names(&r["user_stack"]).iter().any(|n| n.ends_with("tw_record_child"))),
        "the exited child's sleep is named: {child_recs:#?}"
    );
    // Other views of the same file.
    let top = run(&["report", file.to_str().unwrap(), "-n", "0"]);
    assert!(
        top.status.success() && top.stdout.contains("tw_record_sleep"),
        "{}\n{}",
        top.stdout,
        top.stderr
    );
    let folded = run(&["report", file.to_str().unwrap(), "-f"]);
    assert!(
        folded.stdout.lines().any(|l| l.starts_with("tw-record;") && l.contains("tw_record_sleep")),
        "{}",
        folded.stdout
    );
    let _ = std::fs::remove_file(&file);
}

#[test]
fn report_refuses_what_is_not_a_record_in_one_line() {
    let dir = std::env::temp_dir();
    let file = dir.join(format!("tw-notrecord-{}.twr", std::process::id()));
    std::fs::write(&file, b"{\"format\": \"topwaits-record\"}").unwrap();
    let out = run(&["report", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("not a topwaits record file"), "{}", out.stderr);
    let missing = run(&["report", "/nonexistent/x.twr"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(missing.stderr.contains("cannot open /nonexistent/x.twr"), "{}", missing.stderr);
    let _ = std::fs::remove_file(&file);
}

/// One byte from `fd`. Its own frame: a frame-pointer walk from libc's frameless
/// `read` skips the caller of `read`, so the function to name is one level up.
#[inline(never)]
fn read_byte(fd: i32) {
    let mut b = [0u8; 1];
    unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) };
    std::hint::black_box(b);
}

#[inline(never)]
fn tw_pf_read(fd: i32) {
    for _ in 0..3 {
        read_byte(fd);
    }
    std::hint::black_box(());
}

#[test]
fn perfetto_slices_and_flows_agree_with_the_json_events() {
    require_bpf!();
    if !perfetto_reader(module_path!()) {
        return;
    }
    let path = std::env::temp_dir().join(format!("tw-perfetto-{}.pftrace", std::process::id()));
    let mut fds = [0i32; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (rfd, wfd) = (fds[0], fds[1]);
    let reader = Workload::spawn("tw-pf-reader", move || tw_pf_read(rfd));
    let writer = Workload::spawn("tw-pf-writer", move || {
        for _ in 0..3 {
            nanosleep(Duration::from_millis(40));
            unsafe { libc::write(wfd, b"x".as_ptr().cast(), 1) };
        }
    });
    let pid = std::process::id().to_string();
    let tracer = Tracer::start(&[
        "-w",
        "--events-over",
        "20000",
        "--perfetto",
        path.to_str().unwrap(),
        "--json",
        "-p",
        &pid,
    ]);
    reader.go();
    writer.go();
    let (rtid, wtid) = (reader.tid, writer.tid);
    reader.join();
    writer.join();
    tracer.signal(libc::SIGINT);
    let doc = json(&tracer.finish());
    unsafe { libc::close(rfd) };
    unsafe { libc::close(wfd) };
    let t = decode_perfetto(&path);
    let _ = std::fs::remove_file(&path);
    assert_eq!(doc["lost"]["wait_events"], 0);
    // The reader's three reads, each ended by the writer, as JSON events (its
    // wait for the go, begun before the trace, may last past the threshold
    // too: it is not one of the reads).
    let events: Vec<&Value> = doc["events"]
        .as_array()
        .expect("events with --events-over")
        .iter()
        .filter(|e| e["tid"].as_u64() == Some(rtid as u64))
        .filter(|e| stack_names(&e["user_stack"]).iter().any(|f| f.ends_with("tw_pf_read")))
        .collect();
    assert_eq!(events.len(), 3, "three long reads: {events:#?}");
    for e in &events {
        assert!(e["max_us"].as_u64().unwrap() >= 20_000);
        assert_eq!(e["waker"]["tid"].as_u64(), Some(wtid as u64), "{e:#}");
        assert!(stack_names(&e["user_stack"]).iter().any(|f| f.ends_with("tw_pf_read")), "{e:#}");
    }
    assert!(doc["counters"]["wait_events"].as_u64().unwrap() >= 3);
    // The same three waits as slices on the reader's track, with the same lengths.
    let track_of = |tid: u32| {
        t["threads"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(_, v)| v["tid"].as_u64() == Some(tid as u64))
            .map(|(k, _)| k.clone())
            .expect("a track per thread")
    };
    let (rtrack, wtrack) = (track_of(rtid), track_of(wtid));
    assert_eq!(t["threads"][&rtrack]["name"], "tw-pf-reader");
    let on = |track: &str, kind: &str| -> Vec<Value> {
        t["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["track"] == track && e["type"] == kind)
            .cloned()
            .collect()
    };
    let ts = |e: &Value| e["ts"].as_str().unwrap().parse::<u64>().unwrap();
    let (begins, ends) = (on(&rtrack, "TYPE_SLICE_BEGIN"), on(&rtrack, "TYPE_SLICE_END"));
    let reads: Vec<(Value, Value)> = begins
        .into_iter()
        .zip(ends)
        .filter(|(b, _)| {
            b["notes"]["user_stack"].as_str().is_some_and(|s| s.contains("tw_pf_read"))
        })
        .collect();
    assert_eq!(reads.len(), 3, "{t:#}");
    let mut lengths: Vec<u64> = reads.iter().map(|(b, e)| ts(e) - ts(b)).collect();
    let mut want: Vec<u64> = events.iter().map(|e| e["max_ns"].as_u64().unwrap()).collect();
    lengths.sort_unstable();
    want.sort_unstable();
    assert_eq!(lengths, want, "slice lengths are the events' lengths");
    let instants = on(&wtrack, "TYPE_INSTANT");
    for (b, e) in &reads {
        assert_eq!(b["clock"], 3, "CLOCK_MONOTONIC");
        // The first frame above libc's `read` (a helper of the test's, once the
        // stack is walked whole).
        let first_app = b["notes"]["user_stack"].as_str().unwrap().lines().nth(1).unwrap();
        assert_eq!(
            b["name"].as_str(),
            Some(first_app),
            "named by its first application frame: {b:#}"
        );
        assert!(b["notes"]["waker"].as_str().unwrap().starts_with("tw-pf-writer"), "{b:#}");
        // A flow from an instant on the writer's track, inside the slice.
        let flow = e["ends_flows"][0].as_str().expect("the slice ends a flow");
        let from = instants
            .iter()
            .find(|i| i["flows"][0] == flow)
            .expect("the flow starts on the waker's track");
        assert!(ts(from) >= ts(b) && ts(from) <= ts(e), "the wakeup lies inside the wait");
    }
}
