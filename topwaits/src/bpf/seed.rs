//! Waits in progress when a trace begins: the `seed_waits` iterator records
//! them from the trace's start and lists their threads' user registers; the
//! user stacks walked from those registers are handed back in `REWALKS`.

use anyhow::{anyhow, Result};
use aya::maps::{HashMap as BpfHashMap, MapData};
use aya::{Btf, Ebpf};
use topwaits_common::{
    names, stack_ref, walker, KernelStack, Rewalk, SeededWait, KSTACK_DEPTH, USER_SEED,
};

/// Loads the iterator (the first time) and runs it once: every traced thread
/// off its CPU gets its wait recorded from now, and those with a user stack
/// are returned, with their registers.
pub fn run(ebpf: &mut Ebpf, btf: &Btf) -> Result<Vec<SeededWait>> {
    Ok(parse(&super::regs::run_task_iterator(
        ebpf,
        names::PROG_SEED_WAITS,
        btf,
        "the iterator of the waits in progress",
    )?))
}

/// The records the iterator wrote; a torn tail is left out.
fn parse(bytes: &[u8]) -> Vec<SeededWait> {
    let word =
        |c: &[u8], at: usize| u64::from_ne_bytes(c[at..at + 8].try_into().unwrap_or_default());
    let half =
        |c: &[u8], at: usize| u32::from_ne_bytes(c[at..at + 4].try_into().unwrap_or_default());
    bytes
        .chunks_exact(size_of::<SeededWait>())
        .map(|c| SeededWait {
            task: word(c, 0),
            ts: word(c, 8),
            tid: half(c, 16),
            tgid: half(c, 20),
            ip: word(c, 24),
            sp: word(c, 32),
            bp: word(c, 40),
        })
        .collect()
}

/// The frames of a user stack as the kernel keeps them: at most
/// `KSTACK_DEPTH`, the last a depth mark where more were walked, zeros after.
fn as_kept(frames: &[u64]) -> (KernelStack, usize) {
    let mut kept = [0u64; KSTACK_DEPTH];
    let n = frames.len().min(KSTACK_DEPTH);
    kept[..n].copy_from_slice(&frames[..n]);
    if frames.len() > KSTACK_DEPTH {
        kept[KSTACK_DEPTH - 1] = walker::CUT_MARK | walker::cut::DEPTH;
    }
    (kept, n)
}

/// Hands the kernel `frames`, the user stack walked for the seeded wait `w`:
/// kept in `USTACKS` under the reference the kernel would give it, and named
/// in `REWALKS` for the wait's end. False when a map is full (the wait keeps
/// its mark).
pub fn hand_back(ebpf: &mut Ebpf, w: &SeededWait, frames: &[u64]) -> Result<bool> {
    let (kept, n) = as_kept(frames);
    if n == 0 {
        return Ok(false);
    }
    let id = stack_ref(&kept[..n], USER_SEED);
    let map =
        ebpf.map_mut(names::USTACKS).ok_or_else(|| anyhow!("map {} missing", names::USTACKS))?;
    let mut stacks: BpfHashMap<&mut MapData, u64, KernelStack> = BpfHashMap::try_from(map)?;
    if stacks.get(&id, 0).is_err() && stacks.insert(id, kept, 0).is_err() {
        return Ok(false);
    }
    let map =
        ebpf.map_mut(names::REWALKS).ok_or_else(|| anyhow!("map {} missing", names::REWALKS))?;
    let mut rewalks: BpfHashMap<&mut MapData, u64, Rewalk> = BpfHashMap::try_from(map)?;
    Ok(rewalks.insert(w.task, Rewalk { ts: w.ts, ustack: id }, 0).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_read_whole_and_a_torn_tail_is_left_out() {
        let rec = |task: u64, tid: u32| {
            let mut b = Vec::new();
            for w in [task, 5_000, tid as u64 | 9 << 32, 0x401000, 0x7ffc_0000, 0x7ffc_0040] {
                b.extend_from_slice(&w.to_ne_bytes());
            }
            b
        };
        let mut bytes = rec(0xffff_8880_0000_1000, 12);
        bytes.extend(rec(0xffff_8880_0000_2000, 13));
        bytes.extend(&[1, 2, 3]);
        let got = parse(&bytes);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0],
            SeededWait {
                task: 0xffff_8880_0000_1000,
                ts: 5_000,
                tid: 12,
                tgid: 9,
                ip: 0x401000,
                sp: 0x7ffc_0000,
                bp: 0x7ffc_0040
            }
        );
        assert_eq!(got[1].tid, 13);
    }

    #[test]
    fn a_stack_deeper_than_the_kernel_keeps_ends_in_a_depth_mark() {
        let (kept, n) = as_kept(&[1, 2, 3]);
        assert_eq!((n, &kept[..4]), (3, &[1, 2, 3, 0][..]));
        let deep: Vec<u64> = (1..=KSTACK_DEPTH as u64 + 5).collect();
        let (kept, n) = as_kept(&deep);
        assert_eq!(n, KSTACK_DEPTH);
        assert_eq!(kept[KSTACK_DEPTH - 2], KSTACK_DEPTH as u64 - 1);
        assert_eq!(kept[KSTACK_DEPTH - 1], walker::CUT_MARK | walker::cut::DEPTH);
    }
}
