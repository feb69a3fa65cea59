//! The only module that touches aya: loads the embedded eBPF object with the settings
//! global and map sizes, attaches by the chosen path with fallback, and drains the
//! maps into plain [`crate::model`] structs.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, Context as _, Result};
use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, ProgramArray, RingBuf};
use aya::programs::{BtfTracePoint, KProbe, RawTracePoint, TracePoint};
use aya::{Btf, Ebpf, EbpfLoader};
use log::{info, warn};
use topwaits_common::{
    counter, limits, names, Chain, DepKey, Hop, KernelStack, ProcEvent, Settings, SwitchOut, ThreadStats, WaitKey, WaitVal,
    WakeKey, WakeVal,
};

use crate::cli::{AttachMode, Config, ThreadsConfig};
use crate::error::UserError;
use crate::model::{AttachKind, Capture, Counters, OpenSince, RawHop, RawRecord, StackId, WakeInfo, WakeKind};
use crate::profile::{Edge, ThreadProfile, ThreadsCapture};
use crate::sys::{btf, kallsyms, tracefs::Tracefs};

/// Where the kernel exposes the kprobe PMU; absent when CONFIG_KPROBES is unset.
const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe/type";

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
    /// The kernel's BTF, kept for loading the stack learner after attaching.
    btf: Option<Btf>,
    /// `-m`/`-M` in µs, which waits still in progress must pass too.
    block_us: (u64, u64),
}

/// Detaches and unloads every loaded program of an object.
fn self_unload(ebpf: &mut Ebpf) {
    for (_, prog) in ebpf.programs_mut() {
        // Unloading a program that never loaded fails harmlessly.
        let _ = match prog {
            aya::programs::Program::BtfTracePoint(p) => p.unload(),
            aya::programs::Program::RawTracePoint(p) => p.unload(),
            aya::programs::Program::KProbe(p) => p.unload(),
            aya::programs::Program::TracePoint(p) => p.unload(),
            _ => Ok(()),
        };
    }
}

fn comm_bytes(comm: &[u8]) -> Vec<u8> {
    let len = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    comm[..len].to_vec()
}

fn raw_record(k: &WaitKey, total_ns: u64, count: u64, max_ns: u64, max_end_ns: u64) -> RawRecord {
    RawRecord {
        tgid: k.tgid,
        tid: k.tid,
        comm: comm_bytes(&k.comm),
        kstack: StackId::from_ref(k.kstack),
        ustack: StackId::from_ref(k.ustack),
        total_ns,
        count,
        max_ns,
        max_end_mono: max_end_ns,
        wake: None,
        open: None,
    }
}

fn raw_hop(h: &Hop) -> RawHop {
    RawHop {
        tgid: h.tgid,
        tid: h.tid,
        comm: comm_bytes(&h.comm),
        kstack: StackId::from_ref(h.kstack),
        ustack: StackId::from_ref(h.ustack),
    }
}

fn offsets_into(settings: &mut Settings, off: &btf::TaskOffsets) {
    settings.off_flags = off.flags;
    settings.off_pid = off.pid;
    settings.off_tgid = off.tgid;
    settings.off_state = off.state;
    settings.off_comm = off.comm;
    settings.off_prio = off.prio;
    settings.off_static_prio = off.static_prio;
    settings.off_policy = off.policy;
    settings.off_rt_priority = off.rt_priority;
    settings.off_sum_exec = off.sum_exec;
}

/// Map capacities for one mode. Maps a mode does not use hold one entry.
struct Sizes {
    stacks: u32,
    waits: u32,
    wake_waits: u32,
    last_wake: u32,
    threads: u32,
    deps: u32,
    futex: u32,
}

impl Sizes {
    fn unused() -> Self {
        Sizes {
            stacks: 1,
            waits: 1,
            wake_waits: 1,
            last_wake: 1,
            threads: 1,
            deps: 1,
            futex: 1,
        }
    }
}

/// Starts `EbpfLoader::new()`, which parses the kernel's BTF, on another CPU, so
/// that it overlaps with topwaits reading its own task_struct offsets.
fn loader_in_background() -> std::thread::JoinHandle<EbpfLoader<'static>> {
    std::thread::spawn(EbpfLoader::new)
}

fn load(
    loader: std::thread::JoinHandle<EbpfLoader<'static>>,
    settings: &Settings,
    sizes: &Sizes,
    ids: &[u32],
) -> Result<Ebpf> {
    let mut loader = loader.join().map_err(|_| anyhow!("the eBPF loader thread panicked"))?;
    let mut ebpf = loader
        .override_global(names::SETTINGS, settings, true)
        .map_max_entries(names::USTACKS, sizes.stacks)
        .map_max_entries(names::KSTACKS, sizes.stacks)
        .map_max_entries(names::WAITS, sizes.waits)
        .map_max_entries(names::WAKE_WAITS, sizes.wake_waits)
        .map_max_entries(names::LAST_WAKE, sizes.last_wake)
        .map_max_entries(names::THREADS, sizes.threads)
        .map_max_entries(names::DEPS, sizes.deps)
        .map_max_entries(names::FUTEX_WAKING, sizes.futex)
        .map_max_entries(names::PIDS, (ids.len() as u32).max(1))
        .load(OBJECT)
        .context("failed to load the eBPF object")?;
    if !ids.is_empty() {
        let mut pids: BpfHashMap<_, u32, u8> =
            BpfHashMap::try_from(ebpf.map_mut(names::PIDS).ok_or_else(|| anyhow!("map PIDS missing"))?)?;
        for &id in ids {
            pids.insert(id, 1, 0).context("failed to fill the pid filter")?;
        }
    }
    Ok(ebpf)
}

/// Reads the task_struct offsets, or explains why BTF is needed.
fn task_offsets(what: &'static str) -> Result<btf::TaskOffsets> {
    let path = Path::new(btf::VMLINUX_BTF);
    if !path.exists() {
        return Err(UserError::NoBtf {
            path: btf::VMLINUX_BTF.into(),
            what,
        }
        .into());
    }
    btf::TaskOffsets::from_sys(path)
}

fn attach_one_tp_btf(ebpf: &mut Ebpf, btf: &Btf, prog: &str, tp: &str) -> Result<()> {
    let p: &mut BtfTracePoint = program(ebpf, prog)?.try_into()?;
    p.load(tp, btf).with_context(|| format!("failed to load the tp_btf {tp} program"))?;
    p.attach().with_context(|| format!("failed to attach tp_btf/{tp}"))?;
    Ok(())
}

fn attach_one_raw_tp(ebpf: &mut Ebpf, prog: &str, tp: &str) -> Result<()> {
    let p: &mut RawTracePoint = program(ebpf, prog)?.try_into()?;
    p.load().with_context(|| format!("failed to load the raw_tp {tp} program"))?;
    p.attach(tp).with_context(|| format!("failed to attach raw_tp/{tp}"))?;
    Ok(())
}

/// `topwaits threads` follows wakeups and needs no process events.
const THREADS_HOOKS: Hooks = Hooks {
    waking: true,
    exec: false,
};

/// Which hooks besides sched_switch a mode needs.
#[derive(Clone, Copy)]
struct Hooks {
    waking: bool,
    exec: bool,
}

fn attach_tp_btf(ebpf: &mut Ebpf, btf: &Btf, hooks: Hooks) -> Result<()> {
    if hooks.waking {
        attach_one_tp_btf(ebpf, btf, names::PROG_WAKING_BTF, "sched_waking")?;
    }
    if hooks.exec {
        attach_one_tp_btf(ebpf, btf, names::PROG_EXEC_BTF, "sched_process_exec")?;
    }
    attach_one_tp_btf(ebpf, btf, names::PROG_SWITCH_BTF, "sched_switch")
}

fn attach_raw_tp(ebpf: &mut Ebpf, hooks: Hooks) -> Result<()> {
    if hooks.waking {
        attach_one_raw_tp(ebpf, names::PROG_WAKING_RAW, "sched_waking")?;
    }
    if hooks.exec {
        attach_one_raw_tp(ebpf, names::PROG_EXEC_RAW, "sched_process_exec")?;
    }
    attach_one_raw_tp(ebpf, names::PROG_SWITCH_RAW, "sched_switch")
}

fn attach_kprobe(ebpf: &mut Ebpf, hooks: Hooks) -> Result<()> {
    let prog: &mut KProbe = program(ebpf, names::PROG_FINISH_KPROBE)?.try_into()?;
    // Load first: the program must pass the verifier even where kprobes cannot attach.
    prog.load().context("failed to load the finish_task_switch kprobe program")?;
    let symbol = kallsyms::find_function_in_sys("finish_task_switch")
        .context("failed to read /proc/kallsyms")?
        .ok_or(UserError::NoKprobeTarget)?;
    info!("kprobe target: {symbol}");
    if !Path::new(KPROBE_PMU).exists() {
        return Err(UserError::NoKprobes(KPROBE_PMU.to_string()).into());
    }
    prog.attach(&symbol, 0).with_context(|| format!("failed to attach a kprobe to {symbol}"))?;
    // Wakers and execs come from tracepoints on every path.
    if hooks.waking {
        attach_one_raw_tp(ebpf, names::PROG_WAKING_RAW, "sched_waking")?;
    }
    if hooks.exec {
        attach_one_raw_tp(ebpf, names::PROG_EXEC_RAW, "sched_process_exec")?;
    }
    Ok(())
}

/// Attaches the futex syscall hooks to whichever futex tracepoints exist.
fn attach_futex(ebpf: &mut Ebpf, tracefs: &Tracefs) -> Result<()> {
    let hooks: [(&str, &[&str]); 3] = [
        (names::PROG_FUTEX_ENTER, &["sys_enter_futex"]),
        (names::PROG_FUTEX_WAKE_ENTER, &["sys_enter_futex_wake", "sys_enter_futex_requeue"]),
        (names::PROG_FUTEX_EXIT, &["sys_exit_futex", "sys_exit_futex_wake", "sys_exit_futex_requeue"]),
    ];
    for (prog_name, events) in hooks {
        let present: Vec<&str> = events.iter().copied().filter(|e| tracefs.has_event("syscalls", e)).collect();
        if present.is_empty() {
            continue;
        }
        let p: &mut TracePoint = program(ebpf, prog_name)?.try_into()?;
        p.load().with_context(|| format!("failed to load {prog_name}"))?;
        for e in present {
            p.attach("syscalls", e).with_context(|| format!("failed to attach syscalls/{e}"))?;
        }
    }
    Ok(())
}

fn program<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut aya::programs::Program> {
    ebpf.program_mut(name).ok_or_else(|| anyhow!("program {name} missing from the eBPF object"))
}

impl Tracer {
    /// Loads and attaches according to `config`. Errors name the fix.
    pub fn start(config: &Config) -> Result<Tracer> {
        let loader = loader_in_background();
        let btf_path = Path::new(btf::VMLINUX_BTF);
        let have_btf = btf_path.exists();
        // aya parses the kernel's BTF once more to attach tp_btf: do that on another
        // CPU while the offsets are read and the programs load (start-up time).
        let attach_btf = (have_btf && matches!(config.attach, AttachMode::TpBtf | AttachMode::Auto))
            .then(|| std::thread::spawn(Btf::from_sys_fs));
        let kernel_btf = move || -> Result<Btf> {
            match attach_btf {
                Some(t) => t.join().map_err(|_| anyhow!("the BTF parser thread panicked"))?.map_err(Into::into),
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
                Err(UserError::NoBtf {
                    path: btf::VMLINUX_BTF.into(),
                    what,
                }
                .into())
            }
        };
        if config.needs_task_flags() {
            need_btf("-u/-k (task flags)")?;
        }
        // Only the maps a mode uses get their full size.
        let mut sizes = Sizes::unused();
        sizes.stacks = config.stack_storage_size;
        if config.waker {
            sizes.wake_waits = config.max_entries;
            sizes.last_wake = limits::START_ENTRIES;
        } else {
            sizes.waits = config.max_entries;
        }
        let mut ebpf = load(loader, &settings, &sizes, config.filter_ids())?;
        let hooks = Hooks {
            waking: config.waker,
            exec: settings.events != 0,
        };
        let attached_mono = crate::clock::monotonic_now();
        let mut kept_btf = None;
        let attach = match config.attach {
            AttachMode::TpBtf => {
                need_btf("--attach tp_btf")?;
                let btf = kernel_btf()?;
                attach_tp_btf(&mut ebpf, &btf, hooks)?;
                kept_btf = Some(btf);
                AttachKind::TpBtf
            }
            AttachMode::RawTp => {
                attach_raw_tp(&mut ebpf, hooks)?;
                AttachKind::RawTp
            }
            AttachMode::Kprobe => {
                need_btf("--attach kprobe (task_struct offsets)")?;
                attach_kprobe(&mut ebpf, hooks)?;
                AttachKind::Kprobe
            }
            AttachMode::Auto => {
                let tried = if have_btf {
                    kernel_btf().and_then(|btf| attach_tp_btf(&mut ebpf, &btf, hooks).map(|()| btf))
                } else {
                    Err(anyhow!("no kernel BTF"))
                };
                match tried {
                    Ok(btf) => {
                        kept_btf = Some(btf);
                        AttachKind::TpBtf
                    }
                    Err(e) => {
                        warn!("tp_btf unavailable ({e:#}); falling back to raw_tp");
                        // A half-attached tp_btf set must not stay attached.
                        self_unload(&mut ebpf);
                        attach_raw_tp(&mut ebpf, hooks)?;
                        AttachKind::RawTp
                    }
                }
            }
        };
        info!("attached with {}", attach.name());
        Ok(Tracer {
            ebpf,
            attach,
            waker: config.waker,
            cpu_time: false,
            attached_mono,
            btf: kept_btf,
            block_us: (config.min_us, config.max_us),
        })
    }

    /// Loads the kernel-stack learner and hands it to the `sched_switch` hook, which
    /// tail-calls it. Done after attaching, so that its verification (about 15 ms)
    /// does not delay the start; until then every kernel stack is unwound.
    pub fn load_learner(&mut self) -> Result<()> {
        let fd = match self.attach {
            AttachKind::TpBtf => {
                let btf = self.btf.take().ok_or_else(|| anyhow!("kernel BTF not kept"))?;
                let p: &mut BtfTracePoint = program(&mut self.ebpf, names::PROG_LEARN_BTF)?.try_into()?;
                p.load("sched_switch", &btf).context("failed to load the stack learner")?;
                p.fd()?.try_clone()?
            }
            AttachKind::RawTp => {
                let p: &mut RawTracePoint = program(&mut self.ebpf, names::PROG_LEARN_RAW)?.try_into()?;
                p.load().context("failed to load the stack learner")?;
                p.fd()?.try_clone()?
            }
            // The kprobe path takes stacks as the incoming task and learns nothing.
            AttachKind::Kprobe => return Ok(()),
        };
        let mut learners: ProgramArray<&mut MapData> = ProgramArray::try_from(self.map_mut(names::LEARNERS)?)?;
        learners.set(0, &fd, 0).context("failed to hand the stack learner to the hook")?;
        Ok(())
    }

    /// Loads and attaches the `topwaits threads` programs.
    pub fn start_threads(config: &ThreadsConfig) -> Result<Tracer> {
        let loader = loader_in_background();
        let off = task_offsets("topwaits threads (task_struct offsets)")?;
        let mut settings = config.settings();
        offsets_into(&mut settings, &off);
        // Futex syscall tracepoints live in tracefs; without them every
        // dependency is reported with futex: false.
        let tracefs = match Tracefs::open() {
            Ok(t) => Some(t),
            Err(e) => {
                warn!("{e:#}; futex dependencies are unavailable");
                None
            }
        };
        if let Some(op) = tracefs.as_ref().and_then(|t| t.field_offset("syscalls", "sys_enter_futex", "op")) {
            settings.off_futex_op = op;
        }
        let mut sizes = Sizes::unused();
        sizes.threads = limits::START_ENTRIES;
        sizes.deps = limits::DEPS_ENTRIES;
        sizes.futex = limits::START_ENTRIES;
        let mut ebpf = load(loader, &settings, &sizes, config.threads.ids())?;
        let attached_mono = crate::clock::monotonic_now();
        let tried = match config.attach {
            AttachMode::RawTp => None,
            mode => {
                let res = Btf::from_sys_fs().map_err(anyhow::Error::from).and_then(|btf| {
                    attach_one_tp_btf(&mut ebpf, &btf, names::PROG_NEW_BTF, "sched_wakeup_new")?;
                    attach_tp_btf(&mut ebpf, &btf, THREADS_HOOKS)
                });
                match res {
                    Ok(()) => Some(AttachKind::TpBtf),
                    Err(e) if mode == AttachMode::TpBtf => return Err(e),
                    Err(e) => {
                        warn!("tp_btf unavailable ({e:#}); falling back to raw_tp");
                        None
                    }
                }
            }
        };
        let attach = match tried {
            Some(kind) => kind,
            None => {
                self_unload(&mut ebpf);
                attach_one_raw_tp(&mut ebpf, names::PROG_NEW_RAW, "sched_wakeup_new")?;
                attach_raw_tp(&mut ebpf, THREADS_HOOKS)?;
                AttachKind::RawTp
            }
        };
        if let Some(t) = &tracefs {
            attach_futex(&mut ebpf, t)?;
        }
        info!("attached with {}", attach.name());
        Ok(Tracer {
            ebpf,
            attach,
            waker: false,
            cpu_time: off.sum_exec != u32::MAX,
            attached_mono,
            btf: None,
            block_us: (0, u64::MAX),
        })
    }

    /// Reads the thread profiles, closing open states at `end_mono`, and the edges.
    pub fn drain_threads(&self, end_mono: u64) -> Result<ThreadsCapture> {
        let threads: BpfHashMap<&MapData, u32, ThreadStats> = BpfHashMap::try_from(self.map(names::THREADS)?)?;
        let mut out = ThreadsCapture::default();
        for item in threads.iter() {
            let (_, t) = item.context("failed to read the thread map")?;
            out.threads.push(ThreadProfile::from_stats(&t, end_mono, self.cpu_time));
        }
        let deps: BpfHashMap<&MapData, DepKey, u64> = BpfHashMap::try_from(self.map(names::DEPS)?)?;
        for item in deps.iter() {
            let (k, count) = item.context("failed to read the dependency map")?;
            out.edges.push(Edge {
                waker: k.waker,
                sleeper: k.sleeper,
                count,
                futex: k.futex != 0,
            });
        }
        out.counters = self.counters()?;
        let arr: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(self.map(names::COUNTERS)?)?;
        out.lost_threads = arr.get(&counter::LOST_THREADS_FULL, 0)?.iter().sum();
        out.lost_deps = arr.get(&counter::LOST_DEPS_FULL, 0)?.iter().sum();
        Ok(out)
    }

    /// The process-event stream, if the settings asked for one. Taken once.
    pub fn take_events(&mut self) -> Result<Option<ProcEvents>> {
        let Some(map) = self.ebpf.take_map(names::EVENTS) else {
            return Ok(None);
        };
        Ok(Some(ProcEvents {
            ring: RingBuf::try_from(map)?,
        }))
    }

    /// When events may first have been recorded.
    pub fn attached_mono(&self) -> u64 {
        self.attached_mono
    }

    pub fn attach_kind(&self) -> AttachKind {
        self.attach
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
        let mut control: aya::maps::Array<&mut MapData, u64> = aya::maps::Array::try_from(self.map_mut(names::CONTROL)?)?;
        control.set(0, end_mono, 0).context("failed to set the end of the trace")
    }

    /// Detaches and unloads the programs, so that what is drained next is final.
    pub fn stop(&mut self) {
        self_unload(&mut self.ebpf);
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

    /// Reads the aggregate like [`Tracer::drain`], then deletes the rows it read, so
    /// that the next drain holds only what came after. Stack traces are kept: new
    /// rows may name them. A wait added to a row between its read and its deletion
    /// is lost; the window is a few microseconds per row.
    pub fn drain_and_clear(&mut self, open_at: Option<u64>) -> Result<Capture> {
        let capture = self.drain(open_at)?;
        let waker = self.waker;
        let map = self.map_mut(if waker { names::WAKE_WAITS } else { names::WAITS })?;
        if waker {
            let mut m: BpfHashMap<&mut MapData, WakeKey, WakeVal> = BpfHashMap::try_from(map)?;
            let keys: Vec<WakeKey> = m.keys().filter_map(Result::ok).collect();
            for k in keys {
                let _ = m.remove(&k);
            }
        } else {
            let mut m: BpfHashMap<&mut MapData, WaitKey, WaitVal> = BpfHashMap::try_from(map)?;
            let keys: Vec<WaitKey> = m.keys().filter_map(Result::ok).collect();
            for k in keys {
                let _ = m.remove(&k);
            }
        }
        Ok(capture)
    }

    /// The waits still in progress at `end_mono` (switched out during the trace and
    /// not back), as one-wait records; and every thread seen switching out.
    fn open_waits(&self, end_mono: u64, records: &mut Vec<RawRecord>, switched: &mut std::collections::HashSet<u32>) -> Result<()> {
        let starts: BpfHashMap<&MapData, u64, SwitchOut> = BpfHashMap::try_from(self.map(names::STARTS)?)?;
        let wakes: Option<BpfHashMap<&MapData, u64, Chain>> =
            if self.waker { Some(BpfHashMap::try_from(self.map(names::LAST_WAKE)?)?) } else { None };
        let (min_us, max_us) = self.block_us;
        for item in starts.iter() {
            let (task, st) = item.context("failed to read the per-task start map")?;
            switched.insert(st.tid);
            if st.ts == 0 || st.ts > end_mono {
                continue;
            }
            let so_far = end_mono - st.ts;
            if !(min_us..=max_us).contains(&(so_far / 1000)) {
                continue;
            }
            let key = WaitKey {
                kstack: st.kstack,
                tgid: st.tgid,
                tid: st.tid,
                ustack: st.ustack,
                comm: st.comm,
            };
            let mut r = raw_record(&key, so_far, 1, so_far, end_mono);
            r.open = Some(OpenSince::Exact(st.ts));
            if let Some(wakes) = &wakes {
                let chain = wakes.get(&task, 0).ok().filter(|c| c.ts >= st.ts && c.ts <= end_mono);
                r.wake = Some(open_wake(&st, chain.as_ref(), end_mono));
            }
            records.push(r);
        }
        Ok(())
    }

    /// Reads the aggregate, the stacks it names, and the counters; with `open_at`,
    /// also the waits still in progress at that CLOCK_MONOTONIC time.
    pub fn drain(&self, open_at: Option<u64>) -> Result<Capture> {
        let mut records = Vec::new();
        if self.waker {
            let waits: BpfHashMap<&MapData, WakeKey, WakeVal> = BpfHashMap::try_from(self.map(names::WAKE_WAITS)?)?;
            for item in waits.iter() {
                let (k, v) = item.context("failed to read the aggregate map")?;
                let mut r = raw_record(&k.target, v.total_ns, v.count, v.max_ns, v.max_end_ns);
                let kind = match k.kind {
                    topwaits_common::wake_kind::WOKEN => WakeKind::Woken,
                    topwaits_common::wake_kind::PREEMPTED => WakeKind::Preempted,
                    _ => WakeKind::NoWaker,
                };
                let len = (k.len as usize).min(k.hops.len());
                r.wake = Some(WakeInfo {
                    kind,
                    hops: k.hops[..len].iter().map(raw_hop).collect(),
                    blocked_ns: v.blocked_ns,
                    runq_ns: v.runq_ns,
                    max_blocked_ns: v.max_blocked_ns,
                    max_runq_ns: v.max_runq_ns,
                });
                records.push(r);
            }
        } else {
            let waits: BpfHashMap<&MapData, WaitKey, WaitVal> = BpfHashMap::try_from(self.map(names::WAITS)?)?;
            for item in waits.iter() {
                let (k, v) = item.context("failed to read the aggregate map")?;
                records.push(raw_record(&k, v.total_ns, v.count, v.max_ns, v.max_end_ns));
            }
        }
        let mut switched = std::collections::HashSet::new();
        if let Some(end) = open_at {
            self.open_waits(end, &mut records, &mut switched)?;
        }
        let kernel: BpfHashMap<&MapData, u64, KernelStack> = BpfHashMap::try_from(self.map(names::KSTACKS)?)?;
        let user: BpfHashMap<&MapData, u64, KernelStack> = BpfHashMap::try_from(self.map(names::USTACKS)?)?;
        let mut stacks = HashMap::new();
        for r in &records {
            let hops = r.wake.iter().flat_map(|w| &w.hops);
            let refs = [(r.kstack, &kernel), (r.ustack, &user)]
                .into_iter()
                .chain(hops.flat_map(|h| [(h.kstack, &kernel), (h.ustack, &user)]));
            for (id, map) in refs {
                let StackId::Id(id) = id else { continue };
                if stacks.contains_key(&id) {
                    continue;
                }
                // A reference always names a stored stack (entries are never
                // deleted); were one gone, the record would show a missing stack.
                if let Ok(frames) = map.get(&id, 0) {
                    stacks.insert(id, frames.iter().copied().take_while(|&ip| ip != 0).collect());
                }
            }
        }
        Ok(Capture {
            records,
            stacks,
            counters: self.counters()?,
            switched,
            ..Default::default()
        })
    }
}

/// The waker side of a wait still in progress: preempted (on the run queue all
/// along), woken and on the run queue since the wakeup, or not woken yet.
fn open_wake(st: &SwitchOut, chain: Option<&Chain>, end_mono: u64) -> WakeInfo<RawHop> {
    let so_far = end_mono - st.ts;
    let (kind, hops, blocked) = match chain {
        _ if st.state == 0 => (WakeKind::Preempted, Vec::new(), 0),
        Some(c) => {
            let len = (c.len as usize).min(c.hops.len());
            (WakeKind::Woken, c.hops[..len].iter().map(raw_hop).collect(), c.ts - st.ts)
        }
        None => (WakeKind::NotYet, Vec::new(), so_far),
    };
    WakeInfo {
        kind,
        hops,
        blocked_ns: blocked,
        runq_ns: so_far - blocked,
        max_blocked_ns: blocked,
        max_runq_ns: so_far - blocked,
    }
}


/// Process events from the kernel: a task seen for the first time, or an exec.
pub struct ProcEvents {
    ring: RingBuf<MapData>,
}

impl ProcEvents {
    /// Hands every pending event to `f` as (tgid, kind).
    pub fn drain(&mut self, mut f: impl FnMut(u32, u32)) {
        while let Some(item) = self.ring.next() {
            if item.len() >= std::mem::size_of::<ProcEvent>() {
                // SAFETY: the kernel writes whole ProcEvent records; the read is
                // unaligned-safe.
                let ev: ProcEvent = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
                f(ev.tgid, ev.kind);
            }
        }
    }
}

impl std::os::fd::AsRawFd for ProcEvents {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.ring.as_raw_fd()
    }
}
