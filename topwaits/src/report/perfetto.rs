//! Perfetto output (`--perfetto FILE`): the long waits of `--events-over` as a
//! Perfetto trace that ui.perfetto.dev and trace_processor open. One track per
//! thread (under its process), each wait a slice named by its most telling frame
//! with its stacks as annotations, and with `-w` a flow arrow from an instant on the
//! waker's track, at the wakeup, to the wait it ended.

use std::collections::BTreeMap;
use std::io::{self, Write};

use prost::Message;

use super::Format;
use crate::model::{comm_text, Event, Record, Report, Stack, WakeKind};
use crate::util::text::tid_text;

/// The messages of Perfetto's trace schema (protos/perfetto/trace) that topwaits
/// writes, with the schema's field numbers; prost does the encoding.
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Trace {
        #[prost(message, repeated, tag = "1")]
        pub packet: Vec<TracePacket>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TracePacket {
        #[prost(uint64, optional, tag = "8")]
        pub timestamp: Option<u64>,
        #[prost(uint32, optional, tag = "58")]
        pub timestamp_clock_id: Option<u32>,
        #[prost(uint32, optional, tag = "10")]
        pub trusted_packet_sequence_id: Option<u32>,
        #[prost(uint32, optional, tag = "13")]
        pub sequence_flags: Option<u32>,
        #[prost(message, optional, tag = "11")]
        pub track_event: Option<TrackEvent>,
        #[prost(message, optional, tag = "60")]
        pub track_descriptor: Option<TrackDescriptor>,
        #[prost(message, optional, tag = "6")]
        pub clock_snapshot: Option<ClockSnapshot>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ClockSnapshot {
        #[prost(message, repeated, tag = "1")]
        pub clocks: Vec<Clock>,
        #[prost(int32, optional, tag = "2")]
        pub primary_trace_clock: Option<i32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Clock {
        #[prost(uint32, optional, tag = "1")]
        pub clock_id: Option<u32>,
        #[prost(uint64, optional, tag = "2")]
        pub timestamp: Option<u64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrackDescriptor {
        #[prost(uint64, optional, tag = "1")]
        pub uuid: Option<u64>,
        #[prost(string, optional, tag = "2")]
        pub name: Option<String>,
        #[prost(message, optional, tag = "3")]
        pub process: Option<ProcessDescriptor>,
        #[prost(message, optional, tag = "4")]
        pub thread: Option<ThreadDescriptor>,
        #[prost(uint64, optional, tag = "5")]
        pub parent_uuid: Option<u64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProcessDescriptor {
        #[prost(int32, optional, tag = "1")]
        pub pid: Option<i32>,
        #[prost(string, optional, tag = "6")]
        pub process_name: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ThreadDescriptor {
        #[prost(int32, optional, tag = "1")]
        pub pid: Option<i32>,
        #[prost(int32, optional, tag = "2")]
        pub tid: Option<i32>,
        #[prost(string, optional, tag = "5")]
        pub thread_name: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrackEvent {
        #[prost(int32, optional, tag = "9")]
        pub r#type: Option<i32>,
        #[prost(uint64, optional, tag = "11")]
        pub track_uuid: Option<u64>,
        #[prost(string, optional, tag = "23")]
        pub name: Option<String>,
        #[prost(string, repeated, tag = "22")]
        pub categories: Vec<String>,
        #[prost(message, repeated, tag = "4")]
        pub debug_annotations: Vec<DebugAnnotation>,
        #[prost(fixed64, repeated, packed = "false", tag = "47")]
        pub flow_ids: Vec<u64>,
        #[prost(fixed64, repeated, packed = "false", tag = "48")]
        pub terminating_flow_ids: Vec<u64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DebugAnnotation {
        #[prost(string, optional, tag = "10")]
        pub name: Option<String>,
        #[prost(uint64, optional, tag = "3")]
        pub uint_value: Option<u64>,
        #[prost(string, optional, tag = "6")]
        pub string_value: Option<String>,
    }

    /// `TrackEvent.Type`.
    pub const SLICE_BEGIN: i32 = 1;
    pub const SLICE_END: i32 = 2;
    pub const INSTANT: i32 = 3;
    /// `BuiltinClock`: BPF timestamps are CLOCK_MONOTONIC.
    pub const CLOCK_MONOTONIC: u32 = 3;
    pub const CLOCK_BOOTTIME: u32 = 6;
    /// `TracePacket.SequenceFlags`.
    pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
}

use proto::*;

/// `--perfetto`: one trace file.
pub struct Perfetto;

impl Format for Perfetto {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(&trace(report).encode_to_vec())
    }
}

/// Track ids: processes and threads apart (a process's main thread has its id).
fn process_uuid(tgid: u32) -> u64 {
    1 << 32 | tgid as u64
}

fn thread_uuid(tid: u32) -> u64 {
    2 << 32 | tid as u64
}

/// The name of the instant on a waker's track: `wakes comm/tid` for a
/// thread, `wakes goroutine N` for a goroutine.
fn wakes(r: &Record) -> String {
    if topwaits_common::golang::is_goroutine(r.tid) {
        return format!("wakes {}", tid_text(r.tid));
    }
    format!("wakes {}/{}", comm_text(&r.comm), r.tid)
}

/// A stack as one frame per line, leaf first.
fn stack_text(s: &Stack) -> String {
    s.frames().iter().map(|f| f.describe()).collect::<Vec<_>>().join("\n")
}

fn text(name: &str, value: String) -> DebugAnnotation {
    DebugAnnotation { name: Some(name.into()), string_value: Some(value), uint_value: None }
}

fn state_name(state: u32) -> String {
    match state {
        0 => "R (preempted)".into(),
        s if s & 2 != 0 => format!("D ({s:#x})"),
        s if s & 1 != 0 => format!("S ({s:#x})"),
        s => format!("{s:#x}"),
    }
}

fn packet(ts: Option<u64>, event: TrackEvent) -> TracePacket {
    TracePacket {
        timestamp: ts,
        timestamp_clock_id: Some(CLOCK_MONOTONIC),
        trusted_packet_sequence_id: Some(1),
        track_event: Some(event),
        ..Default::default()
    }
}

/// The thread (tgid, tid, comm) behind each track, for the descriptors; a
/// goroutine's (its tid marked, see `golang::GOROUTINE_TID`) is a track of its
/// own under its process, named by its goid, not a thread.
#[derive(Default)]
struct Tracks {
    threads: BTreeMap<u32, (u32, String)>,
    goroutines: BTreeMap<u32, u32>,
    processes: BTreeMap<u32, String>,
}

impl Tracks {
    fn add(&mut self, tgid: u32, tid: u32, comm: &[u8]) -> u64 {
        let name = comm_text(comm);
        self.processes.entry(tgid).or_insert_with(|| name.clone());
        if topwaits_common::golang::is_goroutine(tid) {
            self.goroutines.insert(tid, tgid);
            return thread_uuid(tid);
        }
        if tgid == tid {
            // The main thread names its process.
            self.processes.insert(tgid, name.clone());
        }
        // The latest name wins (a thread renamed itself, or exec'd).
        self.threads.insert(tid, (tgid, name));
        thread_uuid(tid)
    }

    fn descriptors(&self) -> Vec<TracePacket> {
        let processes = self.processes.iter().map(|(&pid, name)| TrackDescriptor {
            uuid: Some(process_uuid(pid)),
            process: Some(ProcessDescriptor {
                pid: Some(pid as i32),
                process_name: Some(name.clone()),
            }),
            ..Default::default()
        });
        let threads = self.threads.iter().map(|(&tid, (pid, name))| TrackDescriptor {
            uuid: Some(thread_uuid(tid)),
            parent_uuid: Some(process_uuid(*pid)),
            thread: Some(ThreadDescriptor {
                pid: Some(*pid as i32),
                tid: Some(tid as i32),
                thread_name: Some(name.clone()),
            }),
            ..Default::default()
        });
        let goroutines = self.goroutines.iter().map(|(&tid, &pid)| TrackDescriptor {
            uuid: Some(thread_uuid(tid)),
            parent_uuid: Some(process_uuid(pid)),
            name: Some(tid_text(tid)),
            ..Default::default()
        });
        processes
            .chain(threads)
            .chain(goroutines)
            .map(|d| TracePacket {
                trusted_packet_sequence_id: Some(1),
                track_descriptor: Some(d),
                ..Default::default()
            })
            .collect()
    }
}

/// The slice of one wait, and with a task waker the instant and flow that ended it.
fn wait_packets(e: &Event, flow: u64, tracks: &mut Tracks, out: &mut Vec<TracePacket>) {
    let r = &e.record;
    let track = tracks.add(r.tgid, r.tid, &r.comm);
    let mut notes = vec![
        text("state", state_name(e.state)),
        DebugAnnotation {
            name: Some("duration_us".into()),
            uint_value: Some(r.max_ns / 1000),
            string_value: None,
        },
        text("kernel_stack", stack_text(&r.kernel)),
        text("user_stack", stack_text(&r.user)),
    ];
    if !r.ran_on.is_empty() {
        // A goroutine's: the threads the scheduler ran it on, most often first.
        let tids: Vec<String> = r.ran_on.iter().map(u32::to_string).collect();
        notes.push(text("ran_on_tids", tids.join(", ")));
    }
    let mut end =
        TrackEvent { r#type: Some(SLICE_END), track_uuid: Some(track), ..Default::default() };
    if let Some(w) = &r.wake {
        let woken = e.start_mono() + w.blocked_ns;
        match (w.kind, w.hops.first()) {
            (WakeKind::Woken, Some(h)) if !h.interrupt => {
                notes.push(text(
                    "waker",
                    format!("{} (pid {}, {})", comm_text(&h.comm), h.tgid, tid_text(h.tid)),
                ));
                notes.push(text("waker_kernel_stack", stack_text(&h.kernel)));
                notes.push(text("waker_user_stack", stack_text(&h.user)));
                let waker_track = tracks.add(h.tgid, h.tid, &h.comm);
                out.push(packet(
                    Some(woken),
                    TrackEvent {
                        r#type: Some(INSTANT),
                        track_uuid: Some(waker_track),
                        name: Some(wakes(r)),
                        categories: vec!["wakeup".into()],
                        flow_ids: vec![flow],
                        ..Default::default()
                    },
                ));
                end.terminating_flow_ids = vec![flow];
            }
            (WakeKind::Woken, Some(h)) => {
                let handler = crate::report::interrupt_handler(h).unwrap_or("?").to_string();
                notes.push(text("waker", format!("[interrupt] {handler}")));
            }
            (kind, _) => notes.push(text("waker", crate::report::no_waker_label(kind).into())),
        }
        notes.push(DebugAnnotation {
            name: Some("blocked_us".into()),
            uint_value: Some(w.blocked_ns / 1000),
            string_value: None,
        });
    }
    out.push(packet(
        Some(e.start_mono()),
        TrackEvent {
            r#type: Some(SLICE_BEGIN),
            track_uuid: Some(track),
            name: Some(super::timeline::telling_frame(r)),
            categories: vec!["off-cpu".into()],
            debug_annotations: notes,
            ..Default::default()
        },
    ));
    out.push(packet(Some(e.end_mono()), end));
}

/// The instant of one on-CPU sample (`--on-cpu`) on its thread's track, named
/// by where it ran.
fn sample_packet(r: &Record, tracks: &mut Tracks, out: &mut Vec<TracePacket>) {
    let track = tracks.add(r.tgid, r.tid, &r.comm);
    out.push(packet(
        Some(r.max_end_mono),
        TrackEvent {
            r#type: Some(INSTANT),
            track_uuid: Some(track),
            name: Some(format!("running: {}", super::timeline::telling_frame(r))),
            categories: vec!["on-cpu".into()],
            debug_annotations: vec![
                text("kernel_stack", stack_text(&r.kernel)),
                text("user_stack", stack_text(&r.user)),
            ],
            ..Default::default()
        },
    ));
}

/// The trace of a report's events, and of its on-CPU samples.
pub fn trace(report: &Report) -> Trace {
    let mut tracks = Tracks::default();
    let mut events = Vec::new();
    for (i, e) in report.events.iter().enumerate() {
        wait_packets(e, i as u64 + 1, &mut tracks, &mut events);
    }
    for r in &report.samples {
        sample_packet(r, &mut tracks, &mut events);
    }
    // Timestamps are CLOCK_MONOTONIC: a clock snapshot at the trace's start makes
    // it the trace's clock (readers otherwise expect BOOTTIME, and drop what they
    // cannot convert).
    let start = report.info.start_mono;
    let snapshot = TracePacket {
        timestamp: Some(start),
        timestamp_clock_id: Some(CLOCK_MONOTONIC),
        trusted_packet_sequence_id: Some(1),
        sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
        clock_snapshot: Some(ClockSnapshot {
            clocks: [CLOCK_MONOTONIC, CLOCK_BOOTTIME]
                .iter()
                .map(|&id| Clock { clock_id: Some(id), timestamp: Some(start) })
                .collect(),
            primary_trace_clock: Some(CLOCK_MONOTONIC as i32),
        }),
        ..Default::default()
    };
    let mut packet = vec![snapshot];
    packet.extend(tracks.descriptors());
    packet.extend(events);
    Trace { packet }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Event;
    use crate::report::fixtures::offwake_report;

    fn with_events() -> Report {
        let mut r = offwake_report();
        r.events = r
            .records
            .iter()
            .map(|rec| Event {
                record: Record { count: 1, total_ns: rec.max_ns, ..rec.clone() },
                state: 1,
            })
            .collect();
        r.events[1].state = 0;
        r
    }

    #[test]
    fn each_event_is_a_slice_on_its_threads_track_with_a_flow_from_its_waker() {
        let r = with_events();
        let t = Trace::decode(&encoded(&r)[..]).unwrap();
        let tracks: Vec<&TrackDescriptor> =
            t.packet.iter().filter_map(|p| p.track_descriptor.as_ref()).collect();
        let thread = |tid: i32| {
            tracks.iter().find(|d| d.thread.as_ref().and_then(|t| t.tid) == Some(tid)).unwrap()
        };
        assert_eq!(thread(101).thread.as_ref().unwrap().thread_name.as_deref(), Some("sleeper"));
        assert_eq!(
            thread(102).thread.as_ref().unwrap().thread_name.as_deref(),
            Some("writer"),
            "the waker has a track"
        );
        let evs: Vec<(&TracePacket, &TrackEvent)> =
            t.packet.iter().filter_map(|p| p.track_event.as_ref().map(|e| (p, e))).collect();
        let begin = evs
            .iter()
            .find(|(_, e)| e.r#type == Some(SLICE_BEGIN) && e.track_uuid == thread(101).uuid)
            .unwrap();
        let rec = &r.events[0];
        assert_eq!(begin.0.timestamp, Some(rec.start_mono()));
        assert_eq!(begin.0.timestamp_clock_id, Some(CLOCK_MONOTONIC));
        assert_eq!(
            begin.1.name.as_deref(),
            Some("clock_nanosleep"),
            "the first user frame, as in the timeline"
        );
        let note = |n: &str| {
            begin
                .1
                .debug_annotations
                .iter()
                .find(|a| a.name.as_deref() == Some(n))
                .and_then(|a| a.string_value.clone())
        };
        assert_eq!(note("kernel_stack").unwrap(), "__schedule\nschedule\ndo_nanosleep");
        assert!(note("waker").unwrap().starts_with("writer"));
        let end = evs
            .iter()
            .find(|(_, e)| e.r#type == Some(SLICE_END) && e.track_uuid == thread(101).uuid)
            .unwrap();
        assert_eq!(end.0.timestamp, Some(rec.end_mono()));
        let instant = evs.iter().find(|(_, e)| e.r#type == Some(INSTANT)).unwrap();
        assert_eq!(instant.1.track_uuid, thread(102).uuid);
        assert_eq!(
            instant.0.timestamp,
            Some(rec.start_mono() + rec.record.wake.as_ref().unwrap().blocked_ns)
        );
        assert_eq!(instant.1.flow_ids, end.1.terminating_flow_ids);
        assert!(!instant.1.flow_ids.is_empty());
        // The preempted worker: a slice, no flow.
        let worker = evs
            .iter()
            .find(|(_, e)| e.r#type == Some(SLICE_BEGIN) && e.track_uuid == thread(7).uuid)
            .unwrap();
        let state =
            worker.1.debug_annotations.iter().find(|a| a.name.as_deref() == Some("state")).unwrap();
        assert_eq!(state.string_value.as_deref(), Some("R (preempted)"));
        assert_eq!(evs.iter().filter(|(_, e)| e.r#type == Some(INSTANT)).count(), 1);
        assert_eq!(t.packet[0].sequence_flags, Some(SEQ_INCREMENTAL_STATE_CLEARED));
        let snap = t.packet[0].clock_snapshot.as_ref().expect("a clock snapshot first");
        assert_eq!(snap.primary_trace_clock, Some(CLOCK_MONOTONIC as i32));
    }

    #[test]
    fn each_on_cpu_sample_is_an_instant_named_by_where_it_ran() {
        let mut r = with_events();
        let mut s = crate::report::fixtures::on_cpu_report().records.pop().unwrap();
        (s.count, s.total_ns, s.max_end_mono) = (1, 10_000_000, 2_500_000_000);
        r.samples = vec![s];
        let t = Trace::decode(&encoded(&r)[..]).unwrap();
        let on: Vec<(&TracePacket, &TrackEvent)> = t
            .packet
            .iter()
            .filter_map(|p| p.track_event.as_ref().map(|e| (p, e)))
            .filter(|(_, e)| e.categories == ["on-cpu"])
            .collect();
        assert_eq!(on.len(), 1);
        assert_eq!((on[0].0.timestamp, on[0].1.r#type), (Some(2_500_000_000), Some(INSTANT)));
        assert_eq!(on[0].1.name.as_deref(), Some("running: compute"));
        let sleeper = t
            .packet
            .iter()
            .filter_map(|p| p.track_descriptor.as_ref())
            .find(|d| d.thread.as_ref().and_then(|t| t.tid) == Some(101));
        assert_eq!(on[0].1.track_uuid, sleeper.unwrap().uuid, "on the thread's own track");
    }

    #[test]
    fn a_goroutines_wait_is_on_a_track_named_by_its_goid_with_the_threads_it_ran_on() {
        let mut r = with_events();
        let g = &mut r.events[0].record;
        g.tid = topwaits_common::golang::tid_of(42);
        g.ran_on = vec![104, 101];
        g.user = crate::report::fixtures::frames(&[
            "runtime.gopark",
            "sync.(*Mutex).Lock",
            "main.handle",
        ]);
        let t = Trace::decode(&encoded(&r)[..]).unwrap();
        let tracks: Vec<&TrackDescriptor> =
            t.packet.iter().filter_map(|p| p.track_descriptor.as_ref()).collect();
        let track = tracks
            .iter()
            .find(|d| d.name.as_deref() == Some("goroutine 42"))
            .unwrap_or_else(|| panic!("{tracks:#?}"));
        assert!(track.thread.is_none(), "a goroutine is not a thread");
        let process = tracks.iter().find(|d| d.uuid == track.parent_uuid).unwrap();
        assert_eq!(process.process.as_ref().unwrap().pid, Some(r.events[0].record.tgid as i32));
        let begin = t
            .packet
            .iter()
            .filter_map(|p| p.track_event.as_ref())
            .find(|e| e.r#type == Some(SLICE_BEGIN) && e.track_uuid == track.uuid)
            .unwrap();
        let ran_on =
            begin.debug_annotations.iter().find(|a| a.name.as_deref() == Some("ran_on_tids"));
        assert_eq!(ran_on.unwrap().string_value.as_deref(), Some("104, 101"));
        assert_eq!(begin.name.as_deref(), Some("main.handle"), "named past the parking");
        assert_eq!(wakes(&r.events[0].record), "wakes goroutine 42");
        let thread = &r.events[1].record;
        assert_eq!(wakes(thread), format!("wakes {}/{}", comm_text(&thread.comm), thread.tid));
        // A thread's wait names no threads it ran on.
        let thread_slice = t
            .packet
            .iter()
            .filter_map(|p| p.track_event.as_ref())
            .find(|e| e.r#type == Some(SLICE_BEGIN) && e.track_uuid != track.uuid)
            .unwrap();
        assert!(thread_slice
            .debug_annotations
            .iter()
            .all(|a| a.name.as_deref() != Some("ran_on_tids")));
    }

    fn encoded(r: &Report) -> Vec<u8> {
        let mut v = Vec::new();
        Perfetto.write(r, &mut v).unwrap();
        v
    }
}
