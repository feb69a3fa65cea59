//! Long-wait events (`--events-over`): the kernel's event records turned into
//! one-wait records that symbolize like the aggregate's, and back into events.

use topwaits_common::{wake_kind, WaitEvent};

use crate::model::{comm_bytes, raw_hop, Event, RawRecord, Record, StackId, WakeInfo, WakeKind};

/// A record of the one wait of `e` (with its waker when `waker` is on), and its state.
pub fn raw(e: &WaitEvent, waker: bool) -> (RawRecord, u32) {
    let delta = e.end.saturating_sub(e.start);
    let wake = waker.then(|| {
        let (kind, hops, blocked) = match e.wake_kind {
            wake_kind::WOKEN if e.woken >= e.start => {
                (WakeKind::Woken, vec![raw_hop(&e.waker)], e.woken - e.start)
            }
            wake_kind::PREEMPTED => (WakeKind::Preempted, Vec::new(), 0),
            _ => (WakeKind::NoWaker, Vec::new(), delta),
        };
        let blocked = blocked.min(delta);
        WakeInfo {
            kind,
            hops,
            blocked_ns: blocked,
            runq_ns: delta - blocked,
            max_blocked_ns: blocked,
            max_runq_ns: delta - blocked,
        }
    });
    let r = RawRecord {
        tgid: e.tgid,
        tid: e.tid,
        comm: comm_bytes(&e.comm),
        kstack: StackId::from_ref(e.kstack),
        ustack: StackId::from_ref(e.ustack),
        total_ns: delta,
        count: 1,
        max_ns: delta,
        max_end_mono: e.end,
        wake,
        open: None,
        what: e.what,
        on_cpu: false,
    };
    (r, e.state)
}

/// The events of symbolized one-wait records and their states, in order.
pub fn events(records: Vec<Record>, states: &[u32]) -> Vec<Event> {
    records.into_iter().zip(states).map(|(record, &state)| Event { record, state }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use topwaits_common::{Hop, STACK_NONE, STACK_STORED};

    fn event() -> WaitEvent {
        WaitEvent {
            start: 1_000,
            end: 51_000,
            woken: 41_000,
            kstack: STACK_STORED | 5,
            ustack: STACK_NONE,
            tgid: 10,
            tid: 11,
            state: 1,
            wake_kind: wake_kind::WOKEN,
            comm: *b"sleeper\0\0\0\0\0\0\0\0\0",
            waker: Hop {
                tgid: 20,
                tid: 21,
                comm: *b"writer\0\0\0\0\0\0\0\0\0\0",
                ..Default::default()
            },
            what: Default::default(),
        }
    }

    #[test]
    fn an_event_is_a_record_of_one_wait_split_at_its_wakeup() {
        let (r, state) = raw(&event(), true);
        assert_eq!(
            (r.count, r.total_ns, r.max_ns, r.max_end_mono, state),
            (1, 50_000, 50_000, 51_000, 1)
        );
        assert_eq!(r.comm, b"sleeper");
        assert_eq!(r.kstack, StackId::Id(STACK_STORED | 5));
        let w = r.wake.unwrap();
        assert_eq!((w.kind, w.blocked_ns, w.runq_ns), (WakeKind::Woken, 40_000, 10_000));
        assert_eq!((w.hops[0].tid, w.hops[0].comm.as_slice()), (21, &b"writer"[..]));
        assert!(raw(&event(), false).0.wake.is_none(), "no waker without -w");
        let preempted =
            WaitEvent { state: 0, wake_kind: wake_kind::PREEMPTED, woken: 0, ..event() };
        let w = raw(&preempted, true).0.wake.unwrap();
        assert_eq!((w.kind, w.blocked_ns, w.runq_ns), (WakeKind::Preempted, 0, 50_000));
        let unseen = WaitEvent { wake_kind: wake_kind::NO_WAKER, woken: 0, ..event() };
        assert_eq!(raw(&unseen, true).0.wake.unwrap().blocked_ns, 50_000);
    }
}
