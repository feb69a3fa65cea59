//! The time each `Thread.sleep` asked for: a uprobe on the `JVM_Sleep` (or
//! `JVM_SleepNanos`) of every libjvm.so the traced processes map at the
//! start, attached once per file (the switch takes the time where a futex
//! wait's deadline is that call's; see the eBPF `what`).

use std::collections::HashSet;

use anyhow::{Context as _, Result};
use aya::programs::uprobe::{UProbeAttachLocation, UProbeScope};
use aya::programs::UProbe;
use aya::Ebpf;
use topwaits_common::names;

use super::attach::{loaded, program};
use crate::sys::procfs;

/// How a JVM's mapping of its library ends in `/proc/PID/maps`.
const JVM: &[u8] = b"/libjvm.so\n";

/// Hooks the libjvm.so files that `pids` map; how many were hooked. A file
/// that cannot be is a warning, and its sleeps are labelled without the time
/// asked; JVMs started later are too.
pub fn attach(ebpf: &mut Ebpf, pids: &[u32]) -> usize {
    let mut seen = HashSet::new();
    let mut hooked = 0;
    let mut is_loaded = false;
    for &pid in pids {
        // Most processes map no JVM: their maps are scanned, not parsed.
        let Ok(text) = std::fs::read(format!("/proc/{pid}/maps")) else { continue };
        if !text.windows(JVM.len()).any(|w| w == JVM) {
            continue;
        }
        let maps = procfs::parse_maps(&text[..]);
        let Some(m) = maps.iter().find(|m| m.path.ends_with("/libjvm.so")) else { continue };
        if !seen.insert((m.dev, m.inode)) {
            continue;
        }
        let path = format!("/proc/{pid}/root{}", m.path);
        match hook(ebpf, &path, &mut is_loaded) {
            Ok(true) => hooked += 1,
            Ok(false) => {}
            Err(e) => log::warn!("Thread.sleep's asked time not read in {}: {e:#}", m.path),
        }
    }
    hooked
}

/// Probes `JVM_Sleep` in the libjvm.so at `path`; false where it has none.
fn hook(ebpf: &mut Ebpf, path: &str, is_loaded: &mut bool) -> Result<bool> {
    let mut f = std::fs::File::open(path).with_context(|| format!("failed to open {path}"))?;
    let Some(offset) = crate::stacks::hotspot::sleep_offset(&mut f)? else { return Ok(false) };
    let p: &mut UProbe = program(ebpf, names::PROG_JVM_SLEEP)?.try_into()?;
    if !*is_loaded {
        loaded(p.load(), || "the Thread.sleep hook".to_string())?;
        *is_loaded = true;
    }
    p.attach(UProbeAttachLocation::AbsoluteOffset(offset), path, UProbeScope::AllProcesses)
        .context("failed to attach a uprobe on JVM_Sleep")?;
    Ok(true)
}
