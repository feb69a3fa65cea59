//! Kernel tests of what each wait was for (`waits_on`), on workloads whose answer
//! is known: a contended pthread mutex and a condition variable (holder.c), a
//! sleep with the time it asked for, `dd oflag=dsync` on a file, a loopback TCP
//! reader, and mmap_lock contention (mmaplock.c); and `--by what` and `--what`.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::programs::{compile, start, Started};
use common::*;
use serde_json::Value;

fn comm(r: &Value) -> &str {
    r["comm"].as_str().unwrap_or("")
}

fn kind(r: &Value) -> &str {
    r["waits_on"]["kind"].as_str().unwrap_or("")
}

fn ns(r: &Value) -> u64 {
    r["total_ns"].as_u64().unwrap()
}

/// The share of `comm`'s waiting whose label passes `pred`.
fn share_of(doc: &Value, comm_is: &str, pred: impl Fn(&Value) -> bool) -> f64 {
    let mine: Vec<&Value> =
        doc["records"].as_array().unwrap().iter().filter(|r| comm(r) == comm_is).collect();
    let all: u64 = mine.iter().map(|r| ns(r)).sum();
    let hit: u64 = mine.iter().filter(|r| pred(&r["waits_on"])).map(|r| ns(r)).sum();
    assert!(all > 0, "no waits of {comm_is}: {doc:#}");
    hit as f64 / all as f64
}

#[test]
fn mutex_condvar_and_sleep_waits_say_what_they_waited_for() {
    require_bpf!();
    let w = start(&compile("holder"));
    let pid = w.0.id().to_string();
    let doc = json(&run(&["-p", &pid, "--json", "2"]));
    // The workers wait on one mutex, named by its address.
    let mutexes: Vec<&Value> = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| comm(r) == "tw_worker" && kind(r) == "mutex")
        .collect();
    assert!(!mutexes.is_empty(), "{doc:#}");
    let addr = &mutexes[0]["waits_on"]["addr"];
    assert!(mutexes.iter().all(|r| &r["waits_on"]["addr"] == addr), "one mutex: {mutexes:#?}");
    assert!(
        mutexes[0]["waits_on"]["description"].as_str().unwrap().starts_with("mutex 0x"),
        "{:#}",
        mutexes[0]
    );
    assert!(share_of(&doc, "tw_worker", |w| w["kind"] == "mutex") > 0.6, "{doc:#}");
    // The pool waits on a condition variable.
    let cv =
        share_of(&doc, "tw_pool", |w| w["kind"] == "futex" && w["lock"] == "condition variable");
    assert!(cv > 0.95, "{cv}: {doc:#}");
    // The holder's sleep asked for 2 ms.
    let sleeps: Vec<&Value> = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| comm(r) == "tw_holder" && kind(r) == "sleep")
        .collect();
    assert!(!sleeps.is_empty(), "{doc:#}");
    assert!(sleeps.iter().all(|r| r["waits_on"]["requested_ns"] == 2_000_000), "{sleeps:#?}");
    // --by what: the mutex and the condition variable are each one record.
    let by = json(&run(&["-p", &pid, "--json", "--by", "what", "1"]));
    let labels: Vec<&str> = by["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["waits_on"]["label"].as_str().unwrap_or(""))
        .collect();
    let mut unique = labels.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), labels.len(), "one record per label: {labels:?}");
    assert!(
        labels.iter().any(|l| l.starts_with("mutex 0x"))
            && labels.iter().any(|l| l.starts_with("condition variable 0x")),
        "{labels:?}"
    );
    // --what: the label is the root frame of each folded line.
    let folded = run(&["-p", &pid, "-f", "--what", "1"]);
    assert!(folded.status.success(), "{}", folded.stderr);
    assert!(
        folded.stdout.lines().any(|l| l.starts_with("[mutex_0x") && l.contains(";tw_worker;")),
        "{}",
        folded.stdout
    );
    assert!(folded.stdout.lines().all(|l| l.starts_with('[')), "{}", folded.stdout);
}

/// The block device a path lives on, as /sys names it.
fn device_of(path: &str) -> String {
    use std::os::unix::fs::MetadataExt;
    topwaits::analysis::what::procfs::device_name(std::fs::metadata(path).unwrap().dev())
        .unwrap_or_default()
}

#[test]
fn dd_with_dsync_waits_on_the_disk_and_its_file() {
    require_bpf!();
    let file = format!("{}/labels-dd.out", env!("CARGO_TARGET_TMPDIR"));
    let of = format!("of={file}");
    let dd = Started(
        Command::new("dd")
            .args(["if=/dev/zero", &of, "bs=4k", "count=1000000", "oflag=dsync"])
            .stderr(Stdio::null())
            .spawn()
            .expect("dd starts"),
        String::new(),
    );
    std::thread::sleep(Duration::from_millis(200));
    let device = device_of(&file);
    let doc = json(&run(&["-p", &dd.0.id().to_string(), "--json", "2"]));
    drop(dd);
    let _ = std::fs::remove_file(&file);
    let disk = share_of(&doc, "dd", |w| w["kind"] == "disk");
    assert!(disk > 0.8, "{disk}: {doc:#}");
    let named = share_of(&doc, "dd", |w| w["kind"] == "disk" && w["file"] == file.as_str());
    assert!(named > 0.5, "{named}: {doc:#}");
    if !device.is_empty() {
        assert!(
            share_of(&doc, "dd", |w| w["device"] == device.as_str()) > 0.5,
            "{device}: {doc:#}"
        );
    }
}

#[test]
fn a_loopback_tcp_reader_waits_on_its_socket_and_port() {
    require_bpf!();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut writer = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        tx.send(tid()).unwrap();
        let mut buf = [0u8; 16];
        while s.read(&mut buf).unwrap_or(0) > 0 {}
    });
    let reader_tid = rx.recv().unwrap();
    // Fed until the trace has ended: its socket is open when topwaits resolves it.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let feeder = std::thread::spawn(move || {
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
            if writer.write_all(b"x").is_err() {
                break;
            }
        }
    });
    let doc = json(&run(&["-t", &reader_tid.to_string(), "--json", "1.5"]));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    feeder.join().unwrap();
    reader.join().unwrap();
    let records = doc["records"].as_array().unwrap();
    let sockets: Vec<&Value> = records.iter().filter(|r| kind(r) == "socket").collect();
    let total: u64 = records.iter().map(ns).sum();
    let on_socket: u64 = sockets.iter().map(|r| ns(r)).sum();
    assert!(on_socket as f64 > 0.9 * total as f64, "{doc:#}");
    let port = format!("127.0.0.1:{port}");
    assert!(
        sockets.iter().all(|r| r["waits_on"]["socket"].as_str().unwrap_or("").contains(&port)),
        "{port}: {sockets:#?}"
    );
}

#[test]
fn mmap_lock_contention_shows_as_a_kernel_rwsem() {
    require_bpf!();
    let w = start(&compile("mmaplock"));
    let doc = json(&run(&["-p", &w.0.id().to_string(), "--json", "2"]));
    let locks: Vec<&Value> = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            kind(r) == "kernel_lock"
                && r["waits_on"]["lock"] == "rwsem"
                && r["waits_on"]["name"] == "mmap_lock"
        })
        .collect();
    let read = locks.iter().any(|r| comm(r) == "tw_faulter" && r["waits_on"]["mode"] == "read");
    let write = locks.iter().any(|r| r["waits_on"]["mode"] == "write");
    assert!(read && write, "faulters read and mappers write the mmap_lock: {doc:#}");
}

/// Sleeps `n` times until 10 ms after it last woke, as CPython's time.sleep does
/// (clock_nanosleep with TIMER_ABSTIME).
#[inline(never)]
fn tw_sleep_to_deadlines(n: usize) {
    for _ in 0..n {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: plain libc calls on a local timespec.
        unsafe {
            libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t);
            t.tv_nsec += 10_000_000;
            if t.tv_nsec >= 1_000_000_000 {
                t.tv_sec += 1;
                t.tv_nsec -= 1_000_000_000;
            }
            while libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &t,
                std::ptr::null_mut(),
            ) == libc::EINTR
            {}
        }
    }
}

#[test]
fn sleeps_to_a_deadline_are_one_record_that_says_so() {
    require_bpf!();
    let sleeper = Workload::spawn("tw-abs-sleeper", || tw_sleep_to_deadlines(60));
    let tracer = Tracer::start_learned(&["--json", "-t", &sleeper.tid.to_string(), "1.5"]);
    sleeper.go();
    let doc = json(&tracer.finish());
    sleeper.join();
    let sleeps: Vec<&Value> = calls_in(&doc, "tw_sleep_to_deadlines")
        .into_iter()
        .filter(|r| kind(r) == "sleep")
        .collect();
    // Each deadline less the time of the switch differs by however late the
    // thread reached it: the time left is kept as at most 1, 2 or 5 x 10^k,
    // so they stay one record, said to be to a deadline.
    assert_eq!(sleeps.len(), 1, "{sleeps:#?}");
    assert_eq!(sleeps[0]["waits_on"]["requested_ns"], 10_000_000, "{:#}", sleeps[0]);
    assert_eq!(sleeps[0]["waits_on"]["to_deadline"], true, "{:#}", sleeps[0]);
    assert!(sleeps[0]["count"].as_u64().unwrap() >= 20, "{:#}", sleeps[0]);
}
