//! Attaching the loaded programs by each path: tp_btf, raw_tp, the kprobe (which
//! loads, then fails in one line where kprobes are missing), and the futex syscall
//! tracepoints.

use std::path::Path;

use anyhow::{anyhow, Context as _, Result};
use aya::programs::{BtfTracePoint, KProbe, Program, ProgramError, RawTracePoint, TracePoint};
use aya::{Btf, Ebpf};
use log::info;
use topwaits_common::names;

use crate::error::{verifier_verdict, UserError};
use crate::sys::{kallsyms, tracefs::Tracefs};

/// Where the kernel exposes the kprobe PMU; absent when CONFIG_KPROBES is unset.
const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe/type";

pub(super) fn attach_one_tp_btf(ebpf: &mut Ebpf, btf: &Btf, prog: &str, tp: &str) -> Result<()> {
    let p: &mut BtfTracePoint = program(ebpf, prog)?.try_into()?;
    loaded(p.load(tp, btf), || format!("the tp_btf {tp} program"))?;
    p.attach().with_context(|| format!("failed to attach tp_btf/{tp}"))?;
    Ok(())
}

pub(super) fn attach_one_raw_tp(ebpf: &mut Ebpf, prog: &str, tp: &str) -> Result<()> {
    let p: &mut RawTracePoint = program(ebpf, prog)?.try_into()?;
    loaded(p.load(), || format!("the raw_tp {tp} program"))?;
    p.attach(tp).with_context(|| format!("failed to attach raw_tp/{tp}"))?;
    Ok(())
}

/// `topwaits threads` follows wakeups and needs no process events.
pub(super) const THREADS_HOOKS: Hooks = Hooks { waking: true, exec: false };

/// Which hooks besides sched_switch a mode needs.
#[derive(Clone, Copy)]
pub(super) struct Hooks {
    pub waking: bool,
    pub exec: bool,
}

impl Hooks {
    /// The hooks' (program, tracepoint) pairs in the order they attach: sched_switch
    /// last, so that every event it sees had the others in place. Process events
    /// are two hooks: exec and fork.
    fn list(self, waking: &'static str, exec: [&'static str; 2], switch: &'static str) -> Vec<(&'static str, &'static str)> {
        let mut list = Vec::with_capacity(4);
        if self.waking {
            list.push((waking, "sched_waking"));
        }
        if self.exec {
            list.push((exec[0], "sched_process_exec"));
            list.push((exec[1], "sched_process_fork"));
        }
        list.push((switch, "sched_switch"));
        list
    }
}

/// Loads programs at once, a thread each. The kernel verifies privileged programs
/// in parallel, and with `--waker` the two large hooks, for sched_switch and
/// sched_waking, take about 35 and 15 ms, their stack learners 35-50 ms each.
pub(super) fn load_in_parallel(
    ebpf: &mut Ebpf,
    hooks: &[(&str, &'static str)],
    load: impl Fn(&mut Program, &'static str) -> Result<()> + Sync,
) -> Result<()> {
    let mut todo: Vec<(&mut Program, &str, &'static str)> =
        ebpf.programs_mut().filter_map(|(name, p)| hooks.iter().find(|(prog, _)| *prog == name).map(|&(prog, tp)| (p, prog, tp))).collect();
    if todo.len() != hooks.len() {
        let missing = hooks.iter().map(|(prog, _)| *prog).collect::<Vec<_>>().join(", ");
        return Err(anyhow!("programs missing from the eBPF object (one of {missing})"));
    }
    // Each program's verification, for `RUST_LOG=debug`: start-up is mostly this.
    let load = &|p: &mut Program, name: &str, tp: &'static str| -> Result<()> {
        let t0 = std::time::Instant::now();
        load(p, tp)?;
        if log::log_enabled!(log::Level::Debug) {
            let insns = p.info().ok().and_then(|i| i.verified_instruction_count());
            let insns = insns.map_or_else(|| "an unknown number of".to_string(), |n| n.to_string());
            log::debug!("program {name} ({tp}) loaded in {:.1} ms: {insns} instructions verified", t0.elapsed().as_secs_f64() * 1e3);
        }
        Ok(())
    };
    std::thread::scope(|s| {
        let last = todo.pop();
        let others: Vec<_> = todo.into_iter().map(|(p, name, tp)| s.spawn(move || load(p, name, tp))).collect();
        let mut result = last.map_or(Ok(()), |(p, name, tp)| load(p, name, tp));
        for h in others {
            let r = h.join().unwrap_or_else(|_| Err(anyhow!("a program loader thread panicked")));
            result = result.and(r);
        }
        result
    })
}

pub(super) fn attach_tp_btf(ebpf: &mut Ebpf, btf: &Btf, hooks: Hooks) -> Result<()> {
    let hooks = hooks.list(names::PROG_WAKING_BTF, [names::PROG_EXEC_BTF, names::PROG_FORK_BTF], names::PROG_SWITCH_BTF);
    load_in_parallel(ebpf, &hooks, |p, tp| {
        let p: &mut BtfTracePoint = p.try_into()?;
        loaded(p.load(tp, btf), || format!("the tp_btf {tp} program"))
    })?;
    for (prog, tp) in hooks {
        let p: &mut BtfTracePoint = program(ebpf, prog)?.try_into()?;
        p.attach().with_context(|| format!("failed to attach tp_btf/{tp}"))?;
    }
    Ok(())
}

pub(super) fn attach_raw_tp(ebpf: &mut Ebpf, hooks: Hooks) -> Result<()> {
    let hooks = hooks.list(names::PROG_WAKING_RAW, [names::PROG_EXEC_RAW, names::PROG_FORK_RAW], names::PROG_SWITCH_RAW);
    load_in_parallel(ebpf, &hooks, |p, tp| {
        let p: &mut RawTracePoint = p.try_into()?;
        loaded(p.load(), || format!("the raw_tp {tp} program"))
    })?;
    for (prog, tp) in hooks {
        let p: &mut RawTracePoint = program(ebpf, prog)?.try_into()?;
        p.attach(tp).with_context(|| format!("failed to attach raw_tp/{tp}"))?;
    }
    Ok(())
}

pub(super) fn attach_kprobe(ebpf: &mut Ebpf, hooks: Hooks) -> Result<()> {
    let prog: &mut KProbe = program(ebpf, names::PROG_FINISH_KPROBE)?.try_into()?;
    // Load first: the program must pass the verifier even where kprobes cannot attach.
    loaded(prog.load(), || "the finish_task_switch kprobe program".to_string())?;
    let symbol =
        kallsyms::find_function_in_sys("finish_task_switch").context("failed to read /proc/kallsyms")?.ok_or(UserError::NoKprobeTarget)?;
    info!("kprobe target: {symbol}");
    if !Path::new(KPROBE_PMU).exists() {
        return Err(UserError::NoKprobes(KPROBE_PMU.to_string()).into());
    }
    prog.attach(&symbol, 0).with_context(|| format!("failed to attach a kprobe to {symbol}"))?;
    // Wakers, execs and forks come from tracepoints on every path.
    if hooks.waking {
        attach_one_raw_tp(ebpf, names::PROG_WAKING_RAW, "sched_waking")?;
    }
    if hooks.exec {
        attach_one_raw_tp(ebpf, names::PROG_EXEC_RAW, "sched_process_exec")?;
        attach_one_raw_tp(ebpf, names::PROG_FORK_RAW, "sched_process_fork")?;
    }
    Ok(())
}

/// Attaches the futex syscall hooks to whichever futex tracepoints exist.
pub(super) fn attach_futex(ebpf: &mut Ebpf, tracefs: &Tracefs) -> Result<()> {
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
        loaded(p.load(), || format!("the {prog_name} program"))?;
        for e in present {
            p.attach("syscalls", e).with_context(|| format!("failed to attach syscalls/{e}"))?;
        }
    }
    Ok(())
}

/// A program's load, with a rejection by the verifier said on one line (its
/// verdict; the whole log, often thousands of lines, goes to `RUST_LOG=debug`).
/// `what` names the program in the message.
pub(super) fn loaded(r: Result<(), ProgramError>, what: impl FnOnce() -> String) -> Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(ProgramError::LoadError { io_error, verifier_log }) => {
            let (what, log) = (what(), verifier_log.to_string());
            log::debug!("the verifier's log of {what}:\n{log}");
            Err(UserError::Rejected { what, errno: io_error.to_string(), verdict: verifier_verdict(&log) }.into())
        }
        Err(e) => {
            let what = what();
            Err(anyhow::Error::new(e).context(format!("failed to load {what}")))
        }
    }
}

pub(super) fn program<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut aya::programs::Program> {
    ebpf.program_mut(name).ok_or_else(|| anyhow!("program {name} missing from the eBPF object"))
}
