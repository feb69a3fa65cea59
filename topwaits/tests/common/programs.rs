//! The C workloads of tests/programs, compiled once per test binary, and a running
//! workload with the values of its "ready" line.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;

/// The workload binary, compiled once per test run with frame pointers.
fn stuck_binary() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = format!("{}/stuck", env!("CARGO_TARGET_TMPDIR"));
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/stuck.c");
        let status = Command::new("cc")
            .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", &out, src])
            .status()
            .expect("a C compiler (cc) is needed");
        assert!(status.success(), "compiling {src} failed");
        out
    })
}

/// A running workload and the values of its "ready" line.
pub struct Stuck {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub stdout: BufReader<ChildStdout>,
    pub ready: HashMap<String, String>,
}

impl Stuck {
    pub fn start(args: &[&str]) -> Stuck {
        let mut child = Command::new(stuck_binary())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("failed to start the workload");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(line.starts_with("ready"), "workload said {line:?}");
        let ready = line
            .split_whitespace()
            .skip(1)
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Stuck { child, stdin, stdout, ready }
    }

    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }

    pub fn num(&self, key: &str) -> i128 {
        self.ready[key].parse().unwrap_or_else(|_| panic!("{key}={} is no number", self.ready[key]))
    }

    pub fn hex(&self, key: &str) -> String {
        format!("{:#x}", u64::from_str_radix(self.ready[key].trim_start_matches("0x"), 16).unwrap())
    }
}

impl Drop for Stuck {
    fn drop(&mut self) {
        if let Some(w) = self.ready.get("writer").and_then(|w| w.parse::<i32>().ok()) {
            unsafe { libc::kill(w, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Compiles tests/programs/NAME.c (optimized, with frame pointers as the compiler
/// chooses) into the test's temporary directory.
pub fn compile(name: &str) -> String {
    let out = format!("{}/{name}", env!("CARGO_TARGET_TMPDIR"));
    let src = format!("{}/tests/programs/{name}.c", env!("CARGO_MANIFEST_DIR"));
    let status = Command::new("cc")
        .args(["-O2", "-g", "-pthread", "-o", &out, &src])
        .status()
        .expect("a C compiler (cc) is needed");
    assert!(status.success(), "compiling {src} failed");
    out
}

/// A started workload and its "ready" line, killed when dropped.
pub struct Started(pub Child, pub String);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a workload that prints "ready" once it runs.
pub fn start(exe: &str) -> Started {
    start_with(exe, &[])
}

/// Starts `exe` with `args` (an interpreter and its script, say), once it
/// prints "ready".
pub fn start_with(exe: &str, args: &[&str]) -> Started {
    let mut child =
        Command::new(exe).args(args).stdout(Stdio::piped()).spawn().expect("the workload starts");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let started = Started(child, line.trim().to_string());
    assert!(started.1.starts_with("ready"), "{:?}", started.1);
    started
}
