//! The bench's serve soak: `topwaits serve -w` scraped every second while
//! short processes come and go, with stack maps small enough to fill and age;
//! its resident memory over the run and its own CPU.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

use crate::tracers::{start, stop};

/// A memory figure of `pid` from its status (`VmRSS:`, `VmHWM:`), in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Resident memory of `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// User and system CPU of the whole process, its ended threads included, in
/// clock ticks (100 a second).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_comm = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the comm.
    fields.get(11..13).map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum())
}

/// One GET of /metrics; the body's length.
fn scrape(port: u16) -> Result<usize> {
    let mut conn = TcpStream::connect(("127.0.0.1", port))?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")?;
    let mut body = Vec::new();
    conn.read_to_end(&mut body)?;
    if !body.starts_with(b"HTTP/1.1 200") {
        bail!(
            "serve answered /metrics with {}",
            String::from_utf8_lossy(&body[..body.len().min(40)])
        );
    }
    Ok(body.len())
}

pub fn serve_soak(bin: &str, secs: u64) -> Result<String> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let listen = format!("127.0.0.1:{port}");
    let cmd: Vec<String> =
        [bin, "serve", "-w", "--listen", &listen, "--stack-storage-size", "2048"]
            .map(String::from)
            .to_vec();
    let r = start(&cmd, &[])?;
    let pid = r.child.id();
    let t0 = Instant::now();
    // Resident size through the run, sampled each round (about 12 a second).
    let mut samples: Vec<(Duration, u64)> = Vec::new();
    let mut last_scrape = Instant::now();
    let (mut processes, mut scrapes, mut page) = (0u64, 0u64, 0usize);
    let cpu_start = cpu_ticks(pid);
    while t0.elapsed() < Duration::from_secs(secs) {
        let mut kids = Vec::new();
        for _ in 0..4 {
            kids.push(
                Command::new("sh")
                    .args(["-c", "sleep 0.01; echo x | cat >/dev/null"])
                    .stdout(Stdio::null())
                    .spawn()?,
            );
        }
        for k in &mut kids {
            k.wait()?;
        }
        processes += 12;
        if last_scrape.elapsed() >= Duration::from_secs(1) {
            page = scrape(port).context("scraping serve")?;
            scrapes += 1;
            last_scrape = Instant::now();
        }
        samples.push((t0.elapsed(), rss_kib(pid)));
        std::thread::sleep(Duration::from_millis(50));
    }
    // serve's heap swings between the trims its sweeps make every 5 s, so an
    // instant's size says little: the least size over each half (from 10 s, as
    // the start's one-time work is over) is what a leak would lift.
    let floor = |from: u64, to: u64| {
        let span = Duration::from_secs(from)..Duration::from_secs(to);
        samples.iter().filter(|(at, _)| span.contains(at)).map(|s| s.1).min().unwrap_or(0)
    };
    let (first, second) = (floor(10, secs / 2), floor(secs / 2, secs));
    // Its own high-water mark (the children's rusage would be the largest of
    // every child the bench has waited for).
    let peak = status_kib(pid, "VmHWM:");
    let cpu = (cpu_ticks(pid) - cpu_start) as f64 / t0.elapsed().as_secs_f64();
    stop(r)?;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let growth = (second as f64 / first.max(1) as f64 - 1.0) * 100.0;
    Ok(format!(
        "Serve soak: {secs} s of `topwaits serve -w --stack-storage-size 2048`, scraped every second ({scrapes} scrapes, the last {page} bytes), while about {processes} short processes (sh, sleep, cat) came and went: least RSS {:.1} MiB from 10 s to half time and {:.1} MiB in the second half ({growth:+.1}%), peak {:.1} MiB (the heap swings between the trims of serve's sweeps, every 5 s); its own CPU {cpu:.1}% of a core.\n",
        mib(first),
        mib(second),
        mib(peak)
    ))
}
