//! Loading the object and attaching its programs: the maps' sizes for each
//! mode, the settings with the kernel's offsets, which programs a trace
//! attaches, and the BTF that tp_btf and the iterators need.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, Context as _, Result};
use aya::maps::Array;
use aya::{Btf, Ebpf, EbpfLoader};
use log::warn;
use topwaits_common::{limits, names, Settings};

use super::attach::{self, attach_kprobe, attach_raw_tp, attach_tp_btf, Plan};
use super::{regs, sample, OBJECT};
use crate::model::AttachKind;
use crate::settings::{AttachMode, Config, Threads, ThreadsConfig};
use crate::sys::btf::{self, FromBtf as _};
use crate::sys::cgroup;
use crate::sys::tracefs::Tracefs;
use crate::util::error::UserError;

/// The long-wait event ring buffer: 8 MiB, about 75,000 events of 112 bytes,
/// drained every 100 ms and whenever it is half full.
pub(super) const EVENT_BUFFER_BYTES: u32 = 8 << 20;

/// Detaches and unloads every loaded program of an object.
pub(super) fn self_unload(ebpf: &mut Ebpf) {
    for (_, prog) in ebpf.programs_mut() {
        // Unloading a program that never loaded fails harmlessly.
        let _ = match prog {
            aya::programs::Program::BtfTracePoint(p) => p.unload(),
            aya::programs::Program::RawTracePoint(p) => p.unload(),
            aya::programs::Program::KProbe(p) => p.unload(),
            aya::programs::Program::TracePoint(p) => p.unload(),
            aya::programs::Program::PerfEvent(p) => p.unload(),
            _ => Ok(()),
        };
    }
}

pub(super) fn offsets_into(settings: &mut Settings, off: &btf::TaskOffsets) {
    settings.task = *off;
    settings.task_storage = 1;
}

/// Map capacities for one mode. Maps a mode does not use hold one entry.
pub(super) struct Sizes {
    pub(super) stacks: u32,
    pub(super) waits: u32,
    pub(super) wake_waits: u32,
    pub(super) last_wake: u32,
    pub(super) chains: u32,
    pub(super) threads: u32,
    pub(super) deps: u32,
    pub(super) futex: u32,
    /// Bytes of the long-wait event ring buffer (a page when unused).
    pub(super) wait_events: u32,
    /// Kernel stack reuse: shared layouts and their call sites (per-task
    /// entries are task storage, which has no size).
    pub(super) layouts: u32,
    pub(super) sites: u32,
    /// The user stack walker's tree nodes and processes (with `--unwind cfi`).
    pub(super) unwind_nodes: u32,
    pub(super) unwind_array_nodes: u32,
    pub(super) unwind_procs: u32,
    /// Rows of on-CPU samples (with `--on-cpu`).
    pub(super) samples: u32,
    /// (goroutine, thread) pairs whose starts are counted (with goroutines;
    /// allocated as they come).
    pub(super) go_ran_on: u32,
}

/// Nodes of the unwind node array: `TOPWAITS_NODE_ARRAY` where set (tests
/// size it down so that the hash map beyond it is walked), else the limit.
fn array_nodes() -> u32 {
    std::env::var("TOPWAITS_NODE_ARRAY")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .map_or(limits::UNWIND_ARRAY_NODES, |n| n.clamp(1, limits::UNWIND_ARRAY_NODES))
}

impl Sizes {
    /// A trace's sizes: only the maps its mode uses get their full size.
    pub(super) fn for_trace(config: &Config, cfi: bool) -> Self {
        let mut sizes = Sizes::unused();
        sizes.stacks = config.stack_storage_size;
        sizes.layouts = limits::LAYOUTS;
        sizes.sites = limits::LAYOUT_SITES;
        if config.events_over_us.is_some() {
            sizes.wait_events = EVENT_BUFFER_BYTES;
        }
        if cfi {
            sizes.unwind_nodes = limits::UNWIND_NODES;
            sizes.unwind_array_nodes = array_nodes();
            sizes.unwind_procs = limits::UNWIND_PROCS;
        }
        if config.on_cpu.is_some() {
            sizes.samples = config.max_entries;
        }
        if config.goroutines {
            sizes.go_ran_on = config.max_entries;
        }
        if config.waker {
            sizes.wake_waits = config.max_entries;
            // Only deeper chains need every task's last wakeup; a traced task's is
            // in its start entry.
            if config.chain > 1 {
                sizes.last_wake = limits::START_ENTRIES;
            }
            // A chain per distinct waker and stacks, named by the rows and by
            // the waits woken and not yet ended, whose chains no row names yet
            // (under goroutine churn, hundreds): room for both, twice the
            // rows' bound. The map grows as chains come.
            sizes.chains = config.max_entries.saturating_mul(2);
        } else {
            sizes.waits = config.max_entries;
        }
        sizes
    }

    /// The sizes of `topwaits threads`: its per-thread maps, and with
    /// `--on-cpu` the sampler's.
    pub(super) fn for_threads(config: &ThreadsConfig, cfi: bool) -> Self {
        let mut sizes = Sizes::unused();
        sizes.threads = limits::START_ENTRIES;
        sizes.deps = limits::DEPS_ENTRIES;
        sizes.futex = limits::START_ENTRIES;
        if config.goroutines {
            // Each goroutine's waits, by what it waited on, and where.
            sizes.waits = config.max_entries;
            sizes.stacks = limits::THREADS_GOROUTINE_STACKS;
            sizes.go_ran_on = config.max_entries;
        }
        if config.on_cpu.is_some() {
            sizes.samples = config.max_entries;
            sizes.stacks = limits::DEFAULT_STACK_STORAGE.max(sizes.stacks);
            if cfi {
                sizes.unwind_nodes = limits::UNWIND_NODES;
                sizes.unwind_array_nodes = array_nodes();
                sizes.unwind_procs = limits::UNWIND_PROCS;
            }
        }
        sizes
    }

    pub(super) fn unused() -> Self {
        Sizes {
            stacks: 1,
            waits: 1,
            wake_waits: 1,
            last_wake: 1,
            chains: 1,
            threads: 1,
            deps: 1,
            futex: 1,
            wait_events: 4096,
            layouts: 1,
            sites: 1,
            unwind_nodes: 1,
            unwind_array_nodes: 1,
            unwind_procs: 1,
            samples: 1,
            go_ran_on: 1,
        }
    }
}

/// Builds aya's loader on a thread of its own. `EbpfLoader::new()` always parses
/// the kernel's BTF, 20-35 ms of work here, to resolve CO-RE relocations, and aya
/// 0.14 has no way to skip it; topwaits' object has no such relocations (a test
/// checks). So the thread first hides that file from itself and the parse finds
/// nothing. Where it cannot (no CAP_SYS_CHROOT), the parse still runs on another
/// CPU while topwaits reads its `task_struct` offsets.
pub(super) fn loader_in_background() -> std::thread::JoinHandle<EbpfLoader<'static>> {
    std::thread::spawn(|| {
        if let Err(e) = btf::hide_from_this_thread() {
            log::debug!("the eBPF loader parses the kernel's BTF: it could not be hidden ({e})");
        }
        EbpfLoader::new()
    })
}

pub(super) fn load(
    loader: std::thread::JoinHandle<EbpfLoader<'static>>,
    settings: &Settings,
    sizes: &Sizes,
    threads: &Threads,
) -> Result<Ebpf> {
    let bitmap = match threads {
        // Every thread of the cgroup now; the programs keep the set from then on,
        // so it spans every id a thread can have.
        Threads::Cgroup(cg, _) => {
            let max = pid_max();
            let mut words = vec![0u64; (max as usize).div_ceil(64)];
            for id in cgroup::threads_in(cg).into_iter().filter(|&t| t < max) {
                words[id as usize / 64] |= 1 << (id % 64);
            }
            words
        }
        t => id_bitmap(t.ids()),
    };
    let mut loader = loader.join().map_err(|_| anyhow!("the eBPF loader thread panicked"))?;
    let mut ebpf = loader
        .override_global(names::SETTINGS, settings, true)
        .map_max_entries(names::USTACKS, sizes.stacks)
        .map_max_entries(names::KSTACKS, sizes.stacks)
        .map_max_entries(names::WAITS, sizes.waits)
        .map_max_entries(names::WAKE_WAITS, sizes.wake_waits)
        .map_max_entries(names::LAST_WAKE, sizes.last_wake)
        .map_max_entries(names::CHAINS, sizes.chains)
        .map_max_entries(names::THREADS, sizes.threads)
        .map_max_entries(names::DEPS, sizes.deps)
        .map_max_entries(names::FUTEX_WAKING, sizes.futex)
        .map_max_entries(names::PIDS, bitmap.len().max(1) as u32)
        .map_max_entries(names::WAIT_EVENTS, sizes.wait_events)
        .map_max_entries(names::LAYOUTS, sizes.layouts)
        .map_max_entries(names::SITES, sizes.sites)
        .map_max_entries(names::UNWIND_NODES, sizes.unwind_nodes)
        .map_max_entries(names::UNWIND_NODE_ARRAY, sizes.unwind_array_nodes)
        .map_max_entries(names::UNWIND_PROCS, sizes.unwind_procs)
        .map_max_entries(names::SAMPLES, sizes.samples)
        .map_max_entries(names::GO_RAN_ON, sizes.go_ran_on)
        // TASKS is task storage, which aya 0.14 cannot wrap in
        // user space; only the programs use them.
        .allow_unsupported_maps()
        .load(OBJECT)
        .context("failed to load the eBPF object")?;
    let mut pids: Array<_, u64> =
        Array::try_from(ebpf.map_mut(names::PIDS).ok_or_else(|| anyhow!("map PIDS missing"))?)?;
    for (i, &word) in bitmap.iter().enumerate().filter(|(_, w)| **w != 0) {
        pids.set(i as u32, word, 0).context("failed to fill the pid filter")?;
    }
    label_syscalls(&mut ebpf)?;
    Ok(ebpf)
}

/// What the programs need to label waits (see `topwaits_common::label_syscalls`):
/// the syscalls whose first argument to keep, and the sleep calls whose asked
/// time to read.
pub(super) fn label_syscalls(ebpf: &mut Ebpf) -> Result<()> {
    use crate::sys::syscalls::{arg0_bitmap, syscall_info_by_name};
    use topwaits_common::label_syscalls as slot;
    let mut words: Array<_, u64> = Array::try_from(
        ebpf.map_mut(names::LABEL_SYSCALLS).ok_or_else(|| anyhow!("map LABEL_SYSCALLS missing"))?,
    )?;
    let plus_one = |name| syscall_info_by_name(name).map_or(0, |nr| nr + 1);
    let sleeps = [
        (slot::NANOSLEEP, plus_one("nanosleep")),
        (slot::CLOCK_NANOSLEEP, plus_one("clock_nanosleep")),
    ];
    for (i, word) in (0..).zip(arg0_bitmap()).chain(sleeps) {
        words.set(i, word, 0).context("failed to fill the syscalls that labels read")?;
    }
    Ok(())
}

/// For the other attach path after one failed: detaches and drops the half-attached
/// object, then loads a fresh one. Not the same object: a program array takes the
/// type of the first program loaded with it, so the other path's hooks that
/// tail-call through it would be refused (EINVAL).
pub(super) fn reload(
    mut ebpf: Ebpf,
    settings: &Settings,
    sizes: &Sizes,
    threads: &Threads,
) -> Result<Ebpf> {
    self_unload(&mut ebpf);
    drop(ebpf);
    load(loader_in_background(), settings, sizes, threads)
}

/// The largest thread id the kernel gives, plus one (`kernel.pid_max`).
pub(super) fn pid_max() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(PID_MAX_LIMIT)
        .min(PID_MAX_LIMIT)
}

/// With `--cgroup`: the threads that joined the cgroup between the programs'
/// load and the hooks that follow joins being attached, added to the set. A
/// word is rewritten only where one is missing, which a thread forked at that
/// very moment could race with; it is then traced from its next fork on.
pub(super) fn add_late_members(ebpf: &mut Ebpf, threads: &Threads) -> Result<()> {
    let Threads::Cgroup(cg, _) = threads else { return Ok(()) };
    let mut pids: Array<_, u64> =
        Array::try_from(ebpf.map_mut(names::PIDS).ok_or_else(|| anyhow!("map PIDS missing"))?)?;
    let max = pid_max();
    for id in cgroup::threads_in(cg).into_iter().filter(|&t| t < max) {
        let (i, bit) = (id / 64, 1u64 << (id % 64));
        let word = pids.get(&i, 0).context("failed to read the cgroup's threads")?;
        if word & bit == 0 {
            pids.set(i, word | bit, 0).context("failed to add a thread of the cgroup")?;
        }
    }
    Ok(())
}

/// With `--cgroup`: where the programs find what places a cgroup under the
/// traced one (see `topwaits_common::CgroupFilter`).
pub(super) fn cgroup_offsets_into(settings: &mut Settings) -> Result<()> {
    if settings.thread_filter != topwaits_common::thread_filter::CGROUP {
        return Ok(());
    }
    let path = Path::new(btf::VMLINUX_BTF);
    if !path.exists() {
        return Err(UserError::NoBtf {
            path: btf::VMLINUX_BTF.into(),
            what: "--cgroup (to follow threads moved into the cgroup)",
        }
        .into());
    }
    btf::cgroup_offsets_into(path, &mut settings.cgroup)
}

/// No pid or tid reaches this (the kernel's `PID_MAX_LIMIT` on 64-bit), so the
/// filter bitmap is at most 512 KiB.
pub(super) const PID_MAX_LIMIT: u32 = 4 * 1024 * 1024;

/// The ids of `-p`/`-t` as the `PIDS` bitmap: bit `id % 64` of word `id / 64`,
/// as long as the largest possible id needs (empty for none). Ids no task can have
/// are left out.
pub(super) fn id_bitmap(ids: &[u32]) -> Vec<u64> {
    let ids = || ids.iter().copied().filter(|&id| id < PID_MAX_LIMIT);
    let mut words = vec![0u64; ids().max().map_or(0, |m| m as usize / 64 + 1)];
    for id in ids() {
        words[id as usize / 64] |= 1 << (id % 64);
    }
    words
}

/// The task registers iterator without a trace (`blocked`): the object is
/// loaded once, with its maps at their least, and run as often as asked.
pub struct TaskRegsNow {
    ebpf: aya::Ebpf,
    btf: Btf,
}

impl TaskRegsNow {
    pub fn load() -> Result<Self> {
        let mut settings = Settings::defaults();
        offsets_into(&mut settings, &task_offsets("the registers of blocked threads")?);
        let ebpf = load(loader_in_background(), &settings, &Sizes::unused(), &Threads::All)?;
        Ok(TaskRegsNow { ebpf, btf: Btf::from_sys_fs()? })
    }

    /// Every user task's registers now, by thread id.
    pub fn read(&mut self) -> Result<HashMap<u32, topwaits_common::TaskRegs>> {
        regs::of_tasks(&mut self.ebpf, &self.btf)
    }
}

/// The kernel's BTF, for attaching tp_btf and for the iterator of the waits in
/// progress: parsed on another CPU from now when `ahead` (while the offsets
/// are read and the programs load), else when called.
pub(super) fn kernel_btf_parsed(ahead: bool) -> impl FnOnce() -> Result<Btf> {
    let parsing = ahead.then(|| std::thread::spawn(Btf::from_sys_fs));
    move || match parsing {
        Some(t) => {
            t.join().map_err(|_| anyhow!("the BTF parser thread panicked"))?.map_err(Into::into)
        }
        None => Btf::from_sys_fs().map_err(Into::into),
    }
}

/// Attaches the hooks by the path asked for (raw_tp for `auto`), calling
/// `ready` once the programs are verified; with the BTF it parsed, if it did.
pub(super) fn attach_first(
    ebpf: &mut aya::Ebpf,
    mode: AttachMode,
    have_btf: bool,
    plan: &Plan,
    btf: &mut dyn FnMut() -> Result<Btf>,
    ready: &mut dyn FnMut() -> Result<()>,
) -> Result<(AttachKind, Option<Btf>)> {
    match mode {
        AttachMode::TpBtf => need_btf(have_btf, "--attach tp_btf").and_then(|()| {
            let kept = btf()?;
            attach_tp_btf(ebpf, &kept, plan, ready)?;
            Ok((AttachKind::TpBtf, Some(kept)))
        }),
        // raw_tp first: it runs the same programs at the same cost as
        // tp_btf (bpf_stats, `pipe`), and attaching it needs no second
        // parse of the kernel's BTF, which halves the start-up's peak memory.
        AttachMode::RawTp | AttachMode::Auto => {
            attach_raw_tp(ebpf, plan, ready).map(|()| (AttachKind::RawTp, None))
        }
        AttachMode::Kprobe => {
            need_btf(have_btf, "--attach kprobe (task_struct offsets)").and_then(|()| {
                ready()?;
                attach_kprobe(ebpf, plan)?;
                Ok((AttachKind::Kprobe, None))
            })
        }
    }
}

/// The settings global of a trace, with the BTF offsets the kernel gives.
pub(super) fn trace_settings(config: &Config, have_btf: bool) -> Result<Settings> {
    let mut settings = config.settings();
    if have_btf {
        let off = btf::TaskOffsets::from_sys(Path::new(btf::VMLINUX_BTF))?;
        offsets_into(&mut settings, &off);
    }
    if config.needs_task_flags() {
        need_btf(have_btf, "-u/-k (task flags)")?;
    }
    cgroup_offsets_into(&mut settings)?;
    Ok(settings)
}

/// Which programs a trace attaches, and with which bodies.
pub(super) fn trace_plan(config: &Config, settings: &Settings, cfi: bool) -> Plan {
    let plan = Plan::trace(config.waker, settings.events != 0)
        .following_cgroup(settings.thread_filter == topwaits_common::thread_filter::CGROUP)
        .sampling(config.on_cpu.is_some(), cfi);
    // With the walker, the hooks' full bodies are verified before anything
    // attaches, so that every stack of the trace is walked whole; the waits
    // already in progress then are recorded by `Tracer::seed_waits`.
    if cfi {
        plan.full_from_the_start()
    } else {
        plan
    }
}

/// The tracing filesystem, for the futex syscall's tracepoint; without it
/// (said once), `threads` has no futex dependencies.
pub(super) fn futex_tracefs() -> Option<Tracefs> {
    match Tracefs::open() {
        Ok(t) => Some(t),
        Err(e) => {
            warn!("{}; futex dependencies are unavailable", crate::util::stderr::error_line(&e));
            None
        }
    }
}

/// An error naming what needs the kernel's BTF, where it is missing.
pub(super) fn need_btf(have_btf: bool, what: &'static str) -> Result<()> {
    if have_btf {
        Ok(())
    } else {
        Err(UserError::NoBtf { path: btf::VMLINUX_BTF.into(), what }.into())
    }
}

/// What attaches after the hooks: the kernel lock hook (with labels) and the
/// on-CPU sampler.
pub(super) fn attach_extras(
    ebpf: &mut aya::Ebpf,
    config: &Config,
    attach: AttachKind,
) -> Result<()> {
    if config.labels {
        attach::attach_lock_contention(ebpf);
    }
    if let Some(hz) = config.on_cpu {
        // Its body is in place already (loaded with the hooks'), but on
        // the kprobe path, which loads its programs one by one.
        let body = if attach == AttachKind::Kprobe {
            sample::Body::Load(names::PROG_SAMPLE_FULL)
        } else {
            sample::Body::Loaded
        };
        sample::attach(ebpf, hz, body)?;
    }
    Ok(())
}

/// Reads the task_struct offsets, or explains why BTF is needed.
pub(super) fn task_offsets(what: &'static str) -> Result<btf::TaskOffsets> {
    let path = Path::new(btf::VMLINUX_BTF);
    if !path.exists() {
        return Err(UserError::NoBtf { path: btf::VMLINUX_BTF.into(), what }.into());
    }
    btf::TaskOffsets::from_sys(path)
}
