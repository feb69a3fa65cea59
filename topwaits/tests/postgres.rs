//! Kernel test on a real server with an oracle of its own: PostgreSQL samples
//! what each backend waits on (pg_stat_activity's `wait_event_type`: Lock,
//! LWLock, IO, Client). A throwaway cluster runs pgbench's 8 clients while
//! topwaits records the backends and a backend of the test samples
//! pg_stat_activity every 10 ms. The backends' blocked time, classified by
//! their whole user stacks (Debian's postgres has no frame pointers), must
//! split as PostgreSQL's samples do; `why` over every postgres process must
//! give a short answer, each cause said once: a few causes cover most of the
//! waiting, the WAL flush among the first; and `locks` must rank PostgreSQL's
//! own locks, their waiting as PostgreSQL counts its Lock and LWLock waits.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// The newest PostgreSQL's binaries (`/usr/lib/postgresql/N/bin`), if installed.
fn pg_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .collect();
    dirs.sort_by_key(|d| {
        d.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
    });
    dirs.into_iter().rev().find(|d| d.join("initdb").exists() && d.join("pgbench").exists())
}

/// Runs `cmd` as the `postgres` user.
fn as_postgres(bin: &Path, cmd: &str) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "postgres", "--"]).arg(bin.join(cmd));
    c
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A cluster in a scratch directory, on a Unix socket there; stopped and
/// removed when dropped.
struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: String,
}

impl Cluster {
    fn start(bin: PathBuf) -> Cluster {
        let dir = std::env::temp_dir().join(format!("tw-pg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(Command::new("chown").arg("postgres").arg(&dir).status().unwrap().success());
        let port = (20_000 + std::process::id() % 20_000).to_string();
        let c = Cluster { bin, dir, port };
        ok(
            as_postgres(&c.bin, "initdb")
                .args(["-A", "trust", "-D"])
                .arg(c.dir.join("data"))
                .output()
                .unwrap(),
            "initdb",
        );
        let opts = format!("-p {} -k {} -c max_connections=30", c.port, c.dir.display());
        ok(
            as_postgres(&c.bin, "pg_ctl")
                .args(["-w", "-D"])
                .arg(c.dir.join("data"))
                .args(["-o", &opts, "-l"])
                .arg(c.dir.join("log"))
                .arg("start")
                .output()
                .unwrap(),
            "pg_ctl start",
        );
        ok(c.pgbench(&["-i", "-q", "-s", "1"]).output().unwrap(), "pgbench -i");
        c
    }

    fn pgbench(&self, args: &[&str]) -> Command {
        let mut cmd = as_postgres(&self.bin, "pgbench");
        cmd.args(["-h", &self.dir.to_string_lossy(), "-p", &self.port]).args(args).arg("postgres");
        cmd
    }

    fn psql(&self, sql: &str) -> String {
        let out = as_postgres(&self.bin, "psql")
            .args([
                "-X",
                "-q",
                "-At",
                "-h",
                &self.dir.to_string_lossy(),
                "-p",
                &self.port,
                "-d",
                "postgres",
                "-c",
                sql,
            ])
            .output()
            .unwrap();
        ok(out, sql)
    }

    /// The postmaster and every process it started.
    fn processes(&self) -> Vec<u32> {
        let pm: u32 = std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let mut out = vec![pm];
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(pm) {
                out.push(pid);
            }
        }
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = as_postgres(&self.bin, "pg_ctl")
            .args(["-D"])
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Kills pgbench when dropped.
struct Load(Child);

impl Drop for Load {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What PostgreSQL calls a wait, by the function the backend's stack waits in,
/// leaf first: the first frame that tells decides.
fn class_of(user: &[String]) -> Option<&'static str> {
    const CLASSES: &[(&str, &[&str])] = &[
        ("LWLock", &["LWLockAcquire", "LWLockWaitForVar", "LWLockAcquireOrWait"]),
        ("Lock", &["ProcSleep"]),
        ("Client", &["secure_read", "secure_write", "pq_recvbuf", "pq_getbyte", "pq_flush"]),
        (
            "IO",
            &[
                "XLogFlush",
                "XLogWrite",
                "issue_xlog_fsync",
                "pg_fsync",
                "FileRead",
                "FileWrite",
                "mdread",
                "mdwrite",
                "mdextend",
            ],
        ),
    ];
    user.iter().find_map(|f| {
        CLASSES.iter().find(|(_, names)| names.iter().any(|n| f.starts_with(n))).map(|(c, _)| *c)
    })
}

/// Samples the pgbench backends' wait event types every 10 ms from a backend of
/// its own for about `secs`, counting each type (CPU for none).
fn sample_sql(secs: f64) -> String {
    let n = (secs * 100.0) as u32;
    format!(
        "CREATE TEMP TABLE s(t text);
         DO $$ BEGIN FOR i IN 1..{n} LOOP
           PERFORM pg_stat_clear_snapshot();
           INSERT INTO s SELECT coalesce(wait_event_type, 'CPU') FROM pg_stat_activity
             WHERE application_name = 'pgbench' AND backend_type = 'client backend';
           PERFORM pg_sleep(0.01);
         END LOOP; END $$;
         SELECT t || ' ' || count(*) FROM s GROUP BY t;"
    )
}

#[test]
fn backends_blocked_time_splits_as_postgresql_accounts_it_and_why_is_short() {
    require_bpf!();
    let bin = pg_bin();
    if !present(
        module_path!(),
        "PostgreSQL (apt postgresql; cargo xtask setup installs it)",
        bin.is_none().then(|| "not installed".into()),
    ) {
        return;
    }
    let cluster = Cluster::start(bin.unwrap());
    let load = Load(
        cluster
            .pgbench(&["-c", "8", "-j", "2", "-T", "30"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // The 8 backends, once connected.
    let t0 = Instant::now();
    let backends: Vec<u32> = loop {
        let pids =
            cluster.psql("SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench'");
        let pids: Vec<u32> = pids.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if pids.len() == 8 {
            break pids;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "pgbench's 8 clients did not connect: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_millis(500));
    let all: Vec<String> = cluster.processes().iter().map(u32::to_string).collect();
    let file = format!("{}/pgbench.twr", env!("CARGO_TARGET_TMPDIR"));
    let traced = std::thread::scope(|s| {
        let rec = s.spawn(|| run(&["record", "--why", "-o", &file, "-p", &all.join(","), "4"]));
        std::thread::sleep(Duration::from_millis(600));
        let samples = cluster.psql(&sample_sql(3.0));
        (rec.join().unwrap(), samples)
    });
    drop(load);
    let (rec, samples) = traced;
    assert!(rec.status.success(), "{}", rec.stderr);

    // PostgreSQL's own split of the backends' blocked samples.
    let mut pg: BTreeMap<String, f64> = BTreeMap::new();
    for l in samples.lines() {
        if let Some((t, n)) = l.rsplit_once(' ') {
            pg.insert(t.to_string(), n.parse().unwrap());
        }
    }
    let pg_blocked: f64 = pg.iter().filter(|(t, _)| *t != "CPU").map(|(_, n)| n).sum();
    assert!(pg_blocked > 100.0, "too few blocked samples: {pg:?}");

    // topwaits' split of the same backends' blocked time (preemptions are no
    // wait PostgreSQL names), by their whole stacks.
    let doc = json(&run(&["report", &file, "--json"]));
    let mut tw: BTreeMap<&str, f64> = BTreeMap::new();
    let mut unplaced: Vec<(u64, Vec<String>, String)> = Vec::new();
    let mut tw_blocked = 0.0;
    for r in doc["records"].as_array().unwrap() {
        let tid = r["tid"].as_u64().unwrap() as u32;
        if !backends.contains(&tid)
            || r["waits_on"]["kind"] == "run_queue"
            || r["waits_on"]["kind"] == "running"
        {
            continue;
        }
        let ns = r["total_ns"].as_u64().unwrap();
        tw_blocked += ns as f64;
        let user = stack_names(&r["user_stack"]);
        match class_of(&user).filter(|_| r["user_stack_status"] == "ok") {
            Some(c) => *tw.entry(c).or_default() += ns as f64,
            None => unplaced.push((ns, user, r["user_stack_status"].to_string())),
        }
    }
    assert!(tw_blocked > 0.0, "no backend waits traced: {doc:#}");
    let unplaced_ns: u64 = unplaced.iter().map(|u| u.0).sum();
    unplaced.sort_by_key(|u| std::cmp::Reverse(u.0));
    assert!(
        unplaced_ns as f64 <= 0.1 * tw_blocked,
        "{:.1}% of the blocked time cut or unplaceable: {:#?}",
        100.0 * unplaced_ns as f64 / tw_blocked,
        &unplaced[..unplaced.len().min(8)]
    );
    eprintln!("class     PostgreSQL  topwaits");
    for class in ["Lock", "LWLock", "IO", "Client"] {
        let (p, t) = (
            pg.get(class).copied().unwrap_or(0.0) / pg_blocked,
            tw.get(class).copied().unwrap_or(0.0) / tw_blocked,
        );
        eprintln!("{class:<8}  {p:>10.3}  {t:>8.3}");
        assert!((p - t).abs() <= 0.1, "{class}: PostgreSQL's samples {p:.3}, topwaits {t:.3} of the blocked time (samples {pg:?})");
    }

    // why over every postgres process: a short answer, the WAL flush in it.
    let why = json(&run(&["why", &file, "--json", "-n", "0"]));
    let causes = why["causes"].as_array().unwrap();
    let mut covered = 0.0;
    let needed = causes.iter().take_while(|c| {
        let before = covered;
        covered += c["share"].as_f64().unwrap();
        before < 0.8
    });
    let needed = needed.count();
    assert!(
        needed <= 8,
        "{needed} causes to cover 80% of the waiting: {:#}",
        Value::Array(causes[..causes.len().min(12)].to_vec())
    );
    let flush = causes.iter().take(3).any(|c| {
        c["kind"] == "blocked"
            && stack_names(&c["user_stack"]).iter().any(|f| f == "XLogFlush")
            && c["waits_on"].as_str().is_some_and(|w| w.starts_with("disk"))
    });
    assert!(
        flush,
        "the WAL flush is not among the first three causes: {:#}",
        Value::Array(causes[..causes.len().min(6)].to_vec())
    );
    // Said once: no two causes print the same line.
    let lines: Vec<&str> = causes.iter().filter_map(|c| c["description"].as_str()).collect();
    let distinct: std::collections::BTreeSet<&str> = lines.iter().copied().collect();
    assert_eq!(distinct.len(), lines.len(), "causes that print alike: {lines:#?}");
    let text = run(&["why", &file, "-n", "5"]);
    eprintln!("{}", text.stdout);

    // locks: PostgreSQL's own locks, ranked, their waiting as PostgreSQL counts
    // it (the backends' blocked time, times its Lock and LWLock share).
    let locks = json(&run(&["locks", &file, "--json", "-n", "0", "--by", "thread"]));
    let mut lock_ns = 0u64;
    for l in locks["locks"].as_array().unwrap() {
        for s in l["waiters"].as_array().unwrap() {
            if s["tids"]
                .as_array()
                .unwrap()
                .iter()
                .all(|t| backends.contains(&(t.as_u64().unwrap() as u32)))
            {
                lock_ns += s["ns"].as_u64().unwrap();
            }
        }
    }
    let pg_locked = (pg.get("Lock").copied().unwrap_or(0.0)
        + pg.get("LWLock").copied().unwrap_or(0.0))
        / pg_blocked;
    let expected = tw_blocked * pg_locked;
    eprintln!(
        "lock waiting: topwaits locks {:.3} s, PostgreSQL's share {pg_locked:.3} of {:.3} s blocked: {:.3} s",
        lock_ns as f64 / 1e9,
        tw_blocked / 1e9,
        expected / 1e9
    );
    assert!(
        (lock_ns as f64 - expected).abs() <= 0.25 * expected,
        "locks' waiting {lock_ns} ns against {expected:.0} ns (PostgreSQL's Lock+LWLock share {pg_locked:.3}): {:#}",
        Value::Array(locks["locks"].as_array().unwrap().iter().take(4).cloned().collect())
    );
    let by_comm = json(&run(&["locks", &file, "--json", "-n", "3"]));
    let top = &by_comm["locks"][0];
    let waits_in = stack_names(&top["waiters"][0]["user_stack"]);
    assert!(
        waits_in.iter().any(|f| f == "ProcSleep" || f == "LWLockAcquire"),
        "the top lock's waiters: {top:#}"
    );
    let released_in = stack_names(&top["holders"][0]["user_stack"]);
    assert!(
        released_in
            .iter()
            .any(|f| f.starts_with("LockRelease") || f == "ProcLockWakeup" || f == "LWLockRelease"),
        "the top lock's holders release it: {top:#}"
    );
    let text = run(&["locks", &file, "-n", "2"]);
    eprintln!("{}", text.stdout);
}
