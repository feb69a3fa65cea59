//! Whose memory maps name a process's frames: its own, read while it lives, or,
//! for a forked process that has not exec'd, its parent's. Reading a process's
//! maps is the user side's main cost during a trace (the kernel formats every
//! mapping's path); a fork-heavy workload such as `perf bench sched messaging`
//! starts hundreds of processes a second that all map what their parent maps.
//!
//! A process's maps read at its exec are not yet whole: the dynamic loader maps
//! the libraries after it. Such a process is read again before a fork of it
//! shares its maps, and once it has run for [`SETTLE`] (checked at each event, and
//! every few milliseconds while one awaits it), so
//! that its library frames are named after it exits.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use topwaits_common::{proc_event, ProcEvent};

use crate::stacks::cfi::loader::LOADING_AFTER_EXEC;

/// Which processes' maps were read, and which forked ones share another's.
#[derive(Default, Debug)]
pub struct Lineage {
    /// Read: with maps (a user process) or without (a kernel thread).
    read: HashMap<u32, bool>,
    /// A forked process → the read process whose maps it shares.
    shares: HashMap<u32, u32>,
    /// The reverse of `shares`.
    sharers: HashMap<u32, HashSet<u32>>,
    /// Processes read at their exec, when: read again once the loader is done.
    fresh: Vec<(u32, Instant)>,
    /// Processes that exec'd less than [`LOADING_AFTER_EXEC`] ago, when.
    loading: Vec<(u32, Instant)>,
}

/// How long after an exec a process's libraries are taken to be mapped.
pub const SETTLE: Duration = Duration::from_millis(50);

impl Lineage {
    fn known(&self, tgid: u32) -> bool {
        self.read.contains_key(&tgid) || self.shares.contains_key(&tgid)
    }

    /// Reads `tgid`'s own maps with `read` (which says whether it kept any; it is
    /// told whose maps the process shares, if it does), ending any sharing. A
    /// process that shares another's maps and has none of its own to keep (it
    /// maps what that one does, or it is exiting: its memory is going or gone)
    /// keeps sharing them.
    fn read_own(&mut self, tgid: u32, read: &mut dyn FnMut(u32, Option<u32>) -> bool) {
        let found = read(tgid, self.shares.get(&tgid).copied());
        if !found && self.shares.contains_key(&tgid) {
            return;
        }
        if let Some(from) = self.shares.remove(&tgid) {
            if let Some(set) = self.sharers.get_mut(&from) {
                set.remove(&tgid);
            }
        }
        self.read.insert(tgid, found);
    }

    /// Takes one process event: reads with `read` what must be read now, and no
    /// more. `alive` says whether a process still runs.
    pub fn on_event(
        &mut self,
        ev: ProcEvent,
        read: &mut dyn FnMut(u32, Option<u32>) -> bool,
        alive: &dyn Fn(u32) -> bool,
    ) {
        self.on_event_at(ev, Instant::now(), read, alive);
    }

    /// [`Lineage::on_event`] at a given instant (tests).
    pub fn on_event_at(
        &mut self,
        ev: ProcEvent,
        now: Instant,
        read: &mut dyn FnMut(u32, Option<u32>) -> bool,
        alive: &dyn Fn(u32) -> bool,
    ) {
        self.settle(now, read, alive);
        // Within the unwind loader's window after an exec, a fork's word that
        // its walk met unknown code means it was forked before its parent's
        // libraries were mapped, as the loader takes it.
        self.loading.retain(|&(_, at)| now.saturating_duration_since(at) < LOADING_AFTER_EXEC);
        match ev.kind {
            proc_event::FORK => {
                let parent_fresh = self.fresh.iter().position(|&(t, _)| t == ev.parent);
                if let Some(i) = parent_fresh {
                    // Its children share what it maps now, libraries included.
                    self.fresh.swap_remove(i);
                    self.read_own(ev.parent, read);
                } else if !self.known(ev.parent) {
                    self.read_own(ev.parent, read);
                }
                let from = self.shares.get(&ev.parent).copied().unwrap_or(ev.parent);
                if self.read.get(&from) == Some(&true) && !self.read.contains_key(&ev.tgid) {
                    self.shares.insert(ev.tgid, from);
                    self.sharers.entry(from).or_default().insert(ev.tgid);
                }
            }
            proc_event::EXEC => {
                self.rehome(ev.tgid, read, alive);
                self.read_own(ev.tgid, read);
                if self.read.get(&ev.tgid) == Some(&true)
                    && !self.fresh.iter().any(|&(t, _)| t == ev.tgid)
                {
                    self.fresh.push((ev.tgid, now));
                }
                self.loading.retain(|&(t, _)| t != ev.tgid);
                self.loading.push((ev.tgid, now));
            }
            proc_event::MAPS if alive(ev.tgid) => {
                // The stack walker met code in none of the maps it has: the
                // dynamic loader's libraries after an exec, or a dlopen. Read now,
                // while the process runs: it may exit before it has settled. A
                // process read at its exec is still read again once settled, as
                // what the walker met may not be all the loader maps.
                // A fork of a process still loading got a copy of its maps from
                // before its libraries: the parent is read (as the unwind loader
                // reads it, so the two share one read), not each such fork (3 of
                // perf's first forks a run, each a read of a hundred mappings).
                let source = self
                    .shares
                    .get(&ev.tgid)
                    .copied()
                    .filter(|s| self.loading.iter().any(|&(t, _)| t == *s) && alive(*s));
                self.read_own(source.unwrap_or(ev.tgid), read);
            }
            _ => {
                if !self.known(ev.tgid) {
                    self.read_own(ev.tgid, read);
                }
            }
        }
    }

    /// Reads again, now, the processes due (see [`Lineage::settle`]).
    pub fn settle_due(
        &mut self,
        read: &mut dyn FnMut(u32, Option<u32>) -> bool,
        alive: &dyn Fn(u32) -> bool,
    ) {
        self.settle(Instant::now(), read, alive);
    }

    /// Whether a process read at its exec awaits being read again.
    pub fn awaiting(&self) -> bool {
        !self.fresh.is_empty()
    }

    /// Reads again the processes that exec'd at least [`SETTLE`] ago and still run.
    fn settle(
        &mut self,
        now: Instant,
        read: &mut dyn FnMut(u32, Option<u32>) -> bool,
        alive: &dyn Fn(u32) -> bool,
    ) {
        if self.fresh.first().is_none_or(|&(_, at)| now.duration_since(at) < SETTLE) {
            return;
        }
        let (due, young): (Vec<_>, Vec<_>) =
            self.fresh.drain(..).partition(|&(_, at)| now.duration_since(at) >= SETTLE);
        self.fresh = young;
        for (t, _) in due {
            if alive(t) {
                self.read_own(t, read);
            }
        }
    }

    /// Before `tgid` execs (its maps change), the processes sharing its maps get a
    /// source of their own: the first that still runs is read, and the others
    /// share it. With none left running, their sharing ends: their frames are left
    /// unnamed rather than named from the new image.
    fn rehome(
        &mut self,
        tgid: u32,
        read: &mut dyn FnMut(u32, Option<u32>) -> bool,
        alive: &dyn Fn(u32) -> bool,
    ) {
        let Some(set) = self.sharers.remove(&tgid) else { return };
        let mut rest: Vec<u32> = set.into_iter().collect();
        rest.sort_unstable();
        for &t in &rest {
            self.shares.remove(&t);
        }
        let Some(i) = rest.iter().position(|&t| alive(t)) else { return };
        let heir = rest.swap_remove(i);
        self.read_own(heir, read);
        if self.read.get(&heir) == Some(&true) {
            for t in rest {
                self.shares.insert(t, heir);
                self.sharers.entry(heir).or_default().insert(t);
            }
        }
    }

    /// Forgets `tgid`, gone for good (a continuous trace's sweep): what it
    /// shared, and who shared its maps (they have exited too, or they would
    /// keep it).
    pub fn forget(&mut self, tgid: u32) {
        self.read.remove(&tgid);
        if let Some(from) = self.shares.remove(&tgid) {
            if let Some(set) = self.sharers.get_mut(&from) {
                set.remove(&tgid);
            }
        }
        for t in self.sharers.remove(&tgid).into_iter().flatten() {
            self.shares.remove(&t);
        }
        self.fresh.retain(|&(t, _)| t != tgid);
        self.loading.retain(|&(t, _)| t != tgid);
    }

    /// Every process it knows of.
    pub fn known_processes(&self) -> Vec<u32> {
        self.read.keys().chain(self.shares.keys()).copied().collect()
    }

    /// The process whose maps name `tgid`'s frames once it is gone: the one it
    /// shared maps with, else itself.
    pub fn source_of(&self, tgid: u32) -> u32 {
        self.shares.get(&tgid).copied().unwrap_or(tgid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: u32, tgid: u32, parent: u32) -> ProcEvent {
        ProcEvent { tgid, kind, parent, ..Default::default() }
    }

    /// Runs events against fake processes: `with_maps` are user processes, the
    /// rest kernel threads; `dead` have exited. Returns every read, in order.
    fn run(l: &mut Lineage, events: &[ProcEvent], with_maps: &[u32], dead: &[u32]) -> Vec<u32> {
        run_at(l, &events.iter().map(|&e| (e, 0)).collect::<Vec<_>>(), with_maps, dead)
    }

    /// [`run`] with each event at a time in milliseconds.
    fn run_at(
        l: &mut Lineage,
        events: &[(ProcEvent, u64)],
        with_maps: &[u32],
        dead: &[u32],
    ) -> Vec<u32> {
        let t0 = Instant::now();
        let mut reads = Vec::new();
        for &(e, ms) in events {
            l.on_event_at(
                e,
                t0 + Duration::from_millis(ms),
                &mut |t, _| {
                    reads.push(t);
                    with_maps.contains(&t)
                },
                &|t| !dead.contains(&t),
            );
        }
        reads
    }

    const SEEN: u32 = proc_event::SEEN;
    const FORK: u32 = proc_event::FORK;
    const EXEC: u32 = proc_event::EXEC;

    #[test]
    fn forked_children_share_their_parents_maps_without_a_read() {
        let mut l = Lineage::default();
        let mut events = vec![ev(SEEN, 10, 0)];
        for c in 100..300 {
            events.extend([ev(FORK, c, 10), ev(SEEN, c, 0)]);
        }
        // A grandchild shares the same maps, read once.
        events.extend([ev(FORK, 500, 150), ev(SEEN, 500, 0)]);
        let reads = run(&mut l, &events, &[10], &[]);
        assert_eq!(reads, [10]);
        assert_eq!(l.source_of(150), 10);
        assert_eq!(l.source_of(500), 10);
        assert_eq!((l.read.len(), l.shares.len()), (1, 201), "one read, 201 sharing it");
    }

    /// Regression: a forked child's MAPS event, read while it exits (its maps
    /// already empty), ended its sharing, and its frames went unnamed (the quiet
    /// test's exited sched-messaging processes).
    #[test]
    fn an_exiting_child_that_reads_no_maps_keeps_its_parents() {
        let mut l = Lineage::default();
        let reads = run(
            &mut l,
            &[ev(SEEN, 10, 0), ev(FORK, 11, 10), ev(proc_event::MAPS, 11, 0)],
            &[10],
            &[],
        );
        assert_eq!(reads, [10, 11], "read, and found empty");
        assert_eq!(l.source_of(11), 10, "still named from its parent's maps");
        // One with maps of its own now (a library it loaded) reads its own.
        let mut l = Lineage::default();
        run(
            &mut l,
            &[ev(SEEN, 10, 0), ev(FORK, 11, 10), ev(proc_event::MAPS, 11, 0)],
            &[10, 11],
            &[],
        );
        assert_eq!(l.source_of(11), 11);
    }

    /// The read is told whose maps the process shares: one that maps the same
    /// keeps nothing of its own, nor one that has begun to exit (such a read
    /// may be torn), and so keeps sharing.
    #[test]
    fn a_read_is_told_whose_maps_the_process_shares() {
        let mut l = Lineage::default();
        let mut told = Vec::new();
        for e in [
            ev(SEEN, 10, 0),
            ev(FORK, 11, 10),
            ev(proc_event::MAPS, 11, 0),
            ev(proc_event::MAPS, 11, 0),
        ] {
            l.on_event(
                e,
                &mut |t, shares| {
                    told.push((t, shares));
                    true
                },
                &|_| true,
            );
        }
        assert_eq!(told, [(10, None), (11, Some(10)), (11, None)], "its own maps once read");
    }

    #[test]
    fn a_parent_first_seen_at_its_fork_is_read_then() {
        let mut l = Lineage::default();
        let reads = run(
            &mut l,
            &[ev(FORK, 101, 10), ev(FORK, 102, 10), ev(SEEN, 10, 0), ev(SEEN, 101, 0)],
            &[10],
            &[],
        );
        assert_eq!(reads, [10]);
        assert_eq!(l.source_of(102), 10);
    }

    #[test]
    fn threads_and_repeated_sightings_read_once() {
        let mut l = Lineage::default();
        let reads = run(
            &mut l,
            &[ev(SEEN, 10, 0), ev(SEEN, 10, 0), ev(SEEN, 2, 0), ev(SEEN, 2, 0)],
            &[10],
            &[],
        );
        assert_eq!(reads, [10, 2], "a kernel thread without maps is not read again either");
    }

    #[test]
    fn a_process_read_at_its_exec_is_read_again_before_its_forks_share_its_maps() {
        let mut l = Lineage::default();
        let reads = run(&mut l, &[ev(EXEC, 10, 0), ev(FORK, 11, 10), ev(FORK, 12, 10)], &[10], &[]);
        assert_eq!(reads, [10, 10], "once at the exec, once, whole, at the first fork");
        assert_eq!(l.source_of(12), 10);
    }

    #[test]
    fn a_process_read_at_its_exec_is_read_again_once_settled_if_it_still_runs() {
        let mut l = Lineage::default();
        let events = [
            (ev(EXEC, 10, 0), 0),
            (ev(EXEC, 20, 0), 0),
            (ev(SEEN, 30, 0), 10),
            (ev(SEEN, 40, 0), 60),
            (ev(SEEN, 50, 0), 200),
        ];
        let reads = run_at(&mut l, &events, &[10, 20, 30, 40, 50], &[20]);
        assert_eq!(reads, [10, 20, 30, 10, 40, 50], "10 again after SETTLE; 20 is gone");
    }

    /// Regression (CI): a `sleep 0.2` read at its exec was to be read again once
    /// settled, but under load that came after it had exited, and its libc frame
    /// was unnamed. The walker's word that it met unknown code reads it at once;
    /// the read once settled stays (the walker may have met one library of several).
    #[test]
    fn a_process_whose_walker_met_unknown_code_is_read_at_once_and_again_once_settled() {
        const MAPS: u32 = proc_event::MAPS;
        let mut l = Lineage::default();
        let events = [
            (ev(EXEC, 10, 0), 0),
            (ev(MAPS, 10, 0), 1),
            (ev(SEEN, 30, 0), 100),
            (ev(MAPS, 30, 0), 101),
        ];
        let reads = run_at(&mut l, &events, &[10, 30], &[30]);
        assert_eq!(
            reads,
            [10, 10, 10, 30],
            "10 at its exec, at MAPS and once settled; 30 is gone by its MAPS"
        );
        assert!(!l.awaiting());
    }

    /// A fork of a program still loading its libraries met them unmapped in
    /// the copy of its parent's maps it got: its parent is read, and it goes
    /// on sharing; later, such a word means a library of its own.
    #[test]
    fn a_fork_of_a_loading_program_that_met_unknown_code_has_its_parent_read() {
        const MAPS: u32 = proc_event::MAPS;
        let mut l = Lineage::default();
        let events = [
            (ev(EXEC, 10, 0), 0),
            (ev(FORK, 11, 10), 2),
            (ev(FORK, 12, 10), 2),
            (ev(MAPS, 11, 0), 3),
            (ev(MAPS, 12, 0), 300),
        ];
        let reads = run_at(&mut l, &events, &[10, 11, 12], &[]);
        assert_eq!(reads, [10, 10, 10, 12], "at the exec, the first fork, 11's word; then 12");
        assert_eq!(l.source_of(11), 10);
        assert_eq!(l.source_of(12), 12);
    }

    #[test]
    fn a_process_read_at_its_exec_awaits_a_beat_until_read_again() {
        let mut l = Lineage::default();
        assert!(!l.awaiting());
        run(&mut l, &[ev(EXEC, 10, 0)], &[10], &[]);
        assert!(l.awaiting());
        let mut reads = Vec::new();
        l.settle_due(
            &mut |t, _| {
                reads.push(t);
                true
            },
            &|_| true,
        );
        assert!(reads.is_empty() && l.awaiting(), "not yet: {reads:?}");
        std::thread::sleep(SETTLE);
        l.settle_due(
            &mut |t, _| {
                reads.push(t);
                true
            },
            &|_| true,
        );
        assert_eq!(reads, [10]);
        assert!(!l.awaiting());
    }

    #[test]
    fn a_child_that_execs_gets_its_own_maps() {
        let mut l = Lineage::default();
        let reads = run(
            &mut l,
            &[ev(SEEN, 10, 0), ev(FORK, 11, 10), ev(EXEC, 11, 0), ev(SEEN, 11, 0)],
            &[10, 11],
            &[],
        );
        assert_eq!(reads, [10, 11]);
        assert_eq!(l.source_of(11), 11);
    }

    #[test]
    fn children_of_a_kernel_thread_are_read_themselves() {
        let mut l = Lineage::default();
        let reads = run(&mut l, &[ev(FORK, 50, 2), ev(SEEN, 50, 0)], &[], &[]);
        assert_eq!(reads, [2, 50]);
        assert_eq!(l.source_of(50), 50);
    }

    #[test]
    fn a_parent_that_execs_hands_its_old_maps_to_a_living_child() {
        let mut l = Lineage::default();
        let events = [
            ev(SEEN, 10, 0),
            ev(FORK, 11, 10),
            ev(FORK, 12, 10),
            ev(FORK, 13, 10),
            ev(EXEC, 10, 0),
        ];
        // 11 is gone; 12 still runs and maps the old image: read once, shared by 13.
        let reads = run(&mut l, &events, &[10, 12, 13], &[11]);
        assert_eq!(reads, [10, 12, 10]);
        assert_eq!((l.source_of(11), l.source_of(12), l.source_of(13)), (12, 12, 12));
    }

    #[test]
    fn with_no_living_child_the_old_maps_are_not_lent_out() {
        let mut l = Lineage::default();
        let reads =
            run(&mut l, &[ev(SEEN, 10, 0), ev(FORK, 11, 10), ev(EXEC, 10, 0)], &[10], &[11]);
        assert_eq!(reads, [10, 10]);
        assert_eq!(l.source_of(11), 11, "never named from the new image");
    }
}
