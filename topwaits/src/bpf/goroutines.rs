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

/// The processes whose goroutines (or JVM sleeps) may be traced for this
/// selection.
pub(super) fn candidates(threads: &Threads) -> Vec<u32> {
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
/// its threads are traced as any program's. The hooks are kept to hook the
/// Go programs started during the trace too (see [`GoHooks::exec`]): any
/// that the selection takes in, or under `-p`, a selected process that execs
/// a Go program (a wrapper's `exec server`).
pub fn attach(ebpf: &mut Ebpf, threads: &Threads, waker: bool) -> Result<GoHooks> {
    let mut hooks = GoHooks {
        binaries: HashMap::new(),
        loaded: false,
        waker,
        found: Goroutines::default(),
        late: match threads {
            Threads::Tids(_) | Threads::KernelOnly => Late::Never,
            Threads::Pids(p) => Late::Only(p.clone()),
            _ => Late::Any,
        },
    };
    for pid in candidates(threads) {
        hooks.try_add(ebpf, pid);
    }
    Ok(hooks)
}

/// The goroutine hooks of a trace: the binaries met (each a Go program with
/// its runtime, or not one), and the Go processes traced.
#[derive(Default)]
pub struct GoHooks {
    binaries: HashMap<(u64, u64), Option<Runtime>>,
    loaded: bool,
    waker: bool,
    found: Goroutines,
    /// Which programs started during the trace are hooked at their exec.
    late: Late,
}

/// The execs during a trace whose Go programs are hooked.
#[derive(Default)]
enum Late {
    /// None (`-t`, kernel threads only).
    #[default]
    Never,
    /// Those of these processes (`-p`: a selected process that execs).
    Only(Vec<u32>),
    /// Every one the selection takes in.
    Any,
}

impl GoHooks {
    /// What goroutine tracing covers.
    pub fn found(&self) -> &Goroutines {
        &self.found
    }

    /// Process `pid` exec'd: if it runs a Go program, its goroutines are
    /// traced from now on. Says why not where it is a Go program that
    /// cannot be hooked (once per binary).
    pub fn exec(&mut self, ebpf: &mut Ebpf, pid: u32) -> Option<String> {
        match &self.late {
            Late::Any => {}
            Late::Only(pids) if pids.contains(&pid) => {}
            _ => return None,
        }
        let failed = self.found.failed.len();
        self.try_add(ebpf, pid);
        self.found.failed.get(failed).cloned()
    }

    /// [`GoHooks::add`], a failure kept in `failed` with its pid.
    fn try_add(&mut self, ebpf: &mut Ebpf, pid: u32) {
        if let Err(e) = self.add(ebpf, pid) {
            self.found.failed.push(format!("pid {pid}: {}", crate::util::stderr::error_line(&e)));
        }
    }

    /// Hooks process `pid`'s binary if it is a Go program not hooked yet,
    /// and has the hooks watch the process.
    fn add(&mut self, ebpf: &mut Ebpf, pid: u32) -> Result<()> {
        let exe = format!("/proc/{pid}/exe");
        let Ok(meta) = std::fs::metadata(&exe) else { return Ok(()) };
        let id = (meta.dev(), meta.ino());
        let rt = match self.binaries.get(&id) {
            Some(known) => known.clone(),
            None => {
                // Known from here on, hooked or not: a binary that fails is
                // said once.
                self.binaries.insert(id, None);
                let rt = runtime::read(&exe)?;
                let Some(rt) = rt else { return Ok(()) };
                rt.goid_layout()?;
                if !self.loaded {
                    load(ebpf, self.waker)?;
                    self.loaded = true;
                }
                hook(ebpf, &exe, &rt, self.waker)?;
                self.binaries.insert(id, Some(rt.clone()));
                Some(rt)
            }
        };
        let mut procs: BpfHashMap<_, u32, GoProc> = BpfHashMap::try_from(
            ebpf.map_mut(names::GO_PROCS).context("map GO_PROCS missing from the eBPF object")?,
        )?;
        let Some(goid_off) = rt.as_ref().and_then(|rt| rt.goid_off) else {
            // A Go program's pid that now runs something else (it exec'd,
            // or the pid was reused) is no longer watched. Other processes
            // were never in the map: no call into the kernel for them.
            if self.found.traced.iter().any(|(p, _)| *p == pid) {
                let _ = procs.remove(&pid);
            }
            return Ok(());
        };
        let version = rt.and_then(|rt| rt.version);
        let layout = GoProc { goid_off, _pad: 0 };
        if procs.insert(pid, layout, 0).is_err() {
            // Full: the processes gone make room.
            let gone: Vec<u32> = procs
                .keys()
                .filter_map(|k| k.ok())
                .filter(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
                .collect();
            for p in gone {
                let _ = procs.remove(&p);
            }
            procs
                .insert(pid, layout, 0)
                .map_err(|_| anyhow::anyhow!("more Go programs than goroutines are traced in"))?;
        }
        self.found.traced.retain(|(p, _)| *p != pid);
        self.found.traced.push((pid, version));
        Ok(())
    }
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
