//! Kernel tests of a HotSpot JVM's waits, labelled as a Java user names them:
//! four threads of a program run without flags take turns on one monitor and
//! sleep inside it. `why` gives the sleep inside the monitor as one cause for
//! them all, `locks` the monitor and what its holders did, and the split of
//! their blocked time between sleeping and entering the monitor agrees with
//! the JVM's own Flight Recorder.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

/// Whether a JDK is here (setup installs one; elsewhere the test skips).
fn jdk_here(test: &str) -> bool {
    let missing = ["java", "javac", "jcmd", "jfr"]
        .iter()
        .find(|c| !installed(c))
        .map(|c| format!("{c} is not installed (cargo xtask setup installs default-jdk-headless)"));
    present(test, "a JDK", missing)
}

/// A directory of the test's own, removed when dropped.
struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compiles and starts the test program Turns, past its JVM's start-up;
/// `name` tells the tests' directories apart.
fn start(name: &str) -> (Script, Dir) {
    start_program("Turns", name)
}

/// Compiles and starts tests/programs/`program`.java, past its JVM's
/// start-up; `name` tells the tests' directories apart.
fn start_program(program: &str, name: &str) -> (Script, Dir) {
    start_in(None, program, name)
}

/// [`start_program`] with the JDK whose commands are in `bin`, else the one
/// on the PATH.
fn start_in(bin: Option<&Path>, program: &str, name: &str) -> (Script, Dir) {
    let dir = Dir(std::env::temp_dir().join(format!("topwaits-{name}-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let source = format!("{}/tests/programs/{program}.java", env!("CARGO_MANIFEST_DIR"));
    let command = |c: &str| bin.map_or(c.into(), |b| b.join(c).display().to_string());
    let javac = Command::new(command("javac")).arg("-d").arg(&dir.0).arg(source).output().unwrap();
    assert!(javac.status.success(), "javac: {}", String::from_utf8_lossy(&javac.stderr));
    let java = start_script(&command("java"), &["-cp", dir.0.to_str().unwrap()], program);
    std::thread::sleep(std::time::Duration::from_millis(500));
    (java, dir)
}

#[test]
fn why_gives_the_sleep_inside_the_monitor_as_one_cause_and_locks_the_monitor() {
    require_bpf!();
    if !jdk_here(module_path!()) {
        return;
    }
    let (java, _dir) = start("java-why");
    let pid = java.0.id().to_string();
    let why = json(&run(&["why", "--json", "-p", &pid, "3"]));
    let locks = run(&["locks", "-p", &pid, "2"]);
    drop(java);
    let first = &why["causes"][0];
    assert!(first["share"].as_f64().unwrap() >= 0.6, "{first:#}");
    assert_eq!(first["kind"], "blocked", "{first:#}");
    assert!(first["on"].as_str().unwrap().starts_with("timer"), "{first:#}");
    let text = first.to_string();
    assert!(text.contains("JavaThread::sleep"), "{first:#}");
    // One cause for the four workers, not one per thread.
    let description = first["description"].as_str().unwrap();
    assert!(description.contains("4 threads like worker-"), "{description}");
    assert_eq!(first["waits_on"], "sleep", "{first:#}");
    let out = &locks.stdout;
    // One lock: the monitor, named by its object.
    assert!(out.contains("1. Java monitor <0x"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("1. ") && l.contains(MONITOR)), "{out}");
    assert!(out.contains("held while sleeping by worker-"), "{out}");
}

/// The Java methods of a worker's wait, leaf first, as topwaits names them
/// (a frame's source line, where it has one, follows its method's name).
const METHODS: [&str; 3] = ["Turns.lambda$main$0", "Turns$$Lambda$1.run", "java.lang.Thread.run"];

/// A worker's sleep, each method named at the line of its call as jstack and
/// Flight Recorder show them: from the interpreter's frames at first, then
/// from the scopes of the compiled code that inlined them.
const INLINED: [&str; 3] = [
    "Turns.sleepHoldingTheLock (Turns.java:8)",
    "Turns.handle (Turns.java:13)",
    "Turns.lambda$main$0 (Turns.java:21)",
];

/// A frame's method, without its source line.
fn method_of(frame: &str) -> &str {
    frame.split(" (").next().unwrap_or(frame)
}

/// How the trace views end the label of Turns's monitor, after jstack's
/// `<0x...>` for the object.
const MONITOR: &str = "> (a java.lang.Object) (synchronized)";

#[test]
fn java_methods_are_named_in_whole_stacks_without_flags() {
    require_bpf!();
    if !jdk_here(module_path!()) {
        return;
    }
    let (java, _dir) = start("java-names");
    let pid = java.0.id().to_string();
    let doc = json(&run(&["--json", "-p", &pid, "3"]));
    let blocked = run(&["blocked", "-p", &pid]);
    drop(java);
    let (mut total, mut named, mut entered) = (0u64, 0u64, 0u64);
    let (mut slept, mut asked, mut inlined) = (0u64, 0u64, 0u64);
    let (mut entering, mut in_monitor) = (0u64, 0u64);
    let mut monitors = std::collections::BTreeSet::new();
    for r in doc["records"].as_array().unwrap() {
        if !r["comm"].as_str().unwrap_or("").starts_with("worker-") {
            continue;
        }
        let names = stack_names(&r["user_stack"]);
        let ns = r["total_ns"].as_u64().unwrap();
        total += ns;
        // A Thread.sleep is a sleep, with the 2 ms it asked for.
        let on = &r["waits_on"];
        if on["kind"] == "sleep" {
            slept += ns;
            if on["requested_ns"] == 2_000_000 && on["syscall"] == "Thread.sleep" {
                asked += ns;
            }
        }
        // Entering the monitor: labelled by the object it locks, as jstack
        // names it, one label for all the workers.
        let lock = on["lock"].as_str().unwrap_or("");
        if lock.starts_with("Java monitor") {
            entering += ns;
            if lock.starts_with("Java monitor <0x") && lock.ends_with(MONITOR) {
                in_monitor += ns;
                monitors.insert(lock.to_string());
            }
        }
        let whole = !names.iter().any(|n| n.starts_with("[cut:") || n == "[unknown]")
            && names.last().is_some_and(|n| n == "__clone3");
        // Each method in order, one frame apart: none is skipped.
        let at = names.iter().position(|n| method_of(n) == METHODS[0]);
        let in_order =
            at.is_some_and(|i| names[i..].iter().take(3).map(|n| method_of(n)).eq(METHODS));
        if on["kind"] == "sleep" && names.windows(3).any(|w| w.iter().eq(INLINED.iter())) {
            inlined += ns;
        }
        if whole && in_order {
            named += ns;
        }
        // Each worker's Java code was entered from the JVM's C++ through the
        // call stub, named as HotSpot names it.
        if whole && names.iter().any(|n| n == "[jvm:StubRoutines::call_stub]") {
            entered += ns;
        }
    }
    assert!(total > 2_000_000_000, "the workers waited only {total} ns");
    eprintln!("{named} of {total} ns in whole stacks naming the Java methods");
    assert!(named * 10 >= total * 9, "only {named} of {total} ns named whole: {doc:#}");
    assert!(entered * 10 >= total * 9, "only {entered} of {total} ns through the call stub");
    // The VM thread waits for its next operation on one of HotSpot's own
    // monitors, labelled as such rather than as a bare condition variable.
    let vm = doc["records"].as_array().unwrap().iter().filter(|r| r["comm"] == "VM Thread");
    let (mut vm_total, mut vm_monitor) = (0u64, 0u64);
    for r in vm {
        let ns = r["total_ns"].as_u64().unwrap();
        vm_total += ns;
        // Named by the global that holds it, as HotSpot's sources name it.
        if r["waits_on"]["lock"] == "JVM internal monitor VMOperation_lock" {
            vm_monitor += ns;
        }
    }
    assert!(vm_monitor * 10 >= vm_total * 9 && vm_total > 0, "{vm_monitor} of {vm_total} ns");
    assert!(slept > 500_000_000, "the workers slept only {slept} ns: {doc:#}");
    assert!(asked * 10 >= slept * 9, "only {asked} of {slept} ns of sleep with its 2 ms");
    eprintln!("{inlined} of {slept} ns of sleep with its methods and their lines");
    assert!(inlined * 10 >= slept * 9, "only {inlined} of {slept} ns with {INLINED:?}: {doc:#}");
    // Those under way as the trace began too: a starved worker parks again
    // and again in one entry, which its hook never saw begin.
    eprintln!("{in_monitor} of {entering} ns entering the monitor named by its object");
    assert!(entering > 200_000_000, "the workers entered the monitor for only {entering} ns");
    assert!(in_monitor * 10 >= entering * 9, "only {in_monitor} of {entering} ns named");
    assert_eq!(monitors.len(), 1, "one monitor, one label: {monitors:?}");
    // `blocked` walks the threads as they wait now, through the same frames.
    let out = &blocked.stdout;
    let worker =
        out.split("\n\n").find(|t| t.starts_with("worker-")).unwrap_or_else(|| panic!("{out}"));
    assert!(METHODS.iter().all(|m| worker.contains(m)), "{worker}");
    // ... and says what each worker waits on as the other views do.
    let workers: Vec<&str> = out.split("\n\n").filter(|t| t.starts_with("worker-")).collect();
    // (A worker on its way between the two may be running, and not listed.)
    assert!(workers.len() >= 3, "{out}");
    let told = |t: &&str| t.contains("waits on Java monitor") || t.contains("sleeps for");
    // (One may be caught between, as at a safepoint the JVM holds then.)
    assert!(workers.iter().filter(|t| told(t)).count() + 1 >= workers.len(), "{out}");
    assert!(workers.iter().any(|t| t.contains("waits on Java monitor")), "{out}");
}

/// The bin directory of a JDK of release 25 or later under /usr/lib/jvm, as
/// its `release` file says (the machine image has Temurin 25; no package
/// archive setup reaches has one).
fn later_jdk() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/jvm")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let release = std::fs::read_to_string(e.path().join("release")).ok()?;
            let version = release.lines().find_map(|l| l.strip_prefix("JAVA_VERSION="))?;
            let major = version.trim_matches('"').split('.').next()?.parse().ok()?;
            let bin = e.path().join("bin");
            (major >= 25 && bin.join("javac").exists()).then_some((major, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

#[test]
fn compiled_frames_on_jdk_25_name_their_inlined_methods_and_lines() {
    require_bpf!();
    // JDK 25 keeps compiled code's scopes apart from the code cache; JDK 17
    // (the default) is checked by the test above.
    let Some(bin) = later_jdk() else {
        eprintln!("skipped {}: no JDK 25 or later under /usr/lib/jvm", module_path!());
        return;
    };
    let (java, _dir) = start_in(Some(&bin), "Turns", "java-25");
    // Past the JIT's first compilations, as a service in use is.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let pid = java.0.id().to_string();
    let doc = json(&run(&["--json", "-p", &pid, "3"]));
    drop(java);
    let (mut slept, mut inlined, mut entering, mut placed) = (0u64, 0u64, 0u64, 0u64);
    for r in doc["records"].as_array().unwrap() {
        if !r["comm"].as_str().unwrap_or("").starts_with("worker-") {
            continue;
        }
        let names = stack_names(&r["user_stack"]);
        let ns = r["total_ns"].as_u64().unwrap();
        // A sleep: Thread.sleep inlined into the compiled handle(), with
        // the methods and lines jstack gives.
        if r["waits_on"]["kind"] == "sleep" {
            slept += ns;
            if names.windows(3).any(|w| w.iter().eq(INLINED.iter())) {
                inlined += ns;
            }
        }
        // Entering the monitor from compiled code: handle() at the line of
        // its synchronized block.
        if r["waits_on"]["lock"].as_str().unwrap_or("").starts_with("Java monitor") {
            entering += ns;
            if names.iter().any(|n| n == "Turns.handle (Turns.java:12)") {
                placed += ns;
            }
        }
    }
    eprintln!(
        "JDK 25: {inlined} of {slept} ns of sleep, {placed} of {entering} ns entering placed"
    );
    assert!(slept > 500_000_000, "the workers slept only {slept} ns: {doc:#}");
    assert!(inlined * 10 >= slept * 9, "only {inlined} of {slept} ns with {INLINED:?}: {doc:#}");
    assert!(entering > 200_000_000, "the workers entered the monitor for only {entering} ns");
    assert!(placed * 10 >= entering * 9, "only {placed} of {entering} ns at handle's line");
}

/// An ISO-8601 duration as Flight Recorder writes it (`PT0.002088421S`,
/// `PT1M2.5S`), in nanoseconds.
fn iso_duration_ns(d: &str) -> i128 {
    let body = d.strip_prefix("PT").unwrap_or_else(|| panic!("duration {d}"));
    let (mut ns, mut num) = (0f64, String::new());
    for c in body.chars() {
        match c {
            'H' | 'M' | 'S' => {
                let v: f64 = num.parse().unwrap_or_else(|_| panic!("duration {d}"));
                ns += v * match c {
                    'H' => 3.6e12,
                    'M' => 6e10,
                    _ => 1e9,
                };
                num.clear();
            }
            c => num.push(c),
        }
    }
    ns as i128
}

/// Flight Recorder's sleeping and monitor-entering time of the workers within
/// [from, to) (ns since the epoch): each event clipped to the window.
fn jfr_split(events: &Value, (from, to): (i128, i128)) -> (i128, i128) {
    let (mut sleep, mut enter) = (0i128, 0i128);
    for e in events["recording"]["events"].as_array().unwrap() {
        let v = &e["values"];
        if !v["eventThread"]["osName"].as_str().unwrap_or("").starts_with("worker-") {
            continue;
        }
        let start = parse_rfc3339(v["startTime"].as_str().unwrap());
        let end = start + iso_duration_ns(v["duration"].as_str().unwrap());
        let ns = (end.min(to) - start.max(from)).max(0);
        match e["type"].as_str().unwrap() {
            "jdk.ThreadSleep" => sleep += ns,
            "jdk.JavaMonitorEnter" => enter += ns,
            _ => {}
        }
    }
    (sleep, enter)
}

/// One comparison with Flight Recorder on JVM `pid`: sleep's share of the
/// workers' blocked time by topwaits and by Flight Recorder, and what to show
/// if they disagree.
fn jfr_comparison(pid: &str, dir: &std::path::Path, attempt: u32) -> (f64, f64, String) {
    let settings = dir.join("waits.jfc");
    std::fs::write(
        &settings,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<configuration version="2.0" label="topwaits test">
  <event name="jdk.ThreadSleep"><setting name="enabled">true</setting>
    <setting name="stackTrace">false</setting><setting name="threshold">0 ms</setting></event>
  <event name="jdk.JavaMonitorEnter"><setting name="enabled">true</setting>
    <setting name="stackTrace">false</setting><setting name="threshold">0 ms</setting></event>
</configuration>
"#,
    )
    .unwrap();
    let recording = dir.join(format!("waits-{attempt}.jfr"));
    let name = format!("name=tw{attempt}");
    let jcmd = |args: &[String]| {
        let out = Command::new("jcmd").arg(pid).args(args).output().unwrap();
        assert!(out.status.success(), "jcmd {args:?}: {}", String::from_utf8_lossy(&out.stdout));
    };
    // Flight Recorder writes a wait when it ends: it records from before the
    // trace to after it, and each event is clipped to the trace's window.
    jcmd(&[
        "JFR.start".into(),
        name.clone(),
        format!("settings={}", settings.display()),
        format!("filename={}", recording.display()),
    ]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    // Its monitor events include the time a waiter spins: traced on the CPU too.
    let finished = run(&["--json", "--on-cpu", "-p", pid, "3"]);
    let doc = json(&finished);
    std::thread::sleep(std::time::Duration::from_millis(500));
    jcmd(&["JFR.stop".into(), name]);
    let printed = Command::new("jfr")
        .args(["print", "--json", "--events", "jdk.ThreadSleep,jdk.JavaMonitorEnter"])
        .arg(&recording)
        .output()
        .unwrap();
    assert!(printed.status.success(), "jfr print: {}", String::from_utf8_lossy(&printed.stderr));
    let events: Value = serde_json::from_slice(&printed.stdout).unwrap();
    let window = (
        parse_rfc3339(doc["started_at"].as_str().unwrap()),
        parse_rfc3339(doc["ended_at"].as_str().unwrap()),
    );
    let (jfr_sleep, jfr_enter) = jfr_split(&events, window);
    // topwaits: the workers' waits labelled a Java sleep or the monitor, and
    // their time on the CPU or in the run queue while inside the monitor's
    // entry (a waiter spinning before it parks), which Flight Recorder counts
    // as entering. The rest is kept, with its leaf frames, to be shown.
    let (mut sleep, mut enter) = (0i128, 0i128);
    let mut rest = std::collections::BTreeMap::<String, i128>::new();
    for r in doc["records"].as_array().unwrap() {
        if !r["comm"].as_str().unwrap_or("").starts_with("worker-") {
            continue;
        }
        let ns = r["total_ns"].as_u64().unwrap() as i128;
        let w = &r["waits_on"];
        let frames: Vec<&str> = r["user_stack"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["symbol"].as_str())
            .collect();
        let entering = frames.iter().any(|f| f.starts_with("ObjectMonitor::enter"));
        match (w["kind"].as_str(), w["syscall"].as_str(), w["lock"].as_str()) {
            (Some("sleep"), Some("Thread.sleep"), _) => sleep += ns,
            (Some("futex"), _, Some(lock)) if lock.starts_with("Java monitor") => enter += ns,
            (Some("running" | "run_queue"), ..) if entering => enter += ns,
            (kind, _, lock) => {
                let what = format!(
                    "{} {} [{}; {}]",
                    kind.unwrap_or("?"),
                    lock.unwrap_or(""),
                    r["user_stack_status"].as_str().unwrap_or("?"),
                    frames[..frames.len().min(6)].join(" <- ")
                );
                *rest.entry(what).or_default() += ns;
            }
        }
    }
    assert!(jfr_sleep + jfr_enter > 1_000_000_000, "JFR saw only {jfr_sleep} + {jfr_enter} ns");
    assert!(sleep + enter > 1_000_000_000, "topwaits saw only {sleep} + {enter} ns");
    let share = |a: i128, b: i128| a as f64 / (a + b) as f64;
    let workers: Vec<&Value> = doc["thread_times"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["comm"].as_str().unwrap_or("").starts_with("worker-"))
        .collect();
    let detail = format!(
        "topwaits {sleep} + {enter} ns, Flight Recorder {jfr_sleep} + {jfr_enter} ns; \
         the workers' other time (ns): {rest:#?}\nthe workers' times: {workers:?}\n\
         lost: {}\ntopwaits' stderr: {}",
        doc["lost"], finished.stderr
    );
    (share(sleep, enter), share(jfr_sleep, jfr_enter), detail)
}

#[test]
fn the_split_between_sleeping_and_entering_the_monitor_agrees_with_flight_recorder() {
    require_bpf!();
    if !jdk_here(module_path!()) {
        return;
    }
    let (java, dir) = start("java-jfr");
    let pid = java.0.id().to_string();
    // Once in many CI runs (never by hand) topwaits saw a third of the
    // monitor-entering time Flight Recorder saw. What the rest was is printed,
    // and the comparison is made once more on the same JVM: a second miss fails.
    let (mut ours, mut theirs, detail) = jfr_comparison(&pid, &dir.0, 1);
    if (ours - theirs).abs() > 0.1 {
        eprintln!(
            "first comparison disagreed: topwaits {ours:.3}, Flight Recorder {theirs:.3}\n{detail}"
        );
        let again = jfr_comparison(&pid, &dir.0, 2);
        assert!(
            (again.0 - again.1).abs() <= 0.1,
            "sleep's share of the blocked time, twice: topwaits {:.3} then {:.3}, Flight \
             Recorder {theirs:.3} then {:.3}\n{}",
            ours,
            again.0,
            again.1,
            again.2
        );
        (ours, theirs) = (again.0, again.1);
    }
    drop(java);
    eprintln!("sleep's share: topwaits {ours:.3}, Flight Recorder {theirs:.3}");
}

/// The objects whose monitors jstack (`jcmd PID Thread.print`) says each
/// thread waits to lock: (thread name, `<0x...> (a Class)`).
fn jstack_waits(pid: &str) -> Vec<(String, String)> {
    let out = Command::new("jcmd").args([pid, "Thread.print"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut waits = Vec::new();
    let mut thread = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix('"') {
            thread = rest.split('"').next().unwrap_or("").to_string();
        } else if let Some(object) = line.trim().strip_prefix("- waiting to lock ") {
            waits.push((thread.clone(), object.to_string()));
        }
    }
    // Its deadlock section repeats the threads' waits.
    waits.sort();
    waits.dedup();
    waits
}

#[test]
fn a_java_deadlock_is_found_with_its_monitors_as_jstack_names_them() {
    require_bpf!();
    if !jdk_here(module_path!()) {
        return;
    }
    let (java, _dir) = start_program("Deadlock", "java-deadlock");
    let pid = java.0.id().to_string();
    let doc = json(&run(&["blocked", "--json", "-p", &pid]));
    let text = run(&["blocked", "-p", &pid]).stdout;
    let jstack = jstack_waits(&pid);
    drop(java);
    // The JVM's own view: each taker waits to lock the other's object.
    assert_eq!(jstack.len(), 2, "{jstack:?}");
    let takers: Vec<&Value> = doc["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["comm"].as_str().unwrap_or("").starts_with("taker-"))
        .collect();
    assert_eq!(takers.len(), 2, "{doc:#}");
    for t in &takers {
        let w = &t["waits_on"];
        assert_eq!(w["lock"], "java_monitor", "{doc:#}");
        // The same object as jstack's, by address and class.
        let mine = (t["comm"].as_str().unwrap().to_string(), w["object"].as_str().unwrap().into());
        assert!(jstack.contains(&mine), "topwaits {mine:?}, jstack {jstack:?}");
        let other = takers.iter().find(|o| o["tid"] != t["tid"]).unwrap();
        assert_eq!(w["owner_tid"], other["tid"], "{doc:#}");
    }
    let classes: Vec<&str> =
        takers.iter().map(|t| t["waits_on"]["object"].as_str().unwrap()).collect();
    assert!(classes.iter().any(|c| c.ends_with("(a Deadlock$First)")), "{classes:?}");
    assert!(classes.iter().any(|c| c.ends_with("(a Deadlock$Second)")), "{classes:?}");
    // One deadlock, of the two takers.
    let cycles = doc["cycles"].as_array().unwrap();
    assert_eq!(cycles.len(), 1, "{doc:#}");
    let mut in_cycle: Vec<u64> =
        cycles[0]["threads"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
    let mut tids: Vec<u64> = takers.iter().map(|t| t["tid"].as_u64().unwrap()).collect();
    in_cycle.sort_unstable();
    tids.sort_unstable();
    assert_eq!(in_cycle, tids, "{doc:#}");
    assert!(text.contains(", 1 deadlock."), "{text}");
    assert!(text.contains("(a Deadlock$First) (synchronized) held by tid"), "{text}");
}

#[test]
fn object_wait_is_labelled_by_the_object_notified() {
    require_bpf!();
    if !jdk_here(module_path!()) {
        return;
    }
    let (java, _dir) = start_program("Handoff", "java-handoff");
    let pid = java.0.id().to_string();
    let doc = json(&run(&["--json", "-p", &pid, "2"]));
    drop(java);
    // The consumer's waits for each item, one label naming the object.
    let (mut waited, mut named) = (0u64, 0u64);
    let mut labels = std::collections::BTreeSet::new();
    for r in doc["records"].as_array().unwrap().iter().filter(|r| r["comm"] == "consumer") {
        let ns = r["total_ns"].as_u64().unwrap();
        let lock = r["waits_on"]["lock"].as_str().unwrap_or("");
        if lock.contains("Object.wait") {
            waited += ns;
            if lock.starts_with("a notify of <0x")
                && lock.ends_with("(a java.lang.Object) (Object.wait)")
            {
                named += ns;
                labels.insert(lock.to_string());
            }
        }
    }
    eprintln!("{named} of {waited} ns in Object.wait named by the object");
    assert!(waited > 1_000_000_000, "the consumer waited only {waited} ns: {doc:#}");
    assert!(named * 10 >= waited * 9, "only {named} of {waited} ns named: {doc:#}");
    assert_eq!(labels.len(), 1, "{labels:?}");
}

#[test]
fn a_jvm_started_during_the_trace_has_its_sleeps_and_monitors_labelled() {
    require_bpf!();
    if !jdk_here(module_path!()) {
        return;
    }
    // Every thread, so that the JVM is traced from its exec on.
    let tracer = Tracer::start(&["--json", "6"]);
    let (java, _dir) = start("java-late");
    let pid = java.0.id() as u64;
    let doc = json(&tracer.finish());
    drop(java);
    let (mut slept, mut asked, mut entering, mut named) = (0u64, 0u64, 0u64, 0u64);
    let (mut total, mut methods) = (0u64, 0u64);
    for r in doc["records"].as_array().unwrap() {
        if r["tgid"] != pid || !r["comm"].as_str().unwrap_or("").starts_with("worker-") {
            continue;
        }
        let (ns, on) = (r["total_ns"].as_u64().unwrap(), &r["waits_on"]);
        total += ns;
        methods += if stack_names(&r["user_stack"]).iter().any(|n| method_of(n) == METHODS[0]) {
            ns
        } else {
            0
        };
        if on["syscall"] == "Thread.sleep" {
            slept += ns;
            asked += if on["requested_ns"] == 2_000_000 { ns } else { 0 };
        }
        let lock = on["lock"].as_str().unwrap_or("");
        if lock.starts_with("Java monitor") {
            entering += ns;
            named += if lock.ends_with(MONITOR) { ns } else { 0 };
        }
    }
    // Its libjvm.so was hooked once its Java ran, a moment after its start.
    eprintln!("asked {asked} of {slept} ns, named {named} of {entering} ns");
    // ... and its Java methods named, its layout read once its tables were.
    assert!(methods * 10 >= total * 8, "only {methods} of {total} ns in stacks naming Java");
    assert!(slept > 500_000_000 && entering > 500_000_000, "{slept} and {entering} ns: {doc:#}");
    assert!(asked * 10 >= slept * 8, "only {asked} of {slept} ns of sleep with its 2 ms");
    assert!(named * 10 >= entering * 8, "only {named} of {entering} ns with the monitor named");
}
