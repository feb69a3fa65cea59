//! Causes and critical-path segments grouped the way profiles aggregate samples:
//! those that differ only in their thread are one, under a key the caller picks
//! for each thread (its name, its process, or the thread itself). A group keeps
//! its threads, so a report can still say which they were. A thread group's
//! running is one cause, wherever it woke the waiters from (those places kept
//! beside it); and causes a report would print alike are one ([`merge_alike`]).

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

use super::{Ranked, Segment, Tid, What};

/// Causes alike but for their thread: `who` is the key their threads share.
#[derive(Clone, Debug, PartialEq)]
pub struct Group<K> {
    pub who: K,
    pub what: What,
    /// The threads whose doing it was, in order.
    pub tids: BTreeSet<Tid>,
    pub ns: u64,
    /// Of the ranked waiting (0 to 1).
    pub share: f64,
    /// The target threads whose waiting it explains.
    pub waiters: BTreeSet<Tid>,
    /// For running: where its threads were when they woke the waiters, with
    /// the waiting each place ended, most first (`what`'s site is the first).
    pub places: Vec<(u64, u64)>,
}

impl<K> Group<K> {
    fn absorb(&mut self, other: Group<K>) {
        self.tids.extend(other.tids);
        self.ns += other.ns;
        self.share += other.share;
        self.waiters.extend(other.waiters);
        for (site, ns) in other.places {
            match self.places.iter_mut().find(|p| p.0 == site) {
                Some(p) => p.1 += ns,
                None => self.places.push((site, ns)),
            }
        }
    }

    /// Puts the place that ended the most waiting first, as `what`'s site.
    fn settle(&mut self) {
        self.places.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        if let (What::Running { site }, Some(&(first, _))) = (&mut self.what, self.places.first()) {
            *site = first;
        }
    }
}

/// The most time first, then by key and what, so that the order is stable.
fn ranked<K: Ord>(out: &mut [Group<K>]) {
    out.sort_by(|a, b| {
        b.ns.cmp(&a.ns).then_with(|| a.who.cmp(&b.who)).then_with(|| a.what.cmp(&b.what))
    });
}

/// Groups ranked causes whose threads have the same key and whose `what` is the
/// same (any running being the same, its places kept); most time first.
pub fn group_causes<K: Clone + Eq + Hash + Ord>(
    causes: &[Ranked],
    key: impl Fn(Tid) -> K,
) -> Vec<Group<K>> {
    let mut index: HashMap<(K, What), usize> = HashMap::new();
    let mut out: Vec<Group<K>> = Vec::new();
    for c in causes {
        let who = key(c.cause.tid);
        let what = match c.cause.what {
            What::Running { .. } => What::Running { site: 0 },
            ref w => w.clone(),
        };
        let i = *index.entry((who.clone(), what.clone())).or_insert_with(|| {
            out.push(Group {
                who,
                what,
                tids: BTreeSet::new(),
                ns: 0,
                share: 0.0,
                waiters: BTreeSet::new(),
                places: Vec::new(),
            });
            out.len() - 1
        });
        let places = match c.cause.what {
            What::Running { site } => vec![(site, c.ns)],
            _ => Vec::new(),
        };
        out[i].absorb(Group {
            who: key(c.cause.tid),
            what: c.cause.what.clone(),
            tids: BTreeSet::from([c.cause.tid]),
            ns: c.ns,
            share: c.share,
            waiters: c.waiters.clone(),
            places,
        });
    }
    out.iter_mut().for_each(Group::settle);
    ranked(&mut out);
    out
}

/// Merges groups that `text` says alike (a report's line for each): causes at
/// sites that differ only in frames no view prints are one cause. The first of
/// each text keeps its place; most time first.
pub fn merge_alike<K: Ord>(
    groups: Vec<Group<K>>,
    text: impl Fn(&Group<K>) -> String,
) -> Vec<Group<K>> {
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut out: Vec<Group<K>> = Vec::new();
    for g in groups {
        match index.get(&text(&g)) {
            Some(&i) => out[i].absorb(g),
            None => {
                index.insert(text(&g), out.len());
                out.push(g);
            }
        }
    }
    out.iter_mut().for_each(Group::settle);
    ranked(&mut out);
    out
}

/// Critical-path segments alike but for their threads: the same keys along the
/// path and the same `what`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathGroup<K> {
    /// The keys along the path, the thread itself first.
    pub path: Vec<K>,
    /// The threads at each place of the path.
    pub tids: Vec<BTreeSet<Tid>>,
    pub what: What,
    pub ns: u64,
}

/// Groups a critical path's segments; most time first.
pub fn group_path<K: Clone + Eq + Hash + Ord>(
    segments: &[Segment],
    key: impl Fn(Tid) -> K,
) -> Vec<PathGroup<K>> {
    let mut index: HashMap<(Vec<K>, &What), usize> = HashMap::new();
    let mut out: Vec<PathGroup<K>> = Vec::new();
    for s in segments {
        let path: Vec<K> = s.path.iter().map(|&t| key(t)).collect();
        let i = *index.entry((path.clone(), &s.what)).or_insert_with(|| {
            out.push(PathGroup {
                tids: vec![BTreeSet::new(); path.len()],
                path,
                what: s.what.clone(),
                ns: 0,
            });
            out.len() - 1
        });
        let g = &mut out[i];
        for (set, &t) in g.tids.iter_mut().zip(&s.path) {
            set.insert(t);
        }
        g.ns += s.ns;
    }
    out.sort_by(|a, b| {
        b.ns.cmp(&a.ns).then_with(|| a.path.cmp(&b.path)).then_with(|| a.what.cmp(&b.what))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::super::{Cause, Waker};
    use super::*;

    fn ranked(tid: Tid, what: What, ns: u64, waiters: &[Tid]) -> Ranked {
        Ranked {
            cause: Cause { tid, what },
            ns,
            share: ns as f64 / 100.0,
            waiters: waiters.iter().copied().collect(),
        }
    }

    /// Eight backends of one name runnable, and four of them flushing the WAL at
    /// the same site: two causes, not twelve, each with its threads.
    #[test]
    fn causes_alike_but_for_their_thread_are_one() {
        let flush = What::Blocked { site: 7, on: Waker::Device("disk".into()) };
        let mut causes: Vec<Ranked> =
            (1..=8).map(|t| ranked(t, What::RunQueue, 5, &[t % 8 + 1])).collect();
        causes.extend((1..=4).map(|t| ranked(t, flush.clone(), 3, &[9])));
        causes.push(ranked(20, What::RunQueue, 4, &[1]));
        let name = |t: Tid| if t == 20 { "pgbench" } else { "postgres" };
        let g = group_causes(&causes, name);
        assert_eq!(g.len(), 3, "{g:#?}");
        assert_eq!((g[0].who, &g[0].what, g[0].ns), ("postgres", &What::RunQueue, 40));
        assert_eq!(g[0].tids, (1..=8).collect());
        assert_eq!(g[0].waiters, (1..=8).collect());
        assert!((g[0].share - 0.4).abs() < 1e-9);
        assert_eq!((g[1].who, &g[1].what, g[1].ns, g[1].tids.len()), ("postgres", &flush, 12, 4));
        assert_eq!((g[2].who, g[2].ns), ("pgbench", 4));
        // Keyed by the thread itself, nothing merges.
        assert_eq!(group_causes(&causes, |t| t).len(), causes.len());
        let total: u64 = g.iter().map(|g| g.ns).sum();
        assert_eq!(total, causes.iter().map(|c| c.ns).sum::<u64>(), "no time lost or doubled");
    }

    /// A backend's running, waking waiters from two places (a lock's release
    /// and a semaphore's post), is one cause: the place that ended the most
    /// waiting first, the other kept beside it.
    #[test]
    fn running_is_one_cause_wherever_it_woke_the_waiters_from() {
        let causes = vec![
            ranked(1, What::Running { site: 5 }, 30, &[2]),
            ranked(1, What::Running { site: 6 }, 50, &[3]),
            ranked(2, What::Running { site: 5 }, 10, &[1]),
            ranked(1, What::RunQueue, 5, &[2]),
        ];
        let g = group_causes(&causes, |_| "postgres");
        assert_eq!(g.len(), 2, "{g:#?}");
        assert_eq!(
            (&g[0].what, g[0].ns, g[0].places.clone()),
            (&What::Running { site: 6 }, 90, vec![(6, 50), (5, 40)])
        );
        assert_eq!(g[0].tids, BTreeSet::from([1, 2]));
        assert_eq!(g[0].waiters, BTreeSet::from([1, 2, 3]));
        assert!(g[1].places.is_empty());
    }

    /// Two flushes at sites whose printed lines are alike (their deeper
    /// frames differ) are one cause; another line stays apart.
    #[test]
    fn causes_that_print_alike_are_one() {
        let at = |site| What::Blocked { site, on: Waker::Device("disk".into()) };
        let causes =
            vec![ranked(1, at(7), 10, &[2]), ranked(1, at(8), 20, &[3]), ranked(1, at(9), 5, &[2])];
        let g = merge_alike(group_causes(&causes, |_| "postgres"), |g| match g.what {
            What::Blocked { site: 9, .. } => "fsync in pg_fsync".to_string(),
            _ => "fdatasync in XLogFlush".to_string(),
        });
        assert_eq!(g.len(), 2, "{g:#?}");
        assert_eq!(
            (g[0].ns, &g[0].what, g[0].waiters.len()),
            (30, &at(8), 2),
            "the larger one's site stands for both"
        );
        assert_eq!(g[1].ns, 5);
        assert!((g[0].share - 0.3).abs() < 1e-9);
    }

    /// The same text eight times (a backend behind each of eight others, each
    /// running) is one segment, with the threads it stood for.
    #[test]
    fn path_segments_alike_but_for_their_threads_are_one() {
        let wake = What::Running { site: 3 };
        let mut segs: Vec<Segment> =
            (2..10).map(|t| Segment { path: vec![1, t], what: wake.clone(), ns: 10 }).collect();
        segs.push(Segment { path: vec![1], what: What::RunQueue, ns: 30 });
        segs.push(Segment { path: vec![1, 2, 3], what: wake.clone(), ns: 5 });
        let g = group_path(&segs, |t| if t == 1 { "client" } else { "backend" });
        assert_eq!(g.len(), 3, "{g:#?}");
        assert_eq!((g[0].path.clone(), g[0].ns), (vec!["client", "backend"], 80));
        assert_eq!(g[0].tids, vec![BTreeSet::from([1]), (2..10).collect()]);
        assert_eq!((g[1].what.clone(), g[1].ns), (What::RunQueue, 30));
        assert_eq!(g[2].path.len(), 3, "a longer path is another segment");
    }
}
