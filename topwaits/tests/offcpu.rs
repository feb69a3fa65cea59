//! Kernel tests of the core off-CPU trace: each starts its own workload with a known
//! wait pattern, traces it with the real binary, and asserts on the output.

mod common;

use std::time::Duration;

use common::*;

const LONG: Duration = Duration::from_millis(600);

/// Traces one thread that sleeps once for LONG inside `tw_known_long_sleep`.
fn trace_long_sleep(extra: &[&str]) -> (serde_json::Value, i128, i128, u32) {
    let w = Workload::spawn("tw-longsleep", || tw_known_long_sleep(LONG));
    let tid_num = w.tid;
    let tid = tid_num.to_string();
    let mut args = vec!["--json", "-t", &tid];
    args.extend_from_slice(extra);
    args.push("2");
    let tracer = Tracer::start(&args);
    let before = now_wall_ns();
    w.go();
    w.join();
    let after = now_wall_ns();
    let doc = json(&tracer.finish());
    (doc, before, after, tid_num)
}

fn check_long_sleep(doc: &serde_json::Value, before: i128, after: i128, tid: u32) {
    let recs = sleeps_in(doc, "tw_known_long_sleep");
    assert_eq!(recs.len(), 1, "one record for the sleep: {doc:#}");
    let r = recs[0];
    assert_eq!(r["tid"].as_u64(), Some(tid as u64));
    assert_eq!(r["comm"], "tw-longsleep");
    assert_eq!(r["count"], 1);
    let max_us = r["max_us"].as_u64().unwrap();
    let span = sleep_span_us(LONG);
    assert!(span.contains(&max_us), "max {max_us} us for a 600 ms sleep");
    assert_eq!(r["total_us"], r["max_us"]);
    let kernel = stack_names(&r["kernel_stack"]);
    assert!(kernel.iter().any(|f| f.contains("nanosleep")), "kernel frames: {kernel:?}");
    assert!(
        !kernel.iter().any(|f| f.starts_with("bpf_") || f.starts_with("__traceiter")),
        "tracing machinery must be trimmed: {kernel:?}"
    );
    let end = parse_rfc3339(r["max_end"].as_str().unwrap());
    assert!(before <= end && end <= after, "max_end {end} outside [{before}, {after}]");
    let start = parse_rfc3339(r["max_start"].as_str().unwrap());
    assert!(start >= before - 1_000_000, "max_start {start} before the workload began {before}");
}

#[test]
fn long_sleep_shows_its_maximum_stacks_and_end_time() {
    require_bpf!();
    let (doc, before, after, tid) = trace_long_sleep(&[]);
    assert_eq!(doc["attach"], expected_attach());
    check_long_sleep(&doc, before, after, tid);
}

#[test]
fn tp_btf_gives_the_same_answer_as_raw_tp() {
    require_bpf!();
    let (doc, before, after, tid) = trace_long_sleep(&["--attach", "tp_btf"]);
    assert_eq!(doc["attach"], "tp_btf");
    check_long_sleep(&doc, before, after, tid);
}

/// This thread's context switches so far, as the kernel counts them: voluntary
/// (it blocked) and involuntary (it was switched out while runnable).
fn switches() -> [u64; 2] {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let count = |name: &str| -> u64 {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    [count("voluntary_ctxt_switches:"), count("nonvoluntary_ctxt_switches:")]
}

/// The switches a thread made while running `f`: voluntary and involuntary.
fn switches_during(f: impl FnOnce()) -> [u64; 2] {
    let before = switches();
    f();
    let after = switches();
    [after[0] - before[0], after[1] - before[1]]
}

/// Recorded sleeps against the kernel's count: every voluntary switch is a
/// recorded wait, and the only others allowed are involuntary switches at the same
/// call site (a wakeup that lands between setting the sleep state and `schedule()`
/// leaves the thread runnable there, and if another task is picked the kernel
/// counts that switch as involuntary).
fn check_counted(
    counted: u64,
    [voluntary, involuntary]: [u64; 2],
    what: &str,
    doc: &serde_json::Value,
) {
    assert!(
        (voluntary..=voluntary + involuntary).contains(&counted),
        "{what}: {counted} recorded, the kernel counted {voluntary} voluntary and {involuntary} involuntary switches: {doc:#}"
    );
}

#[test]
fn many_short_sleeps_are_counted_exactly() {
    require_bpf!();
    // The kernel's own count of the sleeps: a spurious wakeup (a deferred wakeup
    // that lands during a later sleep) makes nanosleep sleep twice, and both count.
    let slept = std::sync::Arc::new(std::sync::Mutex::new([0u64; 2]));
    let w = {
        let slept = slept.clone();
        Workload::spawn("tw-short", move || {
            let n = switches_during(|| tw_known_short_sleeps(40, Duration::from_millis(3)));
            *slept.lock().unwrap() = n;
        })
    };
    let tid = w.tid.to_string();
    // No duration: the trace ends once the sleeps are done, however slow the machine.
    let tracer = Tracer::start(&["--json", "-t", &tid]);
    w.go();
    w.join();
    tracer.signal(libc::SIGINT);
    let doc = json(&tracer.finish());
    let slept = *slept.lock().unwrap();
    assert!(slept[0] >= 40, "the kernel counted {slept:?} switches for 40 sleeps");
    // The sleeps' records; a preemption in the loop between two sleeps is a
    // record of its own, at another kernel stack, and as short as it was.
    let recs: Vec<_> = records_in(&doc, "tw_known_short_sleeps")
        .into_iter()
        .filter(|r| stack_names(&r["kernel_stack"]).iter().any(|f| f.contains("nanosleep")))
        .collect();
    let count: u64 = recs.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    // Every sleep is recorded, also one whose switch-in the kernel did not show
    // (ended at the time the thread's run time gives; README Limitations).
    assert_eq!(doc["lost"]["unended_waits"], 0, "{doc:#}");
    check_counted(count, slept, "tw_known_short_sleeps", &doc);
    // A preemption inside the nanosleep call (before its timer is armed, or
    // on the way out) has its frames too, and is as short as it was: counted
    // above among the involuntary switches, but no sleep.
    let sleeps = recs.iter().filter(|r| r["waits_on"]["kind"] != "run_queue");
    for r in sleeps {
        assert!(r["max_us"].as_u64().unwrap() >= 3000, "a 3 ms sleep recorded shorter: {r:#}");
    }
}

/// A thread's waits with the stacks of its last one are added to a row it holds,
/// which is written to the aggregate when its stacks change and when the thread
/// exits: none may go missing on either path.
#[test]
fn rows_of_a_thread_that_changes_call_sites_and_exits_are_all_counted() {
    require_bpf!();
    let slept = std::sync::Arc::new(std::sync::Mutex::new([[0u64; 2]; 2]));
    let w = {
        let slept = slept.clone();
        Workload::spawn("tw-alternate", move || {
            let add = |i: usize, n: [u64; 2]| {
                let mut s = slept.lock().unwrap();
                s[i] = [s[i][0] + n[0], s[i][1] + n[1]];
            };
            for _ in 0..6 {
                add(0, switches_during(|| tw_known_short_sleeps(3, Duration::from_millis(2))));
                add(1, switches_during(|| tw_known_long_sleep(Duration::from_millis(2))));
            }
        })
    };
    let tid = w.tid.to_string();
    let tracer = Tracer::start(&["--json", "-t", &tid]);
    w.go();
    w.join();
    // Time for the thread's last switch, which writes its held row.
    std::thread::sleep(Duration::from_millis(200));
    tracer.signal(libc::SIGINT);
    let doc = json(&tracer.finish());
    assert_eq!(doc["lost"]["aggregate_full"], 0, "{doc:#}");
    for (i, func) in ["tw_known_short_sleeps", "tw_known_long_sleep"].into_iter().enumerate() {
        let counted: u64 = calls_in(&doc, func)
            .iter()
            .filter(|r| stack_names(&r["kernel_stack"]).iter().any(|f| f.contains("nanosleep")))
            .map(|r| r["count"].as_u64().unwrap())
            .sum();
        let slept = slept.lock().unwrap()[i];
        assert!(slept[0] >= [18, 6][i], "the kernel counted {slept:?} switches in {func}");
        check_counted(counted, slept, func, &doc);
    }
}

/// One thread sleeping 300 ms once and 20 × 2 ms, for the block-time filters.
fn mixed_sleeps(args: &[&str]) -> serde_json::Value {
    let w = Workload::spawn("tw-mixed", || {
        tw_known_long_sleep(Duration::from_millis(300));
        tw_known_short_sleeps(20, Duration::from_millis(2));
    });
    let tid = w.tid.to_string();
    let mut all = vec!["--json", "-t", tid.as_str()];
    all.extend_from_slice(args);
    all.push("2");
    let tracer = Tracer::start(&all);
    w.go();
    w.join();
    json(&tracer.finish())
}

#[test]
fn min_block_time_drops_short_waits() {
    require_bpf!();
    let doc = mixed_sleeps(&["-m", "100000"]);
    assert_eq!(sleeps_in(&doc, "tw_known_long_sleep").len(), 1, "{doc:#}");
    assert!(records_in(&doc, "tw_known_short_sleeps").is_empty(), "{doc:#}");
    for r in doc["records"].as_array().unwrap() {
        assert!(r["max_us"].as_u64().unwrap() >= 100_000);
    }
    // Each short sleep dropped by -m, none lost.
    assert_eq!(doc["lost"]["unended_waits"], 0, "{doc:#}");
    assert!(doc["counters"]["outside_block_time"].as_u64().unwrap() >= 20, "{doc:#}");
}

#[test]
fn max_block_time_drops_long_waits() {
    require_bpf!();
    let doc = mixed_sleeps(&["-M", "50000"]);
    // The 300 ms sleep is gone; a short preemption inside it may stay.
    for r in calls_in(&doc, "tw_known_long_sleep") {
        assert!(r["max_us"].as_u64().unwrap() < 50_000, "{doc:#}");
    }
    let short: u64 = records_in(&doc, "tw_known_short_sleeps")
        .iter()
        .map(|r| r["count"].as_u64().unwrap())
        .sum();
    assert!(short >= 20, "{doc:#}");
}

#[test]
fn state_filter_matches_the_switch_out_state() {
    require_bpf!();
    // nanosleep sleeps TASK_INTERRUPTIBLE (1).
    let doc = mixed_sleeps(&["--state", "1"]);
    assert_eq!(sleeps_in(&doc, "tw_known_long_sleep").len(), 1, "{doc:#}");
    let doc = mixed_sleeps(&["--state", "2"]);
    assert!(calls_in(&doc, "tw_known_long_sleep").is_empty(), "{doc:#}");
    assert!(records_in(&doc, "tw_known_short_sleeps").is_empty(), "{doc:#}");
    // Preempted only: the 300 ms sleep is gone. The thread may still be
    // preempted inside the sleeping function on its way in or out, so
    // short waits with that frame are allowed; a sleep-length one is not.
    let doc = mixed_sleeps(&["--state", "0"]);
    for r in calls_in(&doc, "tw_known_long_sleep") {
        assert!(
            r["max_us"].as_u64().unwrap() < 100_000,
            "preempted-only must exclude sleeps: {doc:#}"
        );
    }
}

#[test]
fn user_and_kernel_stack_only_modes() {
    require_bpf!();
    let doc = mixed_sleeps(&["-U"]);
    assert_eq!(sleeps_in(&doc, "tw_known_long_sleep").len(), 1, "{doc:#}");
    for r in doc["records"].as_array().unwrap() {
        assert_eq!(r["kernel_stack_status"], "none");
    }
    let doc = mixed_sleeps(&["-K"]);
    let recs = doc["records"].as_array().unwrap();
    assert!(!recs.is_empty());
    for r in recs {
        assert_eq!(r["user_stack_status"], "none");
    }
    assert!(recs
        .iter()
        .any(|r| stack_names(&r["kernel_stack"]).iter().any(|f| f.contains("nanosleep"))));
}

#[test]
fn pid_filter_keeps_only_that_process() {
    require_bpf!();
    let me = std::process::id().to_string();
    let w = Workload::spawn("tw-pidf", || tw_known_long_sleep(Duration::from_millis(200)));
    let tracer = Tracer::start(&["--json", "-p", &me, "1.5"]);
    // Another process that waits too: it must not show up.
    let mut other = std::process::Command::new("sleep").arg("0.3").spawn().unwrap();
    w.go();
    w.join();
    other.wait().unwrap();
    let doc = json(&tracer.finish());
    let recs = doc["records"].as_array().unwrap();
    assert!(recs.iter().all(|r| r["tgid"].as_u64() == Some(std::process::id() as u64)), "{doc:#}");
    assert_eq!(sleeps_in(&doc, "tw_known_long_sleep").len(), 1);
    assert!(recs.iter().all(|r| r["comm"] != "sleep"));
}

#[inline(never)]
fn tw_handle_request() {
    nanosleep(Duration::from_millis(100));
    std::hint::black_box(());
}

/// A thread-per-request server: twelve threads with one stack are twelve records
/// by thread, and one record of twelve threads with `--by process`.
#[test]
fn by_process_makes_a_thread_per_request_server_one_record() {
    require_bpf!();
    let me = std::process::id().to_string();
    let by_thread = Tracer::start(&["--json", "-p", &me, "1.5"]);
    let by_process = Tracer::start(&["--json", "-p", &me, "--by", "process", "1.5"]);
    let workers: Vec<Workload> =
        (0..12).map(|_| Workload::spawn("tw-req", tw_handle_request)).collect();
    let tids: std::collections::HashSet<u64> = workers.iter().map(|w| w.tid as u64).collect();
    for w in &workers {
        w.go();
    }
    workers.into_iter().for_each(Workload::join);
    let (threads, process) = (json(&by_thread.finish()), json(&by_process.finish()));
    // The sleeps themselves, not a preemption on the way into or back from one.
    let sleeps = |doc: &serde_json::Value| -> Vec<serde_json::Value> {
        sleeps_in(doc, "tw_handle_request").into_iter().cloned().collect()
    };
    let per_thread = sleeps(&threads);
    assert_eq!(per_thread.len(), 12, "{threads:#}");
    assert!(per_thread
        .iter()
        .all(|r| tids.contains(&r["tid"].as_u64().unwrap()) && r["threads"] == 1));
    assert_eq!(process["by"], "process");
    let merged = sleeps(&process);
    assert_eq!(merged.len(), 1, "{process:#}");
    let m = &merged[0];
    // Both tracers saw the same waits (a sleep that wakes early and sleeps again
    // is two waits with one stack, in both).
    let count: u64 = per_thread.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert!(count >= 12, "{threads:#}");
    assert_eq!(
        (m["threads"].as_u64(), m["count"].as_u64(), m["tid"].is_null()),
        (Some(12), Some(count), true),
        "{m:#}"
    );
    assert_eq!(m["tgid"].as_u64(), Some(std::process::id() as u64));
    let total: u64 = per_thread.iter().map(|r| r["total_us"].as_u64().unwrap()).sum();
    let merged_total = m["total_us"].as_u64().unwrap();
    assert!(
        merged_total.abs_diff(total) * 20 < total,
        "merged {merged_total} us vs {total} us by thread"
    );
}

#[test]
fn tid_filter_keeps_only_that_thread() {
    require_bpf!();
    let a = Workload::spawn("tw-tida", || tw_known_long_sleep(Duration::from_millis(200)));
    let b = Workload::spawn("tw-tidb", || tw_known_long_sleep(Duration::from_millis(200)));
    let tid = a.tid.to_string();
    let tracer = Tracer::start(&["--json", "-t", &tid, "1.5"]);
    a.go();
    b.go();
    a.join();
    b.join();
    let doc = json(&tracer.finish());
    let recs = doc["records"].as_array().unwrap();
    assert!(!recs.is_empty());
    assert!(recs.iter().all(|r| r["tid"].as_u64() == Some(tid.parse::<u64>().unwrap())), "{doc:#}");
}

#[test]
fn folded_output_is_flamegraph_ready() {
    require_bpf!();
    const ASKED: Duration = Duration::from_millis(300);
    let w = Workload::spawn("tw-folded", || tw_known_long_sleep(ASKED));
    let tid = w.tid.to_string();
    let tracer = Tracer::start(&["-f", "-t", &tid, "1.5"]);
    w.go();
    w.join();
    let out = tracer.finish();
    assert!(out.status.success(), "{}", out.stderr);
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains("tw_known_long_sleep"))
        .unwrap_or_else(|| panic!("no folded line for the sleep:\n{}", out.stdout));
    let (stack, value) = line.rsplit_once(' ').unwrap();
    assert!(!stack.contains(' '));
    let value: u64 = value.parse().unwrap();
    assert!(sleep_span_us(ASKED).contains(&value), "{line}");
    let frames: Vec<&str> = stack.split(';').collect();
    assert_eq!(frames[0], "tw-folded");
    // user frames root→leaf come before the kernel frames root→leaf
    let user = frames.iter().position(|f| f.contains("tw_known_long_sleep")).unwrap();
    let kernel = frames.iter().position(|f| f.contains("nanosleep") && f.contains("do_")).unwrap();
    assert!(user < kernel, "{line}");
    assert!(frames.last().unwrap().contains("schedule"), "kernel leaf last: {line}");
}

#[test]
fn sigint_ends_early_and_still_reports() {
    require_bpf!();
    let w = Workload::spawn("tw-sigint", || tw_known_long_sleep(Duration::from_millis(200)));
    let tid = w.tid.to_string();
    let started = std::time::Instant::now();
    let tracer = Tracer::start(&["--json", "-t", &tid]);
    w.go();
    w.join();
    tracer.signal(libc::SIGINT);
    let out = tracer.finish();
    assert!(started.elapsed() < Duration::from_secs(15));
    let doc = json(&out);
    assert_eq!(sleeps_in(&doc, "tw_known_long_sleep").len(), 1, "{doc:#}");
}

#[test]
fn sigterm_ends_early_and_still_reports() {
    require_bpf!();
    let w = Workload::spawn("tw-sigterm", || tw_known_long_sleep(Duration::from_millis(200)));
    let tid = w.tid.to_string();
    let tracer = Tracer::start(&["--json", "-t", &tid, "60"]);
    w.go();
    w.join();
    tracer.signal(libc::SIGTERM);
    let doc = json(&tracer.finish());
    assert_eq!(sleeps_in(&doc, "tw_known_long_sleep").len(), 1, "{doc:#}");
    assert!(doc["duration_s"].as_f64().unwrap() < 30.0);
}

#[test]
fn top_view_shows_the_wait_window_and_frames() {
    require_bpf!();
    let w = Workload::spawn("tw-top", || tw_known_long_sleep(Duration::from_millis(300)));
    let tid = w.tid.to_string();
    let tracer = Tracer::start(&["-t", &tid, "1.5"]);
    w.go();
    w.join();
    let out = tracer.finish();
    assert!(out.status.success(), "{}", out.stderr);
    let block = out
        .stdout
        .split("\n\n")
        .find(|b| b.contains("tw_known_long_sleep"))
        .unwrap_or_else(|| panic!("{}", out.stdout));
    assert!(block.contains(&format!("tw-top  pid {}  tid {tid}", std::process::id())), "{block}");
    assert!(block.contains("longest 3"), "{block}");
    assert!(block.contains(" -> "), "{block}");
}

#[test]
fn no_program_stays_loaded_after_runs() {
    require_bpf!();
    let before = programs_left_after_exit();
    assert!(before.is_empty(), "left over before the test: {before:?}");
    for args in [
        &["--json", "0.3"][..],
        &["--attach", "tp_btf", "-f", "0.3"],
        &["--attach", "kprobe", "0.3"],
        &["-p", "999999999", "1"],
        &["-w", "0.3"],
        &["threads", "0.3"],
    ] {
        let _ = run(args);
        let left = programs_left_after_exit();
        assert!(left.is_empty(), "{args:?} left programs: {left:?}");
    }
    // Under nohup SIGHUP is ignored, and topwaits, which inherits that, keeps
    // ignoring it as nohup asks: then a hangup must leave it tracing.
    let hup_ignored = sighup_ignored();
    for (sig, name) in
        [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM"), (libc::SIGHUP, "SIGHUP")]
    {
        let mut tracer = Tracer::start(&["--json", "-w"]);
        assert!(!our_loaded_programs().is_empty(), "the tracer should be loaded while it runs");
        tracer.signal(sig);
        if sig == libc::SIGHUP && hup_ignored {
            eprintln!("SIGHUP is ignored here (nohup): topwaits must go on tracing");
            std::thread::sleep(std::time::Duration::from_millis(500));
            assert!(tracer.child.try_wait().unwrap().is_none(), "a hangup ended it under nohup");
            tracer.signal(libc::SIGINT);
        }
        let out = tracer.finish();
        assert!(out.status.success(), "{name}: {}", out.stderr);
        let doc: serde_json::Value =
            serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{name}: no report ({e})"));
        assert!(doc["records"].is_array(), "{name} still prints what was gathered");
        let left = programs_left_after_exit();
        assert!(left.is_empty(), "{name} left programs: {left:?}");
    }
}

/// Whether this process ignores SIGHUP (started under nohup), which the
/// tracers it starts inherit.
fn sighup_ignored() -> bool {
    // SAFETY: a read of the disposition into a zeroed sigaction.
    unsafe {
        let mut hup: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut hup) == 0
            && hup.sa_sigaction == libc::SIG_IGN
    }
}

#[test]
fn kprobe_path_loads_then_fails_with_one_line_naming_kprobes() {
    require_bpf!();
    let out = run(&["--attach", "kprobe", "1"]);
    if std::path::Path::new("/sys/bus/event_source/devices/kprobe/type").exists() {
        eprintln!("kprobes exist on this kernel; the attach may succeed");
        return;
    }
    assert_eq!(out.status.code(), Some(1));
    let err = out.stderr.trim();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("kprobes are not available"), "{err}");
    assert!(
        !err.contains("failed to load") && !err.contains("verifier rejected"),
        "the kprobe program must pass the verifier: {err}"
    );
}

#[test]
fn errors_are_one_line_with_nonzero_exit() {
    require_bpf!();
    for (args, needle) in [
        (&["-p", "999999999", "1"][..], "no process with PID 999999999"),
        (&["-t", "999999999", "1"], "no thread with TID 999999999"),
        (&["-u", "-k"], "cannot be used with"),
        (&["-U", "-K"], "cannot be used with"),
        (&["-p", "1", "-t", "1"], "cannot be used with"),
        (&["-m", "10", "-M", "5"], "above --max-block-time"),
        (&["--stack-storage-size", "x"], "invalid value"),
    ] {
        let out = run(args);
        assert!(!out.status.success(), "{args:?}");
        let err = out.stderr.trim();
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"));
    }
    // A thread id given to -p names its process.
    let w = Workload::spawn("tw-notproc", || ());
    let out = run(&["-p", &w.tid.to_string(), "1"]);
    assert!(out.stderr.contains(&format!("use -t {}", w.tid)), "{}", out.stderr);
    w.go();
    w.join();
}

#[test]
fn unprivileged_run_names_the_capabilities() {
    require_bpf!();
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            BIN,
            "1",
        ])
        .output()
        .expect("setpriv (util-linux) is needed");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("CAP_BPF") && err.contains("CAP_PERFMON") && err.contains("root"),
        "{err}"
    );
}

#[test]
fn broken_pipe_ends_quietly() {
    require_bpf!();
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("{BIN} -f 0.5 | head -c 10 >/dev/null; exit ${{PIPESTATUS[0]}}"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {err}", out.status);
    assert!(!err.contains("panicked") && !err.contains("error"), "{err}");
}
