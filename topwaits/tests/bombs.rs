//! Recordings that travel: a gzip bomb, or a damaged or foreign file, given to
//! `report`, `why` and `diff` is refused in one line, in bounded memory. No BPF.

use std::io::Write as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_topwaits");

/// Runs topwaits and returns (exit status, stderr, peak resident set in MiB).
// Reaped by wait4, for its resource usage, not by Child::wait.
#[allow(clippy::zombie_processes)]
fn run_measured(args: &[&str]) -> (i32, String, f64) {
    let child =
        Command::new(BIN).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id() as i32;
    let mut stderr = child.stderr.unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).unwrap();
        s
    });
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut usage) }, pid);
    let status = std::process::ExitStatus::from_raw(status);
    (status.code().unwrap_or(-1), reader.join().unwrap(), usage.ru_maxrss as f64 / 1024.0)
}

fn dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bombs");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A gzip file of `bytes` of `prefix` then `fill`, made once.
fn bomb(name: &str, prefix: &[u8], fill: u8, bytes: u64) -> PathBuf {
    let path = dir().join(name);
    if path.exists() {
        return path;
    }
    let tmp = path.with_extension("part");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&tmp).unwrap(),
        flate2::Compression::fast(),
    );
    gz.write_all(prefix).unwrap();
    let zeros = vec![fill; 1 << 22];
    let mut left = bytes - prefix.len() as u64;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        gz.write_all(&zeros[..n]).unwrap();
        left -= n as u64;
    }
    gz.finish().unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

fn refused_everywhere(file: &Path, needle: &str, extra: &[&str]) {
    let f = file.to_str().unwrap();
    for args in [vec!["report", f], vec!["why", f], vec!["locks", f], vec!["diff", f, f]] {
        let args: Vec<&str> = args.into_iter().chain(extra.iter().copied()).collect();
        let (code, stderr, rss) = run_measured(&args);
        eprintln!("{args:?}: exit {code}, {rss:.1} MiB, {}", stderr.trim());
        assert_eq!(code, 1, "{args:?} must fail as an error: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(rss <= 100.0, "{args:?} took {rss:.1} MiB");
    }
}

#[test]
fn three_gigabytes_of_zeros_are_refused_at_their_first_bytes() {
    let f = bomb("zeros.twr", b"", 0, 3 << 30);
    refused_everywhere(&f, "not a topwaits record file", &[]);
}

#[test]
fn a_real_header_before_a_bomb_is_refused_at_the_bound() {
    // A valid start, then white space that never ends: the bound stops it.
    let f = bomb(
        "header.twr",
        br#"{"format":"topwaits-record","version":1,"written_by":"0.2.0","report":"#,
        b' ',
        64 << 20,
    );
    refused_everywhere(&f, "expands past 16 MiB", &["--max-record-size", "16"]);
}

#[test]
fn a_foreign_or_damaged_file_is_refused_in_one_line() {
    let d = dir();
    let plain = d.join("plain.twr");
    std::fs::write(&plain, b"hello").unwrap();
    refused_everywhere(&plain, "topwaits record file", &[]);
    let cut = d.join("cut.twr");
    std::fs::write(&cut, [0x1f, 0x8b, 0x08, 0x00]).unwrap();
    refused_everywhere(&cut, "damaged record file: truncated", &[]);
}
