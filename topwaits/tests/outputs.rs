//! Kernel tests of the files topwaits writes: another user's symbolic link is never
//! followed (refused in a world-writable sticky directory, replaced elsewhere), for
//! every option that writes a file, and a path that cannot be written fails before
//! the trace.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use common::*;

/// The uid that plants the links: `nobody`, neither root nor the caller.
const PLANTER: u32 = 65534;

/// A fresh directory with `mode`, owned by root.
fn dir(tag: &str, mode: u32) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tw-outputs-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    fs::set_permissions(&d, fs::Permissions::from_mode(mode)).unwrap();
    d
}

/// A victim file and a link to it at `d/name` that [`PLANTER`] owns.
fn plant(d: &Path, name: &str) -> (PathBuf, PathBuf) {
    let victim = d.join(format!("{name}.victim"));
    fs::write(&victim, b"precious\n").unwrap();
    let link = d.join(name);
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(PLANTER), Some(PLANTER)).unwrap();
    (victim, link)
}

/// Every option that writes a file, with the link in its place.
fn writers(link: &str) -> Vec<Vec<String>> {
    let v = |a: &[&str]| a.iter().map(|s| s.replace("LINK", link)).collect::<Vec<String>>();
    vec![
        v(&["--svg", "LINK", "1"]),
        v(&["--timeline", "LINK", "1"]),
        v(&["--pprof", "LINK", "1"]),
        v(&["--perfetto", "LINK", "1"]),
        v(&["record", "-o", "LINK", "1"]),
        v(&["threads", "--rt-app", "LINK", "1"]),
        v(&["blocked", "--dot", "LINK"]),
    ]
}

#[test]
fn a_planted_link_in_a_sticky_world_writable_directory_is_refused_for_every_output() {
    require_bpf!();
    let d = dir("sticky", 0o1777);
    let (victim, link) = plant(&d, "out");
    for args in writers(link.to_str().unwrap()) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let started = std::time::Instant::now();
        let out = run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", out.stderr);
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {}", out.stderr);
        assert!(
            lines[0].contains("refusing to write") && lines[0].contains("uid 65534"),
            "{args:?}: {}",
            lines[0]
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "{args:?} traced before refusing"
        );
        assert_eq!(fs::read(&victim).unwrap(), b"precious\n", "{args:?} wrote through the link");
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    }
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn another_users_link_elsewhere_is_replaced_never_followed_for_every_output() {
    require_bpf!();
    let d = dir("plain", 0o755);
    for (i, args) in writers("LINK").into_iter().enumerate() {
        let (victim, link) = plant(&d, &format!("out{i}"));
        let args: Vec<String> = args
            .into_iter()
            .map(|a| if a == "LINK" { link.to_string_lossy().into_owned() } else { a })
            .collect();
        // `blocked` needs a target: this test process.
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        let me = std::process::id().to_string();
        if args[0] == "blocked" {
            args.extend(["-p", &me]);
        }
        let out = run(&args);
        assert!(out.status.success(), "{args:?}: {}", out.stderr);
        assert_eq!(fs::read(&victim).unwrap(), b"precious\n", "{args:?} wrote through the link");
        let meta = fs::symlink_metadata(&link).unwrap();
        assert!(meta.file_type().is_file(), "{args:?}: the link was not replaced by the file");
        assert!(meta.len() > 0 && meta.uid() == 0, "{args:?}: {meta:?}");
        // Nothing is left beside it.
        let strays: Vec<_> = fs::read_dir(&d)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(strays.is_empty(), "{args:?} left {strays:?}");
    }
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_record_shown_again_writes_its_files_the_same_safe_way() {
    require_bpf!();
    let d = dir("report", 0o1777);
    let rec = d.join("trace.twr");
    let out = run(&["record", "-o", rec.to_str().unwrap(), "--perfetto", "/dev/null", "0.5"]);
    assert!(out.status.success(), "{}", out.stderr);
    for opt in ["--svg", "--timeline", "--pprof", "--perfetto"] {
        let (victim, link) = plant(&d, &format!("r{}", opt.trim_start_matches('-')));
        let out = run(&["report", rec.to_str().unwrap(), opt, link.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{opt}: {}", out.stderr);
        assert!(out.stderr.contains("refusing to write"), "{opt}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{opt}: the report was shown before the refusal");
        assert_eq!(fs::read(&victim).unwrap(), b"precious\n");
    }
    fs::remove_dir_all(&d).unwrap();
}

/// Regression: `--svg /proc/version` passed the check and failed after the trace.
#[test]
fn paths_that_cannot_be_written_fail_before_the_trace() {
    require_bpf!();
    for args in [
        &["--svg", "/proc/version", "3"][..],
        &["--pprof", "/", "3"],
        &["record", "-o", "/sys/kernel/x", "3"],
    ] {
        let started = std::time::Instant::now();
        let out = run(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains("cannot write"), "{args:?}: {}", out.stderr);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{args:?} traced before failing"
        );
    }
}

#[test]
fn dev_stdout_and_dev_null_are_written_in_place() {
    require_bpf!();
    let out = run(&["-f", "--svg", "/dev/null", "--pprof", "/dev/stdout", "0.3"]);
    assert!(out.status.success(), "{}", out.stderr);
    use std::os::unix::fs::FileTypeExt as _;
    assert!(
        fs::symlink_metadata("/dev/null").unwrap().file_type().is_char_device(),
        "/dev/null was replaced"
    );
    assert!(
        fs::symlink_metadata("/dev/stdout").unwrap().file_type().is_symlink(),
        "/dev/stdout was replaced"
    );
}

/// The binary writes its own completions and man pages (`cargo xtask
/// completions` runs this), with no privilege and no BPF: every visible
/// subcommand has a page, the hidden `generate` none.
#[test]
fn the_binary_writes_its_completions_and_man_pages() {
    let out = dir("generate", 0o755);
    let done = std::process::Command::new(BIN).arg("generate").arg(&out).output().unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let man = fs::read_to_string(out.join("man/topwaits.1")).unwrap();
    assert!(man.contains(".SH JSON OUTPUT") && man.contains("min\\-block\\-time"), "{man}");
    for sub in ["threads", "blocked", "record", "report", "why", "locks", "diff", "serve"] {
        assert!(out.join(format!("man/topwaits-{sub}.1")).exists(), "no page for {sub}");
    }
    assert!(!out.join("man/topwaits-generate.1").exists(), "the hidden subcommand has no page");
    let bash = fs::read_to_string(out.join("completions/topwaits.bash")).unwrap();
    assert!(bash.contains("--stack-storage-size") && bash.contains("ls /proc"), "{bash}");
    let _ = fs::remove_dir_all(&out);
}
