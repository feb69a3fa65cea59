//! The only module that touches aya: loads the embedded eBPF object with the settings
//! global and map sizes, attaches by the chosen path with fallback, and drains the
//! maps into plain [`crate::model`] structs.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, Context as _, Result};
use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, StackTraceMap};
use aya::programs::{BtfTracePoint, KProbe, RawTracePoint};
use aya::{Btf, Ebpf, EbpfLoader};
use log::{info, warn};
use topwaits_common::{counter, limits, names, Hop, Settings, WaitKey, WaitVal, WakeKey, WakeVal};

use crate::cli::{AttachMode, Config};
use crate::error::UserError;
use crate::model::{AttachKind, Capture, Counters, RawHop, RawRecord, StackId, WakeInfo, WakeKind};
use crate::sys::{btf, kallsyms};

/// Where the kernel exposes the kprobe PMU; absent when CONFIG_KPROBES is unset.
const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe/type";

/// The eBPF object, built by build.rs and embedded so the binary is self-contained.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/topwaits"));

/// A loaded and attached set of programs. Dropping it detaches and unloads them.
pub struct Tracer {
    ebpf: Ebpf,
    attach: AttachKind,
    waker: bool,
}

/// Detaches and unloads every loaded program of an object.
fn self_unload(ebpf: &mut Ebpf) {
    for (_, prog) in ebpf.programs_mut() {
        // Unloading a program that never loaded fails harmlessly.
        let _ = match prog {
            aya::programs::Program::BtfTracePoint(p) => p.unload(),
            aya::programs::Program::RawTracePoint(p) => p.unload(),
            aya::programs::Program::KProbe(p) => p.unload(),
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
        kstack: StackId::from_raw(k.kstack),
        ustack: StackId::from_raw(k.ustack),
        total_ns,
        count,
        max_ns,
        max_end_mono: max_end_ns,
        wake: None,
    }
}

fn raw_hop(h: &Hop) -> RawHop {
    RawHop {
        tgid: h.tgid,
        tid: h.tid,
        comm: comm_bytes(&h.comm),
        kstack: StackId::from_raw(h.kstack),
        ustack: StackId::from_raw(h.ustack),
    }
}

fn offsets_into(settings: &mut Settings, off: &btf::TaskOffsets) {
    settings.off_flags = off.flags;
    settings.off_pid = off.pid;
    settings.off_tgid = off.tgid;
    settings.off_state = off.state;
    settings.off_comm = off.comm;
}

fn load(config: &Config, settings: &Settings) -> Result<Ebpf> {
    let pids_size = (config.filter_ids().len() as u32).max(1);
    // Only the maps a mode uses get their full size; the others hold one entry.
    let (waits, wake_waits, last_wake) = if config.waker {
        (1, config.max_entries, limits::START_ENTRIES)
    } else {
        (config.max_entries, 1, 1)
    };
    let mut ebpf = EbpfLoader::new()
        .override_global(names::SETTINGS, settings, true)
        .map_max_entries(names::STACKS, config.stack_storage_size)
        .map_max_entries(names::WAITS, waits)
        .map_max_entries(names::WAKE_WAITS, wake_waits)
        .map_max_entries(names::LAST_WAKE, last_wake)
        .map_max_entries(names::PIDS, pids_size)
        .load(OBJECT)
        .context("failed to load the eBPF object")?;
    if !config.filter_ids().is_empty() {
        let mut pids: BpfHashMap<_, u32, u8> =
            BpfHashMap::try_from(ebpf.map_mut(names::PIDS).ok_or_else(|| anyhow!("map PIDS missing"))?)?;
        for &id in config.filter_ids() {
            pids.insert(id, 1, 0).context("failed to fill the pid filter")?;
        }
    }
    Ok(ebpf)
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

fn attach_tp_btf(ebpf: &mut Ebpf, btf: &Btf, waker: bool) -> Result<()> {
    if waker {
        attach_one_tp_btf(ebpf, btf, names::PROG_WAKING_BTF, "sched_waking")?;
    }
    attach_one_tp_btf(ebpf, btf, names::PROG_SWITCH_BTF, "sched_switch")
}

fn attach_raw_tp(ebpf: &mut Ebpf, waker: bool) -> Result<()> {
    if waker {
        attach_one_raw_tp(ebpf, names::PROG_WAKING_RAW, "sched_waking")?;
    }
    attach_one_raw_tp(ebpf, names::PROG_SWITCH_RAW, "sched_switch")
}

fn attach_kprobe(ebpf: &mut Ebpf, waker: bool) -> Result<()> {
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
    if waker {
        // Wakers come from the sched_waking tracepoint on every path.
        attach_one_raw_tp(ebpf, names::PROG_WAKING_RAW, "sched_waking")?;
    }
    Ok(())
}

fn program<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut aya::programs::Program> {
    ebpf.program_mut(name).ok_or_else(|| anyhow!("program {name} missing from the eBPF object"))
}

impl Tracer {
    /// Loads and attaches according to `config`. Errors name the fix.
    pub fn start(config: &Config) -> Result<Tracer> {
        let btf_path = Path::new(btf::VMLINUX_BTF);
        let have_btf = btf_path.exists();
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
        let mut ebpf = load(config, &settings)?;
        let attach = match config.attach {
            AttachMode::TpBtf => {
                need_btf("--attach tp_btf")?;
                attach_tp_btf(&mut ebpf, &Btf::from_sys_fs()?, config.waker)?;
                AttachKind::TpBtf
            }
            AttachMode::RawTp => {
                attach_raw_tp(&mut ebpf, config.waker)?;
                AttachKind::RawTp
            }
            AttachMode::Kprobe => {
                need_btf("--attach kprobe (task_struct offsets)")?;
                attach_kprobe(&mut ebpf, config.waker)?;
                AttachKind::Kprobe
            }
            AttachMode::Auto => {
                let tried = if have_btf {
                    Btf::from_sys_fs()
                        .map_err(anyhow::Error::from)
                        .and_then(|btf| attach_tp_btf(&mut ebpf, &btf, config.waker))
                } else {
                    Err(anyhow!("no kernel BTF"))
                };
                match tried {
                    Ok(()) => AttachKind::TpBtf,
                    Err(e) => {
                        warn!("tp_btf unavailable ({e:#}); falling back to raw_tp");
                        // A half-attached tp_btf set must not stay attached.
                        self_unload(&mut ebpf);
                        attach_raw_tp(&mut ebpf, config.waker)?;
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
        })
    }

    pub fn attach_kind(&self) -> AttachKind {
        self.attach
    }

    fn map(&self, name: &str) -> Result<&aya::maps::Map> {
        self.ebpf.map(name).ok_or_else(|| anyhow!("map {name} missing from the eBPF object"))
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

    /// Reads the aggregate, the stacks it names, and the counters.
    pub fn drain(&self) -> Result<Capture> {
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
        let traces: StackTraceMap<&MapData> = StackTraceMap::try_from(self.map(names::STACKS)?)?;
        let mut stacks = HashMap::new();
        for r in &records {
            let hops = r.wake.iter().flat_map(|w| &w.hops);
            for id in [r.kstack, r.ustack].into_iter().chain(hops.flat_map(|h| [h.kstack, h.ustack])) {
                if let StackId::Id(id) = id {
                    if stacks.contains_key(&id) {
                        continue;
                    }
                    // A trace can be missing only if the map was reused; the record
                    // then shows a missing-stack frame.
                    if let Ok(t) = traces.get(&id, 0) {
                        stacks.insert(id, t.frames().iter().map(|f| f.ip).collect());
                    }
                }
            }
        }
        Ok(Capture {
            records,
            stacks,
            counters: self.counters()?,
        })
    }
}

