//! Kernel tests of Go programs, stripped as distributions ship them: their
//! functions named from Go's own function table and their stacks unwound by
//! the frame sizes it keeps. On Debian's etcd under `ab`, the WAL's fsync as
//! topwaits sees it, blocked and running, against etcd's own histogram of it.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// etcd's metric `name`, summed over its series.
fn metric(url: &str, name: &str) -> f64 {
    let out = Command::new("curl").args(["-s", &format!("{url}/metrics")]).output().expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Whether a record's user stack passes through `f`.
fn through(r: &Value, f: &str) -> bool {
    stack_names(&r["user_stack"]).iter().any(|n| n.split(" (").next() == Some(f))
}

#[test]
fn debians_etcd_is_named_whole_and_its_wal_sync_agrees_with_its_own_metric() {
    require_bpf!();
    let missing = ["etcd", "ab", "curl"]
        .iter()
        .find(|c| !installed(c))
        .map(|c| format!("{c} is not installed"));
    if !present(
        module_path!(),
        "etcd and ab (apt etcd-server apache2-utils; cargo xtask setup installs them)",
        missing,
    ) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tw-etcd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = 30_000 + std::process::id() % 10_000;
    let url = format!("http://127.0.0.1:{port}");
    let etcd = Killed(
        Command::new("etcd")
            .args([
                "--data-dir",
                &dir.join("data").to_string_lossy(),
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{}", port + 1)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts"),
    );
    let t0 = Instant::now();
    while metric(&url, "etcd_server_has_leader") < 1.0 {
        assert!(t0.elapsed() < Duration::from_secs(20), "etcd did not get ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    let body = dir.join("put.json");
    std::fs::write(&body, r#"{"key":"dHc=","value":"d2FpdHM="}"#).unwrap();
    let _load = Killed(
        Command::new("ab")
            .args([
                "-q",
                "-t",
                "20",
                "-n",
                "10000000",
                "-c",
                "8",
                "-p",
                &body.to_string_lossy(),
                "-T",
                "application/json",
            ])
            .arg(format!("{url}/v3/kv/put"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ab starts"),
    );
    std::thread::sleep(Duration::from_millis(500));
    let pid = etcd.0.id().to_string();
    let tracer = Tracer::start(&["--json", "--on-cpu", "-U", "-p", &pid, "4"]);
    let before = metric(&url, "etcd_disk_wal_fsync_duration_seconds_sum");
    std::thread::sleep(Duration::from_secs(4));
    let after = metric(&url, "etcd_disk_wal_fsync_duration_seconds_sum");
    let doc = json(&tracer.finish());
    // Its goroutines parked now, read from its runtime with no symbol table:
    // found, grouped, and named.
    let blocked = json(&run(&["blocked", "-p", &pid, "--json"]));
    let go = &blocked["go_processes"][0];
    assert_eq!(go["pid"].to_string(), pid, "{blocked:#}");
    assert!(go["parked"].as_u64().unwrap() >= 20, "{blocked:#}");
    let groups = blocked["goroutines"].as_array().unwrap();
    assert!(groups.iter().any(|g| g["waits_on"] == "select"), "{blocked:#}");
    // (A goroutine assisting the GC parks from the system stack: its saved
    // pc is the switch to it, not gopark.)
    let parked = |g: &&Value| {
        g["waits_on"].as_str().is_some_and(|w| w.starts_with("GC"))
            || stack_names(&g["user_stack"])[0].starts_with("runtime.gopark")
    };
    assert!(groups.iter().all(|g| parked(&g)), "{blocked:#}");
    let _ = std::fs::remove_dir_all(&dir);
    let records = doc["records"].as_array().unwrap();
    // Named: every frame but the marks of stacks cut short.
    let frames: Vec<String> = records
        .iter()
        .flat_map(|r| stack_names(&r["user_stack"]))
        .filter(|n| !n.starts_with("[cut"))
        .collect();
    let named = frames.iter().filter(|n| !n.contains("+0x") && *n != "[unknown]").count();
    assert!(
        frames.len() > 500 && named as f64 >= 0.95 * frames.len() as f64,
        "{named} of {} frames named: {doc:#}",
        frames.len()
    );
    // Whole: stacks cut short hold little of the time.
    let ns = |r: &Value| r["total_ns"].as_u64().unwrap();
    let all: u64 = records.iter().map(ns).sum();
    let cut: u64 = records.iter().filter(|r| r["user_stack_status"] != "ok").map(ns).sum();
    assert!((cut as f64) < 0.05 * all as f64, "{cut} of {all} ns in stacks cut short");
    // The WAL's fsync: its waits and its running, against etcd's own sum.
    let sync: u64 =
        records.iter().filter(|r| through(r, "go.etcd.io/etcd/wal.(*WAL).sync")).map(ns).sum();
    let theirs = (after - before) * 1e9;
    eprintln!(
        "WAL sync over the trace: topwaits {:.3} s, etcd's own metric {:.3} s",
        sync as f64 / 1e9,
        theirs / 1e9
    );
    assert!(theirs > 0.1e9, "etcd synced its WAL for {theirs} ns only");
    assert!(
        (sync as f64 - theirs).abs() <= 0.2 * theirs,
        "topwaits {sync} ns against etcd's {theirs:.0} ns"
    );
}
