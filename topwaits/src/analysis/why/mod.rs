//! The analysis behind `topwaits why`: which waits matter. From every wait of the
//! traced threads (start, wakeup, end, waker), each moment a thread spent blocked
//! is followed to what it was waiting behind: the waker, and, while the waker was
//! itself blocked, the waker's waker, recursively ([`follow`]). Where that ends
//! (a thread running, a thread in the run queue, a thread blocked on what no
//! thread did, or a cycle) is the moment's cause. Summed over the targets' waits,
//! the causes rank what limits them. A wait after which its thread woke no other
//! thread before it waited again is idle (a pool worker with no work, a
//! housekeeping sleep, a kernel worker between jobs): it held nobody up, so it
//! is not ranked, and threads whose every wait is idle are listed apart; unless
//! no target's wait was followed by a wakeup (a lone thread's waits are what
//! there is to explain). A thread's own wait that no wakeup ended (still open at
//! the end, perhaps since before the trace) held nobody up either: it is listed
//! apart, with how long it lasted, and not ranked. Groups of threads that wait
//! only on each other are knots. Causes that differ only in their thread are
//! grouped by what the report shows ([`group`]). Pure: waits in, causes and
//! paths out, tested on fabricated streams.

mod follow;
mod group;

use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use follow::{critical_path, running_spans, Segment};
pub use group::{group_causes, group_path, merge_alike, Group, PathGroup};

/// A thread id.
pub type Tid = u32;

/// What ended a wait.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Waker {
    /// Another thread woke it.
    Thread(Tid),
    /// No thread did: an interrupt or device, by the name the interrupt
    /// classification gives (`timer`, `disk`, `network`, a handler).
    Device(String),
    /// It was preempted: runnable all along, waiting for a CPU.
    Preempted,
    /// No wakeup was seen (a lost event, or a wait still open at the end).
    Unknown,
}

/// One wait of one thread, switch-out to switch-in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    pub tid: Tid,
    pub start: u64,
    /// When the wakeup came; None when none was seen or it was preempted.
    pub woken: Option<u64>,
    pub end: u64,
    pub waker: Waker,
    /// Where it waited: a reference the caller names (its stacks).
    pub site: u64,
    /// With a thread waker: where the waker was when it woke this wait.
    pub waker_site: u64,
}

impl Wait {
    /// The end of its blocked part: the wakeup, or its end when it has none.
    fn blocked_until(&self) -> u64 {
        match (&self.waker, self.woken) {
            (Waker::Preempted, _) => self.start,
            (_, Some(w)) => w.clamp(self.start, self.end),
            (_, None) => self.end,
        }
    }
}

/// What a thread was doing where a followed wait ends.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum What {
    /// On a CPU; `site`: where it was when it woke the thread before it on the
    /// path (0: not known, or the path's own thread).
    Running { site: u64 },
    /// Runnable, waiting for a CPU.
    RunQueue,
    /// Blocked in `site`, on what no thread did (or what no event showed).
    Blocked { site: u64, on: Waker },
    /// Waiting in a cycle of waits: the path came back to this thread.
    Cycle,
}

/// A root cause: a thread, and what it was doing.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cause {
    pub tid: Tid,
    pub what: What,
}

/// One ranked cause: the targets' non-idle waiting it explains, and the threads
/// that waited behind it.
#[derive(Clone, Debug, PartialEq)]
pub struct Ranked {
    pub cause: Cause,
    pub ns: u64,
    /// Of the targets' non-idle waiting (0 to 1).
    pub share: f64,
    /// The target threads whose waiting it explains.
    pub waiters: BTreeSet<Tid>,
}

/// An idle thread: none of its waits was followed by its waking another thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Idle {
    pub tid: Tid,
    /// Its time blocked or runnable.
    pub ns: u64,
    /// The site it waited in longest.
    pub site: u64,
}

/// A thread's own wait that no wakeup ended, as far as the trace saw: still
/// open at its end (perhaps since before it began), or its wakeup lost. Nobody
/// waited behind it, so it is no cause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unwoken {
    pub tid: Tid,
    /// Its time blocked so far (summed, where the thread had several).
    pub ns: u64,
    /// Where it waited longest.
    pub site: u64,
}

/// What `why` finds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Findings {
    /// Causes, most time first.
    pub causes: Vec<Ranked>,
    /// The targets' non-idle waiting, which the causes add up to.
    pub waiting_ns: u64,
    /// No target's wait was followed by its waking another target: the threads
    /// never woke each other, and each wait is ranked by what it waited behind
    /// (its waker, the CPU) rather than left idle.
    pub lone: bool,
    pub idle: Vec<Idle>,
    /// Waits no wakeup ended, listed apart: not in `waiting_ns`.
    pub unwoken: Vec<Unwoken>,
    /// Idle waits of threads that are not idle (not ranked either).
    pub idle_waits_ns: u64,
    /// Groups of threads that waited only on each other, each sorted.
    pub knots: Vec<Vec<Tid>>,
    /// The stretches in which each thread that was a running cause ran while
    /// others waited behind it, in order and not overlapping: what it ran then
    /// is what held them up, not its whole profile.
    pub running_spans: HashMap<Tid, Vec<(u64, u64)>>,
}

/// Every traced wait, by thread, in order.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    waits: HashMap<Tid, Vec<Wait>>,
}

impl Trace {
    /// The trace of these waits; overlapping waits of one thread (which the
    /// kernel never gives) are cut at the next one's start.
    pub fn new(waits: impl IntoIterator<Item = Wait>) -> Trace {
        let mut by: HashMap<Tid, Vec<Wait>> = HashMap::new();
        for w in waits {
            if w.end > w.start {
                by.entry(w.tid).or_default().push(w);
            }
        }
        for list in by.values_mut() {
            list.sort_by_key(|w| w.start);
            for i in 1..list.len() {
                let next = list[i].start;
                let prev = &mut list[i - 1];
                if prev.end > next {
                    prev.end = next;
                    prev.woken = prev.woken.map(|w| w.min(next));
                }
            }
        }
        Trace { waits: by }
    }

    fn of(&self, tid: Tid) -> &[Wait] {
        self.waits.get(&tid).map(Vec::as_slice).unwrap_or(&[])
    }

    /// When each thread woke another's wait, in order.
    fn wake_times(&self) -> HashMap<Tid, Vec<u64>> {
        let mut out: HashMap<Tid, Vec<u64>> = HashMap::new();
        for (tid, list) in &self.waits {
            for w in list {
                if let Waker::Thread(b) = w.waker {
                    if b != *tid {
                        out.entry(b).or_default().push(w.woken.unwrap_or(w.end));
                    }
                }
            }
        }
        for v in out.values_mut() {
            v.sort_unstable();
        }
        out
    }

    /// Ranks the causes of the waiting of `targets` (every traced thread when
    /// empty).
    pub fn why(&self, targets: &[Tid]) -> Findings {
        let all: Vec<Tid> = if targets.is_empty() {
            let mut t: Vec<Tid> = self.waits.keys().copied().collect();
            t.sort_unstable();
            t
        } else {
            targets.to_vec()
        };
        let wakes = self.wake_times();
        // Whether wait `i` of `tid` was followed by a wakeup the thread made
        // before its next wait.
        let busy = |tid: Tid, list: &[Wait], i: usize| -> bool {
            let (end, next) = (list[i].end, list.get(i + 1).map_or(u64::MAX, |n| n.start));
            wakes
                .get(&tid)
                .is_some_and(|v| v.get(v.partition_point(|&t| t < end)).is_some_and(|&t| t < next))
        };
        // A lone thread (gzip reading its input) wakes no other: then its waits
        // are what there is to explain, and none is idle.
        let lone = !all.iter().any(|&t| {
            let list = self.of(t);
            (0..list.len()).any(|i| busy(t, list, i))
        });
        let mut found = Findings { lone, ..Findings::default() };
        let mut sums: HashMap<Cause, (u64, BTreeSet<Tid>)> = HashMap::new();
        let mut spans: HashMap<Tid, Vec<(u64, u64)>> = HashMap::new();
        let mut unwoken: HashMap<Tid, (u64, BTreeMap<u64, u64>)> = HashMap::new();
        for &tid in &all {
            let list = self.of(tid);
            let ranked: Vec<&Wait> =
                (0..list.len()).filter(|&i| lone || busy(tid, list, i)).map(|i| &list[i]).collect();
            if ranked.is_empty() {
                if let Some(idle) = idle_of(tid, list) {
                    found.idle.push(idle);
                }
                continue;
            }
            found.idle_waits_ns += list.iter().map(|w| w.end - w.start).sum::<u64>()
                - ranked.iter().map(|w| w.end - w.start).sum::<u64>();
            for w in ranked {
                follow::wait(self, w, &mut |path, cause, start, end| {
                    let ns = end - start;
                    // The thread's own wait, ended by no wakeup seen: nobody
                    // waited behind it.
                    if let (1, What::Blocked { site, on: Waker::Unknown }) =
                        (path.len(), &cause.what)
                    {
                        let e = unwoken.entry(tid).or_default();
                        e.0 += ns;
                        *e.1.entry(*site).or_default() += ns;
                        return;
                    }
                    found.waiting_ns += ns;
                    if let What::Running { .. } = cause.what {
                        spans.entry(cause.tid).or_default().push((start, end));
                    }
                    let e = sums.entry(cause).or_default();
                    e.0 += ns;
                    e.1.insert(tid);
                });
            }
        }
        found.unwoken = unwoken
            .into_iter()
            .filter_map(|(tid, (ns, sites))| {
                let site = sites.into_iter().max_by_key(|&(s, n)| (n, std::cmp::Reverse(s)))?.0;
                Some(Unwoken { tid, ns, site })
            })
            .collect();
        found.unwoken.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
        let total = found.waiting_ns.max(1) as f64;
        found.causes = sums
            .into_iter()
            .map(|(cause, (ns, waiters))| Ranked { cause, ns, share: ns as f64 / total, waiters })
            .collect();
        found.causes.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.cause.cmp(&b.cause)));
        found.idle.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
        found.knots = self.knots();
        found.running_spans = spans.into_iter().map(|(tid, v)| (tid, union(v))).collect();
        found
    }

    /// Groups of two or more threads whose waits were all ended by each other
    /// (or by preemption): strongly connected in the waiter→waker graph, with no
    /// wait ended from outside.
    fn knots(&self) -> Vec<Vec<Tid>> {
        let mut edges: BTreeMap<Tid, BTreeSet<Tid>> = BTreeMap::new();
        let mut outside: BTreeSet<Tid> = BTreeSet::new();
        for (tid, list) in &self.waits {
            let e = edges.entry(*tid).or_default();
            for w in list {
                match &w.waker {
                    Waker::Thread(b) if b != tid => {
                        e.insert(*b);
                    }
                    Waker::Thread(_) | Waker::Preempted => {}
                    Waker::Device(_) | Waker::Unknown => {
                        outside.insert(*tid);
                    }
                }
            }
        }
        components(&edges)
            .into_iter()
            .filter(|c| c.len() > 1)
            .filter(|c| {
                c.iter().all(|t| {
                    !outside.contains(t)
                        && edges.get(t).is_some_and(|e| e.iter().all(|b| c.contains(b)))
                })
            })
            .collect()
    }
}

/// The union of intervals `[from, to)`: in order, none overlapping or touching.
fn union(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (from, to) in v {
        match out.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => out.push((from, to)),
        }
    }
    out
}

/// An idle thread's summary, when it waited at all.
fn idle_of(tid: Tid, list: &[Wait]) -> Option<Idle> {
    let ns: u64 = list.iter().map(|w| w.end - w.start).sum();
    let mut by_site: BTreeMap<u64, u64> = BTreeMap::new();
    for w in list {
        *by_site.entry(w.site).or_default() += w.end - w.start;
    }
    let site = by_site.into_iter().max_by_key(|&(s, n)| (n, std::cmp::Reverse(s)))?.0;
    Some(Idle { tid, ns, site })
}

/// The strongly connected components of a graph (Tarjan's, iterative), each
/// sorted, in order of their smallest member.
fn components(edges: &BTreeMap<Tid, BTreeSet<Tid>>) -> Vec<Vec<Tid>> {
    let mut index: HashMap<Tid, (usize, usize)> = HashMap::new();
    let mut stack: Vec<Tid> = Vec::new();
    let mut on: BTreeSet<Tid> = BTreeSet::new();
    let mut out = Vec::new();
    let mut next = 0usize;
    let empty = BTreeSet::new();
    for &root in edges.keys() {
        if index.contains_key(&root) {
            continue;
        }
        // Each frame: a node and the successors still to visit.
        let mut work: Vec<(Tid, Vec<Tid>)> =
            vec![(root, edges.get(&root).unwrap_or(&empty).iter().copied().collect())];
        index.insert(root, (next, next));
        next += 1;
        stack.push(root);
        on.insert(root);
        while let Some((v, rest)) = work.last_mut() {
            let v = *v;
            if let Some(w) = rest.pop() {
                match index.get(&w) {
                    None => {
                        index.insert(w, (next, next));
                        next += 1;
                        stack.push(w);
                        on.insert(w);
                        work.push((w, edges.get(&w).unwrap_or(&empty).iter().copied().collect()));
                    }
                    Some(&(wi, _)) if on.contains(&w) => {
                        let e = index.get_mut(&v).unwrap();
                        e.1 = e.1.min(wi);
                    }
                    Some(_) => {}
                }
                continue;
            }
            work.pop();
            let (vi, vlow) = index[&v];
            if let Some((u, _)) = work.last() {
                let e = index.get_mut(u).unwrap();
                e.1 = e.1.min(vlow);
            }
            if vi == vlow {
                let mut comp = Vec::new();
                while let Some(w) = stack.pop() {
                    on.remove(&w);
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                comp.sort_unstable();
                out.push(comp);
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests;
