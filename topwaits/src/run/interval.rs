//! One report from what the kernel held at the end of a trace or an interval:
//! symbolize the drained rows and the long-wait events together, split the events
//! off again, merge rows alike in all a report shows, and count what the interval
//! added. Pure: tests feed it a fabricated capture and a fake symbolizer.

use crate::analysis::reduce::{self, By};
use crate::analysis::what::Resolve;
use crate::model::{Capture, Counters, RawRecord, Report, TraceInfo};
use crate::stacks::symbolize::{resolve, Symbolizer};

/// The long waits the kernel sent one by one (`--events-over`), as one-wait rows,
/// with the thread state each began in; and the on-CPU samples it sent with
/// their times (`--perfetto`), as one-sample rows.
#[derive(Default)]
pub struct Events {
    pub rows: Vec<RawRecord>,
    pub states: Vec<u32>,
    pub samples: Vec<RawRecord>,
}

/// The report of one interval. `before` holds the counters at the interval's
/// start; `info` the trace's facts; `res`, where labels are on, resolves what
/// the waits were for. The capture's rows and stacks are consumed.
pub fn report(
    mut capture: Capture,
    events: Events,
    before: &Counters,
    info: TraceInfo,
    sym: &mut dyn Symbolizer,
    res: Option<&mut dyn Resolve>,
) -> Report {
    // Events are symbolized and labelled with the records, then split off again.
    capture.records.extend(events.rows);
    let sampled = capture.records.len();
    capture.records.extend(events.samples);
    let mut resolved = resolve(&capture, sym);
    if let Some(res) = res {
        res.take_kernel_objects(std::mem::take(&mut resolved.kernel_objects));
        let whats: Vec<_> = capture.records.iter().map(|r| r.what).collect();
        crate::analysis::what::label(&mut resolved.records, &whats, res);
    }
    let samples = resolved.records.split_off(sampled);
    let (waits, states, idle_ns) = without_go_scheduler_idle(resolved.records, events.states);
    resolved.records = waits;
    let aggregate = resolved.records.len() - states.len();
    let events = crate::analysis::longwaits::events(resolved.records.split_off(aggregate), &states);
    let mut counters = capture.counters.since(before);
    counters.user_stacks_cut = resolved.user_stacks_cut;
    counters.go_scheduler_idle_ns = idle_ns;
    // Records alike in all a report shows are one; the graphs keep threads apart.
    let records = reduce::merge(resolved.records, By::Thread);
    Report {
        info: TraceInfo { by: By::Thread, ..info },
        counters,
        records,
        objects: Default::default(),
        events,
        samples,
    }
}

/// The waits (aggregate rows, then event rows with their `states`) without
/// the Go scheduler's idle of the processes whose goroutines are traced; and
/// the nanoseconds left out of the aggregate rows.
fn without_go_scheduler_idle(
    records: Vec<crate::model::Record>,
    states: Vec<u32>,
) -> (Vec<crate::model::Record>, Vec<u32>, u64) {
    use crate::analysis::goroutines;
    let go = goroutines::go_processes(&records);
    if go.is_empty() {
        return (records, states, 0);
    }
    let (keep, _) = goroutines::keep(&records, &go);
    let first_event = records.len() - states.len();
    let mut idle_ns = 0;
    let (mut kept, mut kept_states) = (Vec::new(), Vec::new());
    for (i, (r, k)) in records.into_iter().zip(keep).enumerate() {
        match (k, i.checked_sub(first_event)) {
            (true, Some(e)) => {
                kept.push(r);
                kept_states.push(states[e]);
            }
            (true, None) => kept.push(r),
            (false, None) => idle_ns += r.total_ns,
            (false, Some(_)) => {}
        }
    }
    (kept, kept_states, idle_ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AttachKind, StackId};
    use crate::stacks::symbolize::tests::FakeSymbolizer;
    use crate::util::clock::ClockPair;

    fn row(tid: u32, kstack: u64, total_ns: u64, count: u64, max_ns: u64) -> RawRecord {
        RawRecord {
            tgid: 10,
            tid,
            comm: b"w".to_vec(),
            kstack: StackId::Id(kstack),
            ustack: StackId::Id(7),
            total_ns,
            count,
            max_ns,
            max_end_mono: 50,
            wake: None,
            open: None,
            what: Default::default(),
            on_cpu: false,
        }
    }

    fn info() -> TraceInfo {
        TraceInfo {
            clock: ClockPair::sample(),
            start_mono: 0,
            end_mono: 100,
            attach: AttachKind::RawTp,
            target: "all threads".into(),
            utc_offset_s: 0,
            waker: false,
            by: By::Process,
            state_filter: None,
            on_cpu_hz: None,
            cgroup_target: false,
            goroutines: None,
        }
    }

    fn capture(records: Vec<RawRecord>, recorded: u64) -> Capture {
        let mut c = Capture::default();
        c.stacks.insert(1, vec![0x100, 0x200]);
        c.stacks.insert(2, vec![0x101, 0x200]);
        c.stacks.insert(7, vec![0x7000]);
        c.records = records;
        c.counters.recorded = recorded;
        c
    }

    #[test]
    fn rows_alike_in_every_shown_field_become_one_record_and_events_split_off() {
        let mut sym = FakeSymbolizer::default();
        // Two kernel stacks that name the same frames: one record for the thread.
        sym.names.insert(0x100, "schedule".into());
        sym.names.insert(0x101, "schedule".into());
        let rows = vec![row(11, 1, 30, 3, 20), row(11, 2, 5, 1, 5), row(12, 1, 8, 1, 8)];
        let events =
            Events { rows: vec![row(11, 1, 20, 1, 20)], states: vec![1], samples: Vec::new() };
        let r = report(
            capture(rows, 6),
            events,
            &Counters::default(),
            info(),
            &mut sym,
            Some(&mut crate::analysis::what::tests::NoSystem),
        );
        assert_eq!(r.records.len(), 2, "{:#?}", r.records);
        let t11 = r.records.iter().find(|x| x.tid == 11).unwrap();
        assert_eq!((t11.total_ns, t11.count, t11.max_ns), (35, 4, 20));
        assert_eq!(r.events.len(), 1);
        assert_eq!((r.events[0].record.max_ns, r.events[0].state), (20, 1));
        assert_eq!(r.events[0].record.kernel.frames()[0].symbol.as_deref(), Some("schedule"));
        assert_eq!(
            r.info.by,
            By::Thread,
            "a trace's records are per thread; --by groups them when shown"
        );
        // One batch for the kernel, one per process, events included.
        assert_eq!((sym.kernel_calls, sym.user_calls), (1, 1));
    }

    #[test]
    fn counters_are_what_the_interval_added() {
        let mut sym = FakeSymbolizer::default();
        let before = Counters { recorded: 4, ..Default::default() };
        let r = report(
            capture(vec![row(11, 1, 30, 3, 20)], 10),
            Events::default(),
            &before,
            info(),
            &mut sym,
            Some(&mut crate::analysis::what::tests::NoSystem),
        );
        assert_eq!(r.counters.recorded, 6);
        assert!(r.events.is_empty());
    }
}
