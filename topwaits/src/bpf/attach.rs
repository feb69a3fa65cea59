//! Attaching the loaded programs by each path: tp_btf, raw_tp, the kprobe (which
//! loads, then fails in one line where kprobes are missing), and the futex syscall
//! tracepoints.

use std::path::Path;

use anyhow::{anyhow, Context as _, Result};
use aya::maps::{MapData, ProgramArray};
use aya::programs::{BtfTracePoint, KProbe, Program, ProgramError, RawTracePoint, TracePoint};
use aya::{Btf, Ebpf};
use log::info;
use topwaits_common::names;

use crate::sys::{kallsyms, tracefs::Tracefs};
use crate::util::error::{verifier_verdict, UserError};

/// Where the kernel exposes the kprobe PMU; absent when CONFIG_KPROBES is unset.
const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe/type";

pub(super) fn attach_one_raw_tp(ebpf: &mut Ebpf, prog: &str, tp: &str) -> Result<()> {
    let p: &mut RawTracePoint = program(ebpf, prog)?.try_into()?;
    loaded(p.load(), || format!("the raw_tp {tp} program"))?;
    p.attach(tp).with_context(|| format!("failed to attach raw_tp/{tp}"))?;
    Ok(())
}

/// One tracepoint hook: its tracepoint, its program on each attach path, and
/// the body it tail-calls, if it has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Hook {
    pub tracepoint: &'static str,
    pub btf: &'static str,
    pub raw: &'static str,
    pub body: Option<Body>,
}

/// The body of a hook, in a program array of its own: a quick version, in place
/// before the hook attaches (the verifier checks it in a fraction of the time:
/// user stacks by frame pointers), and the full one, put in its place once it
/// has loaded after attaching.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Body {
    pub array: &'static str,
    pub quick: (&'static str, &'static str),
    pub full: (&'static str, &'static str),
}

impl Body {
    /// The (tp_btf, raw_tp) pair's program for the path.
    pub fn pick(pair: (&'static str, &'static str), btf: bool) -> &'static str {
        if btf {
            pair.0
        } else {
            pair.1
        }
    }
}

pub(super) const SWITCH: Hook = Hook {
    tracepoint: "sched_switch",
    btf: names::PROG_SWITCH_BTF,
    raw: names::PROG_SWITCH_RAW,
    body: Some(Body {
        array: names::SWITCH_IMPL,
        quick: (names::PROG_SWITCH_QUICK_BTF, names::PROG_SWITCH_QUICK_RAW),
        full: (names::PROG_SWITCH_FULL_BTF, names::PROG_SWITCH_FULL_RAW),
    }),
};
pub(super) const WAKING: Hook = Hook {
    tracepoint: "sched_waking",
    btf: names::PROG_WAKING_BTF,
    raw: names::PROG_WAKING_RAW,
    body: Some(Body {
        array: names::WAKING_IMPL,
        quick: (names::PROG_WAKING_QUICK_BTF, names::PROG_WAKING_QUICK_RAW),
        full: (names::PROG_WAKING_FULL_BTF, names::PROG_WAKING_FULL_RAW),
    }),
};
pub(super) const EXEC: Hook = Hook {
    tracepoint: "sched_process_exec",
    btf: names::PROG_EXEC_BTF,
    raw: names::PROG_EXEC_RAW,
    body: None,
};
pub(super) const FORK: Hook = Hook {
    tracepoint: "sched_process_fork",
    btf: names::PROG_FORK_BTF,
    raw: names::PROG_FORK_RAW,
    body: None,
};
pub(super) const CGROUP_ATTACH: Hook = Hook {
    tracepoint: "cgroup_attach_task",
    btf: names::PROG_CGROUP_ATTACH_BTF,
    raw: names::PROG_CGROUP_ATTACH_RAW,
    body: None,
};
pub(super) const WAKEUP_NEW: Hook = Hook {
    tracepoint: "sched_wakeup_new",
    btf: names::PROG_NEW_BTF,
    raw: names::PROG_NEW_RAW,
    body: None,
};

/// Which of their bodies the hooks tail-call from the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Bodies {
    /// The quick ones (user stacks by frame pointers), which the verifier
    /// checks in a fraction of the time: where no stack is walked from the
    /// unwind tables (`--unwind fp`, `threads`), they are the same.
    Quick,
    /// The full ones, verified before anything attaches: every stack of the
    /// trace is walked from the unwind tables, from its first moment.
    Full,
}

/// The hooks a mode attaches, in order (sched_switch last, so that every event
/// it sees had the others in place), the bodies they start with, and with
/// `--on-cpu` the body of the sampler, loaded with them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Plan(Vec<Hook>, Bodies, Option<&'static str>);

impl Plan {
    /// A trace: wakers with `waker`, process events (exec and fork) with `events`.
    pub fn trace(waker: bool, events: bool) -> Plan {
        let mut hooks = Vec::with_capacity(4);
        if waker {
            hooks.push(WAKING);
        }
        if events {
            hooks.extend([EXEC, FORK]);
        }
        hooks.push(SWITCH);
        Plan(hooks, Bodies::Quick, None)
    }

    /// The same hooks, with their full bodies verified before they attach.
    pub fn full_from_the_start(self) -> Plan {
        Plan(self.0, Bodies::Full, self.2)
    }

    /// `topwaits threads`: new threads, wakeups and switches; no process events.
    pub fn threads() -> Plan {
        Plan(vec![WAKEUP_NEW, WAKING, SWITCH], Bodies::Quick, None)
    }

    /// With `on` (`--on-cpu`): the sampler's program too, its body the full
    /// one (user stacks from the unwind tables) with `walks`, or the quick one.
    pub fn sampling(mut self, on: bool, walks: bool) -> Plan {
        self.2 =
            on.then_some(if walks { names::PROG_SAMPLE_FULL } else { names::PROG_SAMPLE_QUICK });
        self
    }

    /// With `on` (`threads --on-cpu`): also the process events, exec and fork,
    /// before the switches.
    pub fn with_process_events(mut self, on: bool) -> Plan {
        if on && !self.0.contains(&EXEC) {
            let at = self.0.iter().position(|h| *h == SWITCH).unwrap_or(self.0.len());
            self.0.splice(at..at, [EXEC, FORK]);
        }
        self
    }

    /// With `on` (`--cgroup`): also the hooks that keep the cgroup's set of
    /// threads, forks and moves, in place before any switch is seen.
    pub fn following_cgroup(mut self, on: bool) -> Plan {
        if on {
            let at = self.0.iter().position(|h| *h == SWITCH).unwrap_or(self.0.len());
            let mut add = vec![CGROUP_ATTACH];
            if !self.0.contains(&FORK) {
                add.insert(0, FORK);
            }
            self.0.splice(at..at, add);
        }
        self
    }

    /// (program, tracepoint) pairs on tp_btf (`btf`) or raw_tp: each hook's
    /// attached program, then the bodies it starts with, then the sampler's
    /// program and its body (its event is not a tracepoint).
    fn pairs(&self, btf: bool) -> Vec<(&'static str, &'static str)> {
        let hooks = self.0.iter().map(|h| (if btf { h.btf } else { h.raw }, h.tracepoint));
        let sampler = self.2.map(|body| [(names::PROG_SAMPLE, "cpu-clock"), (body, "cpu-clock")]);
        hooks
            .chain(self.bodies(btf).map(|(_, prog, tp)| (prog, tp)))
            .chain(sampler.into_iter().flatten())
            .collect()
    }

    /// The attached programs alone, on the path.
    fn attached(&self, btf: bool) -> Vec<(&'static str, &'static str)> {
        self.0.iter().map(|h| (if btf { h.btf } else { h.raw }, h.tracepoint)).collect()
    }

    /// (array, program, tracepoint) of the body each hook starts with, on the path.
    fn bodies(
        &self,
        btf: bool,
    ) -> impl Iterator<Item = (&'static str, &'static str, &'static str)> + '_ {
        self.0.iter().filter_map(move |h| {
            h.body.map(|b| {
                (
                    b.array,
                    Body::pick(if self.1 == Bodies::Full { b.full } else { b.quick }, btf),
                    h.tracepoint,
                )
            })
        })
    }

    /// Hands each hook (and the sampler) the body it starts with.
    fn hand_over_bodies(&self, ebpf: &mut Ebpf, btf: bool) -> Result<()> {
        for (array, prog, _) in self.bodies(btf).collect::<Vec<_>>() {
            hand_over(ebpf, array, prog)?;
        }
        if let Some(body) = self.2 {
            hand_over(ebpf, names::SAMPLE_IMPL, body)?;
        }
        Ok(())
    }

    /// The hooks besides sched_switch, which the kprobe path attaches by raw_tp.
    fn besides_switch(&self) -> impl Iterator<Item = &Hook> {
        self.0.iter().filter(|h| **h != SWITCH)
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
    let mut todo: Vec<(&mut Program, &str, &'static str)> = ebpf
        .programs_mut()
        .filter_map(|(name, p)| {
            hooks.iter().find(|(prog, _)| *prog == name).map(|&(prog, tp)| (p, prog, tp))
        })
        .collect();
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
            log::debug!(
                "program {name} ({tp}) loaded in {:.1} ms: {insns} instructions verified",
                t0.elapsed().as_secs_f64() * 1e3
            );
        }
        Ok(())
    };
    std::thread::scope(|s| {
        let last = todo.pop();
        let others: Vec<_> =
            todo.into_iter().map(|(p, name, tp)| s.spawn(move || load(p, name, tp))).collect();
        let mut result = last.map_or(Ok(()), |(p, name, tp)| load(p, name, tp));
        for h in others {
            let r = h.join().unwrap_or_else(|_| Err(anyhow!("a program loader thread panicked")));
            result = result.and(r);
        }
        result
    })
}

/// Puts program `prog` (loaded) in slot 0 of program array `array`: the body its
/// hook tail-calls.
pub(super) fn hand_over(ebpf: &mut Ebpf, array: &str, prog: &str) -> Result<()> {
    let fd = program(ebpf, prog)?.fd()?.try_clone()?;
    let map =
        ebpf.map_mut(array).ok_or_else(|| anyhow!("map {array} missing from the eBPF object"))?;
    let mut slot: ProgramArray<&mut MapData> = ProgramArray::try_from(map)?;
    slot.set(0, &fd, 0).with_context(|| format!("failed to hand {prog} to its hook"))
}

/// Loads one program of a plan: a tracepoint's on the path (tp_btf with `btf`),
/// or the on-CPU sampler's.
fn load_one(p: &mut Program, tp: &'static str, btf: Option<&Btf>) -> Result<()> {
    match (p, btf) {
        (Program::PerfEvent(p), _) => loaded(p.load(), || "the on-CPU sampler".to_string()),
        (Program::BtfTracePoint(p), Some(btf)) => {
            loaded(p.load(tp, btf), || format!("the tp_btf {tp} program"))
        }
        (Program::RawTracePoint(p), None) => {
            loaded(p.load(), || format!("the raw_tp {tp} program"))
        }
        (p, _) => Err(anyhow!("a {:?} program has no place in this attach plan", p.prog_type())),
    }
}

/// Loads the plan's programs on tp_btf (the sampler's too), hands the hooks
/// their bodies, then, once `ready` has returned (what must be in place before
/// the first event: the unwind tables), attaches them.
pub(super) fn attach_tp_btf(
    ebpf: &mut Ebpf,
    btf: &Btf,
    plan: &Plan,
    ready: &mut dyn FnMut() -> Result<()>,
) -> Result<()> {
    load_in_parallel(ebpf, &plan.pairs(true), |p, tp| load_one(p, tp, Some(btf)))?;
    plan.hand_over_bodies(ebpf, true)?;
    ready()?;
    for (prog, tp) in plan.attached(true) {
        let p: &mut BtfTracePoint = program(ebpf, prog)?.try_into()?;
        p.attach().with_context(|| format!("failed to attach tp_btf/{tp}"))?;
    }
    Ok(())
}

/// As [`attach_tp_btf`], on raw_tp.
pub(super) fn attach_raw_tp(
    ebpf: &mut Ebpf,
    plan: &Plan,
    ready: &mut dyn FnMut() -> Result<()>,
) -> Result<()> {
    load_in_parallel(ebpf, &plan.pairs(false), |p, tp| load_one(p, tp, None))?;
    plan.hand_over_bodies(ebpf, false)?;
    ready()?;
    for (prog, tp) in plan.attached(false) {
        let p: &mut RawTracePoint = program(ebpf, prog)?.try_into()?;
        p.attach(tp).with_context(|| format!("failed to attach raw_tp/{tp}"))?;
    }
    Ok(())
}

pub(super) fn attach_kprobe(ebpf: &mut Ebpf, plan: &Plan) -> Result<()> {
    let prog: &mut KProbe = program(ebpf, names::PROG_FINISH_KPROBE)?.try_into()?;
    // Load first: the program must pass the verifier even where kprobes cannot attach.
    loaded(prog.load(), || "the finish_task_switch kprobe program".to_string())?;
    let symbol = kallsyms::find_function_in_sys("finish_task_switch")
        .context("failed to read /proc/kallsyms")?
        .ok_or(UserError::NoKprobeTarget)?;
    info!("kprobe target: {symbol}");
    if !Path::new(KPROBE_PMU).exists() {
        return Err(UserError::NoKprobes(KPROBE_PMU.to_string()).into());
    }
    prog.attach(&symbol, 0).with_context(|| format!("failed to attach a kprobe to {symbol}"))?;
    // Wakers, execs and forks come from tracepoints on every path (a hook's
    // body, its full version at once: this path has no quick start).
    for hook in plan.besides_switch().copied().collect::<Vec<_>>() {
        if let Some(b) = hook.body {
            let p: &mut RawTracePoint = program(ebpf, b.full.1)?.try_into()?;
            loaded(p.load(), || format!("the raw_tp {} program", hook.tracepoint))?;
            hand_over(ebpf, b.array, b.full.1)?;
        }
        attach_one_raw_tp(ebpf, hook.raw, hook.tracepoint)?;
    }
    Ok(())
}

/// Attaches the futex syscall hooks to whichever futex tracepoints exist.
pub(super) fn attach_futex(ebpf: &mut Ebpf, tracefs: &Tracefs) -> Result<()> {
    let hooks: [(&str, &[&str]); 3] = [
        (names::PROG_FUTEX_ENTER, &["sys_enter_futex"]),
        (names::PROG_FUTEX_WAKE_ENTER, &["sys_enter_futex_wake", "sys_enter_futex_requeue"]),
        (
            names::PROG_FUTEX_EXIT,
            &["sys_exit_futex", "sys_exit_futex_wake", "sys_exit_futex_requeue"],
        ),
    ];
    for (prog_name, events) in hooks {
        let present: Vec<&str> =
            events.iter().copied().filter(|e| tracefs.has_event("syscalls", e)).collect();
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

/// Attaches the `lock:contention_begin/end` hooks that name the kernel lock a
/// wait is for. Without them (an older kernel) waits still get their labels,
/// kernel locks by their stacks alone; said once as a warning.
pub(super) fn attach_lock_contention(ebpf: &mut Ebpf) {
    let attach = |ebpf: &mut Ebpf| -> Result<()> {
        for (prog, event) in
            [(names::PROG_LOCK_BEGIN, "contention_begin"), (names::PROG_LOCK_END, "contention_end")]
        {
            let p: &mut RawTracePoint = program(ebpf, prog)?.try_into()?;
            loaded(p.load(), || format!("the {prog} program"))?;
            p.attach(event).with_context(|| format!("failed to attach lock/{event}"))?;
        }
        Ok(())
    };
    if let Err(e) = attach(ebpf) {
        log::warn!(
            "kernel locks are named by their stacks alone: {}",
            crate::util::stderr::error_line(&e)
        );
    }
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
            Err(UserError::Rejected {
                what,
                errno: io_error.to_string(),
                verdict: verifier_verdict(&log),
            }
            .into())
        }
        Err(e) => {
            let what = what();
            Err(anyhow::Error::new(e).context(format!("failed to load {what}")))
        }
    }
}

pub(super) fn program<'a>(
    ebpf: &'a mut Ebpf,
    name: &str,
) -> Result<&'a mut aya::programs::Program> {
    ebpf.program_mut(name).ok_or_else(|| anyhow!("program {name} missing from the eBPF object"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_attaches_its_hooks_with_sched_switch_last() {
        assert_eq!(Plan::trace(false, false).0, [SWITCH]);
        assert_eq!(Plan::trace(true, true).0, [WAKING, EXEC, FORK, SWITCH]);
        assert_eq!(Plan::threads().0, [WAKEUP_NEW, WAKING, SWITCH]);
        assert_eq!(
            Plan::threads().following_cgroup(true).0,
            [WAKEUP_NEW, WAKING, FORK, CGROUP_ATTACH, SWITCH]
        );
        assert_eq!(
            Plan::threads().with_process_events(true).0,
            [WAKEUP_NEW, WAKING, EXEC, FORK, SWITCH]
        );
        let both = Plan::threads().with_process_events(true).following_cgroup(true);
        assert_eq!(
            both.0,
            [WAKEUP_NEW, WAKING, EXEC, FORK, CGROUP_ATTACH, SWITCH],
            "fork attached once"
        );
        assert_eq!(Plan::threads().with_process_events(false).0, Plan::threads().0);
        assert_eq!(
            Plan::trace(false, true).following_cgroup(true).0,
            [EXEC, FORK, CGROUP_ATTACH, SWITCH]
        );
        assert_eq!(Plan::trace(true, false).following_cgroup(false).0, [WAKING, SWITCH]);
        // Loaded before attaching: the attached programs, then the bodies they
        // tail-call (quick ones, or full ones verified before the start), then
        // the sampler's; attached: only the first.
        assert_eq!(
            Plan::trace(false, true).pairs(true),
            [
                (names::PROG_EXEC_BTF, "sched_process_exec"),
                (names::PROG_FORK_BTF, "sched_process_fork"),
                (names::PROG_SWITCH_BTF, "sched_switch"),
                (names::PROG_SWITCH_QUICK_BTF, "sched_switch"),
            ]
        );
        assert_eq!(
            Plan::trace(true, false).sampling(true, true).full_from_the_start().pairs(false),
            [
                (names::PROG_WAKING_RAW, "sched_waking"),
                (names::PROG_SWITCH_RAW, "sched_switch"),
                (names::PROG_WAKING_FULL_RAW, "sched_waking"),
                (names::PROG_SWITCH_FULL_RAW, "sched_switch"),
                (names::PROG_SAMPLE, "cpu-clock"),
                (names::PROG_SAMPLE_FULL, "cpu-clock"),
            ]
        );
        assert_eq!(
            Plan::trace(false, true).attached(false).last(),
            Some(&(names::PROG_SWITCH_RAW, "sched_switch"))
        );
        let threads = Plan::threads().sampling(true, false).pairs(true);
        assert_eq!(
            threads[threads.len() - 2..],
            [(names::PROG_SAMPLE, "cpu-clock"), (names::PROG_SAMPLE_QUICK, "cpu-clock")]
        );
        assert_eq!(Plan::trace(true, false).besides_switch().collect::<Vec<_>>(), [&WAKING]);
    }
}
