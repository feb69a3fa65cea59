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
    let have_node = std::process::Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    let reason = if !have_node {
        Some("node is not installed".to_string())
    } else if !dir.join("node_modules/pprof-format").exists() {
        Some(format!("{} has no pprof-format (run cargo xtask setup)", dir.display()))
    } else {
        None
    };
    match reason {
        None => Some(dir),
        Some(r) if std::env::var("TOPWAITS_REQUIRE_BPF").as_deref() == Ok("1") => panic!("the pprof reader is required in CI: {r}"),
        Some(r) => {
            eprintln!("skipped: {r}");
            None
        }
    }
}

/// The profile at `path` as the independent reader decodes it.
fn decode_pprof(tools: &std::path::Path, path: &std::path::Path) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/tools/pprof_decode.js");
    let out = std::process::Command::new("node").arg(script).arg(tools).arg(path).output().expect("node runs");
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
            let addr = u64::from_str_radix(f["addr"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
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
    let tracer = Tracer::start(&["--json", "--pprof", path.to_str().unwrap(), "-t", &tid]);
    w.go();
    w.join();
    tracer.signal(libc::SIGINT);
    let doc = json(&tracer.finish());
    let p = decode_pprof(&tools, &path);
    let _ = std::fs::remove_file(&path);
    let types: Vec<String> = p["sample_types"].as_array().unwrap().iter().map(|t| t[0].as_str().unwrap().to_string()).collect();
    assert_eq!(types, ["off_cpu", "waits", "max_wait"]);
    // Every JSON record is one sample with the same values and frames.
    let records = doc["records"].as_array().unwrap();
    let samples = p["samples"].as_array().unwrap();
    assert_eq!(samples.len(), records.len(), "one sample per record");
    let mut by_stack: HashMap<(String, Vec<u64>), Vec<&Value>> = HashMap::new();
    for s in samples {
        let addrs = s["frames"].as_array().unwrap().iter().map(|f| f["addr"].as_str().unwrap().parse().unwrap()).collect();
        by_stack.entry((s["labels"]["tid"].as_str().unwrap().to_string(), addrs)).or_default().push(s);
    }
    for r in records {
        let frames = json_frames(r);
        let key = (r["tid"].to_string(), frames.iter().map(|f| f.0).collect::<Vec<_>>());
        let s = by_stack.get(&key).and_then(|v| v.first()).unwrap_or_else(|| panic!("no sample for {r:#}"));
        let values: Vec<u64> = s["values"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().parse().unwrap()).collect();
        assert_eq!(values, [r["total_ns"].as_u64().unwrap(), r["count"].as_u64().unwrap(), r["max_ns"].as_u64().unwrap()], "{r:#}");
        for (f, (_, name)) in s["frames"].as_array().unwrap().iter().zip(&frames) {
            if let Some(name) = name {
                assert_eq!(f["name"].as_str(), Some(name.as_str()), "{s:#}");
            }
        }
        assert_eq!(s["labels"]["comm"], r["comm"]);
        assert_eq!(s["labels"]["pid"].as_str().unwrap(), r["tgid"].to_string());
    }
    // The sleeps, with the test binary's frames mapped to its file and build id.
    let sleep = samples
        .iter()
        .find(|s| s["frames"].as_array().unwrap().iter().any(|f| f["name"].as_str().is_some_and(|n| n.ends_with("tw_pprof_sleep"))))
        .unwrap_or_else(|| panic!("no sample of tw_pprof_sleep: {p:#}"));
    assert_eq!(sleep["values"][1].as_str(), Some("6"), "six sleeps: {sleep:#}");
    let exe = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
    let size = std::fs::metadata(&exe).unwrap().len();
    let own = sleep["frames"].as_array().unwrap().iter().find(|f| f["name"].as_str().is_some_and(|n| n.ends_with("tw_pprof_sleep"))).unwrap();
    assert_eq!(own["file"].as_str(), exe.to_str(), "{own:#}");
    let id = own["build_id"].as_str().unwrap();
    assert!(id.len() >= 16 && id.chars().all(|c| c.is_ascii_hexdigit()), "build id {id:?}");
    let off: u64 = own["file_offset"].as_str().unwrap().parse().unwrap();
    assert!(off > 0 && off < size, "file offset {off} inside the {size}-byte file");
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
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", BIN, "report"])
        .arg(&file)
        .arg("--json")
        .output()
        .expect("setpriv (util-linux) is needed");
    assert!(out.status.success(), "report failed: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), direct.stdout, "report prints the trace's JSON");
    // The forked child, gone before the report, keeps its names.
    let child_recs: Vec<&Value> = doc["records"].as_array().unwrap().iter().filter(|r| r["tgid"].as_u64() == Some(child as u64)).collect();
    assert!(
        child_recs.iter().any(|r| stack_names(&r["user_stack"]).iter().any(|n| n.ends_with("tw_record_child"))),
        "the exited child's sleep is named: {child_recs:#?}"
    );
    // Other views of the same file.
    let top = run(&["report", file.to_str().unwrap(), "-n", "0"]);
    assert!(top.status.success() && top.stdout.contains("tw_record_sleep"), "{}\n{}", top.stdout, top.stderr);
    let folded = run(&["report", file.to_str().unwrap(), "-f"]);
    assert!(folded.stdout.lines().any(|l| l.starts_with("tw-record;") && l.contains("tw_record_sleep")), "{}", folded.stdout);
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
