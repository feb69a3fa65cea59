//! Kernel tests of stacks a user can trust: a junk frame from a frame-pointer walk
//! never poisons the symbols of its process, and is never named.

mod common;

use common::programs::Stuck;
use common::*;

/// A thread whose frame pointer aims into a data file mapping yields a walk through
/// a data address; the other thread's records must still name their functions, and
/// no frame may sit at (or be named for) the data address.
#[cfg(target_arch = "x86_64")]
#[test]
fn a_junk_frame_never_blanks_the_symbols_of_its_process() {
    require_bpf!();
    let data = format!("{}/junk-{}.dat", env!("CARGO_TARGET_TMPDIR"), std::process::id());
    let w = Stuck::start(&["junk", &data]);
    let junk = w.hex("junk");
    let doc = json(&run(&["--json", "--open-waits", "no", "-p", &w.pid(), "1.5"]));
    let clean = records_in(&doc, "clean_sleep_inner");
    assert!(!clean.is_empty(), "the clean thread's frames are named: {doc:#}");
    let names = stack_names(&clean[0]["user_stack"]);
    assert!(names.contains(&"clean_thread".to_string()), "a return address past a call that never returns names its caller: {names:?}");
    assert!(!names.iter().any(|n| n.contains("late_sleeper")), "{names:?}");
    let junky = records_in(&doc, "junk_frame_sleep");
    assert!(!junky.is_empty(), "the junk thread's own function is named: {doc:#}");
    for r in doc["records"].as_array().unwrap() {
        for f in r["user_stack"].as_array().unwrap() {
            assert_ne!(f["addr"].as_str(), Some(junk.as_str()), "a data address is never a frame: {r:#}");
        }
    }
    assert!(doc["counters"]["user_stacks_cut_at_junk"].as_u64().unwrap() >= 1, "{}", doc["counters"]);
    // Folded output names frames as the other formats do.
    let folded = run(&["-f", "--open-waits", "no", "-p", &w.pid(), "1"]);
    assert!(folded.stdout.lines().any(|l| l.contains("clean_thread;clean_sleeper_loop;clean_sleep_inner")), "{}", folded.stdout);
    let _ = std::fs::remove_file(&data);
}

/// With CAP_BPF and CAP_PERFMON but not CAP_SYSLOG, kernel symbol addresses read as
/// zero: topwaits says so in one line instead of printing `[unknown]` silently.
#[test]
fn hidden_kernel_symbols_are_said_in_one_line() {
    require_bpf!();
    let caps = "-all,+bpf,+perfmon";
    let out = std::process::Command::new("setpriv")
        .args(["--inh-caps", caps, "--ambient-caps", caps, "--bounding-set", caps, "--reuid=65534", BIN])
        .args(with_attach(&["--json", "-K", "0.5"]))
        .output()
        .expect("setpriv (util-linux) is needed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("CAP_SYSLOG")).collect();
    assert_eq!(warnings.len(), 1, "one line naming the capability: {stderr}");
    assert!(warnings[0].starts_with("topwaits: warning: "), "{stderr}");
    // As root the addresses are visible and nothing is said.
    let root = run(&["--json", "-K", "0.5"]);
    assert!(!root.stderr.contains("CAP_SYSLOG"), "{}", root.stderr);
}

/// A condition-variable wait sleeps in glibc's internal futex code, which Debian's
/// stripped libc.so.6 does not name: the leaf frame is named from libc's separate
/// debug file (libc6-dbg, which `cargo xtask setup` installs), not `[unknown]`.
#[test]
fn stripped_libc_frames_are_named_from_its_debug_file() {
    require_bpf!();
    let dbg = std::process::Command::new("dpkg").args(["-s", "libc6-dbg"]).output();
    if !dbg.is_ok_and(|o| o.status.success()) {
        assert!(std::env::var_os("TOPWAITS_REQUIRE_BPF").is_none(), "libc6-dbg is missing; cargo xtask setup installs it");
        eprintln!("skipped: libc6-dbg (libc's debug file) is not installed");
        return;
    }
    let w = Workload::spawn("tw-condwait", || {
        let mut m: libc::pthread_mutex_t = libc::PTHREAD_MUTEX_INITIALIZER;
        let mut c: libc::pthread_cond_t = libc::PTHREAD_COND_INITIALIZER;
        for _ in 0..5 {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: a private mutex and condvar on this thread's stack, waited on
            // with a deadline 100 ms ahead.
            unsafe {
                libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts);
                ts.tv_nsec += 100_000_000;
                if ts.tv_nsec >= 1_000_000_000 {
                    ts.tv_sec += 1;
                    ts.tv_nsec -= 1_000_000_000;
                }
                libc::pthread_mutex_lock(&mut m);
                libc::pthread_cond_timedwait(&mut c, &mut m, &ts);
                libc::pthread_mutex_unlock(&mut m);
            }
        }
    });
    let tid = w.tid.to_string();
    let tracer = Tracer::start(&["--json", "--open-waits", "no", "-t", &tid, "1.5"]);
    w.go();
    w.join();
    let doc = json(&tracer.finish());
    let waits: Vec<&serde_json::Value> = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kernel_stack"].as_array().unwrap().iter().any(|f| f["symbol"].as_str().is_some_and(|s| s.contains("futex"))))
        .collect();
    assert!(!waits.is_empty(), "no futex waits: {doc:#}");
    for r in waits {
        let leaf = &r["user_stack"][0];
        assert_eq!(leaf["module"], "libc.so.6", "{r:#}");
        assert_ne!(leaf["symbol"], "[unknown]", "the leaf in stripped libc is named: {r:#}");
    }
}

/// Reads one byte from `fd`: libc's `read` keeps no frame pointer, so a plain
/// frame-pointer walk from inside it skips this function.
#[inline(never)]
fn tw_calls_read_directly(fd: i32) {
    let mut b = [0u8];
    // SAFETY: a read into a local buffer of its size.
    let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) };
    std::hint::black_box(n);
}

/// `--leaf-callers` recovers the direct caller of a frameless libc wrapper from the
/// words at the stack pointer; without it the walk skips that caller.
#[cfg(target_arch = "x86_64")]
#[test]
fn leaf_callers_name_the_caller_a_frame_pointer_walk_skips() {
    require_bpf!();
    let mut fds = [0i32; 2];
    // SAFETY: a pipe into a two-int array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (r, w) = (fds[0], fds[1]);
    let reader = Workload::spawn("tw-leafread", move || {
        for _ in 0..3 {
            tw_calls_read_directly(r);
        }
    });
    let tid = reader.tid.to_string();
    let with = Tracer::start(&["--json", "--open-waits", "no", "--leaf-callers", "-t", &tid, "1.5"]);
    let without = Tracer::start(&["--json", "--open-waits", "no", "-t", &tid, "1.5"]);
    reader.go();
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(150));
        // SAFETY: a one-byte write from a local.
        assert_eq!(unsafe { libc::write(w, [7u8].as_ptr().cast(), 1) }, 1);
    }
    reader.join();
    let (with, without) = (json(&with.finish()), json(&without.finish()));
    let pipe_reads = |doc: &serde_json::Value| -> Vec<Vec<String>> {
        doc["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| stack_names(&r["kernel_stack"]).iter().any(|f| f.contains("pipe_read")))
            .map(|r| stack_names(&r["user_stack"]))
            .collect()
    };
    let (got, plain) = (pipe_reads(&with), pipe_reads(&without));
    assert!(!got.is_empty() && !plain.is_empty(), "{with:#}\n{without:#}");
    for names in &got {
        assert!(names.get(1).is_some_and(|n| n.ends_with("tw_calls_read_directly")), "the leaf's caller is frame 1: {names:?}");
    }
    for names in &plain {
        assert!(!names.iter().any(|n| n.ends_with("tw_calls_read_directly")), "a plain walk skips it: {names:?}");
    }
    // SAFETY: closing the pipe's two ends.
    unsafe {
        libc::close(r);
        libc::close(w);
    }
}
