//! The goroutines parked in a live Go process, read from its runtime's list of
//! all goroutines (`runtime.allgs`) with `process_vm_readv`, for `topwaits
//! blocked`, which traces nothing: each one's goid, wait reason and the return
//! addresses of its stack, walked by frame pointers from what it saved when it
//! parked (`g.sched`).

use anyhow::{anyhow, Context as _, Result};

use crate::sys::elf;
use crate::sys::memory::Memory;

/// One parked goroutine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parked {
    pub goid: u64,
    /// The runtime's wait reason, by name where the binary's table is known.
    pub reason: String,
    /// Its pc in `gopark`, then return addresses, innermost first.
    pub pcs: Vec<u64>,
}

/// A Go process's goroutines at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Goroutines {
    pub version: Option<String>,
    /// How many goroutines the runtime lists (dead ones included).
    pub listed: usize,
    pub parked: Vec<Parked>,
}

/// Most goroutines read from one process.
const MAX_GOROUTINES: u64 = 1_000_000;
/// Most frames walked per goroutine.
const MAX_FRAMES: usize = 64;
/// `runtime.g.atomicstatus` of a parked goroutine, and the scan bit.
const G_WAITING: u32 = topwaits_common::golang::G_WAITING;
const G_SCAN: u32 = 0x1000;

/// Reads the goroutines of process `tgid`; None when it is no Go program.
pub fn read(tgid: u32, mem: &dyn Memory) -> Result<Option<Goroutines>> {
    let exe = format!("/proc/{tgid}/exe");
    let Some(rt) = super::runtime::read(&exe)? else { return Ok(None) };
    let goid_off = rt.goid_layout()? as u64;
    let allgs =
        rt.allgs.ok_or_else(|| anyhow!("its list of goroutines (runtime.allgs) was not found"))?;
    let mut f = std::fs::File::open(&exe).with_context(|| format!("failed to open {exe}"))?;
    let segments = elf::load_segments(&mut f)?;
    let bias = load_bias(tgid, &segments).unwrap_or(0);
    let at = allgs.wrapping_add(bias);
    let (Some(ptr), Some(len)) = (mem.word(at), mem.word(at + 8)) else {
        return Err(anyhow!("its list of goroutines could not be read"));
    };
    if len > MAX_GOROUTINES {
        return Err(anyhow!("its list of goroutines says {len} goroutines"));
    }
    let gs = mem.bytes(ptr, len as usize * 8).context("its goroutines could not be read")?;
    let mut parked = Vec::new();
    for g in gs.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default())) {
        let Some(head) = mem.bytes(g, goid_off as usize + 32) else { continue };
        let word = |off: u64| {
            let o = off as usize;
            u64::from_le_bytes(head[o..o + 8].try_into().unwrap_or_default())
        };
        if word(goid_off - 8) as u32 & !G_SCAN != G_WAITING {
            continue;
        }
        let reason = head[goid_off as usize + 24] as usize;
        parked.push(Parked {
            goid: word(goid_off),
            reason: rt
                .reasons
                .get(reason)
                .cloned()
                .unwrap_or_else(|| format!("wait reason {reason}")),
            // g.sched: its pc at 56 + 8, its frame pointer at 56 + 48.
            pcs: walk(mem, word(64), word(104)),
        });
    }
    Ok(Some(Goroutines { version: rt.version, listed: len as usize, parked }))
}

/// A frame-pointer walk from `pc` and its function's frame pointer `bp`.
fn walk(mem: &dyn Memory, pc: u64, mut bp: u64) -> Vec<u64> {
    let mut pcs = vec![pc];
    while pcs.len() < MAX_FRAMES && bp != 0 && bp & 7 == 0 {
        let (Some(next), Some(ret)) = (mem.word(bp), mem.word(bp + 8)) else { break };
        if ret == 0 {
            break;
        }
        pcs.push(ret);
        // A caller's frame lies above its callee's on the same stack.
        if next <= bp {
            break;
        }
        bp = next;
    }
    pcs
}

/// How far the process at `tgid` loaded its executable from its file's
/// addresses (0 for the usual, fixed-address Go program).
fn load_bias(tgid: u32, segments: &[elf::Segment]) -> Option<u64> {
    let exe = std::fs::read_link(format!("/proc/{tgid}/exe")).ok()?;
    let exe = exe.to_str()?;
    let maps = crate::sys::procfs::maps_of(tgid);
    let m = maps.iter().find(|m| m.path == exe)?;
    Some(m.start.wrapping_sub(elf::mapping_vaddr(segments, m.offset, m.exec)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory of plain words.
    struct Words(Vec<(u64, u64)>);

    impl Memory for Words {
        fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
            match self.0.iter().find(|(a, _)| *a == addr) {
                Some((_, w)) if buf.len() == 8 => {
                    buf.copy_from_slice(&w.to_le_bytes());
                    8
                }
                _ => 0,
            }
        }
    }

    #[test]
    fn a_parked_stack_is_walked_up_its_frame_pointers_and_stops_cleanly() {
        let mem = Words(vec![(0x1000, 0x1040), (0x1008, 0xaa), (0x1040, 0x1080), (0x1048, 0xbb)]);
        assert_eq!(walk(&mem, 0x99, 0x1000), vec![0x99, 0xaa, 0xbb]);
        // A frame pointer that goes down the stack ends the walk there.
        let looped = Words(vec![(0x1000, 0x1000), (0x1008, 0xaa)]);
        assert_eq!(walk(&looped, 0x99, 0x1000), vec![0x99, 0xaa]);
        assert_eq!(walk(&looped, 0x99, 0), vec![0x99]);
    }
}
