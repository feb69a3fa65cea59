//! Kernel tests of stacks a user can trust: a junk frame from a frame-pointer walk
//! never poisons the symbols of its process, and is never named; kernel stacks
//! reused without an unwind (by the same thread or from another's layout) are
//! the stacks an unwind gives.

mod common;

use std::time::Duration;

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
    // Frame-pointer walks are what can go through junk (unwind tables never do).
    let doc =
        json(&run(&["--json", "--unwind", "fp", "--open-waits", "no", "-p", &w.pid(), "1.5"]));
    let clean = records_in(&doc, "clean_sleep_inner");
    assert!(!clean.is_empty(), "the clean thread's frames are named: {doc:#}");
    let names = stack_names(&clean[0]["user_stack"]);
    assert!(
        names.contains(&"clean_thread".to_string()),
        "a return address past a call that never returns names its caller: {names:?}"
    );
    assert!(!names.iter().any(|n| n.contains("late_sleeper")), "{names:?}");
    let junky = records_in(&doc, "junk_frame_sleep");
    assert!(!junky.is_empty(), "the junk thread's own function is named: {doc:#}");
    for r in doc["records"].as_array().unwrap() {
        for f in r["user_stack"].as_array().unwrap() {
            assert_ne!(
                f["addr"].as_str(),
                Some(junk.as_str()),
                "a data address is never a frame: {r:#}"
            );
        }
    }
    assert!(
        doc["counters"]["user_stacks_cut_at_junk"].as_u64().unwrap() >= 1,
        "{}",
        doc["counters"]
    );
    // Folded output names frames as the other formats do.
    let folded = run(&["-f", "--unwind", "fp", "--open-waits", "no", "-p", &w.pid(), "1"]);
    assert!(
        folded
            .stdout
            .lines()
            .any(|l| l.contains("clean_thread;clean_sleeper_loop;clean_sleep_inner")),
        "{}",
        folded.stdout
    );
    let _ = std::fs::remove_file(&data);
}

/// With CAP_BPF and CAP_PERFMON but not CAP_SYSLOG, kernel symbol addresses read as
/// zero: topwaits says so in one line instead of printing `[unknown]` silently.
#[test]
fn hidden_kernel_symbols_are_said_in_one_line() {
    require_bpf!();
    let caps = "-all,+bpf,+perfmon";
    let out = std::process::Command::new("setpriv")
        .args([
            "--inh-caps",
            caps,
            "--ambient-caps",
            caps,
            "--bounding-set",
            caps,
            "--reuid=65534",
            BIN,
        ])
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
        assert!(
            std::env::var_os("TOPWAITS_REQUIRE_BPF").is_none(),
            "libc6-dbg is missing; cargo xtask setup installs it"
        );
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
        .filter(|r| {
            r["kernel_stack"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["symbol"].as_str().is_some_and(|s| s.contains("futex")))
        })
        .collect();
    assert!(!waits.is_empty(), "no futex waits: {doc:#}");
    for r in waits {
        let leaf = &r["user_stack"][0];
        assert_eq!(leaf["module"], "libc.so.6", "{r:#}");
        let named = leaf["symbol"]
            .as_str()
            .is_some_and(|s| s != "[unknown]" && !s.starts_with("libc.so.6+"));
        assert!(named, "the leaf in stripped libc is named: {r:#}");
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
    let with =
        Tracer::start(&["--json", "--open-waits", "no", "--leaf-callers", "-t", &tid, "1.5"]);
    let without =
        Tracer::start(&["--json", "--open-waits", "no", "--unwind", "fp", "-t", &tid, "1.5"]);
    // Unwind tables find the caller too, in its place (once the walker is).
    let cfi = Tracer::start_learned(&["--json", "--open-waits", "no", "-t", &tid, "1.5"]);
    reader.go();
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(150));
        // SAFETY: a one-byte write from a local.
        assert_eq!(unsafe { libc::write(w, [7u8].as_ptr().cast(), 1) }, 1);
    }
    reader.join();
    let (with, without, cfi) = (json(&with.finish()), json(&without.finish()), json(&cfi.finish()));
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
        assert!(
            names.get(1).is_some_and(|n| n.ends_with("tw_calls_read_directly")),
            "the leaf's caller is frame 1: {names:?}"
        );
    }
    for names in &plain {
        assert!(
            !names.iter().any(|n| n.ends_with("tw_calls_read_directly")),
            "a plain walk skips it: {names:?}"
        );
    }
    let walked = pipe_reads(&cfi);
    assert!(!walked.is_empty(), "{cfi:#}");
    for names in &walked {
        assert!(
            names.get(1).is_some_and(|n| n.ends_with("tw_calls_read_directly")),
            "unwind tables give frame 1 too: {names:?}"
        );
    }
    // SAFETY: closing the pipe's two ends.
    unsafe {
        libc::close(r);
        libc::close(w);
    }
}

/// Reads one byte from `fd`, blocking: one user call site for every read, so that
/// only the kernel stack tells a pipe wait from a socket wait. (libc's `read` keeps
/// no frame pointer, so this frame itself is skipped in the user stack.)
#[inline(never)]
fn tw_blocking_read(fd: i32) {
    let mut b = 0u8;
    // SAFETY: reads one byte into a local.
    let n = unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) };
    assert_eq!(n, 1, "read from fd {fd}");
}

/// A pipe and a Unix socket pair, as `[read end, write end]` each, closed on drop.
struct TwoSites {
    pipe: [i32; 2],
    sock: [i32; 2],
}

impl TwoSites {
    fn open() -> TwoSites {
        let (mut pipe, mut sock) = ([0i32; 2], [0i32; 2]);
        // SAFETY: plain syscalls filling local arrays.
        unsafe {
            assert_eq!(libc::pipe(pipe.as_mut_ptr()), 0);
            assert_eq!(libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sock.as_mut_ptr()), 0);
        }
        TwoSites { pipe, sock }
    }

    /// The end of the pipe (`on_pipe`) or of the socket to read from, or to write to.
    fn end(&self, on_pipe: bool, write: bool) -> i32 {
        (if on_pipe { self.pipe } else { self.sock })[write as usize]
    }

    /// Lets thread `tid`, blocked reading, have its byte.
    fn feed(&self, tid: u32, on_pipe: bool) {
        nanosleep(Duration::from_millis(3));
        // Only a read that blocked is a wait: the reader must be asleep in it.
        until_reading(tid);
        // SAFETY: writes one byte from a static.
        assert_eq!(unsafe { libc::write(self.end(on_pipe, true), b"x".as_ptr().cast(), 1) }, 1);
    }
}

impl Drop for TwoSites {
    fn drop(&mut self) {
        // SAFETY: closing fds this value opened.
        unsafe {
            for fd in self.pipe.into_iter().chain(self.sock) {
                libc::close(fd);
            }
        }
    }
}

/// Per traced thread, the reads recorded on the pipe's kernel stack and on the
/// socket's; each read's stack must be one of the two.
fn reads_by_stack(doc: &serde_json::Value, tid: u32) -> (u64, u64) {
    let (mut on_pipe, mut on_sock) = (0, 0);
    for r in
        doc["records"].as_array().unwrap().iter().filter(|r| r["tid"].as_u64() == Some(tid as u64))
    {
        let k = stack_names(&r["kernel_stack"]);
        if !k.iter().any(|f| f == "ksys_read") {
            continue;
        }
        let pipe_frame = k.iter().any(|f| f.contains("pipe_read"));
        let sock_frame = k.iter().any(|f| f.contains("unix_stream_read"));
        assert!(pipe_frame != sock_frame, "one of the two sites: {k:?}");
        let n = r["count"].as_u64().unwrap();
        if pipe_frame {
            on_pipe += n
        } else {
            on_sock += n
        }
    }
    (on_pipe, on_sock)
}

#[test]
fn kernel_stacks_reused_in_place_stay_exact() {
    require_bpf!();
    // Reads in pairs, pipe then socket: the second read of a pair can reuse the
    // first one's kernel stack, and the first of the next pair must not.
    const PAIRS: usize = 12;
    let sites = std::sync::Arc::new(TwoSites::open());
    let order: Vec<bool> = (0..PAIRS * 2).map(|i| (i / 2) % 2 == 0).collect();
    let (reads, s) = (order.clone(), sites.clone());
    let w = Workload::spawn("tw-twosites", move || {
        for on_pipe in reads {
            tw_blocking_read(s.end(on_pipe, false));
        }
    });
    let tid = w.tid.to_string();
    let tracer = Tracer::start_learned(&["--json", "--state", "1", "-t", &tid, "3"]);
    w.go();
    for &on_pipe in &order {
        sites.feed(w.tid, on_pipe);
    }
    let tid_num = w.tid;
    w.join();
    let doc = json(&tracer.finish());
    // Every read is recorded, each on its own site's stack.
    assert_eq!(doc["lost"]["unended_waits"], 0, "{doc:#}");
    assert_eq!(reads_by_stack(&doc, tid_num), (PAIRS as u64, PAIRS as u64), "{doc:#}");
    assert!(doc["counters"]["kernel_stacks_reused"].as_u64().unwrap() > 0, "{:#}", doc["counters"]);
    // Without --waker no waker stack is taken, so none is counted as reused (a
    // stray count in the waits' check once made this the number of checks).
    assert_eq!(doc["counters"]["waker_kernel_stacks_reused"], 0, "{:#}", doc["counters"]);
}

/// A layout one thread learned is checked in place by threads new to the same call
/// site: where their stack is the same (a pipe read after a pipe read) it is
/// reused, and where it differs (a socket read) it must not be.
#[test]
fn kernel_stack_layouts_shared_between_threads_stay_exact() {
    require_bpf!();
    // Thread by thread, in turn: what it reads and how often.
    // A layout learned with stale copies of return addresses in it may fail other
    // threads' checks until one of them has refined it: later threads reuse it.
    const PLAN: [(bool, u64); 10] = [
        (true, 4),
        (false, 1),
        (true, 1),
        (false, 2),
        (true, 1),
        (false, 1),
        (true, 1),
        (true, 1),
        (false, 1),
        (false, 1),
    ];
    let sites = std::sync::Arc::new(TwoSites::open());
    let workers: Vec<Workload> = PLAN
        .iter()
        .enumerate()
        .map(|(i, &(on_pipe, n))| {
            let s = sites.clone();
            Workload::spawn(&format!("tw-share-{i}"), move || {
                for _ in 0..n {
                    tw_blocking_read(s.end(on_pipe, false));
                }
            })
        })
        .collect();
    let tids: Vec<String> = workers.iter().map(|w| w.tid.to_string()).collect();
    let tracer = Tracer::start_learned(&["--json", "--state", "1", "-t", &tids.join(","), "4"]);
    let mut done = Vec::new();
    for (w, &(on_pipe, n)) in workers.into_iter().zip(&PLAN) {
        w.go();
        for _ in 0..n {
            sites.feed(w.tid, on_pipe);
        }
        done.push(w.tid);
        w.join();
    }
    let doc = json(&tracer.finish());
    assert_eq!(doc["lost"]["unended_waits"], 0, "{doc:#}");
    for (&tid, &(on_pipe, n)) in done.iter().zip(&PLAN) {
        let want = if on_pipe { (n, 0) } else { (0, n) };
        assert_eq!(reads_by_stack(&doc, tid), want, "thread {tid}: {doc:#}");
    }
    // The later threads' first reads found a layout learned by an earlier thread.
    assert!(doc["counters"]["kernel_stacks_shared"].as_u64().unwrap() > 0, "{:#}", doc["counters"]);
}
