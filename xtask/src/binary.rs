//! The shipped binary's shape: `cargo xtask test` checks that the release build is
//! the small one the README tells users to copy (no DWARF, symbol table kept).

use std::path::Path;

use anyhow::{bail, Context as _, Result};

/// Largest release binary accepted; an unstripped build is about 46 MB.
pub const MAX_BYTES: u64 = 16 << 20;

/// Section names of a little-endian ELF64 file.
pub fn section_names(elf: &[u8]) -> Result<Vec<String>> {
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u32_at = |o: usize| elf.get(o..o + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
    let u64_at = |o: usize| elf.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize);
    if elf.get(..6) != Some(b"\x7fELF\x02\x01") {
        bail!("not a little-endian ELF64 file");
    }
    let bad = || anyhow::anyhow!("truncated ELF header");
    let (shoff, shentsize, shnum, shstrndx) = (u64_at(0x28).ok_or_else(bad)?, u16_at(0x3a).ok_or_else(bad)?, u16_at(0x3c).ok_or_else(bad)?, u16_at(0x3e).ok_or_else(bad)?);
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18).ok_or_else(bad)?;
    (0..shnum)
        .map(|i| {
            let name = strtab + u32_at(header(i)).ok_or_else(bad)?;
            let bytes = elf.get(name..).ok_or_else(bad)?;
            let end = bytes.iter().position(|&b| b == 0).ok_or_else(bad)?;
            Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
        })
        .collect()
}

/// Fails unless `bin` is small, has no DWARF and keeps its symbol table.
pub fn check(bin: &Path) -> Result<()> {
    let data = std::fs::read(bin).with_context(|| format!("failed to read {}", bin.display()))?;
    let names = section_names(&data)?;
    let size = data.len() as u64;
    if size > MAX_BYTES {
        bail!("{} is {:.1} MiB, above {} MiB", bin.display(), size as f64 / (1 << 20) as f64, MAX_BYTES >> 20);
    }
    if let Some(d) = names.iter().find(|n| n.starts_with(".debug_info") || n.starts_with(".debug_line")) {
        bail!("{} carries DWARF ({d})", bin.display());
    }
    if !names.iter().any(|n| n == ".symtab") {
        bail!("{} has lost its symbol table", bin.display());
    }
    eprintln!("xtask: {} is {:.1} MiB, no DWARF, symbols kept", bin.display(), size as f64 / (1 << 20) as f64);
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_section_names_of_this_test_binary_and_rejects_junk() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let names = section_names(&me).unwrap();
        assert!(names.iter().any(|n| n == ".text") && names.iter().any(|n| n == ".symtab"), "{names:?}");
        assert!(section_names(b"not an elf").is_err());
        assert!(section_names(&me[..80]).is_err(), "a truncated file is an error, not a panic");
    }
}
