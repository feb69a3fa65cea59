//! Kernel tests of Python frames in user stacks: the distribution's python3, and
//! every other CPython 3.10-3.13 build on the machine (pyenv's), run a script
//! whose threads sleep, read a pipe and take a lock; their Python functions are
//! named, with file and line, in order among the native frames; with `-X perf`
//! the trampolines' perf-map names too.

mod common;

use std::process::Command;

use common::*;
use serde_json::Value;

/// The distribution's python3, and pyenv's 3.10-3.13 when installed.
fn interpreters() -> Vec<String> {
    let mut out = vec!["/usr/bin/python3".to_string()];
    let home = std::env::var("PYENV_ROOT").unwrap_or_else(|_| "/root/.pyenv".into());
    for v in ["3.10", "3.11", "3.12", "3.13"] {
        let Ok(dir) = std::fs::read_dir(format!("{home}/versions")) else { break };
        let mut found: Vec<_> = dir
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("{v}.")))
            .collect();
        found.sort_by_key(|e| e.file_name());
        if let Some(e) = found.last() {
            out.push(e.path().join(format!("bin/python{v}")).to_string_lossy().into_owned());
        }
    }
    out.into_iter().filter(|p| std::path::Path::new(p).exists()).collect()
}

/// The stack (names, leaf first) with the most wait time among those holding `func`.
fn heaviest(doc: &Value, func: &str) -> Vec<String> {
    doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| stack_names(&r["user_stack"]).iter().any(|n| n.starts_with(func)))
        .max_by_key(|r| r["total_ns"].as_u64().unwrap())
        .map(|r| stack_names(&r["user_stack"]))
        .unwrap_or_else(|| panic!("no stack with {func}: {doc:#}"))
}

/// The position of the first frame starting with `prefix`, or whose name does
/// past a class (`Thread.run` for `run`: 3.10 names functions without it).
fn at(names: &[String], prefix: &str) -> usize {
    let starts = |n: &str| {
        n.starts_with(prefix) || n.split_once('.').is_some_and(|(_, rest)| rest.starts_with(prefix))
    };
    names.iter().position(|n| starts(n)).unwrap_or_else(|| panic!("no {prefix} in {names:?}"))
}

/// Starts `python` on the test script with `flags`, once its threads run.
fn start(python: &str, flags: &[&str]) -> Script {
    start_script(python, flags, concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/waits.py"))
}

/// A 3.12+ interpreter run with `-X perf` calls each Python function through a
/// trampoline in anonymous memory, named in /tmp/perf-PID.map and built without
/// a frame pointer: the walk steps over it, and both names show.
#[test]
fn python_run_with_x_perf_keeps_whole_stacks_and_the_perf_map_names() {
    require_bpf!();
    let newer: Vec<String> =
        interpreters().into_iter().filter(|p| p.ends_with("3.12") || p.ends_with("3.13")).collect();
    // Not a capability: a machine without pyenv's builds has no 3.12 to run.
    if newer.is_empty() {
        eprintln!("{}: skipped: no CPython 3.12 or later here (pyenv)", module_path!());
        return;
    }
    for python in newer {
        let child = start(&python, &["-X", "perf"]);
        let doc = json(&run(&["--json", "-U", "-p", &child.0.id().to_string(), "2"]));
        drop(child);
        let sleep = heaviest(&doc, "sleeper_inner (waits.py:");
        assert!(
            at(&sleep, "sleeper_inner (") < at(&sleep, "py::sleeper_inner:"),
            "{python}: {sleep:?}"
        );
        assert!(
            at(&sleep, "py::sleeper_inner:") < at(&sleep, "sleeper (waits.py:14)"),
            "{python}: {sleep:?}"
        );
        assert!(at(&sleep, "py::Thread.run:") < at(&sleep, "start_thread"), "{python}: {sleep:?}");
    }
}

#[test]
fn python_functions_are_named_in_order_beside_the_native_frames() {
    require_bpf!();
    // python3 is installed by `cargo xtask setup`.
    let all = interpreters();
    assert!(
        all.iter().any(|p| p == "/usr/bin/python3"),
        "no /usr/bin/python3: run cargo xtask setup"
    );
    for python in all {
        let child = start(&python, &[]);
        let doc = json(&run(&["--json", "-U", "-p", &child.0.id().to_string(), "2"]));
        drop(child);
        // Sleeping two functions deep: the inner one nearer the leaf, and the
        // native sleep below both; the thread's own entry above, from threading.
        let sleep = heaviest(&doc, "sleeper_inner (waits.py:");
        // time.sleep waits in clock_nanosleep (3.11 on) or select (3.10).
        assert!(["clock_nanosleep", "select"].contains(&sleep[0].as_str()), "{python}: {sleep:?}");
        assert!(0 < at(&sleep, "sleeper_inner (waits.py:10)"), "{python}: {sleep:?}");
        assert!(
            at(&sleep, "sleeper_inner ") < at(&sleep, "sleeper (waits.py:14)"),
            "{python}: {sleep:?}"
        );
        assert!(at(&sleep, "sleeper (") < at(&sleep, "run (threading.py:"), "{python}: {sleep:?}");
        assert!(
            at(&sleep, "run (threading.py:") < at(&sleep, "start_thread"),
            "{python}: {sleep:?}"
        );
        // A pipe read: the native read at the leaf, the Python caller above it.
        let read = heaviest(&doc, "pipe_reader (waits.py:18)");
        assert!(at(&read, "read") < at(&read, "pipe_reader "), "{python}: {read:?}");
        // A contended lock: the interpreter's lock wait, then the taker.
        let lock = heaviest(&doc, "lock_taker (waits.py:");
        assert!(
            at(&lock, "PyThread_acquire_lock") < at(&lock, "lock_taker "),
            "{python}: {lock:?}"
        );
        // The evaluator's own frames are replaced by the Python frames they run.
        assert!(!sleep.iter().any(|n| n == "_PyEval_EvalFrameDefault"), "{python}: {sleep:?}");
    }
}

/// An interpreter that starts during a system-wide trace is named once its
/// layout is known, also in a thread whose stack was walked before and has not
/// changed since: that walk, made without Python frames, is not reused after.
#[test]
fn an_interpreter_started_mid_trace_is_named_where_it_waited_before() {
    require_bpf!();
    let t = Tracer::start(&["--json", "-U", "4"]);
    let child = start("/usr/bin/python3", &[]);
    let pid = child.0.id() as u64;
    let doc = json(&t.finish());
    drop(child);
    // The script's threads sleeping in time.sleep (not the main thread's one
    // long sleep): how much of their wait time has the script's functions.
    let (mut total, mut named) = (0u64, 0u64);
    for r in doc["records"].as_array().unwrap() {
        let names = stack_names(&r["user_stack"]);
        if r["tgid"].as_u64() != Some(pid)
            || names.first().map(String::as_str) != Some("clock_nanosleep")
        {
            continue;
        }
        if !names.iter().any(|n| n == "start_thread") {
            continue;
        }
        let ns = r["total_ns"].as_u64().unwrap();
        total += ns;
        if names.iter().any(|n| n.contains("(waits.py:")) {
            named += ns;
        }
    }
    assert!(total > 0, "no sleeping threads of process {pid}");
    assert!(
        named * 10 >= total * 9,
        "only {named} of {total} ns of the script's sleeps name its functions"
    );
}

/// `topwaits blocked`, and the open waits of a trace, walk a Python thread
/// blocked right now in user space: its Python functions stand in for the
/// evaluator's native frames, in order, as in the traced stacks.
#[test]
fn threads_blocked_now_show_their_python_frames() {
    require_bpf!();
    let python = start("/usr/bin/python3", &[]);
    let pid = python.0.id().to_string();
    std::thread::sleep(std::time::Duration::from_millis(300));
    // The sleeper runs a moment between its 10 ms sleeps, and a snapshot that
    // finds it then (on its way back to Python, or waiting for the GIL) rightly
    // shows no sleep: up to five snapshots, for one that finds it asleep.
    let snapshot = || {
        let out = Command::new(BIN).args(["blocked", "--json", "-p", &pid]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let in_sleeper = |doc: &Value| {
        doc["threads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| stack_names(&t["user_stack"]))
            .find(|s| s.iter().any(|n| n.starts_with("sleeper_inner (waits.py:10)")))
    };
    let mut docs = Vec::new();
    let sleeper = loop {
        let doc = snapshot();
        if let Some(s) = in_sleeper(&doc) {
            break s;
        }
        docs.push(doc);
        assert!(docs.len() < 5, "no thread in sleeper_inner in five snapshots: {docs:#?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(
        at(&sleeper, "sleeper_inner (waits.py:10)") < at(&sleeper, "sleeper (waits.py:14)"),
        "{sleeper:?}"
    );
    assert!(
        at(&sleeper, "sleeper (waits.py:14)") < at(&sleeper, "start_thread"),
        "whole, to the thread's entry: {sleeper:?}"
    );
}
