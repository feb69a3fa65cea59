//! `cargo xtask setup`: checks each piece first and installs only what is missing,
//! so a second run takes a second or two.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, Result};

use crate::run;

/// Debian packages: LLVM for bpf-linker, and the tools the tests and benchmark use.
const PACKAGES: &[&str] = &[
    "llvm-22-dev",          // bpf-linker links against LLVM 22, nightly rustc's major
    "bpftool",              // tests: nothing of ours stays loaded; bench: bpf_stats
    "linux-perf",           // bench: perf bench sched messaging/pipe
    "libbpf-tools",         // bench peer: offcputime
    "bpftrace",             // bench peer: off-CPU one-liner
    "util-linux",           // tests: setpriv for the unprivileged check
    "rt-app",               // tests: the generated reproducer must run under rt-app 1.0
    "chromium",             // tests: the SVGs render in headless Chromium
    "libc6-dbg",            // tests, bench: libc's internal frames named from its debug file
    "golang-go",            // tests: go tool pprof reads the pprof files as users will
    "sqlite3",  // tests: a distribution binary without frame pointers, unwound from its CFI
    "binutils", // test: readelf checks the release binary's sections
    "python3",  // tests: Python frames named in the distribution's interpreter
    "default-jdk-headless", // tests: a JVM, its Flight Recorder (jcmd, jfr) to check against
    "nodejs",   // tests: JavaScript frames named in the distribution's node
    "postgresql", // tests: a real server whose own wait accounting checks topwaits'
    "etcd-server", // tests: a stripped Go server, named and unwound from its own tables
    "apache2-utils", // tests: ab loads etcd's HTTP gateway
    "prometheus", // tests: a real Prometheus scrapes `topwaits serve`
];

const BPF_LINKER_VERSION: &str = "0.13.0";

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc_geteuid() == 0 }
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

fn cargo_bin() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from("/root/.cargo"));
    home.join("bin")
}

/// PATH with the cargo bin directory in it, for bpf-linker.
pub fn path_with_cargo_bin() -> std::ffi::OsString {
    let mut paths: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    let bin = cargo_bin();
    if !paths.contains(&bin) {
        paths.insert(0, bin);
    }
    std::env::join_paths(paths).unwrap_or_default()
}

fn output_ok(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn missing_packages() -> Vec<&'static str> {
    PACKAGES
        .iter()
        .copied()
        .filter(|p| {
            output_ok(Command::new("dpkg-query").args(["-W", "-f=${Status}", p]))
                .is_none_or(|s| !s.contains("install ok installed"))
        })
        .collect()
}

fn root_cmd(program: &str) -> Command {
    crate::as_root(program)
}

pub fn setup() -> Result<()> {
    // 1. rust-src for nightly: the eBPF crate builds core from source.
    let installed = output_ok(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]))
    .context("rustup with a nightly toolchain is required")?;
    if !installed.lines().any(|l| l.starts_with("rust-src")) {
        eprintln!("setup: adding rust-src to nightly");
        run(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
    }
    // rustfmt and clippy for the lints `test` runs.
    for (tool, component) in [("fmt", "rustfmt"), ("clippy", "clippy")] {
        if output_ok(Command::new("cargo").args([tool, "--version"])).is_none() {
            eprintln!("setup: adding {component}");
            run(Command::new("rustup").args(["component", "add", component]))?;
        }
    }
    // 2. Debian packages.
    let missing = missing_packages();
    if !missing.is_empty() {
        eprintln!("setup: installing {}", missing.join(" "));
        run(root_cmd("apt-get").args(["update", "-qq"]))?;
        run(root_cmd("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"))?;
    }
    // 3. bpf-linker, built against Debian's LLVM 22.
    let linker = cargo_bin().join("bpf-linker");
    let have = output_ok(Command::new(&linker).arg("--version")).unwrap_or_default();
    if !have.contains(BPF_LINKER_VERSION) {
        eprintln!("setup: building bpf-linker {BPF_LINKER_VERSION} against LLVM 22");
        run(Command::new("cargo")
            .args([
                "install",
                "bpf-linker",
                "--version",
                BPF_LINKER_VERSION,
                "--locked",
                "--no-default-features",
                "--features",
                "llvm-22",
            ])
            .env("LLVM_PREFIX", "/usr/lib/llvm-22"))?;
    }
    // 4. The independent readers the export tests check our files with.
    test_tools()?;
    Ok(())
}

/// npm's pprof-format (a profile.proto reader), pinned.
const PPROF_FORMAT: &str = "pprof-format@2.3.2";

/// Installs the export tests' readers under `target/test-tools`.
fn test_tools() -> Result<()> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-tools");
    if dir.join("node_modules/pprof-format/package.json").exists() {
        return python_readers();
    }
    eprintln!("setup: installing {PPROF_FORMAT} for the export tests");
    std::fs::create_dir_all(&dir)?;
    if !dir.join("package.json").exists() {
        std::fs::write(dir.join("package.json"), "{\"private\": true}\n")?;
    }
    run(Command::new("npm").current_dir(&dir).args([
        "install",
        "--no-audit",
        "--no-fund",
        PPROF_FORMAT,
    ]))?;
    python_readers()
}

/// Perfetto's Python package (its trace schema, read by protobuf), pinned.
const PERFETTO: &str = "perfetto==0.59.1";

/// OpenTelemetry's generated protobuf classes (profiles v1development), pinned.
const OTLP_PROTO: &str = "opentelemetry-proto==1.45.0";

fn python_readers() -> Result<()> {
    for (module, packages) in [
        ("perfetto.protos.perfetto.trace.perfetto_trace_pb2", &[PERFETTO, "protobuf"][..]),
        (
            "opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2",
            &[OTLP_PROTO][..],
        ),
    ] {
        let have = Command::new("python3").args(["-c", &format!("import {module}")]).output();
        if have.is_ok_and(|o| o.status.success()) {
            continue;
        }
        eprintln!("setup: installing {} for the export tests", packages.join(" "));
        run(Command::new("python3")
            .args(["-m", "pip", "install", "-q", "--root-user-action=ignore"])
            .args(packages))?;
    }
    Ok(())
}
