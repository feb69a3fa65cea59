//! Running tracers for the benchmark: start one and know when it has attached,
//! stop it and read its peak RSS, its BPF programs' run time (bpf_stats) and map
//! memory, its own CPU time, and the per-switch cost of its programs.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};

/// One tracer configuration.
pub struct Tracer {
    pub name: &'static str,
    pub cmd: Option<Vec<String>>,
}

impl Tracer {
    pub fn new(name: &'static str, cmd: &[&str]) -> Tracer {
        Tracer { name, cmd: Some(cmd.iter().map(|s| s.to_string()).collect()) }
    }
}
/// A BPF program's cumulative statistics.
#[derive(Clone, Debug)]
pub struct Prog {
    pub id: u64,
    pub name: String,
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// Parses `bpftool -j prog show` without a JSON dependency: the fields we need are
/// flat numbers and strings in each object.
pub fn progs() -> Result<Vec<Prog>> {
    let out = Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output()
        .context("bpftool is needed")?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(split_objects(&text)
        .into_iter()
        .filter_map(|o| {
            Some(Prog {
                id: num(o, "id")?,
                name: string(o, "name").unwrap_or_default(),
                run_time_ns: num(o, "run_time_ns").unwrap_or(0),
                run_cnt: num(o, "run_cnt").unwrap_or(0),
            })
        })
        .collect())
}

/// (id, bytes_memlock) of every map.
pub fn maps() -> Result<Vec<(u64, u64)>> {
    let out = Command::new("bpftool")
        .args(["-j", "map", "show"])
        .output()
        .context("bpftool is needed")?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(split_objects(&text)
        .into_iter()
        .filter_map(|o| Some((num(o, "id")?, num(o, "bytes_memlock").unwrap_or(0))))
        .collect())
}

/// Top-level objects of a JSON array, as text.
pub fn split_objects(text: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0usize, Vec::new());
    let mut in_str = false;
    let mut esc = false;
    for (i, c) in text.char_indices() {
        if in_str {
            match (esc, c) {
                (true, _) => esc = false,
                (false, '\\') => esc = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '{' => {
                if depth == 0 {
                    start = i;
                }
                depth += 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    out.push(&text[start..=i]);
                }
            }
            _ => {}
        }
    }
    out
}

pub fn field<'a>(obj: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":");
    let at = obj.find(&pat)? + pat.len();
    Some(obj[at..].trim_start())
}

pub fn num(obj: &str, key: &str) -> Option<u64> {
    let v = field(obj, key)?;
    let end = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    v[..end].parse().ok()
}

pub fn string(obj: &str, key: &str) -> Option<String> {
    let v = field(obj, key)?.strip_prefix('"')?;
    Some(v[..v.find('"')?].to_string())
}
/// A started tracer, with the programs and maps it created.
pub struct Running {
    pub child: Child,
    pub startup: Duration,
    /// The programs it created, by id, with their names.
    pub prog_ids: BTreeMap<u64, String>,
    pub map_bytes: u64,
    /// From the start to the line on stderr that says topwaits' last programs
    /// (the kernel stack learners, loaded after attaching) are in place, once
    /// seen; topwaits says it at `RUST_LOG=topwaits::run::trace=debug`.
    pub learners: std::sync::Arc<std::sync::Mutex<Option<Duration>>>,
}

/// A tracer still running when its round fails (an error or a panic in the
/// bench) is killed, so that it does not trace the rounds after it. `try_wait`
/// says Ok(None) only for a child of ours not yet reaped: one that [`end`]
/// reaped, or a pid since reused, is left alone.
impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The debug line topwaits prints once its programs loaded after attaching are in place.
pub const LEARNERS_IN_PLACE: &str = "kernel stack learners in place";

pub fn start(cmd: &[String], env: &[(&str, &str)]) -> Result<Running> {
    let before: BTreeSet<u64> = progs()?.into_iter().map(|p| p.id).collect();
    let maps_before: BTreeSet<u64> = maps()?.into_iter().map(|m| m.0).collect();
    let t0 = Instant::now();
    let mut child = Command::new(&cmd[0])
        .args(&cmd[1..])
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("failed to start {}", cmd[0]))?;
    // Ready when its sched_switch program exists (peers print no marker of their own).
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = t0 + Duration::from_secs(30);
    // topwaits says when it has attached: wait for that line alone, since running
    // bpftool meanwhile takes CPU from the start being measured.
    let marked = cmd[0].ends_with("topwaits");
    let ready = loop {
        if marked {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(l) if l.starts_with("Tracing") || l.starts_with("Serving") => {
                    break t0.elapsed()
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let _ = child.kill();
                    bail!("{} exited before attaching", cmd[0]);
                }
                _ => {}
            }
        } else {
            let now: Vec<Prog> = progs()?;
            if now.iter().any(|p| !before.contains(&p.id) && p.name.starts_with("sched_switch")) {
                break t0.elapsed();
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("{} did not attach within 30 s", cmd[0]);
        }
    };
    let prog_ids =
        progs()?.into_iter().filter(|p| !before.contains(&p.id)).map(|p| (p.id, p.name)).collect();
    let map_bytes = maps()?.into_iter().filter(|m| !maps_before.contains(&m.0)).map(|m| m.1).sum();
    // Keep draining stderr so the tracer never blocks on it, noting when the
    // learners are in place.
    let learners = std::sync::Arc::new(std::sync::Mutex::new(None));
    let seen = learners.clone();
    std::thread::spawn(move || {
        while let Ok(line) = rx.recv() {
            if line.contains(LEARNERS_IN_PLACE) {
                if let Ok(mut w) = seen.lock() {
                    w.get_or_insert(t0.elapsed());
                }
            }
        }
    });
    Ok(Running { child, startup: ready, prog_ids, map_bytes, learners })
}

/// Stops a tracer with SIGINT; returns (time to exit, peak RSS in KiB).
pub fn stop(r: Running) -> Result<(Duration, u64)> {
    end(r, true)
}

/// Waits for a tracer to end: with `interrupt`, after sending it SIGINT; without,
/// by itself (a trace of `-p` ends when its process exits). Returns the time from
/// now to its exit and its peak RSS in KiB.
pub fn end(mut r: Running, interrupt: bool) -> Result<(Duration, u64)> {
    let pid = r.child.id() as i32;
    let t0 = Instant::now();
    let mut status = 0i32;
    let mut usage = [0i64; 18];
    // SIGINT, and again every 10 s: a tracer can miss one that lands between
    // installing its handler and going to sleep (libbpf-tools offcputime then
    // sleeps forever). 10 s is well past any report, which a second SIGINT would
    // cut short. After a minute, SIGKILL.
    let mut rc = 0;
    for attempt in 0.. {
        let sig = if attempt < 6 { 2 } else { 9 };
        if interrupt || attempt > 0 {
            unsafe { libc_kill(pid, sig) };
        }
        let until = Instant::now() + Duration::from_secs(10);
        // WNOHANG = 1.
        while rc == 0 && Instant::now() < until {
            rc = unsafe { libc_wait4(pid, &mut status, 1, usage.as_mut_ptr()) };
            if rc == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if rc != 0 {
            break;
        }
    }
    if rc != pid {
        let _ = r.child.wait();
    }
    // ru_maxrss is the 3rd field after two timevals (4 longs): index 4, in KiB.
    Ok((t0.elapsed(), usage[4] as u64))
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
    #[link_name = "wait4"]
    fn libc_wait4(pid: i32, status: *mut i32, options: i32, rusage: *mut i64) -> i32;
}

pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v[v.len() / 2]
}
/// CPU time, in ns, of every thread of `pid`: the scheduler's exact sums in
/// /proc/PID/task/*/schedstat, not tick-sampled times.
pub fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Waits (at most 5 s) until process `pid` uses under 1 ms of CPU in 200 ms.
pub fn settle(pid: u32) {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        let before = cpu_ns(pid);
        std::thread::sleep(Duration::from_millis(200));
        if cpu_ns(pid).saturating_sub(before) < 1_000_000 {
            return;
        }
    }
}

/// Instructions the verifier processed to load the BPF programs that process
/// `pid` holds (`verified_insns` in their fdinfo, Linux 5.16+; 0 where not
/// given). Start-up is mostly this work, and unlike time it does not swing.
pub fn verified_insns(pid: u32) -> u64 {
    prog_fdinfos(&fdinfo_dir(pid))
        .iter()
        .filter_map(|(_, info)| fdinfo_field(info, "verified_insns"))
        .sum()
}

/// The fdinfo directory of process `pid`.
fn fdinfo_dir(pid: u32) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/proc/{pid}/fdinfo"))
}

/// The fdinfo texts, with their program's id, of the BPF program descriptors
/// in an fdinfo directory (none when it cannot be read).
fn prog_fdinfos(fdinfo: &std::path::Path) -> Vec<(u64, String)> {
    let Ok(dir) = std::fs::read_dir(fdinfo) else { return Vec::new() };
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|info| Some((fdinfo_field(&info, "prog_id")?, info)))
        .collect()
}

/// A numeric `key:` line of an fdinfo file.
pub fn fdinfo_field(info: &str, key: &str) -> Option<u64> {
    info.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().parse().ok())
}

/// The statistics of the programs tracer `r` created, read from the
/// descriptors it holds (`/proc/PID/fdinfo`): running bpftool instead, just
/// before the workload, had the tracer handle a new program's arrival (its
/// exec, maps and, with an empty cache, tables) inside the measured window.
/// bpftool is the fallback for a tracer that holds no descriptor of some of
/// its programs.
pub fn snapshot(r: &Running) -> Result<Vec<Prog>> {
    let held = held_progs(&fdinfo_dir(r.child.id()), &r.prog_ids);
    if held.len() == r.prog_ids.len() {
        return Ok(held);
    }
    Ok(progs()?.into_iter().filter(|p| r.prog_ids.contains_key(&p.id)).collect())
}

/// The programs among `names` that a process holds a descriptor of (`fdinfo`:
/// its fdinfo directory), each once, with their statistics.
fn held_progs(fdinfo: &std::path::Path, names: &BTreeMap<u64, String>) -> Vec<Prog> {
    let mut out: BTreeMap<u64, Prog> = BTreeMap::new();
    for (id, info) in prog_fdinfos(fdinfo) {
        let Some(name) = names.get(&id) else { continue };
        out.entry(id).or_insert_with(|| Prog {
            id,
            name: name.clone(),
            run_time_ns: fdinfo_field(&info, "run_time_ns").unwrap_or(0),
            run_cnt: fdinfo_field(&info, "run_cnt").unwrap_or(0),
        });
    }
    out.into_values().collect()
}

/// Run time of all programs between two snapshots, and the sched_switch runs.
pub fn spent(before: &[Prog], after: &[Prog]) -> (u64, u64) {
    spent_counting(before, after, "sched_switch")
}

/// Run time of all programs between two snapshots, and the runs of those
/// whose name starts with `counted`.
pub fn spent_counting(before: &[Prog], after: &[Prog], counted: &str) -> (u64, u64) {
    let (mut total_ns, mut switches) = (0u64, 0u64);
    for a in after {
        let b = before.iter().find(|b| b.id == a.id);
        let (dt, dc) = b.map_or((a.run_time_ns, a.run_cnt), |b| {
            (a.run_time_ns - b.run_time_ns, a.run_cnt - b.run_cnt)
        });
        total_ns += dt;
        if a.name.starts_with(counted) {
            switches += dc;
        }
    }
    (total_ns, switches)
}

/// Per-switch cost of a tracer's programs while `work` runs.
pub fn cost_during(t: &Tracer, work: impl FnOnce() -> Result<()>) -> Result<f64> {
    let cmd = t.cmd.as_ref().ok_or_else(|| anyhow!("{} traces nothing", t.name))?;
    let r = start(cmd, &[])?;
    let before = snapshot(&r)?;
    let worked = work();
    let after = snapshot(&r);
    stop(r)?;
    worked?;
    let (total_ns, switches) = spent(&before, &after?);
    if switches == 0 {
        bail!("{} saw no switches", t.name);
    }
    Ok(total_ns as f64 / switches as f64)
}

#[cfg(test)]
mod tests {
    use super::fdinfo_field;

    #[test]
    fn a_tracer_dropped_mid_round_is_killed_and_an_ended_one_left_alone() {
        let spawn = |secs: &str| super::Running {
            child: std::process::Command::new("sleep").arg(secs).spawn().unwrap(),
            startup: std::time::Duration::ZERO,
            prog_ids: Default::default(),
            map_bytes: 0,
            learners: Default::default(),
        };
        let r = spawn("30");
        let pid = r.child.id();
        drop(r);
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        assert!(state.is_none(), "killed and reaped: {state:?}");
        // One that ends by itself is reaped by `end`; dropping it after sends
        // nothing (SIGINT is not used here: a shell's background job ignores it).
        let r = spawn("0.1");
        let (took, _) = super::end(r, false).unwrap();
        assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    }

    /// A program held twice is counted once, and programs not the tracer's
    /// and descriptors of other kinds are left out.
    #[test]
    fn held_programs_come_from_the_fdinfo_of_their_descriptors() {
        let dir = std::env::temp_dir().join(format!("xtask-fdinfo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let prog = |id: u64, ns: u64, cnt: u64| {
            format!(
                "pos:\t0\nprog_type:\t17\nprog_id:\t{id}\nrun_time_ns:\t{ns}\nrun_cnt:\t{cnt}\n"
            )
        };
        std::fs::write(dir.join("3"), prog(7, 5000, 10)).unwrap();
        std::fs::write(dir.join("4"), prog(7, 5000, 10)).unwrap();
        std::fs::write(dir.join("5"), prog(8, 900, 3)).unwrap();
        std::fs::write(dir.join("6"), prog(99, 1, 1)).unwrap();
        std::fs::write(dir.join("7"), "pos:\t0\nflags:\t02\nmap_id:\t8\n").unwrap();
        let names = [(7, "sched_switch".to_string()), (8, "sched_waking".to_string())]
            .into_iter()
            .collect();
        let held = super::held_progs(&dir, &names);
        std::fs::remove_dir_all(&dir).unwrap();
        let got: Vec<_> =
            held.iter().map(|p| (p.id, p.name.as_str(), p.run_time_ns, p.run_cnt)).collect();
        assert_eq!(got, [(7, "sched_switch", 5000, 10), (8, "sched_waking", 900, 3)]);
        assert_eq!(super::spent(&[], &held), (5900, 10));
    }

    #[test]
    fn fdinfo_fields_are_read_by_exact_key() {
        let info = "pos:\t0\nflags:\t02000002\nmnt_id:\t16\nino:\t2061\nprog_type:\t17\nprog_jited:\t1\n\
                    prog_tag:\tad138c64601ea96c\nmemlock:\t49152\nprog_id:\t47267\nrun_time_ns:\t0\nrun_cnt:\t0\n\
                    recursion_misses:\t0\nverified_insns:\t16927\n";
        assert_eq!(fdinfo_field(info, "verified_insns"), Some(16927));
        assert_eq!(fdinfo_field(info, "prog_id"), Some(47267));
        // A key is matched whole, not as the prefix of another.
        assert_eq!(fdinfo_field(info, "run"), None);
        assert_eq!(fdinfo_field("map_type:\t1\n", "verified_insns"), None);
    }
}
