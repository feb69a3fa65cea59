//! The shipped binary's shape: `cargo xtask test` checks that the release build is
//! the small one the README tells users to copy (no DWARF, symbol table kept).

use std::path::Path;

use anyhow::{bail, Context as _, Result};

/// Largest release binary accepted; an unstripped build is about 46 MB.
pub const MAX_BYTES: u64 = 16 << 20;

/// Fails unless `bin` is small, has no DWARF and keeps its symbol table.
pub fn check(bin: &Path) -> Result<()> {
    let names = section_names(bin)?;
    let size =
        std::fs::metadata(bin).with_context(|| format!("failed to open {}", bin.display()))?.len();
    if size > MAX_BYTES {
        bail!(
            "{} is {:.1} MiB, above {} MiB",
            bin.display(),
            size as f64 / (1 << 20) as f64,
            MAX_BYTES >> 20
        );
    }
    if let Some(d) =
        names.iter().find(|n| n.starts_with(".debug_info") || n.starts_with(".debug_line"))
    {
        bail!("{} carries DWARF ({d})", bin.display());
    }
    if !names.iter().any(|n| n == ".symtab") {
        bail!("{} has lost its symbol table", bin.display());
    }
    eprintln!(
        "xtask: {} is {:.1} MiB, no DWARF, symbols kept",
        bin.display(),
        size as f64 / (1 << 20) as f64
    );
    Ok(())
}

/// The section names of an ELF file, as binutils' readelf lists them.
fn section_names(bin: &Path) -> Result<Vec<String>> {
    let out = std::process::Command::new("readelf")
        .args(["-S", "-W"])
        .arg(bin)
        .output()
        .context("failed to run readelf (binutils)")?;
    if !out.status.success() {
        bail!("{} is not ELF: {}", bin.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    // Rows read `  [ 1] .interp  PROGBITS ...`: the name follows the bracket.
    let text = String::from_utf8_lossy(&out.stdout);
    let names = text
        .lines()
        .filter_map(|l| l.split_once(']').filter(|(i, _)| i.trim_start().starts_with('[')))
        .filter_map(|(_, rest)| rest.split_whitespace().next().map(str::to_string))
        .filter(|n| n != "Name" && n != "NULL")
        .collect();
    Ok(names)
}

/// Builds the release binary with the eBPF crate rebuilt, and fails if the build
/// printed warnings: the nested eBPF build's chatter once came out as dozens of
/// `warning: topwaits@...` lines.
pub fn quiet_build() -> Result<()> {
    let ebpf_main = crate::root().join("topwaits-ebpf/src/main.rs");
    let now = std::fs::File::options().append(true).open(&ebpf_main)?;
    now.set_modified(std::time::SystemTime::now())?;
    let out = crate::cargo().args(["build", "--release", "-p", "topwaits"]).output()?;
    let text = String::from_utf8_lossy(&out.stderr);
    eprint!("{text}");
    if !out.status.success() {
        bail!("cargo build --release failed with {}", out.status);
    }
    let warnings: Vec<&str> = text.lines().filter(|l| l.starts_with("warning")).collect();
    if !warnings.is_empty() {
        bail!("the release build printed {} warning lines, first: {}", warnings.len(), warnings[0]);
    }
    Ok(())
}
