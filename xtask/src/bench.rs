//! `cargo xtask bench`: overhead of topwaits against libbpf-tools offcputime and a
//! bpftrace one-liner, measured in one run with interleaved rounds and medians (and
//! as the traced threads grow, in `scale_bench`), plus
//! start-up time, report time and peak RSS for ~20,000 unique stacks, kernel map
//! memory, the time of a `blocked` snapshot of 1,000 threads, and the share of
//! unresolved user frames against offcputime's on a Python HTTP server. Prints a markdown table and writes it to target/bench.md.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};

use crate::tracers::{
    cpu_ns, end, median, num, settle, snapshot, spent, start, stop, verified_insns, Running, Tracer,
};
use crate::{cargo, root, run};

#[derive(clap::Args)]
pub struct Options {
    /// Interleaved rounds per configuration; medians are reported.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Also run a soak of this many seconds under perf bench sched pipe, sampling
    /// topwaits' RSS and map memory (the README's soak figure uses 600); and
    /// serve's soak under churn for as long (90 s without it).
    #[arg(long, value_name = "SECS")]
    soak: Option<u64>,
    /// Run only the many-stacks measurement (report time and peak RSS) and the
    /// full-load check.
    #[arg(long)]
    stacks_only: bool,
    /// Run only the Go server measurement (goroutine tracing's cost).
    #[arg(long)]
    go_only: bool,
    /// Run only the process churn measurements: each arriving process's cost,
    /// and serve's soak.
    #[arg(long)]
    churn_only: bool,
}

const BPFTRACE_OFFCPU: &str = "tracepoint:sched:sched_switch { @start[args->prev_pid] = nsecs; \
@stk[args->prev_pid] = kstack; $s = @start[args->next_pid]; if ($s) { \
@off[@stk[args->next_pid], args->next_comm] = sum(nsecs - $s); delete(@start[args->next_pid]); } }";

/// The unwind table cache of the bench's topwaits runs: removed as the bench
/// starts, so that its first round starts cold, as a first run on a machine
/// does, and the later ones find what the first built.
fn bench_cache() -> PathBuf {
    root().join("target/bench-cache")
}

/// `idle`: a process that only sleeps, for the cost that `-p` puts on every other
/// task's switches (all of them are filtered out).
fn tracers(bin: &str, idle: u32, idle_cgroup: Option<&str>) -> Vec<Tracer> {
    let cache = bench_cache().to_string_lossy().into_owned();
    let tw = |extra: &[&str]| {
        let mut v = vec![bin.to_string()];
        v.extend(extra.iter().map(|s| s.to_string()));
        // `threads` walks no user stack, and keeps no tables.
        if extra.first() != Some(&"threads") {
            v.extend(["--cache-dir".to_string(), cache.clone()]);
        }
        Some(v)
    };
    let by_cgroup = idle_cgroup.map(|dir| Tracer {
        name: "topwaits --cgroup IDLE (every switch filtered out)",
        cmd: tw(&["-f", "--cgroup", dir]),
    });
    let mut all = vec![
        Tracer { name: "no tracer", cmd: None },
        Tracer { name: "topwaits", cmd: tw(&["-f"]) },
        Tracer {
            name: "topwaits -p IDLE (every switch filtered out)",
            cmd: tw(&["-f", "-p", &idle.to_string()]),
        },
        Tracer {
            name: "topwaits --no-labels (stacks alone, as before labels)",
            cmd: tw(&["-f", "--no-labels"]),
        },
        Tracer { name: "topwaits --unwind fp", cmd: tw(&["-f", "--unwind", "fp"]) },
        Tracer { name: "topwaits --leaf-callers", cmd: tw(&["-f", "--leaf-callers"]) },
        Tracer { name: "topwaits --events-over 10000", cmd: tw(&["-f", "--events-over", "10000"]) },
        Tracer { name: "topwaits --on-cpu (99 samples a second)", cmd: tw(&["-f", "--on-cpu"]) },
        Tracer { name: "topwaits --waker", cmd: tw(&["-f", "--waker"]) },
        Tracer { name: "topwaits --waker --chain 4", cmd: tw(&["-f", "--chain", "4"]) },
        Tracer {
            name: "topwaits why (every wait an event, with its waker)",
            cmd: tw(&["why", "--json"]),
        },
        Tracer {
            name: "topwaits locks (the same events, ranked as locks)",
            cmd: tw(&["locks", "--json"]),
        },
        Tracer { name: "topwaits threads", cmd: tw(&["threads", "--json"]) },
        Tracer {
            name: "topwaits serve (drained every second, unscraped)",
            cmd: tw(&["serve", "--listen", "127.0.0.1:0"]),
        },
        Tracer { name: "libbpf-tools offcputime", cmd: Some(vec!["/usr/sbin/offcputime".into()]) },
        Tracer {
            name: "bpftrace one-liner",
            cmd: Some(vec!["bpftrace".into(), "-e".into(), BPFTRACE_OFFCPU.into()]),
        },
    ];
    // Beside `-p IDLE`, the other way of filtering every switch out.
    if let Some(t) = by_cgroup {
        all.insert(3, t);
    }
    all
}

/// Where the unified (v2) cgroup hierarchy is mounted, if it is.
fn unified_cgroup_root() -> Option<std::path::PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.get(2) == Some(&"cgroup2")).then(|| std::path::PathBuf::from(f[1]))
    })
}

/// A cgroup that holds only the idle process, for the cost `--cgroup` puts on
/// every other switch (to set beside `-p IDLE`'s); removed when dropped, once
/// the idle process is gone. None where no unified hierarchy is writable.
struct IdleCgroup {
    dir: std::path::PathBuf,
}

impl IdleCgroup {
    fn make(idle: u32) -> Option<IdleCgroup> {
        let dir = unified_cgroup_root()?.join(format!("topwaits-bench-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        let cg = IdleCgroup { dir };
        std::fs::write(cg.dir.join("cgroup.procs"), idle.to_string()).ok()?;
        Some(cg)
    }
}

impl Drop for IdleCgroup {
    fn drop(&mut self) {
        // Whatever is still in it (the idle process, when the bench failed)
        // goes back to the parent, so that the directory can go.
        if let (Ok(procs), Some(parent)) =
            (std::fs::read_to_string(self.dir.join("cgroup.procs")), self.dir.parent())
        {
            for pid in procs.lines() {
                let _ = std::fs::write(parent.join("cgroup.procs"), pid);
            }
        }
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!("bench: could not remove {}", self.dir.display());
    }
}

/// The "Total time: X [sec]" that perf bench prints.
fn total_time(stdout: &[u8]) -> Option<f64> {
    String::from_utf8_lossy(stdout).lines().find_map(|l| {
        l.trim().strip_prefix("Total time:").and_then(|v| v.split_whitespace().next()?.parse().ok())
    })
}

/// The workloads of each round: messaging long and short (the short one's
/// run is dominated by what each process perf starts costs a tracer), and pipe.
const KINDS: [&str; 3] = ["messaging", "short", "pipe"];

/// Runs a perf bench workload and returns its "Total time" in seconds.
fn workload(kind: &str) -> Result<f64> {
    let args: &[&str] = match kind {
        "messaging" => &["bench", "sched", "messaging", "-g", "5", "-l", "400"],
        "short" => &["bench", "sched", "messaging", "-g", "4", "-l", "300"],
        _ => &["bench", "sched", "pipe", "-l", "40000"],
    };
    let out = Command::new("perf").args(args).output().context("perf (linux-perf) is needed")?;
    total_time(&out.stdout).ok_or_else(|| {
        anyhow!("no total time from perf bench {kind}: {}", String::from_utf8_lossy(&out.stdout))
    })
}

/// One workload's measurements of a tracer, a value per round.
#[derive(Default)]
struct PerKind {
    /// The workload's own "Total time", s.
    secs: Vec<f64>,
    /// The run time of the tracer's programs per switch, ns.
    cost: Vec<f64>,
    /// The tracer process's own CPU over the workload, in % of a core.
    user_cpu: Vec<f64>,
}

#[derive(Default)]
struct Samples {
    /// By workload, in the order of [`KINDS`].
    kinds: [PerKind; 3],
    startup_ms: Vec<f64>,
    /// From the start to the kernel stack learners in place (topwaits).
    learners_ms: Vec<f64>,
    map_kib: Vec<f64>,
    verified: Vec<f64>,
}

impl Samples {
    fn of(&mut self, kind: &str) -> &mut PerKind {
        &mut self.kinds[KINDS.iter().position(|k| *k == kind).unwrap_or(2)]
    }
}

fn set_bpf_stats(on: bool) -> Result<()> {
    std::fs::write("/proc/sys/kernel/bpf_stats_enabled", if on { "1" } else { "0" })
        .context("failed to set kernel.bpf_stats_enabled")
}

fn ensure_tracefs() {
    if !std::path::Path::new("/sys/kernel/tracing/events").is_dir() {
        let _ =
            Command::new("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]).status();
    }
}

/// Per-switch cost of a tracer's programs over one workload run.
fn measure(t: &Tracer, kind: &str, s: &mut Samples) -> Result<()> {
    let Some(cmd) = &t.cmd else {
        let secs = workload(kind)?;
        s.of(kind).secs.push(secs);
        return Ok(());
    };
    let r = start(cmd, &[("RUST_LOG", "topwaits::run::trace=debug")])?;
    // Start-up work on threads of the tracer's own (topwaits reads the kernel's
    // symbols) is over before its CPU is counted.
    settle(r.child.id());
    if let Some(w) = r.learners.lock().ok().and_then(|w| *w) {
        s.learners_ms.push(w.as_secs_f64() * 1e3);
    }
    let before = snapshot(&r)?;
    let (cpu0, t0) = (cpu_ns(r.child.id()), Instant::now());
    let secs = workload(kind)?;
    // A thread of the tracer that ends meanwhile takes its time out of the sum.
    let user_cpu =
        cpu_ns(r.child.id()).saturating_sub(cpu0) as f64 / t0.elapsed().as_nanos() as f64 * 100.0;
    s.of(kind).user_cpu.push(user_cpu);
    let (total_ns, switches) = spent(&before, &snapshot(&r)?);
    // Read now: topwaits loads its stack learners after attaching.
    s.verified.push(verified_insns(r.child.id()) as f64);
    eprintln!(
        "bench:   {secs:.3} s, {switches} switches, {:.0} ns/switch",
        total_ns as f64 / switches.max(1) as f64
    );
    if switches > 0 {
        s.of(kind).cost.push(total_ns as f64 / switches as f64);
    }
    s.startup_ms.push(r.startup.as_secs_f64() * 1e3);
    s.map_kib.push(r.map_bytes as f64 / 1024.0);
    s.of(kind).secs.push(secs);
    stop(r)?;
    Ok(())
}

/// Starts topwaits with stdout to `out` and returns once it has attached.
fn spawn_attached(bin: &str, args: &[&str], out: std::fs::File) -> Result<Child> {
    let mut child = Command::new(bin).args(args).stdout(out).stderr(Stdio::piped()).spawn()?;
    let stderr = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
    let mut lines = BufReader::new(stderr).lines();
    while let Some(Ok(l)) = lines.next() {
        if l.starts_with("Tracing") {
            // Keep reading its stderr (warnings) so it never writes to a closed pipe.
            std::thread::spawn(move || lines.for_each(drop));
            return Ok(child);
        }
    }
    bail!("{bin} {args:?} exited before attaching")
}

/// Runs the 20,000-path workload under `topwaits -p` and returns (report ms, peak RSS MiB, records).
fn many_stacks(bin: &str) -> Result<(f64, f64, usize)> {
    // A child's ru_maxrss starts from the peak RSS of the process that spawned it
    // (the memory they shared until exec): a topwaits peak below this harness's
    // own could not be told apart, so the harness must still be small here.
    let harness_kib = own_peak_kib();
    let xtask = std::env::current_exe()?;
    let mut work = Command::new(&xtask)
        .arg("stack-workload")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()?;
    let pid = work.id().to_string();
    let out_path = root().join("target/bench-stacks.json");
    let out = std::fs::File::create(&out_path)?;
    let child = spawn_attached(
        bin,
        &["--json", "--stack-storage-size", "65536", "--max-entries", "65536", "-p", &pid],
        out,
    )?;
    // Start the workload now that the tracer is attached, and wait for it; the
    // trace then ends by itself and reports.
    drop(work.stdin.take());
    work.wait()?;
    let r = Running {
        child,
        startup: Duration::ZERO,
        prog_ids: Default::default(),
        map_bytes: 0,
        learners: Default::default(),
    };
    let (report, rss_kib) = end(r, false)?;
    if rss_kib <= harness_kib {
        bail!(
            "the many-stacks case measured {rss_kib} KiB, no more than the bench's own peak RSS ({harness_kib} KiB) that topwaits inherits: run it before the bench reads anything large"
        );
    }
    let text = std::fs::read_to_string(&out_path)?;
    let records = text.matches("\"tgid\":").count();
    Ok((report.as_secs_f64() * 1e3, rss_kib as f64 / 1024.0, records))
}

/// This process's peak RSS (VmHWM) in KiB, 0 if unknown.
fn own_peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The helper workload: 3^9 = 19,683 distinct call paths, each sleeping once.
pub fn stack_workload() {
    // Wait for the go (stdin closing) so the tracer sees every path.
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    let handles: Vec<_> = (0..2u32)
        .map(|half| {
            std::thread::spawn(move || {
                for path in (0..19_683u32).filter(|p| p % 2 == half) {
                    let mut digits = [0u8; 9];
                    let mut x = path;
                    for d in digits.iter_mut() {
                        *d = (x % 3) as u8;
                        x /= 3;
                    }
                    step(&digits);
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
}

#[inline(never)]
fn step(path: &[u8]) {
    match path.first() {
        None => leaf(),
        Some(0) => via_a(&path[1..]),
        Some(1) => via_b(&path[1..]),
        Some(_) => via_c(&path[1..]),
    }
    std::hint::black_box(path);
}

#[inline(never)]
fn via_a(p: &[u8]) {
    step(p);
    std::hint::black_box(p);
}

#[inline(never)]
fn via_b(p: &[u8]) {
    step(p);
    std::hint::black_box(p);
}

#[inline(never)]
fn via_c(p: &[u8]) {
    step(p);
    std::hint::black_box(p);
}

#[inline(never)]
fn leaf() {
    std::thread::sleep(Duration::from_micros(20));
    std::hint::black_box(());
}

/// System-wide tracing under `perf bench sched messaging` at full load: the trace
/// must finish and report, and every recorded wait must be in the records.
fn full_load(bin: &str) -> Result<String> {
    let out_path = root().join("target/bench-load.json");
    // Closed waits only: the check is that every wait the kernel recorded reaches
    // the records (waits still open at the end are not in its counter).
    let tracer = spawn_attached(
        bin,
        &["--json", "-w", "--open-waits", "no"],
        std::fs::File::create(&out_path)?,
    )?;
    let out = Command::new("perf")
        .args(["bench", "sched", "messaging", "-g", "20", "-l", "300"])
        .output()?;
    let secs = total_time(&out.stdout).unwrap_or(f64::NAN);
    let r = Running {
        child: tracer,
        startup: Duration::ZERO,
        prog_ids: Default::default(),
        map_bytes: 0,
        learners: Default::default(),
    };
    let (report, _) = stop(r)?;
    let text = std::fs::read_to_string(&out_path)?;
    let grab = |key: &str| -> u64 { num(&text, key).unwrap_or(0) };
    let (switches, recorded) = (grab("switches"), grab("recorded"));
    // Sum the per-record counts: "count": values inside the records array.
    let records_at = text.find("\"records\":[").unwrap_or(text.len());
    let counted: u64 = text[records_at..]
        .match_indices("\"count\":")
        .filter_map(|(i, m)| {
            num(&text[records_at + i..], m.trim_end_matches(':').trim_matches('"'))
        })
        .sum();
    let lost: u64 =
        ["kernel_stacks", "user_stacks", "aggregate_full", "start_full", "wakeup_map_full"]
            .iter()
            .map(|k| grab(k))
            .sum();
    if counted != recorded {
        bail!("under full load the records hold {counted} waits but {recorded} were recorded");
    }
    Ok(format!(
        "Full load: `topwaits --json -w --open-waits no` system-wide during `perf bench sched messaging -g 20 -l 300` ({secs:.2} s, 800 tasks): {switches} switches, {recorded} waits recorded and all {counted} present in the records, {lost} losses counted; report in {:.0} ms.\n",
        report.as_secs_f64() * 1e3
    ))
}

fn soak(bin: &str, secs: u64) -> Result<String> {
    let r = start(&[bin.to_string(), "-f".into(), "--waker".into()], &[])?;
    let pid = r.child.id();
    let t0 = Instant::now();
    let mut rss = Vec::new();
    while t0.elapsed() < Duration::from_secs(secs) {
        workload("pipe")?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        rss.push(kib);
    }
    let map_kib = r.map_bytes / 1024;
    let (_, peak) = stop(r)?;
    let first = rss.first().copied().unwrap_or(0);
    let last = rss.last().copied().unwrap_or(0);
    Ok(format!(
        "Soak: {secs} s of perf bench sched pipe under `topwaits -f --waker`: RSS {first} KiB at start, {last} KiB at the end, peak {peak} KiB; kernel maps {map_kib} KiB (preallocated, constant).\n"
    ))
}

pub fn bench(opts: &Options) -> Result<()> {
    run(cargo().args(["build", "--release", "-p", "topwaits"]))?;
    let bin = root().join("target/release/topwaits").to_string_lossy().into_owned();
    ensure_tracefs();
    set_bpf_stats(true)?;
    // What was measured before a failure is kept: a later section failing
    // does not throw away the rounds before it.
    let mut table = String::new();
    let result = bench_inner(opts, &bin, &mut table);
    let _ = set_bpf_stats(false);
    print!("{table}");
    let path: PathBuf = root().join("target/bench.md");
    std::fs::write(&path, &table)?;
    eprintln!(
        "bench: wrote {}{}",
        path.display(),
        if result.is_err() { " (up to the failure)" } else { "" }
    );
    result
}

fn bench_inner(opts: &Options, bin: &str, out: &mut String) -> Result<()> {
    if opts.go_only {
        out.push_str(&crate::go_server_bench::go_server(bin, opts.rounds)?);
        return Ok(());
    }
    if opts.churn_only {
        out.push_str(&crate::churn_bench::churn(bin, opts.rounds)?);
        out.push('\n');
        out.push_str(&crate::serve_bench::serve_soak(bin, opts.soak.unwrap_or(90))?);
        return Ok(());
    }
    if opts.stacks_only {
        let (report_ms, rss_mib, records) = many_stacks(bin)?;
        out.push_str(&format!("Many stacks: {records} records; report {report_ms:.0} ms; peak RSS {rss_mib:.1} MiB.\n"));
        out.push_str(&full_load(bin)?);
        out.push_str(&crate::blocked_bench::blocked_snapshot(bin)?);
        out.push_str(&crate::python_server_bench::user_stacks(bin)?);
        if let Some(secs) = opts.soak {
            out.push_str(&soak(bin, secs)?);
        }
        return Ok(());
    }
    // First, while this process is small (see `many_stacks`).
    let (report_ms, rss_mib, records) = many_stacks(bin)?;
    let _ = std::fs::remove_dir_all(bench_cache());
    let startup = startup_cold_warm(bin)?;
    let mut idle = Command::new("sleep").arg("1000000").spawn().context("failed to start sleep")?;
    let idle_cgroup = IdleCgroup::make(idle.id());
    if idle_cgroup.is_none() {
        eprintln!("bench: no writable cgroup2 hierarchy: the --cgroup row is left out");
    }
    let configs = tracers(bin, idle.id(), idle_cgroup.as_ref().and_then(|c| c.dir.to_str()));
    let mut samples: Vec<Samples> = configs.iter().map(|_| Samples::default()).collect();
    let measured = (|| -> Result<()> {
        for round in 0..opts.rounds {
            for kind in KINDS {
                for (i, t) in configs.iter().enumerate() {
                    eprintln!("bench: round {}/{} {kind} {}", round + 1, opts.rounds, t.name);
                    measure(t, kind, &mut samples[i])?;
                }
            }
        }
        Ok(())
    })();
    let _ = idle.kill();
    let _ = idle.wait();
    drop(idle_cgroup);
    measured?;
    let base: Vec<f64> =
        (0..KINDS.len()).map(|k| median(&mut samples[0].kinds[k].secs.clone())).collect();
    let peer = configs.iter().position(|t| t.name.starts_with("libbpf-tools")).unwrap_or(0);
    let peer_cost: Vec<f64> =
        (0..KINDS.len()).map(|k| median(&mut samples[peer].kinds[k].cost.clone())).collect();
    // The slowdown of every round, each against the same round's run without
    // a tracer (read before the medians below sort the samples); and the own-CPU
    // target, which holds for each run, not only the median: every round is
    // shown, the first (with the unwind table cache empty) included.
    let rounds = each_round(&configs, &samples);
    out.push_str(&machine());
    out.push_str(
        "\n| tracer | ns/switch, messaging | vs offcputime | ns/switch, short messaging | vs offcputime | ns/switch, pipe | vs offcputime | messaging slowdown | short slowdown | pipe slowdown | own CPU, messaging (% of a core) | own CPU, short messaging | start-up (ms) | learners in place (ms) | verified insns | kernel maps (KiB) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    out.push_str(&table_rows(&configs, &mut samples, &peer_cost, &base));
    out.push_str(&format!(
        "\nMedians of {} interleaved rounds; workloads `perf bench sched messaging -g 5 -l 400` (baseline {:.3} s), the short `messaging -g 4 -l 300` (baseline {:.3} s) and `perf bench sched pipe -l 40000` (baseline {:.3} s). Per-switch cost is the run time of all of a tracer's BPF programs (kernel.bpf_stats_enabled) divided by its sched_switch program's runs. Verified insns: the instructions the kernel's verifier processed to load all of a tracer's programs (`verified_insns` in their fdinfo), the work most of its start-up goes to. Start-up: from exec to attached (topwaits: \"Tracing\", every stack walked from the unwind tables from then on); learners in place: to its last programs loaded (kernel stack reuse). Every round starts a new tracer; topwaits' unwind table cache starts empty in the first round.\n",
        opts.rounds, base[0], base[1], base[2]
    ));
    out.push_str(&rounds);
    out.push_str(&startup);
    out.push_str(&busy_pipeline(bin)?);
    out.push_str(&crate::churn_bench::churn(bin, opts.rounds)?);
    out.push_str(&format!(
        "\nMany stacks: 19,683 distinct call paths traced with `topwaits --json -p PID`: {records} records; report (drain, symbolize, write, from the workload's exit to topwaits' exit) {report_ms:.0} ms; peak RSS {rss_mib:.1} MiB.\n"
    ));
    out.push_str(&crate::scale_bench::scale(bin, opts.rounds)?);
    out.push('\n');
    out.push_str(&full_load(bin)?);
    out.push_str(&crate::blocked_bench::blocked_snapshot(bin)?);
    out.push_str(&crate::python_server_bench::user_stacks(bin)?);
    out.push_str(&crate::go_server_bench::go_server(bin, opts.rounds)?);
    // serve's soak always runs, 90 s unless --soak sets its length.
    out.push_str(&crate::serve_bench::serve_soak(bin, opts.soak.unwrap_or(90))?);
    if let Some(secs) = opts.soak {
        out.push_str(&soak(bin, secs)?);
    }
    Ok(())
}

/// Each round's slowdown against that round's run without a tracer, and the
/// tracer's own CPU in each round: read before the medians sort the samples.
fn each_round(configs: &[Tracer], samples: &[Samples]) -> String {
    let mut rounds = String::new();
    for (k, title) in [(0, "long messaging"), (1, "short messaging")] {
        rounds.push_str(&format!("\nSlowdown of the {title} run in each round (against that round's run without a tracer):\n"));
        for (t, s) in configs.iter().zip(samples).skip(1) {
            let each: Vec<String> = s.kinds[k]
                .secs
                .iter()
                .zip(&samples[0].kinds[k].secs)
                .map(|(t, b)| format!("{:.3}x", t / b))
                .collect();
            rounds.push_str(&format!("- {}: {}\n", t.name, each.join(", ")));
        }
        rounds.push_str(&format!(
            "\nThe tracer's own CPU over the {title} run in each round (% of a core; the first round starts with an empty unwind table cache):\n"
        ));
        for (t, s) in configs.iter().zip(samples).filter(|(_, s)| !s.kinds[k].user_cpu.is_empty()) {
            let each: Vec<String> =
                s.kinds[k].user_cpu.iter().map(|c| format!("{c:.2}%")).collect();
            rounds.push_str(&format!("- {}: {}\n", t.name, each.join(", ")));
        }
    }
    rounds
}

/// The summary table's rows: each tracer's medians, and its costs against the
/// peer's.
fn table_rows(
    configs: &[Tracer],
    samples: &mut [Samples],
    peer_cost: &[f64],
    base: &[f64],
) -> String {
    let mut out = String::new();
    let fmt = |v: f64, f: &dyn Fn(f64) -> String| if v.is_nan() { "-".to_string() } else { f(v) };
    for (t, s) in configs.iter().zip(samples.iter_mut()) {
        let mut cells = vec![t.name.to_string()];
        for (kind, peer) in s.kinds.iter_mut().zip(peer_cost) {
            let c = median(&mut kind.cost);
            cells.push(fmt(c, &|v| format!("{v:.0}")));
            cells.push(fmt(c / peer, &|v| format!("{v:.2}x")));
        }
        for (kind, base) in s.kinds.iter_mut().zip(base) {
            cells.push(format!("{:.2}x", median(&mut kind.secs) / base));
        }
        for kind in &mut s.kinds[..2] {
            cells.push(fmt(median(&mut kind.user_cpu), &|v| format!("{v:.2}%")));
        }
        cells.push(fmt(median(&mut s.startup_ms), &|v| format!("{v:.0}")));
        cells.push(fmt(median(&mut s.learners_ms), &|v| format!("{v:.0}")));
        cells.push(fmt(median(&mut s.verified), &|v| {
            if v > 0.0 {
                format!("{v:.0}")
            } else {
                "-".to_string()
            }
        }));
        cells.push(fmt(median(&mut s.map_kib), &|v| format!("{v:.0}")));
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out
}

/// Start-up of `topwaits -p PID` on a Python server (Debian's python3, whose tables
/// the start waits for): with an empty cache, then with the cache it filled.
fn startup_cold_warm(bin: &str) -> Result<String> {
    let dir = root().join("target/bench-cache-startup");
    let _ = std::fs::remove_dir_all(&dir);
    let mut py = Command::new("/usr/bin/python3")
        .args(["-c", "import time\nwhile True: time.sleep(0.01)"])
        .spawn()
        .context("python3 (cargo xtask setup)")?;
    std::thread::sleep(Duration::from_millis(300));
    let cmd = |dir: &std::path::Path| -> Vec<String> {
        vec![
            bin.to_string(),
            "-f".into(),
            "--cache-dir".into(),
            dir.to_string_lossy().into_owned(),
            "-p".into(),
            py.id().to_string(),
        ]
    };
    let once = || -> Result<(f64, f64)> {
        let r = start(&cmd(&dir), &[("RUST_LOG", "topwaits::run::trace=debug")])?;
        settle(r.child.id());
        let learners =
            r.learners.lock().ok().and_then(|w| *w).map_or(f64::NAN, |w| w.as_secs_f64() * 1e3);
        let startup = r.startup.as_secs_f64() * 1e3;
        stop(r)?;
        Ok((startup, learners))
    };
    // (start-up, learners in place) of each run, the first with an empty cache.
    let measured: Result<Vec<(f64, f64)>> = (0..6).map(|_| once()).collect();
    let _ = py.kill();
    let _ = py.wait();
    let runs = measured?;
    let (cold, cold_learners) = runs[0];
    let (mut up, mut learners): (Vec<f64>, Vec<f64>) = runs[1..].iter().copied().unzip();
    Ok(format!(
        "\nStart-up of `topwaits -p PID` on Debian's python3 (its tables built before attaching), to \"Tracing\" with every stack walked from the unwind tables: {cold:.0} ms with an empty unwind table cache (learners in place at {cold_learners:.0} ms), {:.0} ms with the cache it filled (median of 5; learners at {:.0} ms).\n",
        median(&mut up),
        median(&mut learners)
    ))
}

fn machine() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    format!("Machine: Linux {}, {cpus} CPUs ({model}).\n", kernel.trim())
}

/// A 2 s trace of a busy pipeline (Debian's gzip compressing what cat reads
/// from /dev/urandom), started while it runs, three times: the share of gzip's
/// wait time in stacks cut because topwaits was starting, and the time of the
/// waits in progress at the start that ended before their stacks could be
/// walked (left out).
fn busy_pipeline(bin: &str) -> Result<String> {
    let mut cat =
        Command::new("cat").arg("/dev/urandom").stdout(Stdio::piped()).spawn().context("cat")?;
    let gzip = Command::new("gzip")
        .arg("-1")
        .stdin(Stdio::from(cat.stdout.take().context("cat's stdout")?))
        .stdout(Stdio::null())
        .spawn();
    let mut gzip = match gzip {
        Ok(g) => g,
        Err(e) => {
            let _ = cat.kill();
            let _ = cat.wait();
            return Err(e).context("gzip");
        }
    };
    std::thread::sleep(Duration::from_millis(300));
    let pid = gzip.id().to_string();
    let runs: Result<Vec<String>> = (0..3)
        .map(|_| {
            let out = Command::new(bin).args(["--json", "-U", "-p", &pid, "2"]).output()?;
            let doc: serde_json::Value =
                serde_json::from_slice(&out.stdout).context("topwaits' JSON")?;
            let (mut all, mut cut) = (0u64, 0u64);
            for r in doc["records"].as_array().into_iter().flatten() {
                let ns = r["total_ns"].as_u64().unwrap_or(0);
                all += ns;
                let frames = r["user_stack"].as_array().into_iter().flatten();
                if frames.filter_map(|f| f["symbol"].as_str()).any(|s| s == "[cut:walker-starting]")
                {
                    cut += ns;
                }
            }
            let left_out =
                doc["counters"]["waits_in_progress_at_start_unwalked_ns"].as_u64().unwrap_or(0);
            Ok(format!(
                "{:.3} cut, {:.1} ms left out of {:.1} ms",
                cut as f64 / all.max(1) as f64,
                left_out as f64 / 1e6,
                all as f64 / 1e6
            ))
        })
        .collect();
    let _ = gzip.kill();
    let _ = cat.kill();
    let _ = (gzip.wait(), cat.wait());
    Ok(format!(
        "\nA busy pipeline traced from its first moment (`topwaits --json -U -p PID 2` of `cat /dev/urandom | gzip -1`, three runs): share of gzip's wait time in stacks cut while topwaits started, and the waits in progress at the start left out: {}.\n",
        runs?.join("; ")
    ))
}
