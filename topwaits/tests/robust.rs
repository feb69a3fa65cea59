//! Kernel tests of what production throws at a tracer: processes that exit before
//! the report, JIT code, full maps, hostile thread names, concurrent instances.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

/// Where each forked child waits.
#[inline(never)]
fn tw_child_sleep() {
    nanosleep(Duration::from_millis(50));
    std::hint::black_box(());
}

#[test]
fn exited_processes_keep_their_symbols() {
    require_bpf!();
    // Whole system, as a user chasing short-lived processes would.
    let tracer = Tracer::start(&["--json", "-m", "1000", "3"]);
    let mut children = Vec::new();
    for _ in 0..12 {
        // SAFETY: the child only sleeps and _exits, both async-signal-safe.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            tw_child_sleep();
            unsafe { libc::_exit(0) };
        }
        assert!(pid > 0, "fork failed");
        children.push(pid as u64);
        let mut status = 0;
        unsafe { libc::waitpid(pid, &mut status, 0) };
    }
    let doc = json(&tracer.finish());
    // Waits with a user stack: a child preempted while exit tears down its memory
    // (exit_mmap's cond_resched, milliseconds under load) has none left to name.
    let recs: Vec<&Value> = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            children.contains(&r["tgid"].as_u64().unwrap()) && r["user_stack_status"] != "none"
        })
        .collect();
    let total: u64 = recs.iter().map(|r| r["total_us"].as_u64().unwrap()).sum();
    let named: u64 = recs
        .iter()
        .filter(|r| stack_names(&r["user_stack"]).iter().any(|f| f.contains("tw_child_sleep")))
        .map(|r| r["total_us"].as_u64().unwrap())
        .sum();
    assert!(total >= 12 * 45_000, "children waited {total} us in all: {doc:#}");
    let share = named as f64 / total as f64;
    eprintln!("exited children: {:.1}% of {total} us attributed to tw_child_sleep", share * 100.0);
    assert!(
        share >= 0.95,
        "only {:.1}% of the exited children's wait is symbolized: {recs:#?}",
        share * 100.0
    );
}

/// Regression: a process exec'd during the trace was read at its exec, before the
/// dynamic loader had mapped its libraries, so once it exited its frames in libc
/// were `[unknown]`. Debian's `sleep` (no frame pointers: one user frame, in libc)
/// run three times, each exiting well before the trace ends.
#[test]
fn a_process_execd_and_gone_during_the_trace_keeps_its_library_frames() {
    require_bpf!();
    let tracer = Tracer::start(&["--json", "-m", "1000", "2"]);
    let mut pids = Vec::new();
    for _ in 0..3 {
        let mut child = std::process::Command::new("sleep").arg("0.2").spawn().expect("sleep runs");
        pids.push(u64::from(child.id()));
        assert!(child.wait().unwrap().success());
    }
    let doc = json(&tracer.finish());
    let recs: Vec<&Value> = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            pids.contains(&r["tgid"].as_u64().unwrap()) && r["max_us"].as_u64().unwrap() >= 150_000
        })
        .collect();
    assert_eq!(recs.len(), 3, "each sleep's 0.2 s wait: {doc:#}");
    for r in recs {
        let leaf = &r["user_stack"][0];
        assert_eq!(leaf["module"], "libc.so.6", "{r:#}");
        assert!(leaf["symbol"].as_str().is_some_and(|s| s.contains("nanosleep")), "{r:#}");
    }
}

/// The sleep that generated code calls into.
#[inline(never)]
extern "C" fn tw_jit_target() {
    nanosleep(Duration::from_millis(300));
    std::hint::black_box(());
}

#[cfg(target_arch = "x86_64")]
#[test]
fn jit_code_is_symbolized_through_the_perf_map() {
    require_bpf!();
    // push rbp; mov rbp, rsp; mov rax, imm64; call rax; pop rbp; ret
    let mut code = vec![0x55, 0x48, 0x89, 0xe5, 0x48, 0xb8];
    code.extend_from_slice(&(tw_jit_target as *const () as usize as u64).to_le_bytes());
    code.extend_from_slice(&[0xff, 0xd0, 0x5d, 0xc3]);
    let len = 4096;
    // SAFETY: a fresh anonymous mapping, written before it is executed.
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(mem, libc::MAP_FAILED);
    unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), mem.cast::<u8>(), code.len()) };
    let map_path = format!("/tmp/perf-{}.map", std::process::id());
    std::fs::write(&map_path, format!("{:x} {:x} tw_jit_function\n", mem as usize, code.len()))
        .unwrap();
    let addr = mem as usize;
    let w = Workload::spawn("tw-jit", move || {
        // SAFETY: the mapping holds the function just written, with the C ABI.
        let f: extern "C" fn() = unsafe { std::mem::transmute(addr) };
        f();
    });
    let tid = w.tid.to_string();
    let tracer = Tracer::start(&["--json", "-t", &tid, "1.5"]);
    w.go();
    w.join();
    let doc = json(&tracer.finish());
    let _ = std::fs::remove_file(&map_path);
    unsafe { libc::munmap(mem, len) };
    let recs = records_in(&doc, "tw_jit_target");
    assert_eq!(recs.len(), 1, "{doc:#}");
    let user = stack_names(&recs[0]["user_stack"]);
    let jit = user
        .iter()
        .position(|f| f == "tw_jit_function")
        .unwrap_or_else(|| panic!("no JIT frame in {user:?}"));
    let target = user.iter().position(|f| f.contains("tw_jit_target")).unwrap();
    assert!(target < jit, "the JIT frame is the caller of the target: {user:?}");
}

/// Runs a busy mixed workload (pipes, sleeps) while `args` trace the whole system.
fn busy_trace(args: &[&str]) -> Finished {
    let tracer = Tracer::start(args);
    let mut perf = std::process::Command::new("perf")
        .args(["bench", "sched", "messaging", "-g", "2", "-l", "100"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("perf (linux-perf) is needed");
    tw_known_short_sleeps(20, Duration::from_millis(2));
    perf.wait().unwrap();
    tracer.finish()
}

fn warning_lines<'a>(stderr: &'a str, needle: &str) -> Vec<&'a str> {
    stderr.lines().filter(|l| l.starts_with("topwaits: warning:") && l.contains(needle)).collect()
}

#[test]
fn a_tiny_stack_map_counts_and_reports_its_losses_and_keeps_the_time() {
    require_bpf!();
    let out = busy_trace(&["--json", "--stack-storage-size", "4", "1.5"]);
    let doc = json(&out);
    let lost = doc["lost"]["kernel_stacks"].as_u64().unwrap()
        + doc["lost"]["user_stacks"].as_u64().unwrap();
    assert!(lost > 0, "{}", doc["lost"]);
    assert_eq!(
        warning_lines(&out.stderr, "--stack-storage-size").len(),
        1,
        "one warning with the fix: {}",
        out.stderr
    );
    let missing: Vec<&Value> = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kernel_stack_status"] == "missing" || r["user_stack_status"] == "missing")
        .collect();
    assert!(!missing.is_empty(), "records with lost stacks keep their time");
    assert!(missing
        .iter()
        .all(|r| r["total_us"].as_u64().unwrap() > 0 || r["total_ns"].as_u64().unwrap() > 0));
    let folded = busy_trace(&["-f", "--stack-storage-size", "4", "1"]);
    assert!(
        folded.stdout.contains("[missing_kernel_stack]")
            || folded.stdout.contains("[missing_user_stack]"),
        "{}",
        folded.stdout
    );
}

#[test]
fn a_full_aggregate_map_is_counted_with_its_time() {
    require_bpf!();
    let out = busy_trace(&["--json", "--max-entries", "4", "1.5"]);
    let doc = json(&out);
    assert!(doc["lost"]["aggregate_full"].as_u64().unwrap() > 0, "{}", doc["lost"]);
    assert!(doc["lost"]["aggregate_full_us"].as_u64().unwrap() > 0, "{}", doc["lost"]);
    // The aggregate's records (waits still open at the end come from the per-task
    // start map, not from the aggregate, and are not in its counters).
    let closed: Vec<&Value> =
        doc["records"].as_array().unwrap().iter().filter(|r| r["open"] == false).collect();
    let full = warning_lines(&out.stderr, "did not fit into the full aggregate map");
    assert!(full.len() == 1 && full[0].contains("--max-entries"), "{}", out.stderr);
    // Everything recorded is in the records: nothing vanished silently.
    let counted: u64 = closed.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert_eq!(counted, doc["counters"]["recorded"].as_u64().unwrap());
}

#[test]
fn a_full_waker_chain_map_is_counted_and_reported_once() {
    require_bpf!();
    // Four chains for a machine's worth of wakers: most wakeups find the chain map
    // full. Their waits are still aggregated, as woken by nobody seen.
    let out = busy_trace(&["--json", "--waker", "--max-entries", "4", "1.5"]);
    let doc = json(&out);
    assert!(doc["lost"]["chain_map_full"].as_u64().unwrap() > 0, "{}", doc["lost"]);
    assert_eq!(warning_lines(&out.stderr, "full chain map").len(), 1, "{}", out.stderr);
    assert!(
        warning_lines(&out.stderr, "full chain map")[0].contains("--max-entries"),
        "{}",
        out.stderr
    );
    let closed: Vec<&Value> =
        doc["records"].as_array().unwrap().iter().filter(|r| r["open"] == false).collect();
    let counted: u64 = closed.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert_eq!(
        counted,
        doc["counters"]["recorded"].as_u64().unwrap(),
        "every recorded wait is in a record"
    );
}

fn set_name(name: &[u8]) {
    let mut buf = [0u8; 16];
    let n = name.len().min(15);
    buf[..n].copy_from_slice(&name[..n]);
    unsafe { libc::prctl(libc::PR_SET_NAME, buf.as_ptr()) };
}

#[test]
fn hostile_thread_names_keep_every_format_parseable() {
    require_bpf!();
    let names: [&[u8]; 5] = [b"a;b c", b"\xff\xfe bad", b"", b"tab\there\nnl", b"--"];
    for format in ["-f", "--json", "-n0"] {
        let mut workers = Vec::new();
        for name in names {
            let name = name.to_vec();
            workers.push(Workload::spawn("tw-hostile", move || {
                set_name(&name);
                tw_known_long_sleep(Duration::from_millis(100));
            }));
        }
        let tids: Vec<String> = workers.iter().map(|w| w.tid.to_string()).collect();
        let list = tids.join(",");
        let tracer = Tracer::start(&[format, "-t", &list, "1"]);
        for w in &workers {
            w.go();
        }
        for w in workers {
            w.join();
        }
        let out = tracer.finish();
        assert!(out.status.success(), "{format}: {}", out.stderr);
        match format {
            "-f" => {
                let lines: Vec<&str> = out.stdout.lines().collect();
                assert!(lines.len() >= names.len(), "{}", out.stdout);
                for l in &lines {
                    let parts: Vec<&str> = l.split_whitespace().collect();
                    assert_eq!(parts.len(), 2, "not `stack value`: {l:?}");
                    assert!(parts[1].parse::<u64>().is_ok(), "{l:?}");
                }
                assert!(out.stdout.contains("a:b_c;"), "{}", out.stdout);
                assert!(out.stdout.contains("[empty];"), "{}", out.stdout);
            }
            "--json" => {
                let doc: Value = serde_json::from_str(&out.stdout).unwrap();
                let comms: Vec<&str> = doc["records"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|r| r["comm"].as_str())
                    .collect();
                for want in
                    ["a;b c", "\u{fffd}\u{fffd} bad", "[empty]", "tab\\x09here\\x0anl", "--"]
                {
                    assert!(comms.contains(&want), "{want:?} missing from {comms:?}");
                }
            }
            _ => {
                assert!(out.stdout.contains("    a;b c  pid"), "{}", out.stdout);
                assert!(out.stdout.contains("    [empty]  pid"), "{}", out.stdout);
                assert!(!out.stdout.contains('\t'), "control characters are escaped");
            }
        }
    }
}

/// Sleeps once, from one of two leaves.
#[inline(never)]
fn tw_leaf_a() {
    nanosleep(Duration::from_millis(20));
    std::hint::black_box(1);
}

#[inline(never)]
fn tw_leaf_b() {
    nanosleep(Duration::from_millis(20));
    std::hint::black_box(2);
}

/// Recurses `depth` more times, then sleeps from leaf `b` or `a`: each pair is its
/// own user stack (under 64 frames, so that none is cut and made alike).
#[inline(never)]
fn tw_nest(depth: usize, b: bool) {
    if depth == 0 {
        if b {
            tw_leaf_b()
        } else {
            tw_leaf_a()
        }
    } else {
        tw_nest(std::hint::black_box(depth - 1), b);
    }
    std::hint::black_box(depth);
}

/// The report reads the maps a batch at a time: more entries than one batch holds
/// (1,500 threads' records) and more stacks than are looked up one by one (90
/// distinct user stacks) must all come back, each with its own stack.
#[test]
fn every_record_and_stack_of_a_large_trace_is_read_back() {
    require_bpf!();
    const THREADS: usize = 1500;
    const DEPTHS: usize = 45;
    let pid = std::process::id().to_string();
    // No duration: the trace ends once every thread has slept, however slow the
    // machine is to start them.
    // No -m either: a nanosleep that spurious wakeups (deferred wakeups from the
    // barrier's futex) cut into parts all shorter than the threshold would leave its
    // thread without a record. No --state: 1,500 threads woken at once on two CPUs
    // wait for a CPU longer than 20 ms, and a thread preempted inside nanosleep
    // before it blocks finds its timer expired and never sleeps (seen in CI): its
    // wait is then a preemption, state 0.
    // Once the walker is in place: every stack must be whole.
    let tracer = Tracer::start_learned(&["--json", "-p", &pid]);
    let go = std::sync::Arc::new(std::sync::Barrier::new(THREADS + 1));
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let go = go.clone();
            std::thread::Builder::new()
                .name("tw-many".into())
                .stack_size(256 * 1024)
                .spawn(move || {
                    go.wait();
                    tw_nest(i % DEPTHS, (i / DEPTHS) % 2 == 1);
                    u64::from(tid())
                })
                .unwrap()
        })
        .collect();
    go.wait();
    let all: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    tracer.signal(libc::SIGINT);
    let doc = json(&tracer.finish());
    let all_recs = doc["records"].as_array().unwrap();
    // Every thread waited at the barrier, so every one has records.
    let seen: std::collections::HashSet<u64> =
        all_recs.iter().filter_map(|r| r["tid"].as_u64()).collect();
    let unseen: Vec<u64> = all.iter().copied().filter(|t| !seen.contains(t)).collect();
    assert!(
        unseen.is_empty(),
        "threads without a record: {unseen:?}; lost: {}, counters: {}",
        doc["lost"],
        doc["counters"]
    );
    // And every one slept in tw_nest, also a thread whose switch-in the kernel
    // did not show (README Limitations: its wait is ended from its run time).
    let recs: Vec<&Value> = records_in(&doc, "tw_nest");
    let slept: std::collections::HashSet<u64> =
        recs.iter().map(|r| r["tid"].as_u64().unwrap()).collect();
    let missing: Vec<u64> = all.iter().copied().filter(|t| !slept.contains(t)).collect();
    assert!(
        missing.is_empty() && doc["lost"]["unended_waits"] == 0,
        "threads whose sleep has no record: {missing:?}; lost: {}, counters: {}",
        doc["lost"],
        doc["counters"]
    );
    let mut shapes = std::collections::HashSet::new();
    // Waits in the syscall: a preemption in user code may end its walk at junk.
    for r in recs
        .iter()
        .filter(|r| stack_names(&r["kernel_stack"]).iter().any(|f| f.contains("nanosleep")))
    {
        assert_eq!(r["user_stack_status"], "ok", "{r:#}");
        let names = stack_names(&r["user_stack"]);
        let depth = names.iter().filter(|f| f.ends_with("tw_nest")).count();
        shapes.insert((depth, names.iter().any(|f| f.ends_with("tw_leaf_b"))));
    }
    assert_eq!(shapes.len(), 2 * DEPTHS, "every distinct stack: {shapes:?}");
}

#[test]
fn two_instances_tracing_one_thread_both_get_complete_results() {
    require_bpf!();
    let w = Workload::spawn("tw-twice", || tw_known_long_sleep(Duration::from_millis(400)));
    let tid = w.tid.to_string();
    let a = Tracer::start(&["--json", "-t", &tid, "1.5"]);
    let b = Tracer::start(&["--json", "-w", "-t", &tid, "1.5"]);
    w.go();
    w.join();
    for doc in [json(&a.finish()), json(&b.finish())] {
        let recs = sleeps_in(&doc, "tw_known_long_sleep");
        assert_eq!(recs.len(), 1, "{doc:#}");
        assert_eq!(recs[0]["count"], 1);
        let max = recs[0]["max_us"].as_u64().unwrap();
        assert!(sleep_span_us(Duration::from_millis(400)).contains(&max), "{max}");
    }
}

#[test]
fn auto_attach_logs_its_choice_at_info_level() {
    require_bpf!();
    if std::env::var("TOPWAITS_TEST_ATTACH").is_ok() {
        eprintln!("skipped: this test is about the automatic choice");
        return;
    }
    let tracer = Tracer::start_env(&["-f", "0.3"], &[("RUST_LOG", "info")]);
    let out = tracer.finish();
    assert!(out.stderr.contains("attached with raw_tp"), "{}", out.stderr);
}

#[test]
fn a_closed_stderr_is_no_reason_to_panic() {
    require_bpf!();
    // Tiny maps guarantee warnings, which then meet the closed pipe.
    let mut child = std::process::Command::new(BIN)
        .args(with_attach(&["-f", "--stack-storage-size", "2", "0.5"]))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    assert!(!out.stdout.is_empty());
}

#[test]
fn a_signal_while_attaching_still_ends_with_a_report() {
    require_bpf!();
    // SIGTERM at several points of start-up, before and around the "Tracing" line:
    // each run must end normally with a parseable report, never be killed.
    for delay_ms in [30u64, 80, 200] {
        let child = std::process::Command::new(BIN)
            .args(with_attach(&["--json", "-w"]))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("failed to start topwaits");
        std::thread::sleep(Duration::from_millis(delay_ms));
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "SIGTERM after {delay_ms} ms: {:?} {stderr}", out.status);
        let doc: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("after {delay_ms} ms: {e}: {stderr}"));
        assert!(doc["records"].is_array());
    }
}

/// Regression: `--svg /nonexistent/x.svg 2` traced for 2 s and then failed, and
/// `threads --rt-app` with a bad path lost the whole table. Every output file is
/// opened before anything loads, and a bad one fails at once in one line.
#[test]
fn bad_output_paths_fail_before_tracing() {
    require_bpf!();
    for args in [
        &["--svg", "/nonexistent/dir/x.svg", "3"][..],
        &["--timeline", "/nonexistent/dir/t.svg", "3"],
        &["threads", "--rt-app", "/nonexistent/dir/a.json", "3"],
        &["blocked", "--dot", "/nonexistent/dir/g.dot"],
    ] {
        let started = std::time::Instant::now();
        let out = run(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", out.stderr);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{args:?} traced before failing"
        );
        assert!(!out.stderr.contains("Tracing"), "{args:?}: {}", out.stderr);
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {}", out.stderr);
        assert!(lines[0].contains("cannot write /nonexistent/dir/"), "{}", lines[0]);
    }
}

/// Regression: the `--wakeups` view said "Tracing off-CPU waits".
#[test]
fn each_view_says_what_it_traces() {
    require_bpf!();
    assert!(run(&["--wakeups", "-f", "0.3"]).stderr.starts_with("Tracing wakeups of all threads"));
    assert!(run(&["-w", "-f", "0.3"])
        .stderr
        .starts_with("Tracing off-CPU waits and their wakers of all threads"));
    assert!(run(&["-f", "0.3"]).stderr.starts_with("Tracing off-CPU waits of all threads"));
}

/// Regression: `--state 2` matched by bitmask, so idle kernel threads sleeping in
/// TASK_IDLE (uninterruptible | noload) passed, and ranked above real I/O waits.
/// "D state" is what load average counts: TASK_NOLOAD sleeps are left out.
#[test]
fn state_2_is_d_state_without_idle_kernel_threads() {
    require_bpf!();
    let file = format!("{}/dstate-{}.dat", env!("CARGO_TARGET_TMPDIR"), std::process::id());
    let tracer = Tracer::start(&["--json", "--open-waits", "no", "--state", "2", "1.5"]);
    let dd = std::process::Command::new("dd")
        .args(["if=/dev/zero", &format!("of={file}"), "bs=64k", "count=300", "oflag=direct,dsync"])
        .output()
        .unwrap();
    assert!(dd.status.success(), "{}", String::from_utf8_lossy(&dd.stderr));
    let doc = json(&tracer.finish());
    let _ = std::fs::remove_file(&file);
    let recs = doc["records"].as_array().unwrap();
    assert!(recs.iter().any(|r| r["comm"] == "dd"), "direct I/O waits are D state: {doc:#}");
    for r in recs {
        let k = stack_names(&r["kernel_stack"]);
        let first = k.iter().find(|f| !f.contains("schedule")).cloned().unwrap_or_default();
        assert!(
            first != "worker_thread" && first != "rcu_gp_kthread" && first != "kdamond_fn",
            "an idle kernel thread (TASK_IDLE) passed --state 2: {} {k:?}",
            r["comm"]
        );
    }
}
