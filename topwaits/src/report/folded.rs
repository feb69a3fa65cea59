//! Folded stacks, one `frames value` line per record, byte-compatible with bcc
//! `offcputime -f`: `comm;user frames root→leaf;kernel frames root→leaf value`.

use std::io::{self, Write};

use super::{hop_name, no_waker_label, Format};
use crate::model::{Frame, Record, Report, Stack};
use crate::settings::ValueKind;

/// Placeholder frames for stacks the kernel could not store (no spaces: a folded
/// line splits into exactly `stack value`).
pub const MISSING_USER: &str = "[missing_user_stack]";
pub const MISSING_KERNEL: &str = "[missing_kernel_stack]";

pub struct Folded {
    pub delimited: bool,
    pub value: ValueKind,
    /// `--what`: what each wait was for as the root frame.
    pub what: bool,
    /// `--cgroup-frames` / `--no-cgroup-frames` (see [`cgroup_on`]).
    pub cgroup: Option<bool>,
}

/// Whether lines carry each record's cgroup as their root frame, and pprof as a
/// label: as asked, else when the trace was of a cgroup, unit or container.
pub fn cgroup_on(asked: Option<bool>, report: &Report) -> bool {
    asked.unwrap_or(report.info.cgroup_target)
}

/// The root frame naming a record's cgroup.
pub fn cgroup_frame(r: &Record) -> String {
    clean(&format!("[cgroup:{}]", r.cgroup.as_deref().unwrap_or("unknown")))
}

/// Makes one frame safe for the folded format: `;` becomes `:`, whitespace and control
/// characters become `_`, and an empty name becomes `[empty]`, so every line splits
/// into exactly `stack value` and every frame into `;`-separated parts.
pub fn clean(name: &str) -> String {
    if name.is_empty() {
        return "[empty]".to_string();
    }
    name.chars()
        .map(|c| match c {
            ';' => ':',
            c if c.is_whitespace() || c.is_control() => '_',
            c => c,
        })
        .collect()
}

/// Appends a stack's frames, root→leaf (`leaf_first == false`) or leaf→root.
fn push_stack(line: &mut Vec<String>, stack: &Stack, missing: &str, leaf_first: bool) {
    match stack {
        Stack::Missing => line.push(missing.to_string()),
        Stack::Frames(f) => {
            // The same best name as every other format: `module+0xoffset` where no
            // symbol resolved (it holds no space or `;`).
            let names = |f: &std::sync::Arc<Frame>| clean(&f.describe());
            if leaf_first {
                line.extend(f.iter().map(names));
            } else {
                line.extend(f.iter().rev().map(names));
            }
        }
        Stack::None => {}
    }
}

/// The `-d` delimiter goes between two stacks only when both exist, as in bcc.
fn push_delimiter(line: &mut Vec<String>, delimited: bool, a: &Stack, b: &Stack) {
    if delimited && matches!(a, Stack::Frames(_)) && matches!(b, Stack::Frames(_)) {
        line.push("-".to_string());
    }
}

/// The leaf frame of an on-CPU sample's line (`--on-cpu`), which sets it apart
/// from the waits at the same stacks.
pub const RUNNING: &str = "[running]";

/// The frames of one record, root first, starting with the comm (after its
/// cgroup, with `cgroup`, and what the wait was for, with `what`): the target's user
/// then kernel frames root→leaf, and with `--waker` each hop after a `--` frame, its
/// kernel then user frames leaf→root, then its name (bcc offwaketime's layout).
pub fn line_frames(r: &Record, delimited: bool, what: bool, cgroup: bool) -> Vec<String> {
    let mut line = Vec::new();
    if cgroup {
        line.push(cgroup_frame(r));
    }
    if what {
        line.push(clean(&format!("[{}]", crate::model::label::short_of(r.waits_on.as_ref()))));
    }
    line.push(clean(&String::from_utf8_lossy(&r.comm)));
    push_stack(&mut line, &r.user, MISSING_USER, false);
    push_delimiter(&mut line, delimited, &r.user, &r.kernel);
    push_stack(&mut line, &r.kernel, MISSING_KERNEL, false);
    if r.on_cpu() {
        line.push(RUNNING.to_string());
    }
    if let Some(w) = &r.wake {
        if w.hops.is_empty() {
            line.push("--".to_string());
            line.push(clean(no_waker_label(w.kind)));
        }
        for h in &w.hops {
            line.push("--".to_string());
            push_stack(&mut line, &h.kernel, MISSING_KERNEL, true);
            push_delimiter(&mut line, delimited, &h.kernel, &h.user);
            push_stack(&mut line, &h.user, MISSING_USER, true);
            line.push(clean(&hop_name(h)));
        }
    }
    line
}

/// The number a line carries.
pub fn value(r: &Record, kind: ValueKind) -> u64 {
    match kind {
        ValueKind::Total => r.total_ns / 1000,
        ValueKind::Max => r.max_ns / 1000,
        ValueKind::Count => r.count,
    }
}

impl Format for Folded {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        // Records that fold to the same text (two call sites in one function, say)
        // are one line: values add up, or the longer wait wins with `--value max`.
        let mut merged: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
        let cgroup = cgroup_on(self.cgroup, report);
        for r in &report.records {
            let v = value(r, self.value);
            let slot = merged
                .entry(line_frames(r, self.delimited, self.what, cgroup).join(";"))
                .or_insert(0);
            *slot = if self.value == ValueKind::Max { (*slot).max(v) } else { *slot + v };
        }
        let mut lines: Vec<(u64, String)> = merged.into_iter().map(|(l, v)| (v, l)).collect();
        // Ascending by value, as bcc prints them; ties by text for stable output.
        lines.sort();
        for (v, l) in lines {
            writeln!(out, "{l} {v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{frames, report};

    fn render(f: Folded, r: &Report) -> String {
        let mut out = Vec::new();
        f.write(r, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn on_cpu_lines_end_in_a_running_frame() {
        let got = render(
            Folded { delimited: false, value: ValueKind::Total, what: false, cgroup: None },
            &crate::report::fixtures::on_cpu_report(),
        );
        assert!(got.contains("sleeper;main;compute;[running] 2000000\n"), "{got}");
        assert!(
            got.contains(
                "sleeper;main;wait_here;clock_nanosleep;do_nanosleep;schedule;__schedule 1000500\n"
            ),
            "{got}"
        );
    }

    #[test]
    fn matches_bcc_offcputime_layout() {
        let got = render(
            Folded { delimited: false, value: ValueKind::Total, what: false, cgroup: None },
            &report(),
        );
        assert_eq!(
            got,
            "kworker/0:1;[missing_kernel_stack] 3\n\
             sleeper;main;wait_here;clock_nanosleep;do_nanosleep;schedule;__schedule 1000500\n"
        );
    }

    #[test]
    fn a_cgroup_trace_roots_lines_at_their_cgroup_unless_asked_not_to() {
        let mut r = report();
        r.records[0].cgroup = Some("/system.slice/docker-4f1c.scope".into());
        let folded = |cgroup, r: &Report| {
            render(Folded { delimited: false, value: ValueKind::Count, what: true, cgroup }, r)
        };
        assert!(!folded(None, &r).contains("[cgroup:"), "a trace of threads: bcc's layout");
        let got = folded(Some(true), &r);
        assert!(
            got.contains("[cgroup:/system.slice/docker-4f1c.scope];[not_labelled];sleeper;main;"),
            "the cgroup above what: {got}"
        );
        assert!(got.contains("[cgroup:unknown];"), "a record whose cgroup was not read: {got}");
        r.info.cgroup_target = true;
        assert_eq!(folded(None, &r), got, "the default of a cgroup trace");
        assert!(!folded(Some(false), &r).contains("[cgroup:"), "--no-cgroup-frames");
    }

    #[test]
    fn delimiter_sits_between_user_and_kernel_frames_only_when_both_exist() {
        let got = render(
            Folded { delimited: true, value: ValueKind::Count, what: false, cgroup: None },
            &report(),
        );
        assert_eq!(
            got,
            "kworker/0:1;[missing_kernel_stack] 2\n\
             sleeper;main;wait_here;clock_nanosleep;-;do_nanosleep;schedule;__schedule 10\n"
        );
    }

    #[test]
    fn placeholder_frames_keep_lines_two_fields() {
        use crate::model::WakeKind;
        let mut r = crate::report::fixtures::offwake_report();
        r.records[0].user = Stack::Missing;
        r.records[0].kernel = Stack::Missing;
        if let Some(w) = r.records[0].wake.as_mut() {
            w.hops.clear();
            w.kind = WakeKind::NoWaker;
        }
        let got = render(
            Folded { delimited: true, value: ValueKind::Total, what: false, cgroup: None },
            &r,
        );
        for line in got.lines() {
            assert_eq!(line.split(' ').count(), 2, "{line:?}");
        }
        assert!(
            got.contains("[missing_user_stack];[missing_kernel_stack];--;[no_waker_seen] "),
            "{got}"
        );
    }

    /// Regression: one gzip pipe-read stack came out as two identical folded lines,
    /// from records that differed only where folded output does not look (the
    /// offset within a function).
    #[test]
    fn records_that_fold_alike_are_one_line() {
        let mut r = report();
        let mut twin = r.records[0].clone();
        twin.total_ns = 500_000;
        twin.count = 3;
        twin.max_ns = 400_000_000;
        r.records.push(twin);
        let sum = render(
            Folded { delimited: false, value: ValueKind::Total, what: false, cgroup: None },
            &r,
        );
        let sleeper: Vec<&str> = sum.lines().filter(|l| l.starts_with("sleeper;")).collect();
        assert_eq!(
            sleeper,
            ["sleeper;main;wait_here;clock_nanosleep;do_nanosleep;schedule;__schedule 1001000"]
        );
        let count = render(
            Folded { delimited: false, value: ValueKind::Count, what: false, cgroup: None },
            &r,
        );
        assert!(count.contains("__schedule 13\n"), "{count}");
        let max = render(
            Folded { delimited: false, value: ValueKind::Max, what: false, cgroup: None },
            &r,
        );
        assert!(max.contains("__schedule 400000\n") && max.lines().count() == 2, "{max}");
    }

    #[test]
    fn max_value_is_the_longest_wait_in_microseconds() {
        let got = render(
            Folded { delimited: false, value: ValueKind::Max, what: false, cgroup: None },
            &report(),
        );
        assert!(got.ends_with("__schedule 250000\n"), "{got}");
    }

    #[test]
    fn offwake_layout_matches_bcc_offwaketime_with_chain_hops_after_more_dividers() {
        use crate::report::fixtures::offwake_report;
        let got = render(
            Folded { delimited: false, value: ValueKind::Total, what: false, cgroup: None },
            &offwake_report(),
        );
        assert_eq!(
            got,
            "kworker/0:1;[missing_kernel_stack];--;[preempted] 3\n\
             sleeper;main;wait_here;clock_nanosleep;do_nanosleep;schedule;__schedule;--;\
             try_to_wake_up;pipe_write;vfs_write;write;produce;main;writer;--;\
             try_to_wake_up;hrtimer_wakeup;asm_sysvec_apic_timer_interrupt;[interrupt] 1000500\n"
        );
        let got = render(
            Folded { delimited: true, value: ValueKind::Total, what: false, cgroup: None },
            &offwake_report(),
        );
        assert!(
            got.contains("clock_nanosleep;-;do_nanosleep")
                && got.contains("vfs_write;-;write;produce"),
            "{got}"
        );
        assert!(
            !got.contains("asm_sysvec_apic_timer_interrupt;-"),
            "no delimiter without a user stack: {got}"
        );
    }

    #[test]
    fn hostile_comm_names_keep_lines_parseable() {
        let mut r = report();
        r.records.truncate(1);
        for comm in [&b"a;b c"[..], b"", b"\xff\xfe;x", b"tab\there\n"] {
            r.records[0].comm = comm.to_vec();
            r.records[0].user = frames(&["f g", "h;i"]);
            let out = render(
                Folded { delimited: false, value: ValueKind::Total, what: false, cgroup: None },
                &r,
            );
            let line = out.trim_end_matches('\n');
            assert_eq!(out.matches('\n').count(), 1, "{out:?}");
            let parts: Vec<&str> = line.split(' ').collect();
            assert_eq!(parts.len(), 2, "{line:?}");
            assert_eq!(parts[1], "1000500");
            let f: Vec<&str> = parts[0].split(';').collect();
            assert_eq!(f.len(), 1 + 2 + 3, "{line:?}");
            assert_eq!(&f[1..3], ["h:i", "f_g"]);
        }
        assert_eq!(clean(""), "[empty]");
        assert_eq!(clean("a;b c"), "a:b_c");
    }
}
