//! The uprobes on each libjvm.so the traced processes map, at the start and
//! as JVMs start running Java during the trace, attached once per file: on
//! `JVM_Sleep` (`JVM_SleepNanos` since JDK 21), for the time each
//! `Thread.sleep` asked for, and on the monitor's contended entry and its
//! `Object.wait`, for the monitor each such wait is in (the switch takes both
//! where a futex wait is theirs; see the eBPF `what`).

use std::collections::HashSet;

use anyhow::{Context as _, Result};
use aya::maps::HashMap as AyaHashMap;
use aya::programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope};
use aya::programs::UProbe;
use aya::Ebpf;
use topwaits_common::{names, JvmMonitor, JVM_MONITOR_THREAD_IN_RCX};

use super::attach::{loaded, program};
use crate::stacks::hotspot::{self, Jvms};
use crate::sys::procfs;

/// How a JVM's mapping of its library ends in `/proc/PID/maps`.
const JVM: &[u8] = b"/libjvm.so\n";

/// What was hooked: in how many libjvm.so files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hooked {
    pub sleeps: usize,
    pub monitors: usize,
}

/// The libjvm.so files hooked so far, and the programs loaded for them.
#[derive(Default)]
pub struct JvmHooks {
    seen: HashSet<(u64, u64)>,
    loaded: (bool, bool),
    jvms: Jvms,
    pub hooked: Hooked,
}

impl JvmHooks {
    /// Hooks the libjvm.so files that `pids` map (a file once, for all the
    /// processes that map it). A file that cannot be is a warning, and its
    /// waits are labelled without the time asked or the monitor.
    pub fn attach(&mut self, ebpf: &mut Ebpf, pids: &[u32]) {
        for &pid in pids {
            // Most processes map no JVM: their maps are scanned, not parsed.
            let Ok(text) = std::fs::read(format!("/proc/{pid}/maps")) else { continue };
            if text.windows(JVM.len()).any(|w| w == JVM) {
                self.hook_process(ebpf, pid, &procfs::parse_maps(&text[..]));
            }
        }
    }

    /// Hooks the libjvm.so of process `pid`, which maps `maps` (unless its
    /// file is hooked already), and tells the switch the monitors its threads
    /// are in now.
    pub fn hook_process(&mut self, ebpf: &mut Ebpf, pid: u32, maps: &[procfs::Mapping]) {
        self.hook(ebpf, pid, maps);
        if self.hooked.monitors > 0 {
            self.seed(ebpf, pid, maps);
        }
        self.jvms.forget(pid);
    }

    /// Tells the switch which monitor each thread of JVM process `pid` is in
    /// now: a thread inside `EnterI` when its hook came parks again and
    /// again in that one call, unseen by the hook until it has the monitor.
    fn seed(&mut self, ebpf: &mut Ebpf, pid: u32, maps: &[procfs::Mapping]) {
        let Some(t) = self.jvms.thread_layout(pid, maps) else { return };
        let Some(waits) = self.jvms.monitor_waits(pid, maps) else { return };
        let map = ebpf.map_mut(names::JVM_MONITORS).map(AyaHashMap::<_, u32, JvmMonitor>::try_from);
        let Some(Ok(mut map)) = map else {
            log::warn!(
                "the JVM monitors' map is missing: waits under way keep their frames' label"
            );
            return;
        };
        log::debug!("HotSpot of {pid}: {} threads in a monitor now", waits.len());
        for (tid, w) in waits {
            // The field a hook would name, so that the switch checks it as it
            // checks theirs.
            let field = if w.entering { t.pending } else { t.waiting };
            let m = JvmMonitor { monitor: w.monitor, thread: w.thread, field };
            if let Err(e) = map.insert(tid, m, 0) {
                log::debug!("monitor of tid {tid} not kept: {e}");
            }
        }
    }

    /// Hooks the libjvm.so of process `pid`, which maps `maps`, unless its
    /// file is hooked already.
    fn hook(&mut self, ebpf: &mut Ebpf, pid: u32, maps: &[procfs::Mapping]) {
        let Some(m) = hotspot::jvm_mapping(maps) else { return };
        if !self.seen.insert((m.dev, m.inode)) {
            return;
        }
        let path = format!("/proc/{pid}/root{}", m.path);
        match hook_sleep(ebpf, &path, &mut self.loaded.0) {
            Ok(true) => self.hooked.sleeps += 1,
            Ok(false) => {}
            Err(e) => log::warn!("Thread.sleep's asked time not read in {}: {e:#}", m.path),
        }
        // The fields that name a thread's monitor, from this JVM's vmStructs.
        let Some(t) = self.jvms.thread_layout(pid, maps) else {
            log::warn!("Java monitors not named in {}: its thread layout did not read", m.path);
            return;
        };
        match hook_monitors(ebpf, &path, (t.pending, t.waiting), &mut self.loaded.1) {
            Ok(true) => self.hooked.monitors += 1,
            Ok(false) => {}
            Err(e) => log::warn!("Java monitors not named in {}: {e:#}", m.path),
        }
    }
}

/// Probes `JVM_Sleep` in the libjvm.so at `path`; false where it has none.
fn hook_sleep(ebpf: &mut Ebpf, path: &str, is_loaded: &mut bool) -> Result<bool> {
    let mut f = std::fs::File::open(path).with_context(|| format!("failed to open {path}"))?;
    let Some(offset) = hotspot::sleep_offset(&mut f)? else { return Ok(false) };
    let p = load(ebpf, names::PROG_JVM_SLEEP, "the Thread.sleep hook", is_loaded)?;
    p.attach(UProbeAttachLocation::AbsoluteOffset(offset), path, UProbeScope::AllProcesses)
        .context("failed to attach a uprobe on JVM_Sleep")?;
    Ok(true)
}

/// Probes the monitor methods of the libjvm.so at `path`, whose threads keep
/// the monitor they enter at `fields.0` and the one they wait in at
/// `fields.1`; false where it has none of those methods.
fn hook_monitors(
    ebpf: &mut Ebpf,
    path: &str,
    fields: (u64, u64),
    is_loaded: &mut bool,
) -> Result<bool> {
    let mut f = std::fs::File::open(path).with_context(|| format!("failed to open {path}"))?;
    let found = hotspot::monitor_offsets(&mut f)?;
    if found.is_empty() {
        return Ok(false);
    }
    let p = load(ebpf, names::PROG_JVM_MONITOR, "the Java monitor hook", is_loaded)?;
    for (offset, waits) in found {
        let cookie = match waits {
            true => fields.1 | JVM_MONITOR_THREAD_IN_RCX,
            false => fields.0,
        };
        let point = UProbeAttachPoint {
            location: UProbeAttachLocation::AbsoluteOffset(offset),
            cookie: Some(cookie),
        };
        p.attach(point, path, UProbeScope::AllProcesses)
            .context("failed to attach a uprobe on an ObjectMonitor method")?;
    }
    Ok(true)
}

/// Program `name`, loaded on its first use.
fn load<'a>(
    ebpf: &'a mut Ebpf,
    name: &str,
    what: &str,
    is_loaded: &mut bool,
) -> Result<&'a mut UProbe> {
    let p: &mut UProbe = program(ebpf, name)?.try_into()?;
    if !*is_loaded {
        loaded(p.load(), || what.to_string())?;
        *is_loaded = true;
    }
    Ok(p)
}
