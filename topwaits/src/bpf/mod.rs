//! The only module that touches aya: loads the embedded eBPF object with the settings
//! global and map sizes and runs its life (start, end, stop, counters). Attaching
//! (`attach`), draining the maps into plain structs (`drain`) and the process-event
//! ring (`events`) live in the submodules.

mod age;
mod attach;
mod batch;
mod drain;
mod events;
mod goroutines;
mod jvm;
mod load;
mod regs;
mod sample;
mod seed;
mod walker_maps;

pub use drain::Fill;
pub use events::{ProcEvents, WaitEvents, MAX_HELD_EVENTS};
pub use sample::{period_ns, record as sample_record};

pub use load::TaskRegsNow;
use load::*;
pub use walker_maps::UnwindMaps;

use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, Context as _, Result};
use aya::maps::{MapData, PerCpuArray, RingBuf};
use aya::programs::{BtfTracePoint, RawTracePoint};
use aya::{Btf, Ebpf};
use log::{info, warn};
use topwaits_common::{counter, names, SwitchOut};

use crate::model::{AttachKind, Counters};
use crate::settings::{AttachMode, Config, ThreadsConfig};
use crate::sys::btf;
use attach::{attach_futex, attach_raw_tp, attach_tp_btf, load_in_parallel, Plan};
pub use goroutines::Goroutines;

/// The eBPF object, built by build.rs and embedded so the binary is self-contained.
pub(super) static OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/topwaits"));

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
    /// Entries the stack maps, the chain map and the map of the threads
    /// goroutines ran on hold at most.
    capacity: age::Capacity,
    /// What the last aging deleted (see [`age`]).
    aged: age::Aged,
    /// Drains report the waits in progress since the start too, under the
    /// stacks walked for them (`serve`, whose every interval counts them).
    seeded_open: bool,
    /// The goroutine hooks, and the Go programs whose goroutines are traced.
    goroutines: goroutines::GoHooks,
    /// The JVMs' uprobes, where waits are labelled.
    jvm: Option<jvm::JvmHooks>,
    /// How full the aggregate map is, as user space knows it.
    aggregate: Aggregate,
}

/// The aggregate map's size, and the rows taken out of it since it was last
/// cleared (see [`Tracer::spill`]); the programs count the rows they insert.
#[derive(Clone, Copy, Debug, Default)]
struct Aggregate {
    size: u32,
    taken: u64,
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
        let have_btf = Path::new(btf::VMLINUX_BTF).exists();
        // aya parses the kernel's BTF once more to attach tp_btf: when asked for, do
        // that on another CPU while the offsets are read and the programs load.
        // The iterator that records the waits in progress at the start needs it
        // too (with the walker: their user stacks are walked whole).
        let cfi = config.settings().cfi != 0;
        let kernel_btf = kernel_btf_parsed(have_btf && (config.attach == AttachMode::TpBtf || cfi));
        let settings = trace_settings(config, have_btf)?;
        let sizes = Sizes::for_trace(config, cfi);
        let mut ebpf = load(loader, &settings, &sizes, &config.threads)?;
        // Before the switch attaches: a wait it records before the JVMs'
        // hooks are on would miss what they read.
        let mut jvm = hook_jvms(&mut ebpf, config)?;
        let take_unwind =
            |ebpf: &mut aya::Ebpf| if cfi { UnwindMaps::take(ebpf).map(Some) } else { Ok(None) };
        let plan = trace_plan(config, &settings, cfi);
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
            let attached =
                attach_first(&mut ebpf, config.attach, have_btf, &plan, &mut btf, &mut ready);
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
                jvm = hook_jvms(&mut ebpf, config)?;
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
        attach_extras(&mut ebpf, config, attach)?;
        let goroutines = if config.goroutines {
            goroutines::attach(&mut ebpf, &config.threads, config.waker)?
        } else {
            goroutines::GoHooks::default()
        };
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
            capacity: age::Capacity::of(&sizes),
            aged: Default::default(),
            seeded_open: false,
            goroutines,
            jvm,
            aggregate: Aggregate { size: sizes.waits.max(sizes.wake_waits), taken: 0 },
        };
        Ok((tracer, prepared))
    }

    /// The Go programs whose goroutines are traced, and those that could not be.
    pub fn goroutines(&self) -> &Goroutines {
        self.goroutines.found()
    }

    /// Process `pid` exec'd: a Go program's goroutines are traced from now on
    /// where the selection takes in new processes. Says why not, once per
    /// binary, where it is a Go program that cannot be hooked.
    pub fn exec(&mut self, pid: u32) -> Option<String> {
        self.goroutines.exec(&mut self.ebpf, pid)
    }

    /// JVM process `pid` started running Java during the trace: its
    /// libjvm.so is hooked from now on, unless it was already.
    pub fn hook_jvm(&mut self, pid: u32) {
        let Some(j) = self.jvm.as_mut() else { return };
        let before = j.hooked;
        j.hook_process(&mut self.ebpf, pid, &crate::sys::procfs::maps_of(pid));
        if j.hooked != before {
            log::debug!("HotSpot of {pid} hooked: {:?} libjvm.so in all", j.hooked);
            if let Err(e) = jvm_control(&mut self.ebpf, j.hooked) {
                log::warn!("JVM hooks not switched on: {e:#}");
            }
        }
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
        let tracefs = futex_tracefs();
        if let Some(op) =
            tracefs.as_ref().and_then(|t| t.field_offset("syscalls", "sys_enter_futex", "op"))
        {
            settings.off_futex_op = op;
        }
        let sizes = Sizes::for_threads(config, settings.cfi != 0);
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
        let goroutines = if config.goroutines {
            goroutines::attach(&mut ebpf, &config.threads, false)?
        } else {
            goroutines::GoHooks::default()
        };
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
            goroutines,
            jvm: None,
            arrived_at_stop: None,
            sample_period: config.on_cpu.map(sample::period_ns),
            walks: cfi,
            capacity: age::Capacity::of(&sizes),
            aged: Default::default(),
            seeded_open: false,
            aggregate: Aggregate { size: sizes.waits, taken: 0 },
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
            got: Default::default(),
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
        self.set_control(topwaits_common::control::END, end_mono)
            .context("failed to set the end of the trace")
    }

    /// Writes slot `slot` of the programs' `CONTROL` array.
    fn set_control(&mut self, slot: u32, value: u64) -> Result<()> {
        set_control(&mut self.ebpf, slot, value)
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

/// Sets slot `slot` of the programs' `CONTROL` array.
fn set_control(ebpf: &mut Ebpf, slot: u32, value: u64) -> Result<()> {
    let map = ebpf.map_mut(names::CONTROL).ok_or_else(|| anyhow!("map CONTROL missing"))?;
    let mut control: aya::maps::Array<&mut MapData, u64> = aya::maps::Array::try_from(map)?;
    Ok(control.set(slot, value, 0)?)
}

/// Hooks the JVMs the trace selects now, where waits are labelled; None
/// where they are not.
fn hook_jvms(ebpf: &mut Ebpf, config: &Config) -> Result<Option<jvm::JvmHooks>> {
    if !config.labels {
        return Ok(None);
    }
    let mut j = jvm::JvmHooks::default();
    j.attach(ebpf, &goroutines::candidates(&config.threads));
    log::debug!("HotSpot hooked: {:?} libjvm.so", j.hooked);
    jvm_control(ebpf, j.hooked)?;
    Ok(Some(j))
}

/// Tells the switch which JVM hooks there are, so that it reads what they
/// keep (and no futex wait pays for them before).
fn jvm_control(ebpf: &mut Ebpf, hooked: jvm::Hooked) -> Result<()> {
    use topwaits_common::control;
    if hooked.sleeps > 0 {
        set_control(ebpf, control::JVM_SLEEPS, 1)?;
    }
    if hooked.monitors > 0 {
        set_control(ebpf, control::JVM_MONITORS, 1)?;
    }
    Ok(())
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
