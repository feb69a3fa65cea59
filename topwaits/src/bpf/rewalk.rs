//! Waits that the hooks' quick bodies began (their user stacks taken by frame
//! pointers while the full bodies loaded, see `SwitchOut::quick`) and that are
//! still open once the full bodies are in place: user space walks those stacks
//! again from the unwind tables and hands them to the full body, which uses one
//! only for the very wait it was walked for.

use anyhow::{Context as _, Result};
use aya::maps::{HashMap as BpfHashMap, MapData};
use topwaits_common::{names, stack_ref, KernelStack, Rewalk, SwitchOut, KSTACK_DEPTH, USER_SEED};

use super::{batch, Tracer};

/// A wait the quick body began and the full body has not yet ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuickWait {
    pub tgid: u32,
    pub tid: u32,
    /// Its start (`bpf_ktime_get_ns()`), which names it.
    pub ts: u64,
}

impl Tracer {
    /// The waits still open that the quick body began.
    pub fn quick_waits(&self) -> Result<Vec<QuickWait>> {
        let mut waits = Vec::new();
        batch::each(self.map(names::STARTS)?, |_: &u64, st: &SwitchOut| {
            if st.ts != 0 && st.quick != 0 {
                waits.push(QuickWait { tgid: st.tgid, tid: st.tid, ts: st.ts });
            }
        })
        .context("failed to read the per-task start map")?;
        Ok(waits)
    }

    /// Hands the full body `frames` (leaf first, as the walker keeps them) as
    /// the user stack of `wait`: kept in the user stack map under the reference
    /// the kernel would give them, and named in `REWALKS` for that wait alone.
    pub fn give_rewalk(&mut self, wait: &QuickWait, frames: &[u64]) -> Result<()> {
        let frames = &frames[..frames.len().min(KSTACK_DEPTH)];
        let ustack = stack_ref(frames, USER_SEED);
        let mut stack: KernelStack = [0; KSTACK_DEPTH];
        stack[..frames.len()].copy_from_slice(frames);
        let mut stacks: BpfHashMap<&mut MapData, u64, KernelStack> = BpfHashMap::try_from(self.map_mut(names::USTACKS)?)?;
        stacks.insert(ustack, stack, 0).context("failed to store a stack walked again")?;
        let mut rewalks: BpfHashMap<&mut MapData, u32, Rewalk> = BpfHashMap::try_from(self.map_mut(names::REWALKS)?)?;
        rewalks.insert(wait.tid, Rewalk { ts: wait.ts, ustack }, 0).context("failed to hand over a stack walked again")?;
        self.rewalked.insert((wait.tid, wait.ts), ustack);
        Ok(())
    }

    /// The stack walked again for the wait of `tid` that began at `ts`, if
    /// any: a wait still open at the end reports it, as the full body would.
    pub(super) fn rewalked(&self, tid: u32, ts: u64) -> Option<u64> {
        self.rewalked.get(&(tid, ts)).copied()
    }
}
