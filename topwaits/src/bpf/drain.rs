//! Draining the maps into plain [`crate::model`] and [`crate::model::profile`] structs:
//! the aggregate with its stacks, waits still in progress, and the thread profiles.

use std::collections::HashMap;

use anyhow::{Context as _, Result};
use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray};
use topwaits_common::golang::GoRanOn;
use topwaits_common::{
    counter, names, DepKey, Hops, KernelStack, SwitchOut, ThreadStats, WaitKey, WaitVal, WakeKey,
    WakeVal,
};

use super::{batch, Tracer};
use crate::model::profile::{Edge, ThreadProfile, ThreadsCapture};
use crate::model::{
    comm_bytes, raw_hop, Capture, OpenSince, RawHop, RawRecord, StackId, WakeInfo, WakeKind,
};

pub(super) fn raw_record(
    k: &WaitKey,
    total_ns: u64,
    count: u64,
    max_ns: u64,
    max_end_ns: u64,
) -> RawRecord {
    RawRecord {
        tgid: k.tgid,
        tid: k.tid,
        comm: comm_bytes(&k.comm),
        kstack: StackId::from_ref(k.kstack),
        ustack: StackId::from_ref(k.ustack),
        total_ns,
        count,
        max_ns,
        max_end_mono: max_end_ns,
        wake: None,
        open: None,
        what: k.what,
        on_cpu: false,
    }
}

/// Adds the rows that threads still held in their start entries (`count` 0: none)
/// to the rows read from the aggregate: a thread's held row may extend one it
/// wrote there before.
fn add_held(
    rows: &mut HashMap<WaitKey, WaitVal>,
    held: impl IntoIterator<Item = (WaitKey, WaitVal)>,
) {
    for (key, val) in held {
        if val.count != 0 {
            rows.entry(key).or_default().absorb(&val);
        }
    }
}

/// How full the aggregate map is, as its programs and user space count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fill {
    /// Rows the programs inserted since user space last cleared the map.
    pub inserted: u64,
    /// Rows taken out of it since then.
    pub taken: u64,
    /// How many rows it holds.
    pub size: u32,
}

/// The kernel has no batch lookup-and-delete for a map (before Linux 5.6).
#[derive(Debug)]
struct NoTake;

impl std::fmt::Display for NoTake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no batch lookup-and-delete for this map")
    }
}

impl std::error::Error for NoTake {}

/// Calls `f` with each row of an aggregate map: read, or with `take` taken out.
fn rows_of<K: aya::Pod, V: aya::Pod>(
    map: &aya::maps::Map,
    take: bool,
    f: impl FnMut(&K, &V),
) -> Result<()> {
    if !take {
        return batch::each(map, f);
    }
    match batch::take_each(map, f)? {
        true => Ok(()),
        false => Err(NoTake.into()),
    }
}

impl Tracer {
    /// Reads the thread profiles, closing open states at `end_mono`, and the edges.
    pub fn drain_threads(&self, end_mono: u64) -> Result<ThreadsCapture> {
        let mut out = ThreadsCapture::default();
        batch::each(self.map(names::THREADS)?, |_: &u32, t: &ThreadStats| {
            out.threads.push(ThreadProfile::from_stats(t, end_mono, self.cpu_time));
        })
        .context("failed to read the thread map")?;
        batch::each(self.map(names::DEPS)?, |k: &DepKey, &count: &u64| {
            out.edges.push(Edge { waker: k.waker, sleeper: k.sleeper, count, futex: k.futex != 0 });
        })
        .context("failed to read the dependency map")?;
        out.counters = self.counters()?;
        let arr: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(self.map(names::COUNTERS)?)?;
        out.lost_threads = arr.get(&counter::LOST_THREADS_FULL, 0)?.iter().sum();
        out.lost_deps = arr.get(&counter::LOST_DEPS_FULL, 0)?.iter().sum();
        Ok(out)
    }

    /// How full the aggregate is: rows inserted since it was last cleared, and
    /// those [`Tracer::spill`] took out since.
    pub fn aggregate_fill(&self) -> Result<Fill> {
        let super::Aggregate { size, taken } = self.aggregate;
        let control: aya::maps::Array<&MapData, u64> =
            aya::maps::Array::try_from(self.map(names::CONTROL)?)?;
        let inserted = control.get(&topwaits_common::control::ROWS, 0)?;
        Ok(Fill { inserted, taken, size })
    }

    /// Takes every row out of the aggregate while the programs run, with the
    /// stacks they name, so that a trace with more distinct rows than the map
    /// holds loses none: called when it is half full, the rows taken join the
    /// next drain's. Each row is read and deleted in one step (a batch
    /// lookup-and-delete, under its bucket's lock), so no wait is added to a row
    /// already read. Rows threads hold (`Settings::hold_rows`) stay with them
    /// for the final drain. `Ok(None)` where the kernel cannot take them so.
    pub fn spill(&mut self) -> Result<Option<Capture>> {
        let mut records = Vec::new();
        let mut chains = HashMap::new();
        let taken = if self.waker {
            self.woken_rows(&mut chains, &mut records, true)
        } else {
            rows_of(self.map(names::WAITS)?, true, |k: &WaitKey, v: &WaitVal| {
                records.push(raw_record(k, v.total_ns, v.count, v.max_ns, v.max_end_ns));
            })
        };
        match taken {
            Ok(()) => {}
            Err(e) if e.downcast_ref::<NoTake>().is_some() => return Ok(None),
            Err(e) => return Err(e.context("failed to take rows out of the aggregate map")),
        }
        self.aggregate.taken += records.len() as u64;
        let stacks = self.stacks_named(&records, &[])?;
        log::debug!("took {} rows out of the aggregate", records.len());
        // Rows name stacks and chains that nothing in the kernel may name again:
        // over half full, those maps would fill next.
        if let Err(e) = self.age_stacks() {
            log::warn!("{e:#}");
        }
        Ok(Some(Capture { records, stacks, ..Default::default() }))
    }

    /// Reads the aggregate like [`Tracer::drain`], taking its rows out as it reads
    /// them (see [`Tracer::spill`]), so that the next drain holds only what came
    /// after and no wait is added to a row already read. Stack traces are kept:
    /// new rows may name them. Where the kernel cannot take rows so, they are
    /// read and then deleted, and a wait added to a row in between is lost.
    pub fn drain_and_clear(&mut self, open_at: Option<u64>) -> Result<Capture> {
        let capture = match self.read_rows(open_at, &[], true) {
            Err(e) if e.downcast_ref::<NoTake>().is_some() => {
                let capture = self.drain(open_at, &[])?;
                self.delete_rows()?;
                capture
            }
            taken => taken?,
        };
        if self.sample_period.is_some() {
            super::sample::clear(self.map_mut(names::SAMPLES)?)?;
        }
        // Goroutines get rows of their own again (see `Settings::go_merge_rows`).
        self.set_control(topwaits_common::control::ROWS, 0)?;
        match self.age_ran_on(&capture) {
            Ok(0) => {}
            Ok(n) => log::debug!("forgot the threads of quiet goroutines: {n} pairs"),
            Err(e) => log::warn!("the threads goroutines ran on could not be aged: {e:#}"),
        }
        self.aggregate.taken = 0;
        Ok(capture)
    }

    /// Deletes every row of the aggregate, one at a time.
    fn delete_rows(&mut self) -> Result<()> {
        let waker = self.waker;
        let map = self.map_mut(if waker { names::WAKE_WAITS } else { names::WAITS })?;
        if waker {
            let mut m: BpfHashMap<&mut MapData, WakeKey, WakeVal> = BpfHashMap::try_from(map)?;
            let keys: Vec<WakeKey> = m.keys().filter_map(Result::ok).collect();
            for k in keys {
                let _ = m.remove(&k);
            }
        } else {
            let mut m: BpfHashMap<&mut MapData, WaitKey, WaitVal> = BpfHashMap::try_from(map)?;
            let keys: Vec<WaitKey> = m.keys().filter_map(Result::ok).collect();
            for k in keys {
                let _ = m.remove(&k);
            }
        }
        Ok(())
    }

    /// The waits still in progress at `end_mono` (switched out during the trace and
    /// not back), as one-wait records; and every thread seen switching out. Returns
    /// how many waits looked open but were not: their thread had been back on a CPU
    /// without the hook seeing it (see [`Tracer::stop`]).
    fn open_waits(
        &self,
        end_mono: u64,
        chains: &HashMap<u64, Hops>,
        records: &mut Vec<RawRecord>,
        switched: &mut std::collections::HashSet<u32>,
    ) -> Result<u64> {
        let mut arrived = 0;
        let (min_us, max_us) = self.block_us;
        let mut seeded = HashMap::new();
        if self.seeded_open {
            batch::each(self.map(names::REWALKS)?, |&task: &u64, r: &topwaits_common::Rewalk| {
                seeded.insert(task, *r);
            })
            .context("failed to read the walked stacks of the waits at the start")?;
        }
        batch::each(self.map(names::STARTS)?, |&task: &u64, st: &SwitchOut| {
            let mut ustack = st.ustack;
            if st.ts != 0 && st.ustack == topwaits_common::SEEDED_USTACK {
                // In progress since before the trace and still: the thread
                // never switched. A trace's end reads it from /proc with the
                // start its wait really had (`analysis::open`); `serve` counts
                // it from the trace's start, under the stack walked for it.
                match seeded.get(&task) {
                    Some(r) if self.seeded_open && r.ts == st.ts && r.ustack != 0 => {
                        ustack = r.ustack
                    }
                    _ => return,
                }
            }
            switched.insert(st.tid);
            if st.ts == 0 || st.ts > end_mono {
                return;
            }
            if self.arrived_unseen(task, st) {
                arrived += 1;
                return;
            }
            let so_far = end_mono - st.ts;
            if !(min_us..=max_us).contains(&(so_far / 1000)) {
                return;
            }
            let key = WaitKey {
                kstack: st.kstack,
                tgid: st.tgid,
                tid: st.tid,
                ustack,
                comm: st.comm,
                what: st.what,
            };
            let mut r = raw_record(&key, so_far, 1, so_far, end_mono);
            r.open = Some(OpenSince::Exact(st.ts));
            if self.waker {
                let woken = topwaits_common::woke_wait(st.woken, st.chain, st.ts, end_mono)
                    .then(|| (st.woken, hops_of(chains, st.chain)));
                r.wake = Some(open_wake(st, woken, end_mono));
            }
            records.push(r);
        })
        .context("failed to read the per-task start map")?;
        Ok(arrived)
    }

    /// Reads the aggregate, the stacks it names, and the counters; with `open_at`,
    /// also the waits still in progress at that CLOCK_MONOTONIC time.
    /// `extra`: more records whose stacks to read (long-wait events).
    pub fn drain(&self, open_at: Option<u64>, extra: &[RawRecord]) -> Result<Capture> {
        self.read_rows(open_at, extra, false)
    }

    /// [`Tracer::drain`], taking the aggregate's rows out with `take`.
    fn read_rows(&self, open_at: Option<u64>, extra: &[RawRecord], take: bool) -> Result<Capture> {
        let mut records = Vec::new();
        let mut chains = HashMap::new();
        if self.waker {
            self.woken_rows(&mut chains, &mut records, take)?;
        } else if self.holds_rows {
            let mut rows = HashMap::new();
            rows_of(self.map(names::WAITS)?, take, |k: &WaitKey, v: &WaitVal| {
                rows.insert(*k, *v);
            })
            .context("failed to read the aggregate map")?;
            let mut held = Vec::new();
            batch::each(self.map(names::STARTS)?, |_: &u64, st: &SwitchOut| {
                held.push((st.row, st.held))
            })
            .context("failed to read the rows held in the per-task start map")?;
            add_held(&mut rows, held);
            records.extend(
                rows.iter()
                    .map(|(k, v)| raw_record(k, v.total_ns, v.count, v.max_ns, v.max_end_ns)),
            );
        } else {
            rows_of(self.map(names::WAITS)?, take, |k: &WaitKey, v: &WaitVal| {
                records.push(raw_record(k, v.total_ns, v.count, v.max_ns, v.max_end_ns));
            })
            .context("failed to read the aggregate map")?;
        }
        if let Some(period) = self.sample_period {
            super::sample::drain(self.map(names::SAMPLES)?, period, &mut records)?;
        }
        let mut switched = std::collections::HashSet::new();
        let mut counters = self.counters()?;
        if let Some(end) = open_at {
            let arrived = self.open_waits(end, &chains, &mut records, &mut switched)?;
            // Their end is unknown, so they are lost. Counted once, when the trace
            // ends: an interval's open wait may still end from its run time.
            if self.arrived_at_stop.is_some() {
                counters.unended += arrived;
            }
        }
        let stacks = self.stacks_named(&records, extra)?;
        // Not taken out: a goroutine that stays on its thread is counted there
        // once, when it first starts on it (a continuous trace forgets only
        // the goroutines gone quiet, see `age_ran_on`).
        let mut starts = Vec::new();
        batch::each(self.map(names::GO_RAN_ON)?, |k: &GoRanOn, &n: &u64| starts.push((*k, n)))
            .context("failed to read the threads goroutines ran on")?;
        let ran_on = crate::model::ran_on::by_goroutine(starts);
        Ok(Capture { records, stacks, counters, switched, ran_on, ..Default::default() })
    }

    /// The rows of a trace with wakers, each with its waker chain's hops (taken
    /// out of the map with `take`); the chains read are kept in `chains` for the
    /// waits still open.
    fn woken_rows(
        &self,
        chains: &mut HashMap<u64, Hops>,
        records: &mut Vec<RawRecord>,
        take: bool,
    ) -> Result<()> {
        batch::each(self.map(names::CHAINS)?, |&id: &u64, h: &Hops| {
            chains.insert(id, *h);
        })
        .context("failed to read the waker chain map")?;
        // Chains aged out since a row named them (`serve`).
        chains.extend(self.aged_chains());
        let rows = self.map(names::WAKE_WAITS)?;
        rows_of(rows, take, |k: &WakeKey, v: &WakeVal| {
            let mut r = raw_record(&k.target, v.total_ns, v.count, v.max_ns, v.max_end_ns);
            let kind = match k.kind {
                topwaits_common::wake_kind::WOKEN => WakeKind::Woken,
                topwaits_common::wake_kind::PREEMPTED => WakeKind::Preempted,
                _ => WakeKind::NoWaker,
            };
            r.wake = Some(WakeInfo {
                kind,
                hops: if kind == WakeKind::Woken { hops_of(chains, k.chain) } else { Vec::new() },
                blocked_ns: v.blocked_ns,
                runq_ns: v.runq_ns,
                max_blocked_ns: v.max_blocked_ns,
                max_runq_ns: v.max_runq_ns,
            });
            records.push(r);
        })
        .context("failed to read the aggregate map")?;
        Ok(())
    }

    /// The kernel and user stacks that `records` and `extra` name, by id.
    fn stacks_named(
        &self,
        records: &[RawRecord],
        extra: &[RawRecord],
    ) -> Result<HashMap<u64, Vec<u64>>> {
        let mut stacks = HashMap::new();
        for (map, user) in [(names::KSTACKS, false), (names::USTACKS, true)] {
            let map = self.map(map)?;
            let wanted: std::collections::HashSet<u64> = records
                .iter()
                .chain(extra)
                .flat_map(|r| {
                    let hops = r.wake.iter().flat_map(|w| &w.hops).map(|h| {
                        if user {
                            h.ustack
                        } else {
                            h.kstack
                        }
                    });
                    std::iter::once(if user { r.ustack } else { r.kstack }).chain(hops)
                })
                .filter_map(|id| match id {
                    StackId::Id(id) => Some(id),
                    _ => None,
                })
                .collect();
            let keep = |frames: &KernelStack| {
                frames.iter().copied().take_while(|&ip| ip != 0).collect::<Vec<u64>>()
            };
            // Past a few stacks, reading the whole map in batches beats a lookup each.
            let batched = wanted.len() > 64
                && batch::for_each(map, |id: &u64, frames: &KernelStack| {
                    if wanted.contains(id) {
                        stacks.insert(*id, keep(frames));
                    }
                })
                .context("failed to read the stack map")?;
            if !batched {
                let m: BpfHashMap<&MapData, u64, KernelStack> = BpfHashMap::try_from(map)?;
                // A reference always names a stored stack (entries are never
                // deleted); were one gone, the record would show a missing stack.
                for &id in &wanted {
                    if let Ok(frames) = m.get(&id, 0) {
                        stacks.insert(id, keep(&frames));
                    }
                }
            }
            // Stacks aged out since a row named them (`serve`).
            for id in wanted {
                if let (false, Some(frames)) = (stacks.contains_key(&id), self.aged_stack(id)) {
                    stacks.insert(id, frames.clone());
                }
            }
        }
        Ok(stacks)
    }
}

/// The hops of the chain `id` refers to; none if the map lacks it (entries are
/// never deleted, so only a reference of a lost chain could miss).
fn hops_of(chains: &HashMap<u64, Hops>, id: u64) -> Vec<RawHop> {
    chains.get(&id).map_or_else(Vec::new, |h| {
        h.hops[..(h.len as usize).min(h.hops.len())].iter().map(raw_hop).collect()
    })
}

/// The waker side of a wait still in progress: preempted (on the run queue all
/// along), woken and on the run queue since the wakeup, or not woken yet.
/// `woken`: the time of the wakeup and its chain's hops.
fn open_wake(st: &SwitchOut, woken: Option<(u64, Vec<RawHop>)>, end_mono: u64) -> WakeInfo<RawHop> {
    let so_far = end_mono - st.ts;
    let (kind, hops, blocked) = match woken {
        _ if st.state == 0 => (WakeKind::Preempted, Vec::new(), 0),
        Some((ts, hops)) => (WakeKind::Woken, hops, ts - st.ts),
        None => (WakeKind::NotYet, Vec::new(), so_far),
    };
    WakeInfo {
        kind,
        hops,
        blocked_ns: blocked,
        runq_ns: so_far - blocked,
        max_blocked_ns: blocked,
        max_runq_ns: so_far - blocked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tid: u32, kstack: u64) -> WaitKey {
        WaitKey { kstack, ustack: 0, tgid: 1, tid, comm: [b'a'; 16], what: Default::default() }
    }

    #[test]
    fn held_rows_extend_the_aggregate_or_add_rows_and_empty_ones_are_skipped() {
        let mut rows = HashMap::new();
        rows.insert(key(2, 10), WaitVal { total_ns: 100, count: 2, max_ns: 60, max_end_ns: 1_000 });
        let held = [
            // Same thread and stacks as an aggregate row, with a longer wait.
            (key(2, 10), WaitVal { total_ns: 90, count: 1, max_ns: 90, max_end_ns: 2_000 }),
            // A row only held so far.
            (key(3, 10), WaitVal { total_ns: 5, count: 1, max_ns: 5, max_end_ns: 3_000 }),
            // A start entry with nothing held (its stale figures must not count).
            (key(4, 10), WaitVal { total_ns: 7, count: 0, max_ns: 7, max_end_ns: 4_000 }),
        ];
        add_held(&mut rows, held);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[&key(2, 10)],
            WaitVal { total_ns: 190, count: 3, max_ns: 90, max_end_ns: 2_000 }
        );
        assert_eq!(
            rows[&key(3, 10)],
            WaitVal { total_ns: 5, count: 1, max_ns: 5, max_end_ns: 3_000 }
        );
    }

    #[test]
    fn chain_references_resolve_to_their_valid_hops_and_a_missing_one_to_none() {
        let hop =
            |tid| topwaits_common::Hop { tgid: 1, tid, kstack: 0, ustack: 0, comm: [b'w'; 16] };
        let mut chains = HashMap::new();
        let mut two = Hops { len: 2, ..Default::default() };
        two.hops[0] = hop(7);
        two.hops[1] = hop(8);
        // A stale third hop beyond `len` must not show.
        two.hops[2] = hop(9);
        chains.insert(0x8000_0000_0000_0042, two);
        // A length past the array is clamped rather than trusted.
        chains.insert(0x8000_0000_0000_0043, Hops { len: 99, ..Default::default() });
        let tids = |id| hops_of(&chains, id).iter().map(|h| h.tid).collect::<Vec<_>>();
        assert_eq!(tids(0x8000_0000_0000_0042), [7, 8]);
        assert_eq!(tids(0x8000_0000_0000_0043).len(), topwaits_common::MAX_CHAIN);
        assert!(tids(0x8000_0000_0000_0044).is_empty());
    }
}
