//! Waits as increments over the successive intervals of a continuous trace
//! (`topwaits serve`). The kernel adds a wait to its aggregate when it ends;
//! one still in progress at an interval's end is drained as a record of its
//! time so far. Here such a record counts only the time since the last
//! interval, and the row a wait ends in counts only what was not counted yet:
//! summed over intervals, every wait counts once and whole, and a thread
//! blocked throughout counts each interval's length (a rate of 1 s a second).
//! Pure: records in, records out, state only for the waits in progress.

use std::collections::{HashMap, HashSet};

use crate::model::{OpenSince, RawRecord, StackId};

/// What makes two rows of the aggregate one: the thread, its stacks and what
/// it waited for (as [`crate::model::RawRecord`] keeps them).
type RowKey = (u32, StackId, StackId, u32, u32, u64, u64);

fn key(r: &RawRecord) -> RowKey {
    (r.tid, r.kstack, r.ustack, r.what.nr, r.what.flags, r.what.arg0, r.what.obj)
}

/// The waits in progress at the last interval's end: by thread and start, the
/// row they will end in and the time counted of them so far.
#[derive(Debug, Default)]
pub struct Increments {
    counted: HashMap<(u32, u64), (RowKey, u64)>,
}

impl Increments {
    /// Turns one interval's records into its increments, in place: records of
    /// waits in progress keep only their time since the last interval (and no
    /// count: they are counted when they end), rows of waits that ended keep
    /// only what was not counted yet; records left with nothing go.
    pub fn step(&mut self, records: &mut Vec<RawRecord>) {
        let mut open = HashSet::new();
        for r in records.iter_mut().filter(|r| !r.on_cpu) {
            let Some(start) = r.open.and_then(OpenSince::mono) else { continue };
            let id = (r.tid, start);
            let before = self.counted.get(&id).map_or(0, |c| c.1);
            self.counted.insert(id, (key(r), r.total_ns.max(before)));
            r.total_ns = r.total_ns.saturating_sub(before);
            r.count = 0;
            open.insert(id);
        }
        // Waits in progress last time and not now have ended (or their thread
        // has): their rows owe what was counted of them already.
        let mut owed: HashMap<RowKey, u64> = HashMap::new();
        self.counted.retain(|id, (k, ns)| {
            let kept = open.contains(id);
            if !kept {
                *owed.entry(*k).or_default() += *ns;
            }
            kept
        });
        for r in records.iter_mut().filter(|r| !r.on_cpu && r.open.is_none()) {
            if let Some(o) = owed.get_mut(&key(r)) {
                let take = (*o).min(r.total_ns);
                r.total_ns -= take;
                *o -= take;
            }
        }
        records.retain(|r| r.total_ns > 0 || r.count > 0);
    }

    /// How many waits in progress it follows.
    pub fn in_progress(&self) -> usize {
        self.counted.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(tid: u32, ustack: u64, total: u64, count: u64, open: Option<u64>) -> RawRecord {
        RawRecord {
            tgid: 1,
            tid,
            comm: b"t".to_vec(),
            kstack: StackId::None,
            ustack: StackId::Id(ustack),
            total_ns: total,
            count,
            max_ns: total,
            max_end_mono: 0,
            wake: None,
            open: open.map(OpenSince::Exact),
            what: Default::default(),
            on_cpu: false,
        }
    }

    fn totals(v: &[RawRecord]) -> Vec<(u32, u64, u64)> {
        v.iter().map(|r| (r.tid, r.total_ns, r.count)).collect()
    }

    /// A wait from 0 to 2.5 s over intervals ending at 1, 2 and 3 s: 1 s, 1 s,
    /// then its row of 2.5 s counts 0.5 s. Another thread's short waits pass as
    /// they are. Summed, every wait counts once, whole.
    #[test]
    fn a_wait_across_intervals_counts_each_interval_once() {
        let mut inc = Increments::default();
        let mut i1 = vec![rec(7, 1, 1_000, 1, Some(0)), rec(8, 2, 30, 3, None)];
        inc.step(&mut i1);
        assert_eq!(totals(&i1), [(7, 1_000, 0), (8, 30, 3)]);
        let mut i2 = vec![rec(7, 1, 2_000, 1, Some(0))];
        inc.step(&mut i2);
        assert_eq!(totals(&i2), [(7, 1_000, 0)]);
        let mut i3 = vec![rec(7, 1, 2_500, 1, None), rec(7, 1, 400, 1, Some(2_600))];
        inc.step(&mut i3);
        assert_eq!(
            totals(&i3),
            [(7, 500, 1), (7, 400, 0)],
            "the row owes what was counted; a new wait counts its own"
        );
        let sum: u64 = [&i1, &i2, &i3]
            .iter()
            .flat_map(|v| v.iter())
            .filter(|r| r.tid == 7)
            .map(|r| r.total_ns)
            .sum();
        assert_eq!(sum, 2_500 + 400);
        assert_eq!(inc.in_progress(), 1);
    }

    /// A thread that exits while it waits leaves no row: what it owes is
    /// dropped, not taken from another thread's rows; on-CPU samples and rows
    /// of other stacks pass untouched.
    #[test]
    fn what_a_vanished_wait_owes_is_taken_from_its_own_row_only() {
        let mut inc = Increments::default();
        inc.step(&mut vec![rec(7, 1, 1_000, 1, Some(0))]);
        let mut sample = rec(9, 1, 50, 5, None);
        sample.on_cpu = true;
        let mut next = vec![rec(7, 2, 300, 2, None), sample];
        inc.step(&mut next);
        assert_eq!(totals(&next), [(7, 300, 2), (9, 50, 5)]);
        assert_eq!(inc.in_progress(), 0);
    }
}
