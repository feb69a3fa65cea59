//! The only module that touches aya: loads the embedded eBPF object with the settings
//! global and map sizes and runs its life (start, end, stop, counters). Attaching
//! (`attach`), draining the maps into plain structs (`drain`) and the process-event
//! ring (`events`) live in the submodules.

mod age;
mod attach;
mod batch;
mod drain;
mod events;
mod regs;
mod sample;
mod seed;
mod walker_maps;

pub use events::{ProcEvents, WaitEvents, MAX_HELD_EVENTS};
pub use sample::{period_ns, record as sample_record};

pub use walker_maps::UnwindMaps;

use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, Context as _, Result};
use aya::maps::{Array, MapData, PerCpuArray, RingBuf};
use aya::programs::{BtfTracePoint, RawTracePoint};
use aya::{Btf, Ebpf, EbpfLoader};
use log::{info, warn};
use topwaits_common::{counter, limits, names, Settings, SwitchOut};

use crate::model::{AttachKind, Counters};
use crate::settings::{AttachMode, Config, Threads, ThreadsConfig};
use crate::sys::btf::{self, FromBtf as _};
use crate::sys::cgroup;
use crate::sys::tracefs::Tracefs;
use crate::util::error::UserError;
use attach::{attach_futex, attach_kprobe, attach_raw_tp, attach_tp_btf, load_in_parallel, Plan};

/// The eBPF object, built by build.rs and embedded so the binary is self-contained.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/topwaits"));

/// A loaded and attached set of programs. Dropping it detaches and unloads them.
pub struct Tracer {
    ebpf: Ebpf,
    attach: AttachKind,
    waker: bool,
    /// The threads programs know where the scheduler keeps a task's CPU time.
    cpu_time: bool,
    /// CLOCK_MONOTONIC just before the first program was attached: events may be
    /// recorded from then on.
    attached_mono: u64,
    /// The kernel's BTF, kept for loading the stack learner after attaching
    /// (tp_btf) and the iterator of the waits in progress at the start.
    btf: Option<Btf>,
    /// `-m`/`-M` in µs, which waits still in progress must pass too.
    block_us: (u64, u64),
    /// Long waits are sent as events (`--events-over`).
    wait_events: bool,
    /// Threads hold their latest row in their start entry (`Settings::hold_rows`):
    /// the final drain adds those rows.
    holds_rows: bool,
    /// Taken by [`Tracer::stop`]: the open waits (task, start) whose thread had
    /// been back on a CPU by then, unseen by the hook; None while attached.
    arrived_at_stop: Option<HashMap<u64, u64>>,
    /// User stacks are walked from the unwind tables (`--unwind cfi`).
    walks: bool,
    /// `--on-cpu`: the sampling period (ns).
    sample_period: Option<u64>,
    /// Entries the stack maps and the chain map hold at most.
    capacity: (u32, u32),
    /// What the last aging deleted (see [`age`]).
    aged: age::Aged,
    /// Drains report the waits in progress since the start too, under the
    /// stacks walked for them (`serve`, whose every interval counts them).
    seeded_open: bool,
}

/// The long-wait event ring buffer: 8 MiB, about 75,000 events of 112 bytes,
/// drained every 100 ms and whenever it is half full.
const EVENT_BUFFER_BYTES: u32 = 8 << 20;

/// Detaches and unloads every loaded program of an object.
fn self_unload(ebpf: &mut Ebpf) {
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

fn offsets_into(settings: &mut Settings, off: &btf::TaskOffsets) {
    settings.task = *off;
    settings.task_storage = 1;
}

/// Map capacities for one mode. Maps a mode does not use hold one entry.
struct Sizes {
    stacks: u32,
    waits: u32,
    wake_waits: u32,
    last_wake: u32,
    chains: u32,
    threads: u32,
    deps: u32,
    futex: u32,
    /// Bytes of the long-wait event ring buffer (a page when unused).
    wait_events: u32,
    /// Kernel stack reuse: shared layouts and their call sites (per-task
    /// entries are task storage, which has no size).
    layouts: u32,
    sites: u32,
    /// The user stack walker's tree nodes and processes (with `--unwind cfi`).
    unwind_nodes: u32,
    unwind_procs: u32,
    /// Rows of on-CPU samples (with `--on-cpu`).
    samples: u32,
}

impl Sizes {
    fn unused() -> Self {
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
            unwind_procs: 1,
            samples: 1,
        }
    }
}

/// Builds aya's loader on a thread of its own. `EbpfLoader::new()` always parses
/// the kernel's BTF, 20-35 ms of work here, to resolve CO-RE relocations, and aya
/// 0.14 has no way to skip it; topwaits' object has no such relocations (a test
/// checks). So the thread first hides that file from itself and the parse finds
/// nothing. Where it cannot (no CAP_SYS_CHROOT), the parse still runs on another
/// CPU while topwaits reads its `task_struct` offsets.
fn loader_in_background() -> std::thread::JoinHandle<EbpfLoader<'static>> {
    std::thread::spawn(|| {
        if let Err(e) = btf::hide_from_this_thread() {
            log::debug!("the eBPF loader parses the kernel's BTF: it could not be hidden ({e})");
        }
        EbpfLoader::new()
    })
}

fn load(
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
        .map_max_entries(names::UNWIND_PROCS, sizes.unwind_procs)
        .map_max_entries(names::SAMPLES, sizes.samples)
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
fn label_syscalls(ebpf: &mut Ebpf) -> Result<()> {
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
fn reload(mut ebpf: Ebpf, settings: &Settings, sizes: &Sizes, threads: &Threads) -> Result<Ebpf> {
    self_unload(&mut ebpf);
    drop(ebpf);
    load(loader_in_background(), settings, sizes, threads)
}

/// The largest thread id the kernel gives, plus one (`kernel.pid_max`).
fn pid_max() -> u32 {
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
fn add_late_members(ebpf: &mut Ebpf, threads: &Threads) -> Result<()> {
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
fn cgroup_offsets_into(settings: &mut Settings) -> Result<()> {
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
const PID_MAX_LIMIT: u32 = 4 * 1024 * 1024;

/// The ids of `-p`/`-t` as the `PIDS` bitmap: bit `id % 64` of word `id / 64`,
/// as long as the largest possible id needs (empty for none). Ids no task can have
/// are left out.
fn id_bitmap(ids: &[u32]) -> Vec<u64> {
    let ids = || ids.iter().copied().filter(|&id| id < PID_MAX_LIMIT);
    let mut words = vec![0u64; ids().max().map_or(0, |m| m as usize / 64 + 1)];
    for id in ids() {
        words[id as usize / 64] |= 1 << (id % 64);
    }
    words
}

/// Every user task's registers now, by thread id, without a trace: the object
/// is loaded with its maps at their least for the iterator alone (`blocked`).
pub fn task_regs_now() -> Result<HashMap<u32, topwaits_common::TaskRegs>> {
    let mut settings = Settings::defaults();
    offsets_into(&mut settings, &task_offsets("the registers of blocked threads")?);
    let mut ebpf = load(loader_in_background(), &settings, &Sizes::unused(), &Threads::All)?;
    regs::of_tasks(&mut ebpf, &Btf::from_sys_fs()?)
}

/// Reads the task_struct offsets, or explains why BTF is needed.
fn task_offsets(what: &'static str) -> Result<btf::TaskOffsets> {
    let path = Path::new(btf::VMLINUX_BTF);
    if !path.exists() {
        return Err(UserError::NoBtf { path: btf::VMLINUX_BTF.into(), what }.into());
    }
    btf::TaskOffsets::from_sys(path)
}

impl Tracer {
    /// Loads and attaches according to `config`. Errors name the fix. Between
    /// the two, `prepare` gets the user stack walker's maps (with `--unwind cfi`)
    /// to fill, so that tables wanted from the start are in place before the
    /// first wait; it is called again if the programs must be loaded again.
    pub fn start<T: Send>(
        config: &Config,
        mut prepare: impl FnMut(Option<UnwindMaps>) -> Result<T> + Send,
    ) -> Result<(Tracer, T)> {
        let loader = loader_in_background();
        let btf_path = Path::new(btf::VMLINUX_BTF);
        let have_btf = btf_path.exists();
        // aya parses the kernel's BTF once more to attach tp_btf: when asked for, do
        // that on another CPU while the offsets are read and the programs load.
        // The iterator that records the waits in progress at the start needs it
        // too (with the walker: their user stacks are walked whole).
        let cfi = config.settings().cfi != 0;
        let attach_btf = (have_btf && (config.attach == AttachMode::TpBtf || cfi))
            .then(|| std::thread::spawn(Btf::from_sys_fs));
        let kernel_btf = move || -> Result<Btf> {
            match attach_btf {
                Some(t) => t
                    .join()
                    .map_err(|_| anyhow!("the BTF parser thread panicked"))?
                    .map_err(Into::into),
                None => Btf::from_sys_fs().map_err(Into::into),
            }
        };
        let mut settings = config.settings();
        if have_btf {
            let off = btf::TaskOffsets::from_sys(btf_path)?;
            offsets_into(&mut settings, &off);
        }
        let need_btf = |what: &'static str| -> Result<()> {
            if have_btf {
                Ok(())
            } else {
                Err(UserError::NoBtf { path: btf::VMLINUX_BTF.into(), what }.into())
            }
        };
        if config.needs_task_flags() {
            need_btf("-u/-k (task flags)")?;
        }
        // Only the maps a mode uses get their full size.
        let mut sizes = Sizes::unused();
        sizes.stacks = config.stack_storage_size;
        sizes.layouts = limits::LAYOUTS;
        sizes.sites = limits::LAYOUT_SITES;
        if config.events_over_us.is_some() {
            sizes.wait_events = EVENT_BUFFER_BYTES;
        }
        if settings.cfi != 0 {
            sizes.unwind_nodes = limits::UNWIND_NODES;
            sizes.unwind_procs = limits::UNWIND_PROCS;
        }
        if config.on_cpu.is_some() {
            sizes.samples = config.max_entries;
        }
        if config.waker {
            sizes.wake_waits = config.max_entries;
            // Only deeper chains need every task's last wakeup; a traced task's is
            // in its start entry.
            if config.chain > 1 {
                sizes.last_wake = limits::START_ENTRIES;
            }
            // A chain per distinct waker and stacks: no more than the rows that
            // name them, except with --chain > 1, where every wakeup keeps one.
            sizes.chains = config.max_entries;
        } else {
            sizes.waits = config.max_entries;
        }
        cgroup_offsets_into(&mut settings)?;
        let mut ebpf = load(loader, &settings, &sizes, &config.threads)?;
        let take_unwind =
            |ebpf: &mut aya::Ebpf| if cfi { UnwindMaps::take(ebpf).map(Some) } else { Ok(None) };
        let plan = Plan::trace(config.waker, settings.events != 0)
            .following_cgroup(settings.thread_filter == topwaits_common::thread_filter::CGROUP)
            .sampling(config.on_cpu.is_some(), cfi);
        // With the walker, the hooks' full bodies are verified before anything
        // attaches, so that every stack of the trace is walked whole; the waits
        // already in progress then are recorded by `Tracer::seed_waits`.
        let plan = if cfi { plan.full_from_the_start() } else { plan };
        let mut attached_mono = crate::util::clock::monotonic_now();
        let mut kernel_btf = Some(kernel_btf);
        let mut btf = || {
            kernel_btf.take().ok_or_else(|| anyhow!("the kernel's BTF was parsed once already"))?()
        };
        // The tables are filled on another thread while the kernel verifies
        // the programs (tens of ms each), and are in place before they attach.
        let unwind = take_unwind(&mut ebpf)?;
        let mut prepared = None;
        let first = std::thread::scope(|s| {
            let prepare = &mut prepare;
            let mut preparing = Some(s.spawn(move || prepare(unwind)));
            let attached_at = &mut attached_mono;
            let mut ready = || -> Result<()> {
                if let Some(h) = preparing.take() {
                    prepared =
                        Some(h.join().map_err(|_| anyhow!("the unwind table thread panicked"))??);
                }
                // The programs are verified: the first attaches now.
                *attached_at = crate::util::clock::monotonic_now();
                Ok(())
            };
            let attached = match config.attach {
                AttachMode::TpBtf => need_btf("--attach tp_btf").and_then(|()| {
                    let kept = btf()?;
                    attach_tp_btf(&mut ebpf, &kept, &plan, &mut ready)?;
                    Ok((AttachKind::TpBtf, Some(kept)))
                }),
                // raw_tp first: it runs the same programs at the same cost as
                // tp_btf (bpf_stats, `pipe`), and attaching it needs no second
                // parse of the kernel's BTF, which halves the start-up's peak memory.
                AttachMode::RawTp | AttachMode::Auto => {
                    attach_raw_tp(&mut ebpf, &plan, &mut ready).map(|()| (AttachKind::RawTp, None))
                }
                AttachMode::Kprobe => {
                    need_btf("--attach kprobe (task_struct offsets)").and_then(|()| {
                        ready()?;
                        attach_kprobe(&mut ebpf, &plan)?;
                        Ok((AttachKind::Kprobe, None))
                    })
                }
            };
            ready().and(attached)
        });
        let (attach, kept_btf) = match first {
            Ok(done) => done,
            Err(e) if config.attach == AttachMode::Auto && have_btf => {
                warn!(
                    "raw_tp unavailable ({}); falling back to tp_btf",
                    crate::util::stderr::error_line(&e)
                );
                ebpf = reload(ebpf, &settings, &sizes, &config.threads)?;
                prepared = Some(prepare(take_unwind(&mut ebpf)?)?);
                let kept = btf()?;
                attach_tp_btf(&mut ebpf, &kept, &plan, &mut || {
                    attached_mono = crate::util::clock::monotonic_now();
                    Ok(())
                })?;
                (AttachKind::TpBtf, Some(kept))
            }
            Err(e) => return Err(e),
        };
        // Parsed for the iterator of the waits in progress, where attaching did
        // not need it.
        let kept_btf = match kept_btf {
            Some(b) => Some(b),
            None if cfi && have_btf && attach != AttachKind::Kprobe => btf().ok(),
            None => None,
        };
        let prepared = prepared.ok_or_else(|| anyhow!("the unwind tables were not prepared"))?;
        add_late_members(&mut ebpf, &config.threads)?;
        if config.labels {
            attach::attach_lock_contention(&mut ebpf);
        }
        if let Some(hz) = config.on_cpu {
            // Its body is in place already (loaded with the hooks'), but on
            // the kprobe path, which loads its programs one by one.
            let body = if attach == AttachKind::Kprobe {
                sample::Body::Load(names::PROG_SAMPLE_FULL)
            } else {
                sample::Body::Loaded
            };
            sample::attach(&mut ebpf, hz, body)?;
        }
        info!("attached with {}", attach.name());
        let tracer = Tracer {
            ebpf,
            attach,
            waker: config.waker,
            cpu_time: false,
            attached_mono,
            btf: kept_btf,
            block_us: (config.min_us, config.max_us),
            wait_events: config.events_over_us.is_some(),
            holds_rows: settings.hold_rows != 0,
            arrived_at_stop: None,
            sample_period: config.on_cpu.map(sample::period_ns),
            walks: cfi,
            capacity: (sizes.stacks, sizes.chains),
            aged: Default::default(),
            seeded_open: false,
        };
        Ok((tracer, prepared))
    }

    /// Whether user stacks are walked from the unwind tables.
    pub fn walks_user_stacks(&self) -> bool {
        self.walks
    }

    /// Records the waits in progress now, as the trace begins (see
    /// `seed_waits` in the eBPF crate): each traced thread off its CPU waits from
    /// here. Returns those whose user stacks are to be walked, with their
    /// registers; hand each back with [`Tracer::hand_back`] while it still waits.
    pub fn seed_waits(&mut self) -> Result<Vec<topwaits_common::SeededWait>> {
        if self.btf.is_none() {
            self.btf = Some(
                Btf::from_sys_fs()
                    .context("failed to read the kernel's BTF for the waits in progress")?,
            );
        }
        let btf = self.btf.as_ref().ok_or_else(|| anyhow!("kernel BTF not kept"))?;
        seed::run(&mut self.ebpf, btf)
    }

    /// Hands the kernel the user stack walked for a wait in progress at the
    /// start (see [`Tracer::seed_waits`]); false when it could not be kept.
    pub fn hand_back(
        &mut self,
        wait: &topwaits_common::SeededWait,
        frames: &[u64],
    ) -> Result<bool> {
        seed::hand_back(&mut self.ebpf, wait, frames)
    }

    /// Loads the kernel-stack learners and hands them to the hooks, which
    /// tail-call them: the `sched_switch` one, and with `--waker` the
    /// `sched_waking` one, verified at once. Done after attaching, so that their
    /// verification (35-50 ms each) does not delay the start; until then every
    /// kernel stack is unwound.
    pub fn load_after_start(&mut self) -> Result<()> {
        if matches!(self.attach, AttachKind::Kprobe) {
            // The kprobe path takes stacks as the incoming task and learns nothing.
            return Ok(());
        }
        let tp_btf = matches!(self.attach, AttachKind::TpBtf);
        let mut learners = vec![(
            names::LEARNERS,
            if tp_btf { names::PROG_LEARN_BTF } else { names::PROG_LEARN_RAW },
            "sched_switch",
        )];
        if self.waker {
            let prog =
                if tp_btf { names::PROG_LEARN_WAKER_BTF } else { names::PROG_LEARN_WAKER_RAW };
            learners.push((names::WAKE_LEARNERS, prog, "sched_waking"));
        }
        let progs: Vec<_> = learners.iter().map(|&(_, prog, tp)| (prog, tp)).collect();
        let btf = self.btf.take();
        let loaded = if tp_btf {
            let btf = btf.as_ref().ok_or_else(|| anyhow!("kernel BTF not kept"))?;
            load_in_parallel(&mut self.ebpf, &progs, |p, tp| {
                let p: &mut BtfTracePoint = p.try_into()?;
                attach::loaded(p.load(tp, btf), || format!("the {tp} stack learner"))
            })
        } else {
            load_in_parallel(&mut self.ebpf, &progs, |p, tp| {
                let p: &mut RawTracePoint = p.try_into()?;
                attach::loaded(p.load(), || format!("the {tp} stack learner"))
            })
        };
        loaded?;
        for (array, prog, _) in learners {
            attach::hand_over(&mut self.ebpf, array, prog)?;
        }
        Ok(())
    }

    /// Loads and attaches the `topwaits threads` programs, and with `--on-cpu`
    /// the sampler; `prepare` gets the walker's maps to fill before it
    /// attaches, as in [`Tracer::start`].
    pub fn start_threads<T>(
        config: &ThreadsConfig,
        prepare: impl FnOnce(Option<UnwindMaps>) -> Result<T>,
    ) -> Result<(Tracer, T)> {
        let loader = loader_in_background();
        let off = task_offsets("topwaits threads (task_struct offsets)")?;
        let mut settings = config.settings();
        offsets_into(&mut settings, &off);
        // Futex syscall tracepoints live in tracefs; without them every
        // dependency is reported with futex: false.
        let tracefs = match Tracefs::open() {
            Ok(t) => Some(t),
            Err(e) => {
                warn!(
                    "{}; futex dependencies are unavailable",
                    crate::util::stderr::error_line(&e)
                );
                None
            }
        };
        if let Some(op) =
            tracefs.as_ref().and_then(|t| t.field_offset("syscalls", "sys_enter_futex", "op"))
        {
            settings.off_futex_op = op;
        }
        let mut sizes = Sizes::unused();
        sizes.threads = limits::START_ENTRIES;
        sizes.deps = limits::DEPS_ENTRIES;
        sizes.futex = limits::START_ENTRIES;
        if config.on_cpu.is_some() {
            sizes.samples = limits::DEFAULT_MAX_ENTRIES;
            sizes.stacks = limits::DEFAULT_STACK_STORAGE;
            if settings.cfi != 0 {
                sizes.unwind_nodes = limits::UNWIND_NODES;
                sizes.unwind_procs = limits::UNWIND_PROCS;
            }
        }
        cgroup_offsets_into(&mut settings)?;
        let mut ebpf = load(loader, &settings, &sizes, &config.threads)?;
        let cfi = settings.cfi != 0;
        let prepared = prepare(if cfi { UnwindMaps::take(&mut ebpf).map(Some)? } else { None })?;
        let plan = Plan::threads()
            .with_process_events(settings.events != 0)
            .following_cgroup(settings.thread_filter == topwaits_common::thread_filter::CGROUP)
            .sampling(config.on_cpu.is_some(), cfi);
        // When the first program attaches, its verification over.
        let attached = std::cell::Cell::new(0);
        let now = || {
            attached.set(crate::util::clock::monotonic_now());
            Ok(())
        };
        let attach_btf = |ebpf: &mut Ebpf| -> Result<()> {
            let btf = Btf::from_sys_fs()?;
            attach_tp_btf(ebpf, &btf, &plan, &mut { now })
        };
        let attach_raw =
            |ebpf: &mut Ebpf| -> Result<()> { attach_raw_tp(ebpf, &plan, &mut { now }) };
        // As for the off-CPU trace: raw_tp first, tp_btf when it fails.
        let attach = match config.attach {
            AttachMode::TpBtf => {
                attach_btf(&mut ebpf)?;
                AttachKind::TpBtf
            }
            mode => match attach_raw(&mut ebpf) {
                Ok(()) => AttachKind::RawTp,
                Err(e) if mode == AttachMode::RawTp => return Err(e),
                Err(e) => {
                    warn!(
                        "raw_tp unavailable ({}); falling back to tp_btf",
                        crate::util::stderr::error_line(&e)
                    );
                    if cfi {
                        // The walker's maps were filled in the first load's.
                        return Err(
                            e.context("raw_tp unavailable; with --on-cpu, try --attach tp_btf")
                        );
                    }
                    ebpf = reload(ebpf, &settings, &sizes, &config.threads)?;
                    attach_btf(&mut ebpf)?;
                    AttachKind::TpBtf
                }
            },
        };
        let attached_mono = attached.get();
        if let Some(t) = &tracefs {
            attach_futex(&mut ebpf, t)?;
        }
        add_late_members(&mut ebpf, &config.threads)?;
        if let Some(hz) = config.on_cpu {
            // Its body was loaded with the hooks'.
            sample::attach(&mut ebpf, hz, sample::Body::Loaded)?;
        }
        info!("attached with {}", attach.name());
        let tracer = Tracer {
            ebpf,
            attach,
            waker: false,
            cpu_time: off.sum_exec != u32::MAX,
            attached_mono,
            btf: None,
            block_us: (0, u64::MAX),
            wait_events: false,
            holds_rows: false,
            arrived_at_stop: None,
            sample_period: config.on_cpu.map(sample::period_ns),
            walks: cfi,
            capacity: (sizes.stacks, sizes.chains),
            aged: Default::default(),
            seeded_open: false,
        };
        Ok((tracer, prepared))
    }

    /// The long-wait event ring buffer, once (with `--events-over`).
    pub fn take_wait_events(&mut self) -> Result<Option<events::WaitEvents>> {
        if !self.wait_events {
            return Ok(None);
        }
        let Some(map) = self.ebpf.take_map(names::WAIT_EVENTS) else {
            return Ok(None);
        };
        Ok(Some(events::WaitEvents {
            ring: RingBuf::try_from(map)?,
            got: Vec::new(),
            samples: Vec::new(),
            dropped: 0,
        }))
    }

    pub fn take_events(&mut self) -> Result<Option<ProcEvents>> {
        let Some(map) = self.ebpf.take_map(names::EVENTS) else {
            return Ok(None);
        };
        Ok(Some(ProcEvents { ring: RingBuf::try_from(map)? }))
    }

    /// When events may first have been recorded.
    pub fn attached_mono(&self) -> u64 {
        self.attached_mono
    }

    pub fn attach_kind(&self) -> AttachKind {
        self.attach
    }

    /// Every user task's registers now, by thread id (see [`regs`]). The
    /// kernel's BTF, which loading the iterator needs, is parsed for it and
    /// dropped after: kept, its 12 MiB stayed through the report that follows.
    pub fn task_regs(&mut self) -> Result<HashMap<u32, topwaits_common::TaskRegs>> {
        let btf = match self.btf.take() {
            Some(kept) => kept,
            None => Btf::from_sys_fs()?,
        };
        regs::of_tasks(&mut self.ebpf, &btf)
    }

    fn map(&self, name: &str) -> Result<&aya::maps::Map> {
        self.ebpf.map(name).ok_or_else(|| anyhow!("map {name} missing from the eBPF object"))
    }

    fn map_mut(&mut self, name: &str) -> Result<&mut aya::maps::Map> {
        self.ebpf.map_mut(name).ok_or_else(|| anyhow!("map {name} missing from the eBPF object"))
    }

    /// Makes the threads hooks record nothing from `end_mono` (CLOCK_MONOTONIC ns)
    /// on: set ahead to the end of the duration, or to now on Ctrl-C. Detaching
    /// (see [`Tracer::stop`]) can take hundreds of ms, during which they still run.
    pub fn end_threads_at(&mut self, end_mono: u64) -> Result<()> {
        let mut control: aya::maps::Array<&mut MapData, u64> =
            aya::maps::Array::try_from(self.map_mut(names::CONTROL)?)?;
        control.set(0, end_mono, 0).context("failed to set the end of the trace")
    }

    /// Detaches and unloads the programs, so that what is drained next is final.
    /// Detaches and unloads the programs. With `open_waits`, first notes the waits
    /// still open whose thread has been back on a CPU (see
    /// [`Tracer::arrived_unseen`]): after detaching, a thread may run again
    /// legitimately, so this is only known now.
    pub fn stop(&mut self, open_waits: bool) {
        if open_waits {
            let mut arrived = HashMap::new();
            let read = self.map(names::STARTS).and_then(|m| {
                batch::each(m, |&task: &u64, st: &SwitchOut| {
                    if st.ts != 0 && Self::arrived_now(st) {
                        arrived.insert(task, st.ts);
                    }
                })
            });
            if let Err(e) = read {
                log::warn!(
                    "could not read the per-task start map before detaching: {}",
                    crate::util::stderr::error_line(&e)
                );
            }
            self.arrived_at_stop = Some(arrived);
        }
        self_unload(&mut self.ebpf);
    }

    /// Whether the thread of an open wait has got a CPU since it began: its
    /// `sched_info.pcount` moved on. The hook then missed that switch-in (README
    /// Limitations), so the wait is not open, though its end is unknown. Threads
    /// gone, or kernels without the count, say no.
    fn arrived_now(st: &SwitchOut) -> bool {
        st.arrivals != 0
            && crate::sys::thread::arrivals(st.tgid, st.tid)
                .is_some_and(|n| n as u32 != st.arrivals)
    }

    /// [`Tracer::arrived_now`] while attached; after [`Tracer::stop`], as it was
    /// then.
    fn arrived_unseen(&self, task: u64, st: &SwitchOut) -> bool {
        match &self.arrived_at_stop {
            Some(at_stop) => at_stop.get(&task) == Some(&st.ts),
            None => Self::arrived_now(st),
        }
    }

    /// Sums the per-CPU counters.
    pub fn counters(&self) -> Result<Counters> {
        let arr: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(self.map(names::COUNTERS)?)?;
        let mut slots = vec![0u64; counter::COUNT as usize];
        for (i, slot) in slots.iter_mut().enumerate() {
            *slot = arr.get(&(i as u32), 0)?.iter().sum();
        }
        Ok(Counters::from_slots(&slots))
    }
}

#[cfg(test)]
mod tests {
    use super::{id_bitmap, OBJECT};
    use crate::sys::{btf, elf};

    /// The loader is built without the kernel's BTF (`loader_in_background`):
    /// were the object to gain CO-RE relocations, they would go unresolved.
    #[test]
    fn the_object_has_no_core_relocations() {
        let ext = elf::section_bytes(&mut std::io::Cursor::new(OBJECT), ".BTF.ext")
            .unwrap()
            .expect("the object keeps .BTF.ext");
        assert_eq!(btf::core_relocation_bytes(&ext), Ok(0));
    }

    #[test]
    fn pid_filter_bitmap_sets_one_bit_per_id_and_stops_at_the_largest() {
        assert!(id_bitmap(&[]).is_empty());
        let words = id_bitmap(&[0, 63, 64, 4_194_303]);
        assert_eq!(words.len(), 4_194_303 / 64 + 1);
        assert_eq!(words[0], 1 | 1 << 63);
        assert_eq!(words[1], 1);
        assert_eq!(*words.last().unwrap(), 1 << 63);
        assert_eq!(words.iter().map(|w| w.count_ones()).sum::<u32>(), 4);
        assert_eq!(id_bitmap(&[5, 999_999_999]), vec![1 << 5], "no task has an id that large");
    }
}
