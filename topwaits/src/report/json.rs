//! One JSON document per report; the schema is documented in docs/JSON.md and topwaits(1).

use std::io::{self, Write};

use std::cell::RefCell;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use serde::ser::{Error as _, SerializeMap as _, SerializeSeq as _};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::{by_longest, interrupt_handler, no_waker_label, take, Format};
use crate::analysis::reduce::By;
use crate::model::{comm_text, Counters, Frame, Hop, OpenSince, Record, Report, Stack, WakeKind};
use crate::util::clock::rfc3339;
use crate::util::fasthash::FastMap;

/// Schema version of the document.
pub const VERSION: u32 = 2;

pub struct Json {
    pub limit: usize,
}

fn frame(f: &Frame) -> Value {
    serde_json::to_value(jframe(f)).unwrap_or(Value::Null)
}

/// A frame's fields. Its offset is within the symbol when one resolved
/// (`symbol_offset`), else within the module file (`file_offset`).
fn jframe(f: &Frame) -> JFrame<'_> {
    let resolved = f.symbol.is_some();
    JFrame {
        symbol: f.name(),
        addr: Hex(f.addr),
        module: f.module.as_deref(),
        symbol_offset: f.offset.filter(|_| resolved),
        file_offset: f.offset.filter(|_| !resolved),
    }
}

pub fn stack(s: &Stack) -> (Value, &'static str) {
    (Value::Array(s.frames().iter().map(|f| frame(f)).collect()), status(s))
}

/// A record's `waker`: `null` without `--waker`, an object with empty stacks when
/// no task woke it (its `context` says why), else the chain of hops, each nested
/// as the `waker` of the one it woke.
enum JWaker<'a> {
    Null,
    Nobody(WakeKind),
    Hops(JHops<'a>),
}

impl Serialize for JWaker<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            JWaker::Null => s.serialize_none(),
            JWaker::Hops(h) => h.serialize(s),
            JWaker::Nobody(kind) => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("tgid", &0)?;
                m.serialize_entry("tid", &0)?;
                m.serialize_entry("comm", no_waker_label(*kind))?;
                let context = match kind {
                    WakeKind::Preempted => "preempted",
                    WakeKind::NotYet => "not_woken_yet",
                    _ => "none",
                };
                m.serialize_entry("context", context)?;
                for (field, status) in
                    [("kernel_stack", "kernel_stack_status"), ("user_stack", "user_stack_status")]
                {
                    m.serialize_entry(field, &[(); 0])?;
                    m.serialize_entry(status, "none")?;
                }
                m.serialize_entry("waker", &())?;
                m.end()
            }
        }
    }
}

/// The first of `hops` as a `waker` object, with the rest nested as its own
/// `waker` (`null` after the last).
struct JHops<'a> {
    hops: &'a [Hop],
    texts: &'a FrameTexts,
}

impl Serialize for JHops<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Some((h, rest)) = self.hops.split_first() else {
            return s.serialize_none();
        };
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("tgid", &h.tgid)?;
        m.serialize_entry("tid", &h.tid)?;
        if h.interrupt {
            m.serialize_entry("comm", "[interrupt]")?;
        } else {
            m.serialize_entry("comm", &comm_text(&h.comm))?;
        }
        m.serialize_entry("context", if h.interrupt { "interrupt" } else { "task" })?;
        m.serialize_entry("kernel_stack", &Frames { stack: &h.kernel, texts: self.texts })?;
        m.serialize_entry("kernel_stack_status", status(&h.kernel))?;
        m.serialize_entry("user_stack", &Frames { stack: &h.user, texts: self.texts })?;
        m.serialize_entry("user_stack_status", status(&h.user))?;
        m.serialize_entry("waker", &JHops { hops: rest, texts: self.texts })?;
        if h.interrupt {
            m.serialize_entry("handler", &interrupt_handler(h))?;
        }
        m.end()
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
        "wakeup_map_full": c.wake_full,
        "chain_map_full": c.chains_full,
        "wait_events": c.lost_wait_events,
        "unended_waits": c.unended,
        "proc_events": c.lost_proc_events,
        "goroutine_threads": c.goroutine_threads_lost,
    })
}

/// Each distinct frame's JSON, rendered at its first use and copied into every
/// stack that has it: a report of 20,000 stacks holds about 400,000 frames but a
/// few thousand distinct ones (frames are shared, see `symbolize::resolve`).
/// Keyed by the frame's address, and keeping the frame so that the address stays
/// its own.
#[derive(Default)]
struct FrameTexts(RefCell<FastMap<usize, FrameText>>);

/// A frame and its JSON text.
type FrameText = (Arc<Frame>, Box<RawValue>);

/// A stack's frames serialized straight from the model, without an intermediate
/// value tree (records can number in the tens of thousands).
struct Frames<'a> {
    stack: &'a Stack,
    texts: &'a FrameTexts,
}

impl Serialize for Frames<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let frames = self.stack.frames();
        let mut seq = s.serialize_seq(Some(frames.len()))?;
        let mut texts = self.texts.0.borrow_mut();
        for f in frames {
            let text = match texts.entry(Arc::as_ptr(f) as usize) {
                Entry::Occupied(e) => &e.into_mut().1,
                Entry::Vacant(e) => {
                    let text =
                        serde_json::value::to_raw_value(&jframe(f)).map_err(S::Error::custom)?;
                    &e.insert((f.clone(), text)).1
                }
            };
            seq.serialize_element(&**text)?;
        }
        seq.end()
    }
}

#[derive(Serialize)]
struct JFrame<'a> {
    symbol: std::borrow::Cow<'a, str>,
    addr: Hex,
    #[serde(skip_serializing_if = "Option::is_none")]
    module: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    symbol_offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file_offset: Option<u64>,
}

/// An address as a `0x...` string, formatted straight into the output (a report
/// can hold a million frames: no string each).
struct Hex(u64);

impl Serialize for Hex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{:#x}", self.0))
    }
}

fn status(s: &Stack) -> &'static str {
    match s {
        Stack::Frames(_) if s.is_cut() => "cut",
        Stack::Frames(_) => "ok",
        Stack::Missing => "missing",
        Stack::None => "none",
    }
}

#[derive(Serialize)]
struct JRecord<'a> {
    /// `null` with `--by comm`.
    tgid: Option<u32>,
    /// `null` with `--by process` or `--by comm`.
    tid: Option<u32>,
    /// The ids in the process's own PID namespace (a container's), where that
    /// is not the tracer's.
    #[serde(skip_serializing_if = "Option::is_none")]
    ns_pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ns_tid: Option<u32>,
    /// The cgroup the process was in, where it could be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    cgroup: Option<&'a str>,
    /// Threads the record stands for (more than 1 only with `--by`).
    threads: u32,
    /// A goroutine's record: the threads the scheduler ran it on, the one it
    /// ran on most first.
    #[serde(skip_serializing_if = "Option::is_none")]
    ran_on_tids: Option<&'a [u32]>,
    /// What the waits were for: `kind`, `description` and the kind's fields.
    #[serde(skip_serializing_if = "Option::is_none")]
    waits_on: Option<Value>,
    /// On-CPU sample records (`waits_on.kind` "running"): the samples, whose
    /// time `total_ns` estimates.
    #[serde(skip_serializing_if = "Option::is_none")]
    samples: Option<u64>,
    comm: String,
    kernel_stack: Frames<'a>,
    kernel_stack_status: &'static str,
    user_stack: Frames<'a>,
    user_stack_status: &'static str,
    count: u64,
    total_us: u64,
    max_us: u64,
    avg_us: u64,
    total_ns: u64,
    max_ns: u64,
    max_start: String,
    max_end: String,
    /// Still waiting when the trace ended; `max_end` is then the trace's end.
    open: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    open_since: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    open_since_estimated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    began_before_trace: Option<bool>,
    /// With `--waker`: the blocked/run-queue split, where
    /// `blocked_us + runq_us == total_us` exactly.
    #[serde(skip_serializing_if = "Option::is_none")]
    blocked_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    runq_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_blocked_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_runq_us: Option<u64>,
    waker: JWaker<'a>,
}

/// A record's `waits_on`: the kind and its fields, with the description.
pub fn waits_on(w: &crate::model::label::WaitsOn, mean_ns: u64) -> Value {
    let mut v = serde_json::to_value(w).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("label".into(), Value::String(w.short()));
        m.insert("description".into(), Value::String(w.describe(mean_ns)));
    }
    v
}

/// One record, ready to serialize.
fn record<'a>(report: &Report, r: &'a Record, texts: &'a FrameTexts) -> JRecord<'a> {
    let info = &report.info;
    let off = info.utc_offset_s;
    let total_us = r.total_ns / 1000;
    let blocked_us = r.wake.as_ref().map(|w| (w.blocked_ns / 1000).min(total_us));
    JRecord {
        tgid: matches!(info.by, By::Thread | By::Process).then_some(r.tgid),
        tid: (info.by == By::Thread).then_some(r.tid),
        ns_pid: r.ns_ids.filter(|_| matches!(info.by, By::Thread | By::Process)).map(|n| n.0),
        ns_tid: r.ns_ids.filter(|_| info.by == By::Thread).map(|n| n.1),
        cgroup: r.cgroup.as_deref(),
        waits_on: r.waits_on.as_ref().map(|w| waits_on(w, r.total_ns / r.count.max(1))),
        threads: r.threads,
        ran_on_tids: (info.by == By::Thread && !r.ran_on.is_empty()).then_some(&r.ran_on[..]),
        samples: r.on_cpu().then_some(r.count),
        comm: comm_text(&r.comm),
        kernel_stack: Frames { stack: &r.kernel, texts },
        kernel_stack_status: status(&r.kernel),
        user_stack: Frames { stack: &r.user, texts },
        user_stack_status: status(&r.user),
        count: r.count,
        total_us: r.total_ns / 1000,
        max_us: r.max_ns / 1000,
        avg_us: r.total_ns / 1000 / r.count.max(1),
        total_ns: r.total_ns,
        max_ns: r.max_ns,
        max_start: rfc3339(info.clock.wall(r.max_end_mono) - r.max_ns as i128, off),
        max_end: rfc3339(info.clock.wall(r.max_end_mono), off),
        open: r.open.is_some(),
        open_since: r.open.map(|o| o.mono().map(|t| rfc3339(info.clock.wall(t), off))),
        open_since_estimated: r.open.map(|o| !matches!(o, OpenSince::Exact(_))),
        began_before_trace: r.open.map(|o| !matches!(o, OpenSince::Exact(_))),
        blocked_us,
        runq_us: blocked_us.map(|b| total_us - b),
        max_blocked_us: r.wake.as_ref().map(|w| w.max_blocked_ns / 1000),
        max_runq_us: r.wake.as_ref().map(|w| w.max_runq_ns / 1000),
        waker: match &r.wake {
            None => JWaker::Null,
            Some(w) if w.hops.is_empty() => JWaker::Nobody(w.kind),
            Some(w) => JWaker::Hops(JHops { hops: &w.hops, texts }),
        },
    }
}

/// The document without its records.
fn head(report: &Report) -> Value {
    let info = &report.info;
    let off = info.utc_offset_s;
    json!({
        "version": VERSION,
        "started_at": rfc3339(info.clock.wall(info.start_mono), off),
        "ended_at": rfc3339(info.clock.wall(info.end_mono), off),
        "duration_s": (info.duration_s() * 1000.0).round() / 1000.0,
        "attach": info.attach.name(),
        "target": info.target,
        "goroutines": info.goroutines,
        "lost": lost(&report.counters),
        "waker_mode": info.waker,
        "by": info.by.name(),
        "counters": {
            "wakeups": report.counters.wakings,
            "switches": report.counters.switches,
            "recorded": report.counters.recorded,
            "outside_block_time": report.counters.outside_block_time,
            "user_stacks_cut_at_junk": report.counters.user_stacks_cut,
            "kernel_stacks_reused": report.counters.kstacks_reused,
            "waker_kernel_stacks_reused": report.counters.waker_kstacks_reused,
            "kernel_stacks_shared": report.counters.kstacks_shared,
            "wait_events": report.counters.wait_events,
            "ends_estimated": report.counters.ends_estimated,
            "on_cpu_samples": report.counters.samples,
            "lost_on_cpu_samples": report.counters.lost_samples,
            "waits_in_progress_at_start": report.counters.seeded,
            "waits_in_progress_at_start_walked": report.counters.seeded_walked,
            "waits_in_progress_at_start_unwalked": report.counters.seeded_unwalked,
            "waits_in_progress_at_start_unwalked_ns": report.counters.seeded_unwalked_ns,
            "goroutine_waits": report.counters.goroutine_waits,
            "goroutine_wakeups": report.counters.goroutine_wakeups,
            "goroutine_waits_by_stack": report.counters.goroutine_waits_by_stack,
            "go_scheduler_idle_ns": report.counters.go_scheduler_idle_ns,
        },
        "on_cpu_hz": info.on_cpu_hz,
        "thread_times": crate::analysis::timeshare::of(report).map(|times| thread_times(&times)),
        "records_total": report.records.len(),
    })
}

/// Each thread's time (`--on-cpu`), most running first.
fn thread_times(times: &[crate::analysis::timeshare::ThreadTime]) -> Value {
    Value::Array(
        times
            .iter()
            .map(|t| {
                json!({
                    "tgid": t.tgid,
                    "tid": t.tid,
                    "comm": comm_text(&t.comm),
                    "samples": t.samples,
                    "running_ns": t.running_ns,
                    "runnable_ns": t.runnable_ns,
                    "blocked_ns": t.blocked_ns,
                    "accounted_ns": t.accounted_ns(),
                })
            })
            .collect(),
    )
}

/// The whole document as a value (for tests and small reports).
pub fn document(report: &Report, limit: usize) -> Value {
    let mut v = head(report);
    let texts = FrameTexts::default();
    let records: Vec<Value> = take(by_longest(&report.records), limit)
        .into_iter()
        .map(|r| serde_json::to_value(record(report, r, &texts)).unwrap_or(Value::Null))
        .collect();
    v["records"] = Value::Array(records);
    v
}

/// Streams the document: the head's fields, then one record at a time, so memory
/// stays flat however many records there are.
fn stream(report: &Report, limit: usize, out: &mut dyn Write) -> io::Result<()> {
    // The serializer writes many small pieces: buffered here, they are copies
    // into a buffer of a known type rather than calls through `dyn Write`.
    let mut out = io::BufWriter::with_capacity(1 << 18, out);
    let head = head(report);
    let text = serde_json::to_string(&head)?;
    // `head` is an object: reopen it to append "records".
    out.write_all(&text.as_bytes()[..text.len() - 1])?;
    out.write_all(b",\"records\":[")?;
    let texts = FrameTexts::default();
    for (i, r) in take(by_longest(&report.records), limit).into_iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        serde_json::to_writer(&mut out, &record(report, r, &texts))?;
    }
    out.write_all(b"]")?;
    if !report.events.is_empty() {
        out.write_all(b",\"events\":[")?;
        for (i, e) in report.events.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            serde_json::to_writer(
                &mut out,
                &JEvent { state: e.state, record: record(report, &e.record, &texts) },
            )?;
        }
        out.write_all(b"]")?;
    }
    out.write_all(b"}")?;
    out.flush()
}

/// One long wait of `--events-over`: its state, then the fields of a record of
/// one wait (`max_start`/`max_end` are its start and end).
#[derive(Serialize)]
struct JEvent<'a> {
    state: u32,
    #[serde(flatten)]
    record: JRecord<'a>,
}

impl Format for Json {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        stream(report, self.limit, out)?;
        writeln!(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::report;

    #[test]
    fn on_cpu_records_carry_their_samples_and_each_thread_its_time() {
        let v = document(&crate::report::fixtures::on_cpu_report(), 0);
        assert_eq!(v["on_cpu_hz"], 100);
        let running: Vec<&Value> = v["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["waits_on"]["kind"] == "running")
            .collect();
        assert_eq!(running.len(), 1);
        assert_eq!(
            (running[0]["samples"].as_u64(), running[0]["total_ns"].as_u64()),
            (Some(200), Some(2_000_000_000))
        );
        assert!(v["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["waits_on"]["kind"] != "running")
            .all(|r| r.get("samples").is_none()));
        let t = &v["thread_times"][0];
        assert_eq!(
            (t["tid"].as_u64(), t["running_ns"].as_u64(), t["blocked_ns"].as_u64()),
            (Some(101), Some(2_000_000_000), Some(1_000_500_000))
        );
        assert_eq!(document(&report(), 0)["thread_times"], Value::Null, "only with samples");
    }

    #[test]
    fn document_has_the_documented_schema() {
        let mut out = Vec::new();
        Json { limit: 0 }.write(&report(), &mut out).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["version"], 2);
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
        assert_eq!(
            (r["count"].as_u64(), r["total_us"].as_u64(), r["max_us"].as_u64()),
            (Some(10), Some(1_000_500), Some(250_000))
        );
        assert_eq!(r["max_end"], "2023-11-14T22:13:22.500000+00:00");
        assert_eq!(r["max_start"], "2023-11-14T22:13:22.250000+00:00");
        assert!(r["waker"].is_null());
        let k = &v["records"][1];
        assert_eq!(k["kernel_stack_status"], "missing");
        assert_eq!(k["user_stack_status"], "none");
        assert_eq!(k["kernel_stack"], json!([]));
    }

    #[test]
    fn by_process_or_comm_nulls_the_ids_it_merged_and_counts_threads() {
        let mut rep = report();
        rep.info.by = By::Process;
        rep.records[0].threads = 12;
        let v = document(&rep, 0);
        assert_eq!(v["by"], "process");
        let r = &v["records"][0];
        assert_eq!(
            (r["tgid"].as_u64(), r["tid"].is_null(), r["threads"].as_u64()),
            (Some(100), true, Some(12))
        );
        rep.info.by = By::Comm;
        let r = &document(&rep, 0)["records"][0];
        assert!(r["tgid"].is_null() && r["tid"].is_null(), "{r}");
        assert!(r.get("cgroup").is_none(), "no cgroup read, none shown");
        rep.info.by = By::Cgroup;
        rep.records[0].cgroup = Some("/system.slice/postgresql.service".into());
        let v = document(&rep, 0);
        let r = &v["records"][0];
        assert_eq!(v["by"], "cgroup");
        assert!(r["tgid"].is_null() && r["tid"].is_null(), "{r}");
        assert_eq!(r["cgroup"], "/system.slice/postgresql.service");
    }

    /// Regression: `offset` meant the offset in the symbol for a resolved frame and
    /// in the file for an unresolved one.
    #[test]
    fn frame_offsets_say_whether_they_are_in_the_symbol_or_the_file() {
        let mut f = Frame::unknown(0x7f00_0000_1234);
        f.module = Some("libc.so.6".into());
        f.offset = Some(0x1234);
        let v = frame(&f);
        assert_eq!((v["file_offset"].as_u64(), v.get("symbol_offset")), (Some(0x1234), None));
        f.symbol = Some("read".into());
        f.offset = Some(0x14);
        let v = frame(&f);
        assert_eq!((v["symbol_offset"].as_u64(), v.get("file_offset")), (Some(0x14), None));
        assert!(v.get("offset").is_none());
    }

    #[test]
    fn waker_objects_nest_and_split_adds_up() {
        use crate::report::fixtures::offwake_report;
        let v = document(&offwake_report(), 0);
        assert_eq!(v["waker_mode"], true);
        let r = &v["records"][0];
        assert_eq!(
            r["blocked_us"].as_u64().unwrap() + r["runq_us"].as_u64().unwrap(),
            r["total_us"].as_u64().unwrap()
        );
        assert_eq!(
            (r["max_blocked_us"].as_u64(), r["max_runq_us"].as_u64()),
            (Some(249_900), Some(100))
        );
        let w = &r["waker"];
        assert_eq!(
            (w["comm"].as_str(), w["tid"].as_u64(), w["context"].as_str()),
            (Some("writer"), Some(102), Some("task"))
        );
        assert_eq!(w["kernel_stack"][1]["symbol"], "pipe_write");
        assert_eq!(w["user_stack"][1]["symbol"], "produce");
        let w2 = &w["waker"];
        assert_eq!(
            (w2["comm"].as_str(), w2["context"].as_str()),
            (Some("[interrupt]"), Some("interrupt"))
        );
        assert_eq!(w2["handler"], "hrtimer_wakeup");
        assert_eq!(
            (w2["tid"].as_u64(), w2["tgid"].as_u64()),
            (Some(0), Some(0)),
            "the task an interrupt hit is no waker"
        );
        assert!(w2["waker"].is_null());
        let p = &v["records"][1];
        assert_eq!(p["waker"]["context"], "preempted");
        assert_eq!(p["blocked_us"], 0);
        assert_eq!(p["runq_us"], p["total_us"]);
    }

    #[test]
    fn streamed_output_equals_the_document() {
        use crate::report::fixtures::offwake_report;
        for r in [report(), offwake_report()] {
            let mut out = Vec::new();
            Json { limit: 0 }.write(&r, &mut out).unwrap();
            let streamed: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(streamed, document(&r, 0));
        }
    }

    /// Each distinct frame is rendered once: frames shared by records print the
    /// same in each, and a frame at an address another frame had prints its own.
    #[test]
    fn shared_frames_render_once_and_distinct_frames_apart() {
        let mut r = report();
        let shared = r.records[0].user.frames()[1].clone();
        let mut other = (*shared).clone();
        other.symbol = Some("another_name".into());
        r.records[1].user = Stack::shared(vec![shared.clone(), Arc::new(other), shared]);
        let mut out = Vec::new();
        Json { limit: 0 }.write(&r, &mut out).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        let names = |i: usize| -> Vec<String> {
            v["records"][i]["user_stack"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["symbol"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names(0)[1], "wait_here");
        assert_eq!(names(1), ["wait_here", "another_name", "wait_here"]);
        assert_eq!(v["records"][1]["user_stack"][0], v["records"][0]["user_stack"][1]);
        assert_eq!(
            v["records"][1]["user_stack"][1]["addr"],
            v["records"][0]["user_stack"][1]["addr"]
        );
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
