//! The threads each goroutine ran on: counted in the kernel by goroutine and
//! thread at each start, kept here by goroutine for its records.

use std::collections::{HashMap, HashSet};

use topwaits_common::golang::{is_goroutine, GoRanOn};

use super::{Capture, RawRecord};

/// The threads each goroutine ran on, by (tgid, goid), from how many times the
/// scheduler started it on each: the one it ran on most first.
pub fn by_goroutine(
    starts: impl IntoIterator<Item = (GoRanOn, u64)>,
) -> HashMap<(u32, u64), Vec<u32>> {
    let mut counted: HashMap<(u32, u64), Vec<(u64, u32)>> = HashMap::new();
    for (k, n) in starts {
        counted.entry((k.tgid, k.goid)).or_default().push((n, k.tid));
    }
    counted
        .into_iter()
        .map(|(goroutine, mut tids)| {
            tids.sort_unstable_by_key(|&(n, tid)| (std::cmp::Reverse(n), tid));
            (goroutine, tids.into_iter().map(|(_, tid)| tid).collect())
        })
        .collect()
}

/// The threads the goroutine of `r` ran on; none for a thread's record, and
/// none for goroutines kept by stack (goid 0), which stand for many.
pub fn of(capture: &Capture, r: &RawRecord) -> Vec<u32> {
    if !is_goroutine(r.tid) || r.what.obj == 0 {
        return Vec::new();
    }
    capture.ran_on.get(&(r.tgid, r.what.obj)).cloned().unwrap_or_default()
}

/// Adds to `into` the threads of `more` it lacks, in their order: records of
/// one goroutine merged keep each thread it ran on once.
pub fn join(into: &mut Vec<u32>, more: &[u32]) {
    for &tid in more {
        if !into.contains(&tid) {
            into.push(tid);
        }
    }
}

/// The (goroutine, thread) pairs of `capture` to forget once it holds more
/// than `keep`: those of the goroutines none of its records names. None
/// below that.
pub fn quiet(capture: &Capture, keep: u32) -> Vec<GoRanOn> {
    let pairs: usize = capture.ran_on.values().map(Vec::len).sum();
    if pairs <= keep as usize {
        return Vec::new();
    }
    let named: HashSet<(u32, u64)> = capture
        .records
        .iter()
        .filter(|r| is_goroutine(r.tid) && r.what.obj != 0)
        .map(|r| (r.tgid, r.what.obj))
        .collect();
    let mut out: Vec<GoRanOn> = capture
        .ran_on
        .iter()
        .filter(|(g, _)| !named.contains(g))
        .flat_map(|(&(tgid, goid), tids)| tids.iter().map(move |&tid| GoRanOn { goid, tgid, tid }))
        .collect();
    out.sort_unstable_by_key(|k| (k.tgid, k.goid, k.tid));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use topwaits_common::golang::tid_of;

    fn start(goid: u64, tid: u32) -> GoRanOn {
        GoRanOn { goid, tgid: 100, tid }
    }

    #[test]
    fn each_goroutine_lists_its_threads_most_runs_first_ties_by_tid() {
        let got = by_goroutine([
            (start(7, 101), 2),
            (start(7, 103), 9),
            (start(7, 102), 2),
            (start(8, 101), 1),
        ]);
        assert_eq!(got[&(100, 7)], vec![103, 101, 102]);
        assert_eq!(got[&(100, 8)], vec![101]);
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn only_a_goroutine_of_its_own_gets_threads() {
        let capture = Capture { ran_on: by_goroutine([(start(7, 101), 1)]), ..Default::default() };
        let mut r = crate::model::fixtures::raw_record(100, tid_of(7));
        r.what.obj = 7;
        assert_eq!(of(&capture, &r), vec![101]);
        // Goroutines kept by stack stand for many.
        (r.tid, r.what.obj) = (tid_of(0), 0);
        assert!(of(&capture, &r).is_empty());
        // A thread's record whose label names an object.
        (r.tid, r.what.obj) = (101, 7);
        assert!(of(&capture, &r).is_empty());
    }

    #[test]
    fn over_half_full_the_goroutines_no_record_names_are_forgotten() {
        let ran_on = by_goroutine([
            (start(7, 101), 3),
            (start(7, 102), 1),
            (start(8, 101), 1),
            (start(9, 103), 1),
        ]);
        let mut r = crate::model::fixtures::raw_record(100, tid_of(7));
        r.what.obj = 7;
        // A thread's record naming object 9 keeps nothing of goroutine 9.
        let mut thread = crate::model::fixtures::raw_record(100, 101);
        thread.what.obj = 9;
        let capture = Capture { ran_on, records: vec![r, thread], ..Default::default() };
        assert_eq!(quiet(&capture, 3), [start(8, 101), start(9, 103)]);
        // At or under the mark, nothing goes.
        assert!(quiet(&capture, 4).is_empty());
    }

    #[test]
    fn joined_threads_keep_their_order_once_each() {
        let mut into = vec![3, 1];
        join(&mut into, &[1, 4, 3, 2]);
        assert_eq!(into, [3, 1, 4, 2]);
    }
}
