//! Reduction of wake dependencies to producer and consumer groups.
//!
//! The algorithm, deterministic for a given set of edges:
//! 1. Keep futex edges between two different threads; each waker gets its set of
//!    sleepers and the total number of wakeups it performed.
//! 2. Order the wakers: first those that no other thread wakes through a futex
//!    (sources of work), then by total wakeups (descending), then by number of
//!    distinct sleepers (descending), then by tid (ascending).
//! 3. Walk that order. A waker already placed in a group is skipped. Otherwise its
//!    sleepers that are not yet placed become its consumers; if there is at least
//!    one, the waker becomes a producer with those consumers, and all of them are
//!    placed.
//!
//! Before that, [`driving`] keeps only the edges that drive their sleeper: a
//! thread is a consumer of a waker only if that waker's futex wakeups ended at
//! least a quarter ([`CONSUMER_SHARE`]) of its sleeps, and at least
//! [`CONSUMER_WAKES`] times. A thread woken by futex 12 times in 1,867 sleeps is
//! not anyone's consumer, nor is a thread joining another, which that thread's
//! exit wakes once.
//!
//! Consumers that wake their producer back (a completion, or a mutex hand-off) are
//! placed as consumers before their own wake sets are considered, so they do not
//! form groups of their own. A thread woken by two producers joins the first.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::profile::Edge;

/// One producer and the consumers it wakes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub producer: u32,
    /// Sorted ascending.
    pub consumers: Vec<u32>,
}

/// The least share of a thread's sleeps that one waker's futex wakeups must end
/// for the thread to be its consumer: 1 in 4.
pub const CONSUMER_SHARE: (u64, u64) = (1, 4);

/// The fewest futex wakeups from one waker that make a thread its consumer: a
/// wake seen once or twice is no pattern to reproduce (a `pthread_join`, which
/// the joined thread's exit ends through a futex, is one).
pub const CONSUMER_WAKES: u64 = 3;

/// The futex edges that drive their sleeper (see [`CONSUMER_SHARE`]), given each
/// traced thread's number of sleeps. Edges to untraced threads are dropped.
pub fn driving(edges: &[Edge], sleeps: &std::collections::HashMap<u32, u64>) -> Vec<Edge> {
    let (num, den) = CONSUMER_SHARE;
    edges
        .iter()
        .filter(|e| {
            e.futex
                && e.count >= CONSUMER_WAKES
                && sleeps.get(&e.sleeper).is_some_and(|&s| e.count * den >= s * num)
        })
        .copied()
        .collect()
}

/// Reduces edges to groups, in the order the producers were chosen.
pub fn reduce(edges: &[Edge]) -> Vec<Group> {
    let mut sets: BTreeMap<u32, (BTreeSet<u32>, u64)> = BTreeMap::new();
    let mut woken: BTreeSet<u32> = BTreeSet::new();
    for e in edges.iter().filter(|e| e.futex && e.waker != e.sleeper && e.count > 0) {
        let entry = sets.entry(e.waker).or_default();
        entry.0.insert(e.sleeper);
        entry.1 += e.count;
        woken.insert(e.sleeper);
    }
    let mut order: Vec<(u32, &BTreeSet<u32>, u64)> =
        sets.iter().map(|(w, (s, c))| (*w, s, *c)).collect();
    order.sort_by(|a, b| {
        let root = |w: u32| !woken.contains(&w);
        root(b.0)
            .cmp(&root(a.0))
            .then(b.2.cmp(&a.2))
            .then(b.1.len().cmp(&a.1.len()))
            .then(a.0.cmp(&b.0))
    });
    let mut placed: BTreeSet<u32> = BTreeSet::new();
    let mut groups = Vec::new();
    for (waker, sleepers, _) in order {
        if placed.contains(&waker) {
            continue;
        }
        let consumers: Vec<u32> =
            sleepers.iter().copied().filter(|s| !placed.contains(s) && *s != waker).collect();
        if consumers.is_empty() {
            continue;
        }
        placed.insert(waker);
        placed.extend(consumers.iter().copied());
        groups.push(Group { producer: waker, consumers });
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edges(list: &[(u32, u32, u64)]) -> Vec<Edge> {
        list.iter()
            .map(|&(waker, sleeper, count)| Edge { waker, sleeper, count, futex: true })
            .collect()
    }

    fn group(producer: u32, consumers: &[u32]) -> Group {
        Group { producer, consumers: consumers.to_vec() }
    }

    #[test]
    fn the_seed_example_yields_one_producer_with_three_consumers() {
        // pid1 wakes 2, 3, 4; 2 wakes 1 and 3; 3 wakes 1 and 2; 4 wakes 1.
        let e = edges(&[
            (1, 2, 1),
            (1, 3, 1),
            (1, 4, 1),
            (2, 1, 1),
            (2, 3, 1),
            (3, 1, 1),
            (3, 2, 1),
            (4, 1, 1),
        ]);
        assert_eq!(reduce(&e), vec![group(1, &[2, 3, 4])]);
    }

    #[test]
    fn the_seed_example_holds_with_realistic_counts_in_any_input_order() {
        let mut e = edges(&[
            (1, 2, 50),
            (1, 3, 48),
            (1, 4, 51),
            (2, 1, 5),
            (2, 3, 2),
            (3, 1, 4),
            (3, 2, 3),
            (4, 1, 6),
        ]);
        let want = vec![group(1, &[2, 3, 4])];
        assert_eq!(reduce(&e), want);
        e.reverse();
        assert_eq!(reduce(&e), want);
    }

    #[test]
    fn two_independent_producer_groups() {
        let e = edges(&[
            (10, 11, 30),
            (10, 12, 30),
            (11, 10, 2),
            (20, 21, 9),
            (20, 22, 9),
            (20, 23, 9),
            (22, 20, 1),
        ]);
        assert_eq!(reduce(&e), vec![group(10, &[11, 12]), group(20, &[21, 22, 23])]);
    }

    #[test]
    fn a_pure_pipeline_becomes_source_driven_pairs() {
        // 1 -> 2 -> 3 -> 4: the source 1 drives 2; 3 drives 4.
        let e = edges(&[(3, 4, 10), (2, 3, 10), (1, 2, 10)]);
        assert_eq!(reduce(&e), vec![group(1, &[2]), group(3, &[4])]);
    }

    /// Regression: a thread woken by futex 12 times in 1,867 sleeps was made a
    /// consumer.
    #[test]
    fn only_wakers_that_end_a_quarter_of_the_sleeps_drive_a_consumer() {
        let e = edges(&[(1, 2, 12), (1, 3, 40), (1, 4, 25), (1, 9, 50)]);
        let sleeps: std::collections::HashMap<u32, u64> =
            [(2, 1867), (3, 41), (4, 100)].into_iter().collect();
        let kept: Vec<u32> = driving(&e, &sleeps).iter().map(|e| e.sleeper).collect();
        assert_eq!(kept, [3, 4], "2 is rarely woken by 1; 9 is not traced");
        assert_eq!(reduce(&driving(&e, &sleeps)), vec![group(1, &[3, 4])]);
    }

    /// Regression: rt-app's main thread, in pthread_join all along (one sleep),
    /// was made a fourth consumer of the producer whose exit woke it.
    #[test]
    fn a_single_wake_makes_no_consumer() {
        let e = edges(&[(1, 2, 30), (1, 7, 1)]);
        let sleeps: std::collections::HashMap<u32, u64> = [(2, 31), (7, 1)].into_iter().collect();
        assert_eq!(reduce(&driving(&e, &sleeps)), vec![group(1, &[2])]);
    }

    #[test]
    fn no_dependencies_no_groups() {
        assert!(reduce(&[]).is_empty());
        let not_futex = vec![Edge { waker: 1, sleeper: 2, count: 100, futex: false }];
        assert!(reduce(&not_futex).is_empty(), "only futex edges form groups");
        assert!(reduce(&edges(&[(5, 5, 3)])).is_empty(), "self-wakes are ignored");
    }
}
