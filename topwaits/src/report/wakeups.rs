//! The wakeup view (`--wakeups`, like bcc wakeuptime): time from block to wakeup,
//! aggregated by waker name and stacks and by target name, in all three formats.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde_json::{json, Value};

use super::folded::{clean, MISSING_KERNEL, MISSING_USER};
use super::json::{lost, stack, VERSION};
use super::{hop_name, interrupt_handler, named, take, Format};
use crate::analysis::reduce::By;
use crate::model::{comm_text, Hop, Record, Report, Stack, WakeKind};
use crate::settings::{Output, ValueKind};
use crate::util::clock::{hms_millis, rfc3339};

/// One row: a waker (name, ids and stacks) waking one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub waker: Hop,
    pub target: Vec<u8>,
    /// The target's ids; 0 where the row groups them (`--by`, folded output).
    pub target_tgid: u32,
    pub target_tid: u32,
    pub count: u64,
    pub blocked_ns: u64,
    pub max_blocked_ns: u64,
    /// The longest of these waits (block plus run queue) and when it ended.
    pub max_ns: u64,
    pub max_end_mono: u64,
}

fn names(s: &Stack) -> Vec<String> {
    s.frames().iter().map(|f| f.name().to_string()).collect()
}

/// Groups the woken records by waker (name, stacks, and ids as `by` keeps them)
/// and target (name, and ids as `by` keeps them), largest blocked time first.
/// Waits with no waker are not wakeups and are left out.
pub fn rows(records: &[Record], by: By) -> Vec<Row> {
    type Key = (String, Vec<String>, Vec<String>, bool, bool, Vec<u8>, [u32; 4]);
    let ids = |tgid: u32, tid: u32| match by {
        By::Thread => (tgid, tid),
        By::Process => (tgid, 0),
        By::Comm | By::What | By::Cgroup => (0, 0),
    };
    let mut rows: BTreeMap<Key, Row> = BTreeMap::new();
    for r in records {
        let Some(w) = &r.wake else { continue };
        if w.kind != WakeKind::Woken {
            continue;
        }
        let Some(h) = w.hops.first() else { continue };
        let (wtgid, wtid) = ids(h.tgid, h.tid);
        let (ttgid, ttid) = ids(r.tgid, r.tid);
        let key = (
            hop_name(h),
            names(&h.kernel),
            names(&h.user),
            h.kernel == Stack::Missing,
            h.user == Stack::Missing,
            r.comm.clone(),
            [wtgid, wtid, ttgid, ttid],
        );
        let row = rows.entry(key).or_insert_with(|| Row {
            waker: Hop { tgid: wtgid, tid: wtid, ..h.clone() },
            target: r.comm.clone(),
            target_tgid: ttgid,
            target_tid: ttid,
            count: 0,
            blocked_ns: 0,
            max_blocked_ns: 0,
            max_ns: 0,
            max_end_mono: 0,
        });
        row.count += r.count;
        row.blocked_ns += w.blocked_ns;
        row.max_blocked_ns = row.max_blocked_ns.max(w.max_blocked_ns);
        if (r.max_ns, r.max_end_mono) > (row.max_ns, row.max_end_mono) {
            (row.max_ns, row.max_end_mono) = (r.max_ns, r.max_end_mono);
        }
    }
    let mut v: Vec<Row> = rows.into_values().collect();
    v.sort_by(|a, b| {
        b.blocked_ns
            .cmp(&a.blocked_ns)
            .then(a.target.cmp(&b.target))
            .then(a.target_tid.cmp(&b.target_tid))
    });
    v
}

/// How the top view names a row's waker.
fn waker_text(h: &Hop, by: By) -> String {
    match interrupt_handler(h) {
        Some(handler) => format!("[interrupt] {handler}"),
        None if h.interrupt => "[interrupt]".to_string(),
        None => named(&hop_name(h), h.tgid, h.tid, by),
    }
}

/// The view in the format an [`Output`] names.
pub struct Wakeups {
    pub output: Output,
}

fn folded_line(row: &Row, delimited: bool) -> String {
    let mut line = vec![clean(&hop_name(&row.waker))];
    let push = |line: &mut Vec<String>, s: &Stack, missing: &str| match s {
        Stack::Frames(f) => line.extend(f.iter().rev().map(|f| clean(&f.name()))),
        Stack::Missing => line.push(missing.to_string()),
        Stack::None => {}
    };
    push(&mut line, &row.waker.user, MISSING_USER);
    if delimited
        && matches!(row.waker.user, Stack::Frames(_))
        && matches!(row.waker.kernel, Stack::Frames(_))
    {
        line.push("-".to_string());
    }
    push(&mut line, &row.waker.kernel, MISSING_KERNEL);
    line.push(clean(&String::from_utf8_lossy(&row.target)));
    line.join(";")
}

fn value(row: &Row, kind: ValueKind) -> u64 {
    match kind {
        ValueKind::Total => row.blocked_ns / 1000,
        ValueKind::Max => row.max_blocked_ns / 1000,
        ValueKind::Count => row.count,
    }
}

fn document(report: &Report, rows: &[Row]) -> Value {
    let info = &report.info;
    let recs: Vec<Value> = rows
        .iter()
        .map(|r| {
            let (ks, kstatus) = stack(&r.waker.kernel);
            let (us, ustatus) = stack(&r.waker.user);
            let id = |v: u32, kept: bool| if kept { json!(v) } else { Value::Null };
            let (pid, tid) = (info.by != By::Comm, info.by == By::Thread);
            let task = !r.waker.interrupt;
            json!({
                "waker": {
                    "comm": hop_name(&r.waker),
                    "tgid": id(r.waker.tgid, pid && task),
                    "tid": id(r.waker.tid, tid && task),
                    "handler": interrupt_handler(&r.waker),
                    "context": if r.waker.interrupt { "interrupt" } else { "task" },
                    "kernel_stack": ks,
                    "kernel_stack_status": kstatus,
                    "user_stack": us,
                    "user_stack_status": ustatus,
                },
                "target_comm": comm_text(&r.target),
                "target_tgid": id(r.target_tgid, pid),
                "target_tid": id(r.target_tid, tid),
                "count": r.count,
                "blocked_us": r.blocked_ns / 1000,
                "max_blocked_us": r.max_blocked_ns / 1000,
                "max_us": r.max_ns / 1000,
                "max_end": rfc3339(info.clock.wall(r.max_end_mono), info.utc_offset_s),
            })
        })
        .collect();
    json!({
        "version": VERSION,
        "view": "wakeups",
        "started_at": rfc3339(info.clock.wall(info.start_mono), info.utc_offset_s),
        "duration_s": (info.duration_s() * 1000.0).round() / 1000.0,
        "attach": info.attach.name(),
        "target": info.target,
        "by": info.by.name(),
        "lost": lost(&report.counters),
        "records": recs,
    })
}

impl Format for Wakeups {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        let info = &report.info;
        match &self.output {
            Output::Folded { delimited, value: kind, .. } => {
                // Lines name the waker and the target only, as bcc's wakeuptime.
                let all = rows(&report.records, By::Comm);
                let mut lines: Vec<(u64, String)> =
                    all.iter().map(|r| (value(r, *kind), folded_line(r, *delimited))).collect();
                lines.sort();
                for (v, l) in lines {
                    writeln!(out, "{l} {v}")?;
                }
                Ok(())
            }
            Output::Json { limit } => {
                let all = rows(&report.records, info.by);
                serde_json::to_writer(&mut *out, &document(report, &take(all, *limit)))?;
                writeln!(out)
            }
            Output::Top { limit, .. } => {
                let all = rows(&report.records, info.by);
                let total = all.len();
                let shown = take(all, *limit);
                writeln!(
                    out,
                    "Wakeups of {} for {:.2} s: time from block to wakeup, by waker; {}, {} shown.\n",
                    info.target,
                    info.duration_s(),
                    crate::util::text::plural(total, "row"),
                    shown.len()
                )?;
                for (i, r) in shown.iter().enumerate() {
                    let end = info.clock.wall(r.max_end_mono);
                    writeln!(
                        out,
                        "#{:<3} blocked {:.3} ms  count {}  max {:.3} ms  longest wait {:.3} ms {} -> {}",
                        i + 1,
                        r.blocked_ns as f64 / 1e6,
                        r.count,
                        r.max_blocked_ns as f64 / 1e6,
                        r.max_ns as f64 / 1e6,
                        hms_millis(end - r.max_ns as i128, info.utc_offset_s),
                        hms_millis(end, info.utc_offset_s),
                    )?;
                    writeln!(
                        out,
                        "    target {}",
                        named(&comm_text(&r.target), r.target_tgid, r.target_tid, info.by)
                    )?;
                    writeln!(out, "    waker {}", waker_text(&r.waker, info.by))?;
                    for f in r.waker.kernel.frames().iter().chain(r.waker.user.frames()) {
                        writeln!(out, "      {}", f.describe())?;
                    }
                    writeln!(out)?;
                }
                if shown.len() < total {
                    writeln!(
                        out,
                        "{} more rows not shown; use -n 0 to show all.",
                        total - shown.len()
                    )?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::offwake_report;

    #[test]
    fn rows_group_by_waker_stack_and_target_and_skip_unwoken_waits() {
        let mut r = offwake_report();
        // A second wait of the same thread, woken by the same writer stack.
        let mut again = r.records[0].clone();
        again.tid = 103;
        if let Some(w) = again.wake.as_mut() {
            w.blocked_ns = 5_000_000;
            w.max_blocked_ns = 5_000_000;
        }
        again.count = 1;
        r.records.push(again);
        assert_eq!(rows(&r.records, By::Thread).len(), 2, "two target threads, two rows");
        let rows = rows(&r.records, By::Process);
        assert_eq!(rows.len(), 1, "the preempted worker is no wakeup");
        assert_eq!((rows[0].target_tgid, rows[0].target_tid, rows[0].waker.tid), (100, 0, 0));
        assert_eq!(rows[0].count, 11);
        assert_eq!(rows[0].blocked_ns, 1_005_000_000);
        assert_eq!(rows[0].max_blocked_ns, 249_900_000);
        assert_eq!(rows[0].target, b"sleeper");
    }

    #[test]
    fn folded_puts_the_waker_at_the_bottom_and_the_target_on_top() {
        let mut out = Vec::new();
        Wakeups {
            output: Output::Folded {
                delimited: false,
                value: ValueKind::Total,
                what: false,
                cgroup: None,
            },
        }
        .write(&offwake_report(), &mut out)
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "writer;main;produce;write;vfs_write;pipe_write;try_to_wake_up;sleeper 1000000\n"
        );
    }

    #[test]
    fn json_and_top_name_the_waker_and_target() {
        let mut out = Vec::new();
        Wakeups { output: Output::Json { limit: 0 } }.write(&offwake_report(), &mut out).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["view"], "wakeups");
        assert_eq!(v["records"][0]["waker"]["comm"], "writer");
        assert_eq!(v["records"][0]["target_comm"], "sleeper");
        assert_eq!(v["records"][0]["blocked_us"], 1_000_000);
        let mut out = Vec::new();
        Wakeups { output: Output::Top { limit: 0, delimited: false } }
            .write(&offwake_report(), &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains(
                "#1   blocked 1000.000 ms  count 10  max 249.900 ms  longest wait 250.000 ms 22:13:22.250 -> 22:13:22.500\n\
                 \x20   target sleeper  pid 100  tid 101\n    waker writer  pid 100  tid 102\n      try_to_wake_up\n"
            ),
            "{text}"
        );
        assert!(text.contains("1 row, 1 shown"), "{text}");
        let r = &v["records"][0];
        assert_eq!(
            (r["target_tid"].as_u64(), r["waker"]["tid"].as_u64(), r["max_us"].as_u64()),
            (Some(101), Some(102), Some(250_000))
        );
        assert_eq!(r["max_end"].as_str().map(|s| &s[11..23]), Some("22:13:22.500"));
    }
}
