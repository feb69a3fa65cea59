//! Following waiting to its cause: a stretch a thread spent blocked on a waker
//! is walked along the waker's own timeline (running, runnable, or blocked on its
//! own waker, followed in turn), and each piece ends at a cause. No moment is
//! given twice, a path that comes back to a thread on it ends as a cycle, and
//! the same walk over a whole window is one thread's critical path.

use std::collections::{BTreeMap, BTreeSet};

use super::{Cause, Tid, Trace, Wait, Waker, What};

/// Longest path followed; past it, the last thread's wait is the cause.
const MAX_DEPTH: usize = 32;

/// Where pieces of time go: the path of threads followed (the waiting thread
/// first), where it ended, and when: [from, to).
type Sink<'a> = dyn FnMut(&[Tid], Cause, u64, u64) + 'a;

/// Follows wait `w`: its blocked part to its waker, its runnable part to the
/// run queue.
pub(super) fn wait(trace: &Trace, w: &Wait, sink: &mut Sink) {
    let mut path = vec![w.tid];
    let until = w.blocked_until();
    blocked(trace, w, w.start, until, &mut path, sink);
    if w.end > until {
        sink(&path, Cause { tid: w.tid, what: What::RunQueue }, until, w.end);
    }
}

/// Gives [from, to), a part of the blocked part of wait `w` of the path's last
/// thread, to what it waited behind.
fn blocked(trace: &Trace, w: &Wait, from: u64, to: u64, path: &mut Vec<Tid>, sink: &mut Sink) {
    if to <= from {
        return;
    }
    match &w.waker {
        Waker::Thread(b) if *b != w.tid && path.len() < MAX_DEPTH => {
            if path.contains(b) {
                sink(path, Cause { tid: *b, what: What::Cycle }, from, to);
                return;
            }
            path.push(*b);
            timeline(trace, *b, from, to, w.waker_site, path, sink);
            path.pop();
        }
        on => sink(
            path,
            Cause { tid: w.tid, what: What::Blocked { site: w.site, on: on.clone() } },
            from,
            to,
        ),
    }
}

/// Gives [from, to) of thread `tid` (the path's last) to what it was doing:
/// running (at `site` as far as is known), runnable, or blocked, followed.
fn timeline(
    trace: &Trace,
    tid: Tid,
    from: u64,
    to: u64,
    site: u64,
    path: &mut Vec<Tid>,
    sink: &mut Sink,
) {
    let list = trace.of(tid);
    let mut i = list.partition_point(|w| w.end <= from);
    let mut t = from;
    while t < to {
        let Some(w) = list.get(i).filter(|w| w.start < to) else {
            sink(path, Cause { tid, what: What::Running { site } }, t, to);
            return;
        };
        if w.start > t {
            sink(path, Cause { tid, what: What::Running { site } }, t, w.start);
            t = w.start;
        }
        let until = w.blocked_until().min(to);
        if until > t {
            blocked(trace, w, t, until, path, sink);
            t = until;
        }
        let end = w.end.min(to);
        if end > t {
            sink(path, Cause { tid, what: What::RunQueue }, t, end);
            t = end;
        }
        i += 1;
    }
}

/// A share of a thread's time on its critical path: behind the threads of
/// `path` (the thread itself first; a cycle's repeated thread last), with the
/// last one doing `what`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub path: Vec<Tid>,
    pub what: What,
    pub ns: u64,
}

/// Thread `tid`'s time over [from, to), split by where it went: its own running
/// and run-queue time, and each blocked stretch followed to its cause. The
/// segments add up to the window; most time first.
pub fn critical_path(trace: &Trace, tid: Tid, from: u64, to: u64) -> Vec<Segment> {
    let mut sums: BTreeMap<(Vec<Tid>, What), u64> = BTreeMap::new();
    let mut path = vec![tid];
    timeline(trace, tid, from, to, 0, &mut path, &mut |p, cause, start, end| {
        let ns = end - start;
        let mut p = p.to_vec();
        if p.last() != Some(&cause.tid) {
            p.push(cause.tid);
        }
        *sums.entry((p, cause.what)).or_default() += ns;
    });
    let mut out: Vec<Segment> =
        sums.into_iter().map(|((path, what), ns)| Segment { path, what, ns }).collect();
    out.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.path.cmp(&b.path)));
    out
}

/// When each thread of `running` ran on thread `tid`'s critical path over
/// [from, to), by thread and the site it ran from: its stretches, in order,
/// for the samples taken in them.
pub fn running_spans(
    trace: &Trace,
    tid: Tid,
    from: u64,
    to: u64,
    running: &BTreeSet<Tid>,
) -> BTreeMap<(Tid, u64), Vec<(u64, u64)>> {
    let mut spans: BTreeMap<(Tid, u64), Vec<(u64, u64)>> = BTreeMap::new();
    timeline(trace, tid, from, to, 0, &mut vec![tid], &mut |_, cause, start, end| {
        if let What::Running { site } = cause.what {
            if running.contains(&cause.tid) {
                spans.entry((cause.tid, site)).or_default().push((start, end));
            }
        }
    });
    for s in spans.values_mut() {
        s.sort_unstable();
    }
    spans
}
