//! Goroutine waits: the uprobes on each traced Go program's runtime (`execute`,
//! and `ready` with `--waker`), attached once per binary, the kernel switch
//! hook that sees their threads sleep, and the layout each traced Go
//! process's entry in `GO_PROCS` gives the hooks.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;

use anyhow::{Context as _, Result};
use aya::maps::HashMap as BpfHashMap;
use aya::programs::uprobe::{UProbeAttachLocation, UProbeScope};
use aya::programs::UProbe;
use aya::Ebpf;
use topwaits_common::golang::GoProc;
use topwaits_common::names;

use super::attach::{attach_one_raw_tp, loaded, program};
use crate::settings::Threads;
use crate::stacks::golang::runtime::{self, Runtime};

/// The hooks' programs, in the order of `runtime::HOOKED`.
const PROGRAMS: [&str; 2] = [names::PROG_GO_READY, names::PROG_GO_EXECUTE];

/// What goroutine tracing found at the start: the Go programs traced, by pid
/// with their Go version, and those that could not be.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Goroutines {
    pub traced: Vec<(u32, Option<String>)>,
    pub failed: Vec<String>,
}

impl Goroutines {
    /// `2 Go programs (go1.19.8, go1.22.1)`, or None when none is traced.
    pub fn describe(&self) -> Option<String> {
        if self.traced.is_empty() {
            return None;
        }
        let versions: std::collections::BTreeSet<&str> = self
            .traced
            .iter()
            .map(|(_, v)| v.as_deref().unwrap_or("Go version not known"))
            .collect();
        let versions: Vec<&str> = versions.into_iter().collect();
        let n = crate::util::text::plural(self.traced.len(), "Go program");
        Some(format!("{n} ({})", versions.join(", ")))
    }
}

/// The processes whose goroutines may be traced for this selection.
fn candidates(threads: &Threads) -> Vec<u32> {
    match threads {
        Threads::Pids(p) => p.clone(),
        Threads::Tids(t) => {
            let mut p: Vec<u32> =
                t.iter().filter_map(|&t| crate::sys::procfs::tgid_of(t)).collect();
            p.sort_unstable();
            p.dedup();
            p
        }
        Threads::KernelOnly => Vec::new(),
        _ => {
            let own = std::process::id();
            let mut p: Vec<u32> = crate::sys::procfs::running()
                .unwrap_or_default()
                .into_iter()
                .filter(|&p| p != own)
                .collect();
            p.sort_unstable();
            p
        }
    }
}

/// Finds the Go programs among the traced processes and attaches the hooks to
/// their binaries. A program that cannot be hooked is said in `failed`, and
/// its threads are traced as any program's.
pub fn attach(ebpf: &mut Ebpf, threads: &Threads, waker: bool) -> Result<Goroutines> {
    let mut found = Goroutines::default();
    // Each binary once: whether it is a Go program, and whether it is hooked.
    let mut binaries: HashMap<(u64, u64), Option<Runtime>> = HashMap::new();
    let mut loaded_progs = false;
    for pid in candidates(threads) {
        let exe = format!("/proc/{pid}/exe");
        let Ok(meta) = std::fs::metadata(&exe) else { continue };
        let id = (meta.dev(), meta.ino());
        let rt = match binaries.get(&id) {
            Some(known) => known.clone(),
            None => {
                let read = runtime::read(&exe).and_then(|rt| match rt {
                    Some(rt) => rt.goid_layout().map(|_| Some(rt)),
                    None => Ok(None),
                });
                if matches!(read, Ok(Some(_))) && !loaded_progs {
                    load(ebpf, waker)?;
                    loaded_progs = true;
                }
                let hooked = read.and_then(|rt| match rt {
                    Some(rt) => hook(ebpf, &exe, &rt, waker).map(|()| Some(rt)),
                    None => Ok(None),
                });
                let rt = hooked.unwrap_or_else(|e| {
                    let e = crate::util::stderr::error_line(&e);
                    found.failed.push(format!("pid {pid}: {e}"));
                    None
                });
                binaries.insert(id, rt.clone());
                rt
            }
        };
        let Some(rt) = rt else { continue };
        let mut procs: BpfHashMap<_, u32, GoProc> = BpfHashMap::try_from(
            ebpf.map_mut(names::GO_PROCS).context("map GO_PROCS missing from the eBPF object")?,
        )?;
        let Some(goid_off) = rt.goid_off else { continue };
        let layout = GoProc { goid_off, _pad: 0 };
        if procs.insert(pid, layout, 0).is_ok() {
            found.traced.push((pid, rt.version.clone()));
        } else {
            found.failed.push(format!("pid {pid}: more Go programs than goroutines are traced in"));
        }
    }
    Ok(found)
}

/// The hooks wanted, with their index in `runtime::HOOKED`: `ready` only
/// with `--waker`, which its waker's stack is for.
fn wanted(waker: bool) -> impl Iterator<Item = (usize, &'static str)> {
    PROGRAMS.into_iter().enumerate().filter(move |&(i, _)| waker || i != 0)
}

/// Loads the uprobes, and loads and attaches the switch hook, which watches
/// only the threads of the processes in `GO_PROCS`.
fn load(ebpf: &mut Ebpf, waker: bool) -> Result<()> {
    for (_, name) in wanted(waker) {
        let p: &mut UProbe = program(ebpf, name)?.try_into()?;
        loaded(p.load(), || format!("the goroutine hook {name}"))?;
    }
    attach_one_raw_tp(ebpf, names::PROG_GO_SWITCH, "sched_switch")
}

/// Probes the binary at `exe` (any process that runs it: the hooks keep to
/// the processes in `GO_PROCS`).
fn hook(ebpf: &mut Ebpf, exe: &str, rt: &Runtime, waker: bool) -> Result<()> {
    for (i, name) in wanted(waker) {
        let p: &mut UProbe = program(ebpf, name)?.try_into()?;
        p.attach(UProbeAttachLocation::AbsoluteOffset(rt.hooks[i]), exe, UProbeScope::AllProcesses)
            .with_context(|| format!("failed to attach a uprobe on {}", runtime::HOOKED[i]))?;
    }
    Ok(())
}
