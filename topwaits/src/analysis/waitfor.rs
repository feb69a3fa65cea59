//! The wait-for graph of `topwaits blocked`: threads blocked on a lock point at the
//! thread that holds it. From each such thread the chain of owners is followed to
//! its root (a thread that waits on nothing with an owner), to an owner that no
//! longer exists, or into a cycle, which is a deadlock. Pure: ids in, chains out.

use std::collections::{BTreeMap, BTreeSet};

/// A thread blocked on `lock`, which `owner` holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub waiter: u32,
    pub owner: u32,
    /// How the lock is named in reports, e.g. `mutex 0x55d0c0a0`.
    pub lock: String,
}

/// Where a chain ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// At this thread, which waits on nothing that has an owner.
    Root(u32),
    /// At an owner id that is no thread now: it exited while holding the lock.
    OwnerGone(u32),
    /// In the deadlock cycle with this index in [`Graph::cycles`].
    Cycle(usize),
}

/// The owners followed from one blocked thread: `edges[0].waiter` is that thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    pub edges: Vec<Edge>,
    pub end: End,
}

/// A deadlock: each thread waits on the lock at the same index, held by the next
/// thread (the last by the first). Starts at its lowest thread id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle {
    pub threads: Vec<u32>,
    pub locks: Vec<String>,
}

/// Chains of every thread that waits on an owner, and every cycle once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Graph {
    pub chains: Vec<Chain>,
    pub cycles: Vec<Cycle>,
}

/// Builds the graph. `alive` holds every thread id that exists now; a thread waits
/// on at most one lock, so only its first edge counts.
pub fn analyze(edges: &[Edge], alive: &BTreeSet<u32>) -> Graph {
    let mut out_of: BTreeMap<u32, &Edge> = BTreeMap::new();
    for e in edges {
        out_of.entry(e.waiter).or_insert(e);
    }
    let mut graph = Graph::default();
    for &start in out_of.keys() {
        let mut path: Vec<Edge> = Vec::new();
        let mut at = start;
        let end = loop {
            let Some(e) = out_of.get(&at) else {
                break End::Root(at);
            };
            if let Some(pos) = path.iter().position(|p| p.waiter == e.waiter) {
                break End::Cycle(cycle_index(&mut graph.cycles, &path[pos..]));
            }
            path.push((*e).clone());
            if !alive.contains(&e.owner) {
                break End::OwnerGone(e.owner);
            }
            at = e.owner;
        };
        graph.chains.push(Chain { edges: path, end });
    }
    graph
}

/// The index of a cycle, added if new. It is rotated to start at its lowest id so
/// that every thread of it finds the same one.
fn cycle_index(cycles: &mut Vec<Cycle>, ring: &[Edge]) -> usize {
    let lowest = ring.iter().enumerate().min_by_key(|(_, e)| e.waiter).map_or(0, |(i, _)| i);
    let rotated: Vec<&Edge> = ring[lowest..].iter().chain(&ring[..lowest]).collect();
    let c = Cycle {
        threads: rotated.iter().map(|e| e.waiter).collect(),
        locks: rotated.iter().map(|e| e.lock.clone()).collect(),
    };
    match cycles.iter().position(|x| *x == c) {
        Some(i) => i,
        None => {
            cycles.push(c);
            cycles.len() - 1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(waiter: u32, owner: u32, lock: &str) -> Edge {
        Edge { waiter, owner, lock: lock.to_string() }
    }

    fn alive(ids: &[u32]) -> BTreeSet<u32> {
        ids.iter().copied().collect()
    }

    #[test]
    fn a_chain_ends_at_the_root_owner() {
        let g = analyze(&[e(3, 2, "A"), e(2, 1, "B")], &alive(&[1, 2, 3]));
        assert!(g.cycles.is_empty());
        let from3 = g.chains.iter().find(|c| c.edges[0].waiter == 3).unwrap();
        assert_eq!(from3.edges.iter().map(|x| x.owner).collect::<Vec<_>>(), [2, 1]);
        assert_eq!(from3.end, End::Root(1));
        let from2 = g.chains.iter().find(|c| c.edges[0].waiter == 2).unwrap();
        assert_eq!(from2.end, End::Root(1));
        assert_eq!(g.chains.len(), 2, "one chain per waiting thread");
    }

    #[test]
    fn an_abba_deadlock_is_one_cycle_with_both_threads_and_locks() {
        let g = analyze(&[e(20, 10, "mutex B"), e(10, 20, "mutex A")], &alive(&[10, 20]));
        assert_eq!(g.cycles.len(), 1);
        assert_eq!(g.cycles[0].threads, [10, 20]);
        assert_eq!(g.cycles[0].locks, ["mutex A", "mutex B"]);
        assert!(g.chains.iter().all(|c| c.end == End::Cycle(0)));
    }

    #[test]
    fn a_thread_waiting_into_a_cycle_ends_in_it() {
        let g = analyze(
            &[e(1, 2, "x"), e(2, 3, "y"), e(3, 2, "z"), e(9, 1, "w")],
            &alive(&[1, 2, 3, 9]),
        );
        assert_eq!(g.cycles.len(), 1);
        assert_eq!(g.cycles[0].threads, [2, 3]);
        let from9 = g.chains.iter().find(|c| c.edges[0].waiter == 9).unwrap();
        assert_eq!(from9.end, End::Cycle(0));
        assert_eq!(from9.edges.len(), 4, "9 -> 1 -> 2 -> 3 -> back to 2");
    }

    #[test]
    fn an_owner_that_exited_ends_the_chain() {
        let g = analyze(&[e(5, 77, "m")], &alive(&[5]));
        assert_eq!(g.chains[0].end, End::OwnerGone(77));
    }

    #[test]
    fn self_deadlock_and_duplicate_edges() {
        let g = analyze(&[e(4, 4, "m"), e(4, 4, "m")], &alive(&[4]));
        assert_eq!(g.cycles, [Cycle { threads: vec![4], locks: vec!["m".into()] }]);
        assert_eq!(g.chains.len(), 1);
        assert!(analyze(&[], &alive(&[1])).chains.is_empty());
    }
}
