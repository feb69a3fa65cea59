//! One JSON document per report; the schema is documented in the README.

use std::io::{self, Write};

use serde_json::{json, Value};

use super::{by_longest, take, Format};
use crate::clock::rfc3339;
use crate::model::{comm_text, Counters, Frame, Report, Stack};

/// Schema version of the document.
pub const VERSION: u32 = 1;

pub struct Json {
    pub limit: usize,
}

fn frame(f: &Frame) -> Value {
    let mut v = json!({ "symbol": f.name(), "addr": format!("{:#x}", f.addr) });
    if let Some(m) = &f.module {
        v["module"] = json!(m);
    }
    if let Some(o) = f.offset {
        v["offset"] = json!(o);
    }
    v
}

fn stack(s: &Stack) -> (Value, &'static str) {
    match s {
        Stack::Frames(f) => (Value::Array(f.iter().map(frame).collect()), "ok"),
        Stack::Missing => (json!([]), "missing"),
        Stack::None => (json!([]), "none"),
    }
}

/// The `lost` object.
pub fn lost(c: &Counters) -> Value {
    json!({
        "kernel_stacks": c.lost_kernel_stacks,
        "user_stacks": c.lost_user_stacks,
        "aggregate_full": c.aggregate_full,
        "aggregate_full_us": c.aggregate_full_ns / 1000,
        "start_full": c.start_full,
        "negative_deltas": c.negative_deltas,
    })
}

/// The whole document as a value.
pub fn document(report: &Report, limit: usize) -> Value {
    let info = &report.info;
    let off = info.utc_offset_s;
    let records: Vec<Value> = take(by_longest(&report.records), limit)
        .into_iter()
        .map(|r| {
            let (ks, kstatus) = stack(&r.kernel);
            let (us, ustatus) = stack(&r.user);
            json!({
                "tgid": r.tgid,
                "tid": r.tid,
                "comm": comm_text(&r.comm),
                "kernel_stack": ks,
                "kernel_stack_status": kstatus,
                "user_stack": us,
                "user_stack_status": ustatus,
                "count": r.count,
                "total_us": r.total_ns / 1000,
                "max_us": r.max_ns / 1000,
                "avg_us": r.total_ns / 1000 / r.count.max(1),
                "total_ns": r.total_ns,
                "max_ns": r.max_ns,
                "max_start": rfc3339(info.clock.wall(r.max_end_mono) - r.max_ns as i128, off),
                "max_end": rfc3339(info.clock.wall(r.max_end_mono), off),
                "waker": Value::Null,
            })
        })
        .collect();
    json!({
        "version": VERSION,
        "started_at": rfc3339(info.clock.wall(info.start_mono), off),
        "ended_at": rfc3339(info.clock.wall(info.end_mono), off),
        "duration_s": (info.duration_s() * 1000.0).round() / 1000.0,
        "attach": info.attach.name(),
        "target": info.target,
        "lost": lost(&report.counters),
        "counters": {
            "switches": report.counters.switches,
            "recorded": report.counters.recorded,
            "outside_block_time": report.counters.outside_block_time,
        },
        "records_total": report.records.len(),
        "records": records,
    })
}

impl Format for Json {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer(&mut *out, &document(report, self.limit))?;
        writeln!(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::report;

    #[test]
    fn document_has_the_documented_schema() {
        let mut out = Vec::new();
        Json { limit: 0 }.write(&report(), &mut out).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["version"], 1);
        assert_eq!(v["started_at"], "2023-11-14T22:13:20.000000+00:00");
        assert_eq!(v["duration_s"], 5.0);
        assert_eq!(v["lost"]["kernel_stacks"], 1);
        assert_eq!(v["records_total"], 2);
        let r = &v["records"][0];
        assert_eq!(r["comm"], "sleeper");
        assert_eq!((r["tgid"].as_u64(), r["tid"].as_u64()), (Some(100), Some(101)));
        assert_eq!(r["kernel_stack"][0]["symbol"], "__schedule");
        assert_eq!(r["kernel_stack"][0]["addr"], "0x1000");
        assert_eq!(r["user_stack"][1]["symbol"], "wait_here");
        assert_eq!((r["count"].as_u64(), r["total_us"].as_u64(), r["max_us"].as_u64()), (Some(10), Some(1_000_500), Some(250_000)));
        assert_eq!(r["max_end"], "2023-11-14T22:13:22.500000+00:00");
        assert_eq!(r["max_start"], "2023-11-14T22:13:22.250000+00:00");
        assert!(r["waker"].is_null());
        let k = &v["records"][1];
        assert_eq!(k["kernel_stack_status"], "missing");
        assert_eq!(k["user_stack_status"], "none");
        assert_eq!(k["kernel_stack"], json!([]));
    }

    #[test]
    fn limit_keeps_the_longest_waits_and_reports_the_total() {
        let v = document(&report(), 1);
        assert_eq!(v["records"].as_array().unwrap().len(), 1);
        assert_eq!(v["records"][0]["comm"], "sleeper");
        assert_eq!(v["records_total"], 2);
    }

    #[test]
    fn non_utf8_comm_is_still_valid_json() {
        let mut r = report();
        r.records[0].comm = b"\xff\"x\n".to_vec();
        let mut out = Vec::new();
        Json { limit: 0 }.write(&r, &mut out).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["records"][0]["comm"], "\u{fffd}\"x\\x0a");
    }
}
