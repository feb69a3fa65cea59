//! Builds the eBPF crate with aya-build so the object is embedded in the binary,
//! and names the git commit the binary is built from (`--version`). The nested
//! cargo build's output (which aya-build passes on as `warning:` lines, dozens
//! per fresh build) is shown only when that build fails, or with
//! `TOPWAITS_EBPF_VERBOSE=1`.

use std::process::Command;

include!("build_commit.rs");

use anyhow::{anyhow, bail, Context as _};
use aya_build::Toolchain;

/// Set in the child that really builds: the parent filters its output.
const INNER: &str = "TOPWAITS_EBPF_BUILD_INNER";
const VERBOSE: &str = "TOPWAITS_EBPF_VERBOSE";

fn main() -> anyhow::Result<()> {
    if std::env::var_os(INNER).is_some() {
        return build();
    }
    println!("cargo:rerun-if-env-changed={VERBOSE}");
    commit();
    // The eBPF object also compiles the shared types and limits: aya-build watches
    // only the eBPF crate, so a change there alone once left a stale object.
    println!("cargo:rerun-if-changed=../topwaits-common/src");
    let verbose = std::env::var_os(VERBOSE).is_some_and(|v| v == "1");
    let out = Command::new(std::env::current_exe().context("current_exe")?)
        .env(INNER, "1")
        .output()
        .context("failed to run the eBPF build")?;
    let failed = !out.status.success();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // Directives (rerun-if-changed, ...) always pass; chatter only on failure.
        if !line.starts_with("cargo:warning=") || failed || verbose {
            println!("{line}");
        }
    }
    if failed {
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        bail!(
            "building topwaits-ebpf failed ({}); its cargo output is in the warnings above",
            out.status
        );
    }
    Ok(())
}

fn build() -> anyhow::Result<()> {
    let meta =
        cargo_metadata::MetadataCommand::new().no_deps().exec().context("MetadataCommand::exec")?;
    let ebpf = meta
        .packages
        .into_iter()
        .find(|p| p.name.as_str() == "topwaits-ebpf")
        .ok_or_else(|| anyhow!("topwaits-ebpf package not found"))?;
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("no parent for {}", ebpf.manifest_path))?
        .as_str();
    let pkg = aya_build::Package { name: ebpf.name.as_str(), root_dir, ..Default::default() };
    aya_build::build_ebpf([pkg], Toolchain::default())
}
