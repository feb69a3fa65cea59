//! Developer tasks: `setup` installs what a fresh machine lacks, `run` builds and
//! traces, `test` runs every test, `bench` measures overhead against the peers.

mod bench;
mod binary;
mod blocked_bench;
mod churn_bench;
mod go_server_bench;
mod layering;
mod licenses;
mod python_server_bench;
mod scale_bench;
mod serve_bench;
mod setup;
mod subjects;
mod tracers;

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{bail, Context as _, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "topwaits developer tasks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install the toolchain pieces and Debian packages a fresh machine lacks (idempotent).
    Setup,
    /// Set up, build the release binary, and run it with the given arguments (as root).
    Run {
        /// Arguments for topwaits, after `--`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Set up, then run every test: the lints (rustfmt, clippy), unit tests and the
    /// kernel tests.
    Test {
        /// Extra arguments for `cargo test`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Set up, then measure overhead, start-up and report time against peer tools.
    Bench(bench::Options),
    /// Generate shell completions (bash, zsh, fish) and man pages into target/.
    Completions,
    /// Write THIRD-PARTY-LICENSES.md from Cargo.lock; --check fails if it is stale
    /// or a dependency's licence is outside the policy.
    Licenses {
        #[arg(long)]
        check: bool,
    },
    /// The benchmark's many-stacks workload (used by `bench`).
    #[command(hide = true)]
    StackWorkload,
    /// The benchmark's scale workload: this many sleeping threads (used by `bench`).
    #[command(hide = true)]
    ThreadWorkload { threads: usize },
}

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().map(PathBuf::from).unwrap_or_default()
}

/// Runs a command, failing with its name when it fails.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("failed to start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

/// `cargo` with PATH extended by ~/.cargo/bin, where bpf-linker lives.
pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root()).env("PATH", setup::path_with_cargo_bin());
    c
}

/// Wraps a command in sudo when not root.
pub fn as_root(program: &str) -> Command {
    if setup::is_root() {
        Command::new(program)
    } else {
        let mut c = Command::new("sudo");
        c.arg("--preserve-env=RUST_LOG,TOPWAITS_REQUIRE_BPF").arg(program);
        c
    }
}

/// The lints `test` runs first: commit subjects, formatting, and clippy over every crate and
/// target with warnings as errors (the eBPF crate is checked as a host program).
fn lints() -> Result<()> {
    eprintln!("xtask: commit subjects, cargo fmt --check, then clippy -D warnings");
    subjects::check()?;
    run(cargo().args(["fmt", "--all", "--check"]))?;
    run(cargo().args(["clippy", "--workspace", "--all-targets", "--quiet", "--", "-D", "warnings"]))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Setup => setup::setup(),
        Cmd::Run { args } => setup::setup().and_then(|()| {
            run(cargo().args(["build", "--release", "-p", "topwaits"]))?;
            let bin = root().join("target/release/topwaits");
            let status = as_root(&bin.to_string_lossy()).args(&args).status()?;
            std::process::exit(status.code().unwrap_or(1));
        }),
        Cmd::Test { args } => setup::setup().and_then(|()| {
            licenses::run(true)?;
            lints()?;
            // Unit tests first; then the kernel tests one at a time, so that their
            // workloads' timings and the programs-left-loaded check don't interfere;
            // then the kernel suites again on the tp_btf attach path (auto picks raw_tp).
            // The kernel tests run the optimized binary, the one users run: its
            // costs (the user side's CPU budget) are the product's, and the unit
            // tests keep the overflow checks of the debug build.
            run(cargo().args(["test", "--lib", "--bins"]).args(&args))?;
            run(cargo()
                .args(["test", "--release", "-p", "topwaits", "--test", "*", "--"])
                .arg("--test-threads=1")
                .args(&args))?;
            eprintln!("xtask: the kernel tests again with --attach tp_btf");
            run(cargo()
                .args([
                    "test",
                    "--release",
                    "-p",
                    "topwaits",
                    "--test",
                    "offcpu",
                    "--test",
                    "waker",
                    "--test",
                    "robust",
                    "--test",
                    "manyrows",
                    "--test",
                    "stuck",
                    "--test",
                    "stacks",
                    "--test",
                    "quiet",
                    "--test",
                    "why",
                    "--test",
                    "labels",
                    "--test",
                    "locks",
                    "--test",
                    "containers",
                    "--test",
                    "goroutines",
                    "--",
                ])
                .arg("--test-threads=1")
                .args(&args)
                .env("TOPWAITS_TEST_ATTACH", "tp_btf"))?;
            // The binary the README tells users to copy is the small one, and its
            // build (the eBPF part rebuilt) prints no warnings.
            binary::quiet_build()?;
            binary::check(&root().join("target/release/topwaits"))
        }),
        Cmd::Bench(opts) => setup::setup().and_then(|()| bench::bench(&opts)),
        Cmd::Completions => (|| {
            // The binary writes them from its own options: nothing is shared as source.
            run(cargo().args(["build", "--release", "-p", "topwaits"]))?;
            run(Command::new(root().join("target/release/topwaits"))
                .arg("generate")
                .arg(root().join("target")))
        })(),
        Cmd::Licenses { check } => licenses::run(check),
        Cmd::StackWorkload => {
            bench::stack_workload();
            Ok(())
        }
        Cmd::ThreadWorkload { threads } => {
            scale_bench::thread_workload(threads);
            Ok(())
        }
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
