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
use topwaits_common::{counter, names, Settings, WaitKey, WaitVal};

use crate::cli::{AttachMode, Config};
use crate::error::UserError;
use crate::model::{AttachKind, Capture, Counters, RawRecord, StackId};
use crate::sys::{btf, kallsyms};

/// Where the kernel exposes the kprobe PMU; absent when CONFIG_KPROBES is unset.
const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe/type";

/// The eBPF object, built by build.rs and embedded so the binary is self-contained.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/topwaits"));

/// A loaded and attached set of programs. Dropping it detaches and unloads them.
pub struct Tracer {
    ebpf: Ebpf,
    attach: AttachKind,
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
    let mut ebpf = EbpfLoader::new()
        .override_global(names::SETTINGS, settings, true)
        .map_max_entries(names::STACKS, config.stack_storage_size)
        .map_max_entries(names::WAITS, config.max_entries)
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

fn attach_tp_btf(ebpf: &mut Ebpf, btf: &Btf) -> Result<()> {
    let prog: &mut BtfTracePoint = program(ebpf, names::PROG_SWITCH_BTF)?.try_into()?;
    prog.load("sched_switch", btf).context("failed to load the tp_btf sched_switch program")?;
    prog.attach().context("failed to attach tp_btf/sched_switch")?;
    Ok(())
}

fn attach_raw_tp(ebpf: &mut Ebpf) -> Result<()> {
    let prog: &mut RawTracePoint = program(ebpf, names::PROG_SWITCH_RAW)?.try_into()?;
    prog.load().context("failed to load the raw_tp sched_switch program")?;
    prog.attach("sched_switch").context("failed to attach raw_tp/sched_switch")?;
    Ok(())
}

fn attach_kprobe(ebpf: &mut Ebpf) -> Result<()> {
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
                attach_tp_btf(&mut ebpf, &Btf::from_sys_fs()?)?;
                AttachKind::TpBtf
            }
            AttachMode::RawTp => {
                attach_raw_tp(&mut ebpf)?;
                AttachKind::RawTp
            }
            AttachMode::Kprobe => {
                need_btf("--attach kprobe (task_struct offsets)")?;
                attach_kprobe(&mut ebpf)?;
                AttachKind::Kprobe
            }
            AttachMode::Auto => {
                let tried = if have_btf {
                    Btf::from_sys_fs()
                        .map_err(anyhow::Error::from)
                        .and_then(|btf| attach_tp_btf(&mut ebpf, &btf))
                } else {
                    Err(anyhow!("no kernel BTF"))
                };
                match tried {
                    Ok(()) => AttachKind::TpBtf,
                    Err(e) => {
                        warn!("tp_btf unavailable ({e:#}); falling back to raw_tp");
                        attach_raw_tp(&mut ebpf)?;
                        AttachKind::RawTp
                    }
                }
            }
        };
        info!("attached with {}", attach.name());
        Ok(Tracer { ebpf, attach })
    }

    pub fn attach_kind(&self) -> AttachKind {
        self.attach
    }

    fn map(&self, name: &str) -> Result<&aya::maps::Map> {
        self.ebpf.map(name).ok_or_else(|| anyhow!("map {name} missing from the eBPF object"))
    }

    /// Detaches and unloads the programs, so that what is drained next is final.
    pub fn stop(&mut self) {
        for (_, prog) in self.ebpf.programs_mut() {
            let res = match prog {
                aya::programs::Program::BtfTracePoint(p) => p.unload(),
                aya::programs::Program::RawTracePoint(p) => p.unload(),
                aya::programs::Program::KProbe(p) => p.unload(),
                _ => Ok(()),
            };
            // Unloading a program that never loaded fails harmlessly.
            let _ = res;
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

    /// Reads the aggregate, the stacks it names, and the counters.
    pub fn drain(&self) -> Result<Capture> {
        let waits: BpfHashMap<&MapData, WaitKey, WaitVal> = BpfHashMap::try_from(self.map(names::WAITS)?)?;
        let mut records = Vec::new();
        for item in waits.iter() {
            let (k, v) = item.context("failed to read the aggregate map")?;
            let comm_len = k.comm.iter().position(|&b| b == 0).unwrap_or(k.comm.len());
            records.push(RawRecord {
                tgid: k.tgid,
                tid: k.tid,
                comm: k.comm[..comm_len].to_vec(),
                kstack: StackId::from_raw(k.kstack),
                ustack: StackId::from_raw(k.ustack),
                total_ns: v.total_ns,
                count: v.count,
                max_ns: v.max_ns,
                max_end_mono: v.max_end_ns,
            });
        }
        let traces: StackTraceMap<&MapData> = StackTraceMap::try_from(self.map(names::STACKS)?)?;
        let mut stacks = HashMap::new();
        for r in &records {
            for id in [r.kstack, r.ustack] {
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

