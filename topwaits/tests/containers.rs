//! Kernel tests of tracing by cgroup (`--cgroup`, `--unit`, `--container`),
//! with cgroups this test makes under the unified hierarchy: no container
//! runtime or systemd needed, though `--unit` is also tried on a real
//! transient unit where systemd runs.

mod common;

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::*;
use serde_json::Value;

/// Where the unified (v2) hierarchy is mounted, if it is.
fn unified_mount() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let f: Vec<&str> = left.split(' ').collect();
        (right.starts_with("cgroup2 ") && f.get(3) == Some(&"/")).then(|| PathBuf::from(f[4]))
    })
}

/// A cgroup made for one test, removed (with whatever it still holds killed)
/// when dropped.
struct TestCgroup {
    dir: PathBuf,
    /// Its path within the hierarchy.
    path: String,
}

impl TestCgroup {
    fn make(test: &str, sub: &str) -> Option<TestCgroup> {
        let missing = match unified_mount() {
            None => Some("no cgroup2 hierarchy is mounted".to_string()),
            Some(m) if std::fs::metadata(m.join("cgroup.procs")).is_err() => {
                Some(format!("{} is unreadable", m.display()))
            }
            Some(_) => None,
        };
        if !present(test, "a cgroup2 hierarchy", missing) {
            return None;
        }
        let root = unified_mount().unwrap();
        let top = format!("topwaits-test-{}-{test}", std::process::id());
        let path = if sub.is_empty() { format!("/{top}") } else { format!("/{top}/{sub}") };
        let dir = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("making {}: {e}", dir.display()));
        Some(TestCgroup { dir, path })
    }

    /// A cgroup beside this one, in the same top directory (removed with it).
    fn sibling(&self, name: &str) -> TestCgroup {
        let dir = self.dir.parent().unwrap().join(name);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("making {}: {e}", dir.display()));
        TestCgroup { dir, path: format!("{}/{name}", self.parent_path()) }
    }

    /// The path of the cgroup this one is in.
    fn parent_path(&self) -> String {
        Path::new(&self.path).parent().unwrap().display().to_string()
    }

    /// Moves process `pid` (every thread of it) into the cgroup.
    fn enter(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("moving {pid} in: {e}"));
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // The top directory this test made, and everything below it.
        let root = unified_mount().unwrap();
        let rel = self.path.trim_start_matches('/');
        let top = root.join(rel.split('/').next().unwrap());
        let mut dirs = vec![];
        let mut todo = vec![top.clone()];
        while let Some(d) = todo.pop() {
            if let Ok(rd) = std::fs::read_dir(&d) {
                todo.extend(
                    rd.flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
            dirs.push(d);
        }
        for d in dirs.iter().rev() {
            let _ = std::fs::write(d.join("cgroup.kill"), "1");
            for _ in 0..100 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

/// A Python workload that, once told to go (a line on stdin), starts two
/// threads that sleep in turns and prints their ids; the threads are created
/// during the trace.
const LATE_THREADS: &str = r#"
import sys, threading, time
print("ready", flush=True)
sys.stdin.readline()
def work():
    for _ in range(40):
        time.sleep(0.01)
ts = [threading.Thread(target=work) for _ in range(2)]
for t in ts:
    t.start()
print(" ".join(str(t.native_id) for t in ts), flush=True)
for t in ts:
    t.join()
time.sleep(5)
"#;

/// A child process, killed when dropped (a failed test leaves none behind).
struct Proc(Child);

impl Proc {
    fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The distribution's Python, not a version manager's shim (a script that
/// forks helpers before it becomes Python).
const PYTHON: &str = "/usr/bin/python3";

/// A process that sleeps in a loop until killed.
fn sleeper() -> Proc {
    Proc(
        Command::new(PYTHON)
            .args(["-c", "import time\nwhile True: time.sleep(0.01)"])
            .spawn()
            .expect("/usr/bin/python3 is installed"),
    )
}

fn start_in(cg: &TestCgroup, script: &str) -> Proc {
    // The shell enters the cgroup, then becomes the workload.
    let cmd =
        format!("echo $$ > {}/cgroup.procs && exec /usr/bin/python3 -c \"$0\"", cg.dir.display());
    let mut child = Command::new("sh")
        .args(["-c", &cmd, script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sh and python3 are installed");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let child = Proc(child);
    assert_eq!(line.trim(), "ready", "the workload did not start in {}", cg.dir.display());
    child
}

fn tgids_and_tids(doc: &Value) -> (Vec<u64>, Vec<u64>) {
    let records = doc["records"].as_array().unwrap();
    (
        records.iter().map(|r| r["tgid"].as_u64().unwrap()).collect(),
        records.iter().map(|r| r["tid"].as_u64().unwrap()).collect(),
    )
}

#[test]
fn a_cgroup_is_traced_with_the_threads_that_join_it_and_nothing_else() {
    require_bpf!();
    let Some(cg) = TestCgroup::make("joins", "") else { return };
    let mut work = start_in(&cg, LATE_THREADS);
    let outsider = sleeper();
    let mover = sleeper();
    let t = Tracer::start(&["--json", "-U", "--cgroup", &cg.path, "2"]);
    // After the attach: two new threads in the cgroup, and a process moved in.
    writeln!(work.0.stdin.as_mut().unwrap(), "go").unwrap();
    let mut line = String::new();
    BufReader::new(work.0.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let late: Vec<u64> = line.split_whitespace().map(|t| t.parse().unwrap()).collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    cg.enter(mover.id());
    let doc = json(&t.finish());
    let (tgids, tids) = tgids_and_tids(&doc);
    let ours = [u64::from(work.id()), u64::from(mover.id())];
    assert!(
        tgids.iter().all(|t| ours.contains(t)),
        "only the cgroup's processes ({ours:?}): {tgids:?}"
    );
    assert!(!tgids.contains(&u64::from(outsider.id())), "a process outside the cgroup was traced");
    for tid in &late {
        assert!(
            tids.contains(tid),
            "thread {tid}, made in the cgroup during the trace, is missing: {tids:?}"
        );
    }
    assert!(
        tgids.contains(&u64::from(mover.id())),
        "the process moved into the cgroup is missing: {tgids:?}"
    );
    assert_eq!(
        doc["target"],
        format!("cgroup {}, user stacks", cg.path),
        "the header names the cgroup"
    );
}

#[test]
fn a_process_moved_out_of_the_cgroup_is_no_longer_traced() {
    require_bpf!();
    let Some(cg) = TestCgroup::make("leaves", "") else { return };
    let parent = unified_mount().unwrap();
    let leaver = sleeper();
    cg.enter(leaver.id());
    let t = Tracer::start(&["--json", "-U", "--cgroup", &cg.path, "3"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    // Back to the root cgroup: from then on it is outside.
    std::fs::write(parent.join("cgroup.procs"), leaver.id().to_string()).unwrap();
    let moved = now_wall_ns();
    let doc = json(&t.finish());
    let records = doc["records"].as_array().unwrap();
    let mine: Vec<&Value> = records.iter().filter(|r| r["tgid"] == leaver.id()).collect();
    assert!(!mine.is_empty(), "its waits while inside are traced: {doc:#}");
    // Its 10 ms sleeps: none that ended later than a moment after it left.
    for r in &mine {
        let end = parse_rfc3339(r["max_end"].as_str().unwrap());
        assert!(end < moved + 50_000_000 || r["open"] == true, "a wait after it left: {r:#}");
    }
    let count: u64 = mine.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert!(count < 150, "{count} waits: it kept being traced after it left the cgroup");
}

/// The waits of one recording of a cgroup with two below it, as `--by cgroup`,
/// folded lines and pprof show them: each record names its own cgroup (also for
/// a process that exited before the end), and folded lines begin with it
/// unless `--no-cgroup-frames` says otherwise.
#[test]
fn records_carry_their_cgroup_and_group_by_it() {
    require_bpf!();
    let Some(a) = TestCgroup::make("groups", "a") else { return };
    let b = a.sibling("b");
    let parent = a.parent_path();
    let (in_a, in_a_too, in_b) = (sleeper(), sleeper(), sleeper());
    a.enter(in_a.id());
    a.enter(in_a_too.id());
    b.enter(in_b.id());
    let file = std::env::temp_dir().join(format!("topwaits-cgroups-{}.twr", std::process::id()));
    let file = file.to_str().unwrap();
    let t = Tracer::start(&["record", "-o", file, "-U", "--cgroup", &parent, "2"]);
    // A process that exits during the trace: its cgroup is the one it had.
    let brief = start_in(
        &b,
        "print('ready', flush=True)\nimport time\nfor _ in range(20): time.sleep(0.01)",
    );
    let brief_pid = brief.id();
    drop(brief);
    let rec = t.finish();
    assert!(rec.status.success(), "{}", rec.stderr);

    let doc = json(&run(&["report", file, "--json"]));
    let records = doc["records"].as_array().unwrap();
    let cgroup_of = |pid: u32| {
        records
            .iter()
            .filter(|r| r["tgid"] == pid)
            .map(|r| r["cgroup"].as_str().map(String::from))
            .collect::<Vec<_>>()
    };
    for (pid, cg) in
        [(in_a.id(), &a.path), (in_a_too.id(), &a.path), (in_b.id(), &b.path), (brief_pid, &b.path)]
    {
        let got = cgroup_of(pid);
        assert!(
            !got.is_empty() && got.iter().all(|c| c.as_deref() == Some(cg.as_str())),
            "pid {pid} in {cg}: {got:?}"
        );
    }

    let grouped = json(&run(&["report", file, "--json", "--by", "cgroup"]));
    let groups = grouped["records"].as_array().unwrap();
    assert_eq!(grouped["by"], "cgroup");
    let sleeping_in_a =
        groups.iter().find(|r| r["cgroup"] == a.path.as_str() && r["threads"].as_u64() >= Some(2));
    assert!(
        sleeping_in_a.is_some(),
        "the two sleepers of {} with one stack are one record: {grouped:#}",
        a.path
    );
    assert!(groups.iter().all(|r| r["tgid"].is_null() && r["cgroup"].is_string()), "{grouped:#}");

    let folded = run(&["report", file, "-f"]);
    assert!(folded.status.success(), "{}", folded.stderr);
    for line in folded.stdout.lines() {
        let root = line.split(';').next().unwrap();
        assert!(
            root == format!("[cgroup:{}]", a.path) || root == format!("[cgroup:{}]", b.path),
            "a line of a cgroup trace: {line}"
        );
    }
    let plain = run(&["report", file, "-f", "--no-cgroup-frames"]);
    assert!(!plain.stdout.is_empty() && !plain.stdout.contains("[cgroup:"), "{}", plain.stdout);
    let _ = std::fs::remove_file(file);
}

/// Builds tests/programs/into_cgroup.c.
fn into_cgroup_program() -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("into_cgroup");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/into_cgroup.c");
    let built = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(src)
        .status()
        .expect("cc is installed");
    assert!(built.success(), "into_cgroup.c did not build");
    out
}

/// Runs into_cgroup: forks a child into `into` with CLONE_INTO_CGROUP once
/// the trace is attached (after `parent_in` took the parent in, if given).
/// Returns the parent's and the child's pids, and the trace's JSON.
fn fork_into(
    target: &TestCgroup,
    parent_in: Option<&TestCgroup>,
    into: &Path,
) -> (u32, u32, Value) {
    let mut parent = Proc(
        Command::new(into_cgroup_program())
            .arg(into)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("into_cgroup runs"),
    );
    let mut out = BufReader::new(parent.0.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    if let Some(cg) = parent_in {
        cg.enter(parent.id());
    }
    let t = Tracer::start(&["--json", "-U", "--cgroup", &target.path, "2"]);
    writeln!(parent.0.stdin.as_mut().unwrap(), "go").unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    let child: u32 = line.trim().parse().unwrap_or_else(|_| panic!("into_cgroup failed: {line:?}"));
    (parent.id(), child, json(&t.finish()))
}

/// systemd starts a unit's processes with clone3(CLONE_INTO_CGROUP): the child
/// is in the unit's cgroup from its first instruction, whatever its parent's,
/// and no move event says so. It is traced by its own cgroup, not its parent's.
#[test]
fn a_child_forked_into_the_cgroup_is_traced_and_one_forked_out_is_not() {
    require_bpf!();
    let Some(target) = TestCgroup::make("into", "target") else { return };
    let elsewhere = target.sibling("elsewhere");

    let (parent, child, doc) = fork_into(&target, None, &target.dir);
    let (tgids, _) = tgids_and_tids(&doc);
    assert!(
        tgids.contains(&u64::from(child)),
        "the child forked into the cgroup is missing: {tgids:?}"
    );
    assert!(!tgids.contains(&u64::from(parent)), "its parent, outside, was traced: {tgids:?}");

    let (parent, child, doc) = fork_into(&target, Some(&target), &elsewhere.dir);
    let (tgids, _) = tgids_and_tids(&doc);
    assert!(tgids.contains(&u64::from(parent)), "the parent, inside, is missing: {tgids:?}");
    assert!(
        !tgids.contains(&u64::from(child)),
        "a child forked out of the cgroup was traced: {tgids:?}"
    );
}

/// A producer thread that sleeps 10 ms, then hands an item to the main thread,
/// which waits for it: the producer's sleep is the cause of that waiting.
const HAND_OFF: &str = r#"
import queue, threading, time
q = queue.Queue()
def producer():
    while True:
        time.sleep(0.01)
        q.put(1)
threading.Thread(target=producer, daemon=True).start()
print("ready", flush=True)
while True:
    q.get()
"#;

/// `why --by cgroup`: the same program in two cgroups is one cause per cgroup,
/// where `--by comm` makes it one.
#[test]
fn why_groups_causes_by_cgroup() {
    require_bpf!();
    let Some(a) = TestCgroup::make("why", "a") else { return };
    let b = a.sibling("b");
    let parent = a.parent_path();
    let (_in_a, _in_b) = (start_in(&a, HAND_OFF), start_in(&b, HAND_OFF));
    let file =
        std::env::temp_dir().join(format!("topwaits-why-cgroups-{}.twr", std::process::id()));
    let file = file.to_str().unwrap();
    let rec = run(&["record", "--why", "-o", file, "--cgroup", &parent, "2"]);
    assert!(rec.status.success(), "{}", rec.stderr);
    let by_cgroup = json(&run(&["why", file, "--json", "--by", "cgroup", "-n", "0"]));
    let by_comm = json(&run(&["why", file, "--json", "-n", "0"]));
    let _ = std::fs::remove_file(file);
    let sleeps = |doc: &Value| -> Vec<Value> {
        let causes = doc["causes"].as_array().unwrap_or_else(|| panic!("{doc:#}"));
        causes
            .iter()
            .filter(|c| c["on"].as_str().is_some_and(|o| o.starts_with("timer")))
            .cloned()
            .collect()
    };
    assert_eq!(by_cgroup["by"], "cgroup");
    let mut cgroups: Vec<String> =
        sleeps(&by_cgroup).iter().map(|c| c["cgroup"].as_str().unwrap_or("").to_string()).collect();
    cgroups.sort();
    cgroups.dedup();
    assert_eq!(
        cgroups,
        [a.path.clone(), b.path.clone()],
        "one sleep cause per cgroup: {:#}",
        by_cgroup["causes"]
    );
    let comm = sleeps(&by_comm);
    assert!(
        comm.iter().any(|c| c["threads"].as_array().unwrap().len() == 2),
        "--by comm merges both producers: {comm:#?}"
    );
    assert!(comm.iter().all(|c| c.get("cgroup").is_none()));
}

#[test]
fn a_unit_and_a_container_are_found_by_their_cgroups() {
    require_bpf!();
    let id = "c0ffee00112233445566778899aabbccddeeff00112233445566778899aabbcc";
    let Some(unit) = TestCgroup::make("names", "tw-probe.service") else { return };
    let container = unit.sibling(&format!("docker-{id}.scope"));
    let a = sleeper();
    let b = sleeper();
    unit.enter(a.id());
    container.enter(b.id());
    let by_unit = json(&run(&["--json", "-U", "--unit", "tw-probe", "1"]));
    let by_container = json(&run(&["--json", "-U", "--container", &id[..12], "1"]));
    let (unit_tgids, _) = tgids_and_tids(&by_unit);
    let (ctr_tgids, _) = tgids_and_tids(&by_container);
    assert!(
        !unit_tgids.is_empty() && unit_tgids.iter().all(|&t| t == u64::from(a.id())),
        "{unit_tgids:?} {by_unit:#}"
    );
    assert!(
        !ctr_tgids.is_empty() && ctr_tgids.iter().all(|&t| t == u64::from(b.id())),
        "{ctr_tgids:?}"
    );
    assert_eq!(
        by_unit["target"],
        format!("unit tw-probe.service (cgroup {}), user stacks", unit.path)
    );
    assert_eq!(
        by_container["target"],
        format!("container {} (cgroup {}), user stacks", &id[..12], container.path)
    );
    drop((a, b));
}

#[test]
fn a_real_systemd_unit_is_traced_where_systemd_runs() {
    require_bpf!();
    let systemd = std::fs::read_to_string("/proc/1/comm").is_ok_and(|c| c.trim() == "systemd");
    if !systemd || Command::new("systemd-run").arg("--version").output().is_err() {
        eprintln!("skipped a_real_systemd_unit_is_traced_where_systemd_runs: systemd is not this machine's init");
        return;
    }
    let unit = format!("topwaits-test-{}", std::process::id());
    let ok = Command::new("systemd-run")
        .args([
            "--unit",
            &unit,
            "--collect",
            "python3",
            "-c",
            "import time\nwhile True: time.sleep(0.01)",
        ])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "systemd-run failed");
    let doc = json(&run(&["--json", "-U", "--unit", &unit, "1"]));
    let _ = Command::new("systemctl").args(["stop", &unit]).status();
    let comms: Vec<&str> =
        doc["records"].as_array().unwrap().iter().map(|r| r["comm"].as_str().unwrap()).collect();
    assert!(!comms.is_empty() && comms.iter().all(|c| c.starts_with("python3")), "{comms:?}");
}

#[test]
fn a_missing_cgroup_unit_or_container_is_a_one_line_error() {
    for (args, says) in [
        (vec!["--cgroup", "/no/such/cgroup-here"], "no cgroup /no/such/cgroup-here"),
        (
            vec!["--unit", "no-such-unit-here"],
            "no systemd unit no-such-unit-here.service is running",
        ),
        (vec!["--container", "0123456789ab"], "no container 0123456789ab is running"),
        (vec!["--container", "not-an-id"], "bad container ID"),
        (vec!["--cgroup", "/x", "-p", "1"], "cannot be used with"),
    ] {
        let out = Command::new(BIN).args(&args).arg("1").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(err.trim().lines().count() <= 3, "{args:?}: a short error, not a report: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// The libraries `ldd` says a program loads (its loader among them), by path.
fn libraries_of(program: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(program).output().expect("ldd is installed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let path = l.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// Runs `command` in new mount and PID namespaces, in `root` as its root (with
/// the host's directories `binds` mounted at the same paths in it), and waits
/// for it to print "ready". Returns unshare, which kills it when dropped, and
/// the program's pid here (not the one it sees).
fn in_own_root(root: &Path, binds: &[&str], command: &str) -> (Proc, u32) {
    let r = root.display();
    let binds: String = binds.iter().map(|b| format!("mount --bind {b} {r}{b} && ")).collect();
    let script =
        format!("mount --bind {r} {r} && {binds}cd {r} && pivot_root . old && exec {command}");
    let mut ns = Command::new("unshare")
        .args(["--mount", "--pid", "--fork", "--kill-child", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare runs");
    let mut line = String::new();
    BufReader::new(ns.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let ns = Proc(ns);
    assert!(line.starts_with("ready"), "{command} did not start in its own root: {line:?}");
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", ns.id())).unwrap();
    let pid: u32 = children.split_whitespace().next().expect("unshare's child").parse().unwrap();
    (ns, pid)
}

/// Whether the tools a test names are installed (skipping it with a reason
/// where they are not).
fn have_tools(test: &str, what: &str, tools: &[&str]) -> bool {
    let missing = tools.iter().find(|t| {
        Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .map_or(true, |o| !o.status.success())
    });
    present(test, what, missing.map(|t| format!("no {t}")))
}

/// A root of its own, `name` under the test directory: deep.c (built without
/// frame pointers) at /ctr_app, a path that names nothing here, and copies of
/// its libraries.
fn ctr_root(name: &str) -> PathBuf {
    let root =
        PathBuf::from(format!("{}/{name}-{}", env!("CARGO_TARGET_TMPDIR"), std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("old")).unwrap();
    assert!(!Path::new("/ctr_app").exists(), "/ctr_app must name nothing on this machine");
    let app = root.join("ctr_app");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/deep.c");
    let built = Command::new("cc")
        .args(["-O2", "-fomit-frame-pointer", "-pthread", "-o"])
        .arg(&app)
        .arg(src)
        .status()
        .unwrap();
    assert!(built.success(), "compiling {src} failed");
    for lib in libraries_of(&app) {
        let to = root.join(lib.strip_prefix("/").unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&lib, &to).unwrap_or_else(|e| panic!("copying {}: {e}", lib.display()));
    }
    root
}

/// deep.c started in a root of its own ([`ctr_root`], under `name`) and its
/// own namespaces ([`in_own_root`]): unshare, the program's pid here, and the
/// root. None (skipped with a reason) without the tools.
fn ctr_app_started(test: &str, name: &str) -> Option<(Proc, u32, PathBuf)> {
    if !have_tools(test, "util-linux and a C compiler", &["unshare", "pivot_root", "ldd", "cc"]) {
        return None;
    }
    let root = ctr_root(name);
    let (ns, pid) = in_own_root(&root, &[], "/ctr_app 6");
    Some((ns, pid, root))
}

#[test]
fn a_program_in_its_own_namespaces_is_named_from_its_own_files() {
    require_bpf!();
    let Some((ns, pid, root)) =
        ctr_app_started("a_program_in_its_own_namespaces_is_named_from_its_own_files", "ctr-root")
    else {
        return;
    };
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(maps.contains(" /ctr_app"), "its maps name its own path: {maps}");
    let doc = json(&run_walked(&["--json", "-U", "-p", &pid.to_string()], 1.5));
    drop(ns);
    let _ = std::fs::remove_dir_all(&root);
    let sleep = records_in(&doc, "tw_sleep_leaf");
    let r = sleep.first().unwrap_or_else(|| panic!("its functions are not named: {doc:#}"));
    let names = stack_names(&r["user_stack"]);
    let want = [
        "tw_sleep_leaf",
        "tw_sleep_5",
        "tw_sleep_4",
        "tw_sleep_3",
        "tw_sleep_2",
        "tw_sleep_1",
        "main",
    ];
    let at = names.iter().position(|n| n == "tw_sleep_leaf").unwrap();
    assert_eq!(&names[at..at + want.len()], want, "{names:?}");
    assert!(names.iter().any(|n| n == "__libc_start_call_main"), "a whole stack: {names:?}");
    assert_eq!(r["user_stack_status"], "ok", "{r:#}");
    let modules: Vec<&str> =
        r["user_stack"].as_array().unwrap().iter().filter_map(|f| f["module"].as_str()).collect();
    assert!(modules.contains(&"ctr_app"), "{modules:?}");
    // The host's ids, and its own: the first process of its namespace.
    assert_eq!(
        (r["tgid"].as_u64(), r["ns_pid"].as_u64()),
        (Some(u64::from(pid)), Some(1)),
        "{r:#}"
    );
    assert!(r["ns_tid"].as_u64().is_some(), "{r:#}");
}

#[test]
fn python_in_its_own_root_has_its_frames_named_through_that_root() {
    require_bpf!();
    if !have_tools(
        "python_in_its_own_root_has_its_frames_named_through_that_root",
        "util-linux and python3",
        &["unshare", "pivot_root", "python3"],
    ) {
        return;
    }
    // The distribution's interpreter at /ctr/python3, a path that names nothing
    // here, beside its script; its libraries and standard library are the
    // host's /usr, mounted at the same place.
    let real = std::fs::canonicalize("/usr/bin/python3").unwrap();
    let root =
        PathBuf::from(format!("{}/py-root-{}", env!("CARGO_TARGET_TMPDIR"), std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for d in ["old", "usr", "ctr"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    for l in ["lib", "lib64", "bin"] {
        if Path::new(&format!("/usr/{l}")).exists() {
            std::os::unix::fs::symlink(format!("usr/{l}"), root.join(l)).unwrap();
        }
    }
    assert!(!Path::new("/ctr/python3").exists(), "/ctr/python3 must name nothing on this machine");
    std::fs::copy(&real, root.join("ctr/python3")).unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/waits.py"),
        root.join("ctr/waits.py"),
    )
    .unwrap();
    let (ns, pid) = in_own_root(&root, &["/usr"], "env PYTHONHOME=/usr /ctr/python3 /ctr/waits.py");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(maps.contains(" /ctr/python3"), "its maps name its own path: {maps}");
    let doc = json(&run(&["--json", "-U", "-p", &pid.to_string(), "2"]));
    drop(ns);
    let _ = std::fs::remove_dir_all(&root);
    // The sleeper's Python functions, in order, below the native sleep.
    let r = records_in(&doc, "sleeper_inner (")
        .into_iter()
        .max_by_key(|r| r["total_ns"].as_u64().unwrap());
    let r = r.unwrap_or_else(|| panic!("no Python frames named: {doc:#}"));
    let names = stack_names(&r["user_stack"]);
    let at = |p: &str| {
        names.iter().position(|n| n.starts_with(p)).unwrap_or_else(|| panic!("no {p} in {names:?}"))
    };
    assert!(at("sleeper_inner (waits.py:10)") < at("sleeper (waits.py:14)"), "{names:?}");
    assert!(at("sleeper (") < at("start_thread"), "a whole stack: {names:?}");
    assert!(
        !names.iter().any(|n| n == "_PyEval_EvalFrameDefault"),
        "the evaluator's frames are replaced by Python's: {names:?}"
    );
}

#[test]
fn a_namespaced_process_that_exits_mid_trace_keeps_its_own_ids() {
    require_bpf!();
    let Some((ns, pid, root)) =
        ctr_app_started("a_namespaced_process_that_exits_mid_trace_keeps_its_own_ids", "ctr-exit")
    else {
        return;
    };
    let t = Tracer::start(&["--json", "-U", "-p", &pid.to_string(), "6"]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    drop(ns);
    let doc = json(&t.finish());
    let _ = std::fs::remove_dir_all(&root);
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(") ").next().map(|r| r.chars().next()));
    assert!(matches!(state, None | Some(Some('Z' | 'X'))), "the program has exited: {state:?}");
    let ours: Vec<&Value> =
        doc["records"].as_array().unwrap().iter().filter(|r| r["tgid"] == pid).collect();
    assert!(!ours.is_empty(), "{doc:#}");
    assert!(
        ours.iter().all(|r| r["ns_pid"] == 1 && r["ns_tid"].as_u64().is_some()),
        "its own ids, kept from when it lived: {ours:#?}"
    );
    assert!(!records_in(&doc, "tw_sleep_leaf").is_empty(), "and its functions named: {doc:#}");
}
