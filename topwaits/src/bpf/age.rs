//! Stacks aging out of a continuous trace (`topwaits serve`). The kernel keeps
//! each stack and waker chain once, under its hash, and never deletes one; in a
//! trace that runs for weeks the maps would fill and every new stack be lost.
//! After a drain, when a map is over half full, the entries nothing in flight
//! names (no wait in progress, no pending wakeup) are deleted, and their frames
//! kept on this side until the next aging: a row the kernel adds in between
//! under a deleted reference still finds its frames. The kernel stores a stack
//! again the next time it meets it; its reuse of cached kernel stacks checks
//! that the stack is still stored.

use std::collections::{HashMap, HashSet};

use anyhow::{Context as _, Result};
use aya::maps::Map;
use topwaits_common::{golang::GoRanOn, names, Chain, Hops, KernelStack, Rewalk, SwitchOut};

use super::{batch, Tracer};

/// Stacks and chains deleted from the kernel at the last aging, by reference.
#[derive(Default)]
pub(super) struct Aged {
    pub stacks: HashMap<u64, Vec<u64>>,
    pub chains: HashMap<u64, Hops>,
}

/// What one aging did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Aging {
    /// Entries deleted from the stack maps and the chain map.
    pub stacks: u64,
    pub chains: u64,
}

/// Entries the maps aged here hold at most.
#[derive(Clone, Copy, Debug)]
pub(super) struct Capacity {
    pub stacks: u32,
    pub chains: u32,
    pub ran_on: u32,
}

impl Capacity {
    pub(super) fn of(sizes: &super::load::Sizes) -> Self {
        Capacity { stacks: sizes.stacks, chains: sizes.chains, ran_on: sizes.go_ran_on }
    }
}

/// The share of a map past which it is aged.
const HALF: u32 = 2;

/// The references a map holds, read a batch at a time (values too: the kernel
/// reads both), with each value kept where `keep` says so.
fn entries<V: aya::Pod>(map: &Map, mut keep: impl FnMut(u64, &V)) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    batch::each(map, |&id: &u64, v: &V| {
        ids.push(id);
        keep(id, v);
    })?;
    Ok(ids)
}

impl Tracer {
    /// Ages the stack and chain maps that are over half full (see the module
    /// notes). Call it right after a drain, whose rows named what they needed.
    pub fn age_stacks(&mut self) -> Result<Aging> {
        let Capacity { stacks: stack_cap, chains: chain_cap, .. } = self.capacity;
        let full = |n: usize, cap: u32| n as u64 * HALF as u64 > cap as u64;
        let counts = |t: &Tracer, name| -> Result<usize> {
            Ok(entries::<KernelStack>(t.map(name)?, |_, _| {})?.len())
        };
        let stacks_full = full(counts(self, names::KSTACKS)?, stack_cap)
            || full(counts(self, names::USTACKS)?, stack_cap);
        let chains_full = self.waker
            && full(entries::<Hops>(self.map(names::CHAINS)?, |_, _| {})?.len(), chain_cap);
        if !stacks_full && !chains_full {
            return Ok(Aging::default());
        }
        // What waits in progress and pending wakeups name: their rows are yet to be added.
        let mut live: HashSet<u64> = HashSet::new();
        batch::each(self.map(names::STARTS)?, |_: &u64, st: &SwitchOut| {
            live.extend([st.kstack, st.ustack, st.chain, st.row.kstack, st.row.ustack]);
        })
        .context("failed to read the per-task start map")?;
        batch::each(self.map(names::REWALKS)?, |_: &u64, r: &Rewalk| {
            live.insert(r.ustack);
        })
        .context("failed to read the walked stacks of the waits at the start")?;
        if self.waker {
            if let Ok(m) = self.map(names::LAST_WAKE) {
                batch::each(m, |_: &u64, c: &Chain| {
                    live.insert(c.chain);
                })?;
            }
        }
        let mut aged = Aged::default();
        let mut done = Aging::default();
        if self.waker {
            // Chains first: a chain kept keeps its hops' stacks.
            let mut old = HashMap::new();
            let mut kept = Vec::new();
            entries(self.map(names::CHAINS)?, |id, h: &Hops| {
                if chains_full && !live.contains(&id) {
                    old.insert(id, *h);
                } else {
                    kept.push(*h);
                }
            })?;
            for h in &kept {
                for hop in &h.hops[..(h.len as usize).min(h.hops.len())] {
                    live.extend([hop.kstack, hop.ustack]);
                }
            }
            done.chains = self.delete::<Hops>(names::CHAINS, old.keys().copied().collect())?;
            aged.chains = old;
        }
        if stacks_full {
            for name in [names::KSTACKS, names::USTACKS] {
                let mut old = HashMap::new();
                entries(self.map(name)?, |id, frames: &KernelStack| {
                    if !live.contains(&id) {
                        old.insert(
                            id,
                            frames.iter().copied().take_while(|&ip| ip != 0).collect::<Vec<u64>>(),
                        );
                    }
                })?;
                done.stacks += self.delete::<KernelStack>(name, old.keys().copied().collect())?;
                aged.stacks.extend(old);
            }
        }
        self.aged = aged;
        Ok(done)
    }

    /// Deletes from the kernel's map of the threads goroutines ran on, when it is
    /// over half full, the pairs of the goroutines no row of `capture` (just
    /// drained) names: goroutines that ended or sleep long. One that runs again
    /// is counted again at its next start on a thread other than the one it
    /// parked from.
    pub fn age_ran_on(&mut self, capture: &crate::model::Capture) -> Result<u64> {
        let quiet = crate::model::ran_on::quiet(capture, self.capacity.ran_on / HALF);
        if quiet.is_empty() {
            return Ok(0);
        }
        let mut m: aya::maps::HashMap<&mut aya::maps::MapData, GoRanOn, u64> =
            aya::maps::HashMap::try_from(self.map_mut(names::GO_RAN_ON)?)?;
        let mut deleted = 0;
        for k in &quiet {
            deleted += u64::from(m.remove(k).is_ok());
        }
        Ok(deleted)
    }

    /// Deletes `keys` from map `name`; how many were there.
    fn delete<V: aya::Pod>(&mut self, name: &str, keys: Vec<u64>) -> Result<u64> {
        use std::os::fd::AsFd as _;
        let map = self.map_mut(name)?;
        let Map::HashMap(data) = map else { anyhow::bail!("map {name} is no hash map") };
        if !batch::delete(data.fd().as_fd(), &keys)? {
            let mut m: aya::maps::HashMap<&mut aya::maps::MapData, u64, V> =
                aya::maps::HashMap::try_from(map)?;
            for k in &keys {
                let _ = m.remove(k);
            }
        }
        Ok(keys.len() as u64)
    }

    /// The frames of a stack deleted at the last aging.
    pub(super) fn aged_stack(&self, id: u64) -> Option<&Vec<u64>> {
        self.aged.stacks.get(&id)
    }

    /// The chains deleted at the last aging.
    pub(super) fn aged_chains(&self) -> impl Iterator<Item = (u64, Hops)> + '_ {
        self.aged.chains.iter().map(|(&id, &h)| (id, h))
    }

    /// Makes drains report the waits in progress since the trace began, under
    /// the user stacks walked for them (see `seed_waits`): for a continuous
    /// trace, whose every interval counts the waits in progress.
    pub fn count_seeded_open(&mut self) {
        self.seeded_open = true;
    }
}
