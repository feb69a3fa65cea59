//! The failures users meet, each with a hint on how to fix it.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum UserError {
    #[error("missing privilege: loading eBPF tracing programs needs root, or CAP_BPF and CAP_PERFMON (try sudo)")]
    NoPrivilege,
    #[error("no process with PID {0} (is it still running?)")]
    NoSuchPid(u32),
    #[error("PID {id} is a thread of process {tgid}: use -t {id} for the thread or -p {tgid} for the process")]
    NotAProcess { id: u32, tgid: u32 },
    #[error("no thread with TID {0} (is it still running?)")]
    NoSuchTid(u32),
    #[error("kernel BTF is missing ({path}), which {what} needs; use a kernel built with CONFIG_DEBUG_INFO_BTF=y")]
    NoBtf { path: String, what: &'static str },
    #[error(
        "kprobes are not available on this kernel (CONFIG_KPROBES is not set: {0} is missing); use --attach tp_btf or --attach raw_tp"
    )]
    NoKprobes(String),
    #[error("no attachable finish_task_switch symbol in /proc/kallsyms; use --attach tp_btf or --attach raw_tp")]
    NoKprobeTarget,
    #[error("the kernel's verifier rejected {what} ({errno}){}; RUST_LOG=debug prints its whole log", if verdict.is_empty() { String::new() } else { format!(": {verdict}") })]
    Rejected { what: String, errno: String, verdict: String },
}

/// The verifier's verdict in its log, on one line: the last message before its
/// closing statistics, with the instruction it stopped at when the line before
/// names one (`150: (bf) r9 = r4`). Empty when the log holds no message.
pub fn verifier_verdict(log: &str) -> String {
    let stats = |l: &str| {
        ["verification time", "stack depth", "processed "].iter().any(|p| l.starts_with(p))
    };
    let lines: Vec<&str> =
        log.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with(';')).collect();
    let Some(i) = lines.iter().rposition(|l| !stats(l)) else { return String::new() };
    let message = lines[i];
    let at_insn = |l: &str| {
        l.split_once(": ")
            .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    match i.checked_sub(1).map(|j| lines[j]) {
        Some(prev) if !at_insn(message) && at_insn(prev) => {
            // The instruction, without the register states the log appends after `;`.
            let insn = prev.split(" ; ").next().unwrap_or(prev).trim_end();
            format!("{message} at {insn}")
        }
        _ => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_is_the_last_message_with_the_instruction_it_stopped_at() {
        let log = "0: R1=ctx() R10=fp0\n; if ret == 0 { @ helpers.rs:216\n150: (bf) r9 = r4   ; frame1: R4=0\nR4 !read_ok\n\
                   verification time 104114 usec\nstack depth 16+120\nprocessed 20190 insns (limit 1000000) max_states_per_insn 10\n";
        assert_eq!(verifier_verdict(log), "R4 !read_ok at 150: (bf) r9 = r4");
        let e = UserError::Rejected {
            what: "the sched_switch stack learner".into(),
            errno: "Permission denied (os error 13)".into(),
            verdict: verifier_verdict(log),
        };
        assert_eq!(
            e.to_string(),
            "the kernel's verifier rejected the sched_switch stack learner (Permission denied (os error 13)): R4 !read_ok at 150: (bf) r9 = r4; RUST_LOG=debug prints its whole log"
        );
    }

    #[test]
    fn a_verdict_without_an_instruction_before_it_stands_alone() {
        let log = "BPF program is too large. Processed 1000001 insn\nprocessed 1000001 insns (limit 1000000)\n";
        assert_eq!(verifier_verdict(log), "BPF program is too large. Processed 1000001 insn");
    }

    #[test]
    fn an_empty_log_gives_no_verdict_and_no_dangling_colon() {
        assert_eq!(verifier_verdict(""), "");
        assert_eq!(verifier_verdict("processed 3 insns\n"), "");
        let e = UserError::Rejected {
            what: "x".into(),
            errno: "Invalid argument (os error 22)".into(),
            verdict: String::new(),
        };
        assert_eq!(e.to_string(), "the kernel's verifier rejected x (Invalid argument (os error 22)); RUST_LOG=debug prints its whole log");
    }
}

/// `topwaits diff` crossed this many of its gate's thresholds (exit status 3,
/// which CI jobs tell from an error).
#[derive(Debug, Error)]
#[error("{0} of the gate's thresholds crossed")]
pub struct GateCrossed(pub usize);

/// The exit status of a crossed gate.
pub const GATE_EXIT: i32 = 3;
