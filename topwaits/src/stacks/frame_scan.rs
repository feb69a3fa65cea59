//! User stacks of threads that are blocked right now, recovered without stopping
//! them: from the user pc and sp that `/proc/TID/syscall` shows and the thread's
//! stack memory. The frame-pointer register is not shown there, so the walk finds
//! the first frame record on the stack (a saved frame pointer followed by a return
//! address, linking on to further records), follows that chain, and takes the
//! return addresses that lie between sp and it, where functions built without frame
//! pointers (a libc syscall wrapper) leave them. A return address must lie in an
//! executable mapping and follow a call instruction; anything else is junk and
//! ends or is left out of the walk. Pure: memory and mappings come in as traits.

use std::collections::HashMap;

/// The walker's inputs, defined beside the readers of `/proc` that give them.
pub use crate::sys::memory::Memory;
pub use crate::sys::procfs::{region_of, Region};

/// Which instruction set's call instructions to look for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
    /// Unknown: any address in an executable mapping counts.
    Other,
}

impl Arch {
    /// This machine's.
    pub fn native() -> Self {
        if cfg!(target_arch = "x86_64") {
            Arch::X86_64
        } else if cfg!(target_arch = "aarch64") {
            Arch::Aarch64
        } else {
            Arch::Other
        }
    }
}

/// Most frames a walk returns.
pub const MAX_FRAMES: usize = 127;
/// How far above sp the first frame record is looked for.
const SCAN_BYTES: u64 = 64 * 1024;
/// Most return addresses taken between sp and the first frame record.
const MAX_SCANNED: usize = 8;
const PAGE: u64 = 4096;

/// Page-sized reads, each made once.
struct Pages<'a> {
    mem: &'a dyn Memory,
    pages: HashMap<u64, Option<Box<[u8]>>>,
}

impl Pages<'_> {
    fn bytes(&mut self, addr: u64, n: usize) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(n);
        let mut a = addr;
        while out.len() < n {
            let base = a & !(PAGE - 1);
            let mem = self.mem;
            let page = self.pages.entry(base).or_insert_with(|| {
                let mut buf = vec![0u8; PAGE as usize];
                (mem.read(base, &mut buf) == PAGE as usize).then(|| buf.into_boxed_slice())
            });
            let page = page.as_ref()?;
            let from = (a - base) as usize;
            let take = (PAGE as usize - from).min(n - out.len());
            out.extend_from_slice(&page[from..from + take]);
            a += take as u64;
        }
        Some(out)
    }

    fn word(&mut self, addr: u64) -> Option<u64> {
        let b = self.bytes(addr, 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }
}

/// The walk's view of the process: mappings, memory, instruction set.
pub struct Walker<'a> {
    regions: &'a [Region],
    pages: Pages<'a>,
    arch: Arch,
}

impl<'a> Walker<'a> {
    /// `regions` sorted by start, as `/proc/PID/maps` lists them.
    pub fn new(regions: &'a [Region], mem: &'a dyn Memory, arch: Arch) -> Self {
        Walker { regions, pages: Pages { mem, pages: HashMap::new() }, arch }
    }

    fn region(&self, addr: u64) -> Option<&Region> {
        region_of(self.regions, addr)
    }

    /// Whether `addr` lies in an executable mapping.
    pub fn is_code(&self, addr: u64) -> bool {
        self.region(addr).is_some_and(|r| r.exec)
    }

    /// Whether `addr` can be a return address: in code, right after a call.
    pub fn is_return(&mut self, addr: u64) -> bool {
        if !self.is_code(addr) {
            return false;
        }
        match self.arch {
            Arch::Other => true,
            Arch::Aarch64 => {
                addr.is_multiple_of(4)
                    && self.pages.bytes(addr - 4, 4).is_some_and(|b| {
                        let insn = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                        insn & 0xfc00_0000 == 0x9400_0000 || insn & 0xffff_fc1f == 0xd63f_0000
                    })
            }
            Arch::X86_64 => {
                addr >= 7 && self.pages.bytes(addr - 7, 7).is_some_and(|b| follows_x86_call(&b))
            }
        }
    }

    /// Where the direct call before return address `ret` went (x86-64 `E8 rel32`,
    /// arm64 `BL`); `None` for an indirect call or when it cannot be read.
    pub fn call_target(&mut self, ret: u64) -> Option<u64> {
        match self.arch {
            Arch::X86_64 => {
                let b = self.pages.bytes(ret.checked_sub(5)?, 5)?;
                (b[0] == 0xe8).then(|| {
                    ret.wrapping_add_signed(i32::from_le_bytes([b[1], b[2], b[3], b[4]]) as i64)
                })
            }
            Arch::Aarch64 => {
                let b = self.pages.bytes(ret.checked_sub(4)?, 4)?;
                let insn = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                // BL imm26: a signed word offset from the BL itself.
                (insn & 0xfc00_0000 == 0x9400_0000)
                    .then(|| (ret - 4).wrapping_add_signed((((insn << 6) as i32) >> 4) as i64))
            }
            Arch::Other => None,
        }
    }

    /// Whether `a` and `b` lie in the same mapping.
    pub fn same_mapping(&self, a: u64, b: u64) -> bool {
        matches!((self.region(a), self.region(b)), (Some(x), Some(y)) if x == y)
    }

    /// The user stack of a blocked thread, leaf first, from its pc and sp.
    pub fn walk(&mut self, pc: u64, sp: u64) -> Vec<u64> {
        let mut frames = Vec::new();
        if !self.is_code(pc) {
            return frames;
        }
        frames.push(pc);
        let Some(stack) = self.region(sp).map(|r| r.end) else {
            return frames;
        };
        let limit = stack.min(sp.saturating_add(SCAN_BYTES));
        let mut scanned = Vec::new();
        let mut a = (sp + 7) & !7;
        while a + 16 <= limit {
            if let Some(chain) = self.chain_at(a, stack) {
                frames.extend(scanned);
                frames.extend(chain);
                frames.dedup();
                frames.truncate(MAX_FRAMES);
                return frames;
            }
            if scanned.len() < MAX_SCANNED {
                if let Some(w) = self.pages.word(a) {
                    if self.is_return(w) {
                        scanned.push(w);
                    }
                }
            }
            a += 8;
        }
        // No frame record: the return addresses seen are all there is.
        frames.extend(scanned);
        frames.dedup();
        frames
    }

    /// The return addresses of the frame-record chain that starts at `a`, if one
    /// does: `[a]` is a saved frame pointer above `a` (or 0 at the outermost frame)
    /// and `[a + 8]` a return address, and so on for at least two records.
    fn chain_at(&mut self, a: u64, stack_end: u64) -> Option<Vec<u64>> {
        let mut out = Vec::new();
        let mut fp = a;
        while out.len() < MAX_FRAMES {
            let next = self.pages.word(fp)?;
            let ret = self.pages.word(fp + 8)?;
            if !self.is_return(ret) {
                break;
            }
            out.push(ret);
            if next == 0 {
                break;
            }
            if next <= fp || next % 8 != 0 || next + 16 > stack_end {
                break;
            }
            fp = next;
        }
        // One lone record is too easily a coincidence.
        (out.len() >= 2).then_some(out)
    }
}

/// How far before the pc a leaf's entry may lie for a direct call to it to count.
pub const LEAF_SPAN: u64 = 4096;

/// The caller of a leaf function that keeps no frame pointer (a libc syscall
/// wrapper), from the `words` found at the stack pointer (`--leaf-callers`): the
/// first that can be a return address of a call to the leaf, unless the
/// frame-pointer walk already has it as frame 1 (the leaf had a frame, so its
/// caller is there). `frames` is the walked stack, leaf first; `calls_leaf(w, pc)`
/// says whether `w` follows a call that can have entered the function at `pc`.
pub fn leaf_caller(
    frames: &[u64],
    words: &[u64],
    mut calls_leaf: impl FnMut(u64, u64) -> bool,
) -> Option<u64> {
    let pc = *frames.first()?;
    let c = words.iter().copied().find(|&w| w != pc && calls_leaf(w, pc))?;
    (frames.get(1) != Some(&c)).then_some(c)
}

impl Walker<'_> {
    /// Whether `ret` can be the return address of a call into the leaf at `pc`: it
    /// follows a call, and a direct call went to an entry at most [`LEAF_SPAN`]
    /// before `pc`, or to another mapping (a PLT stub); an indirect call may have.
    pub fn calls_leaf(&mut self, ret: u64, pc: u64) -> bool {
        if !self.is_return(ret) {
            return false;
        }
        match self.call_target(ret) {
            Some(t) => (t <= pc && pc - t < LEAF_SPAN) || !self.same_mapping(t, pc),
            None => true,
        }
    }
}

/// Whether the 7 bytes before a return address end with an x86-64 call:
/// `E8 rel32`, or `FF /2` with a register, memory, SIB or displacement operand
/// (with or without a REX prefix, which comes before the `FF`).
pub fn follows_x86_call(b: &[u8]) -> bool {
    let n = b.len();
    if n < 7 {
        return false;
    }
    let call_ff =
        |at: usize, modrm_ok: &dyn Fn(u8) -> bool| b[n - at] == 0xff && modrm_ok(b[n - at + 1]);
    let reg2 = |m: u8| (m >> 3) & 7 == 2;
    b[n - 5] == 0xe8
        // FF D0+r: call reg; FF 10+r: call [reg] (not SIB 14, not rip 15).
        || call_ff(2, &|m| reg2(m) && (m >> 6 == 3 || (m >> 6 == 0 && m & 7 != 4 && m & 7 != 5)))
        // FF 50+r disp8, or FF 14 SIB.
        || call_ff(3, &|m| reg2(m) && ((m >> 6 == 1 && m & 7 != 4) || (m >> 6 == 0 && m & 7 == 4)))
        // FF 54 SIB disp8.
        || call_ff(4, &|m| reg2(m) && m >> 6 == 1 && m & 7 == 4)
        // FF 15 rip+disp32, FF 90+r disp32.
        || call_ff(6, &|m| reg2(m) && ((m >> 6 == 0 && m & 7 == 5) || (m >> 6 == 2 && m & 7 != 4)))
        // FF 94 SIB disp32.
        || call_ff(7, &|m| reg2(m) && m >> 6 == 2 && m & 7 == 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_leaf_caller_is_the_first_return_address_the_walk_lacks() {
        let returns = |a: u64, _pc: u64| a == 0x5000 || a == 0x6000;
        // pc in a frameless wrapper; the walk went from its caller's caller.
        assert_eq!(leaf_caller(&[0x7000, 0x6000], &[0x1234, 0x5000], returns), Some(0x5000));
        // The first word that is a return address is what the walk has as frame 1:
        // the leaf kept a frame, nothing to add.
        assert_eq!(leaf_caller(&[0x7000, 0x6000], &[0x6000, 0x5000], returns), None);
        assert_eq!(leaf_caller(&[0x7000], &[0x42, 0x99], returns), None, "locals are no callers");
        assert_eq!(leaf_caller(&[], &[0x5000], returns), None);
    }

    /// Memory made of byte runs at addresses.
    #[derive(Default)]
    struct Fake {
        bytes: BTreeMap<u64, u8>,
    }

    impl Fake {
        fn put(&mut self, addr: u64, data: &[u8]) {
            for (i, b) in data.iter().enumerate() {
                self.bytes.insert(addr + i as u64, *b);
            }
        }
        fn put_word(&mut self, addr: u64, w: u64) {
            self.put(addr, &w.to_le_bytes());
        }
    }

    impl Memory for Fake {
        fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
            // Readable inside the fake mappings, where unset bytes read as zeros (as
            // untouched anonymous memory does); nothing outside them.
            if !(0x1000..0x9000).contains(&addr) && !(0x7f00_0000..0x7f01_0000).contains(&addr) {
                return 0;
            }
            for (i, b) in buf.iter_mut().enumerate() {
                *b = self.bytes.get(&(addr + i as u64)).copied().unwrap_or(0);
            }
            buf.len()
        }
    }

    const CODE: u64 = 0x1000; // 0x1000..0x3000 executable
    const DATA: u64 = 0x3000; // 0x3000..0x5000 data
    const STACK_LO: u64 = 0x7f00_0000;
    const STACK_HI: u64 = 0x7f01_0000;

    fn regions() -> Vec<Region> {
        vec![
            Region { start: CODE, end: CODE + 0x2000, exec: true },
            Region { start: DATA, end: DATA + 0x2000, exec: false },
            Region { start: STACK_LO, end: STACK_HI, exec: false },
        ]
    }

    /// Puts `E8 rel32` before `ret`, so that `ret` is a return address.
    fn call_before(m: &mut Fake, ret: u64) {
        m.put(ret - 5, &[0xe8, 0, 0, 0, 0]);
    }

    /// A direct call counts only if it went to the leaf (an entry shortly before
    /// its pc) or out of the leaf's mapping (a PLT stub); a stale return address of
    /// a call to some other function in the leaf's module does not.
    #[test]
    fn calls_into_the_leaf_are_told_from_stale_return_addresses() {
        let mut m = Fake::default();
        let pc = CODE + 0x1800;
        let call = |m: &mut Fake, ret: u64, target: u64| {
            let rel = (target as i64 - ret as i64) as i32;
            m.put(ret - 5, &[0xe8]);
            m.put(ret - 4, &rel.to_le_bytes());
        };
        call(&mut m, CODE + 0x105, pc - 0x40); // into the leaf
        call(&mut m, CODE + 0x205, CODE + 0x10); // to another function, 6 KiB away
        call(&mut m, CODE + 0x305, DATA + 0x10); // to another mapping
        m.put(CODE + 0x401, &[0xff, 0xd0]); // call *%rax, returning to 0x403
        let r = regions();
        let mut w = Walker::new(&r, &m, Arch::X86_64);
        assert_eq!(w.call_target(CODE + 0x105), Some(pc - 0x40));
        assert!(w.calls_leaf(CODE + 0x105, pc));
        assert!(!w.calls_leaf(CODE + 0x205, pc), "a call to another function of the module");
        assert!(w.calls_leaf(CODE + 0x305, pc), "a stub in another mapping");
        assert!(w.calls_leaf(CODE + 0x403, pc), "an indirect call");
        assert!(!w.calls_leaf(DATA + 0x20, pc), "not code");
        let words = [DATA + 0x20, CODE + 0x205, CODE + 0x105];
        assert_eq!(
            leaf_caller(&[pc, CODE + 0x1f00], &words, |a, p| w.calls_leaf(a, p)),
            Some(CODE + 0x105)
        );
    }

    #[test]
    fn x86_call_forms() {
        let ends = |tail: &[u8]| {
            let mut b = vec![0x90u8; 7 - tail.len()];
            b.extend_from_slice(tail);
            follows_x86_call(&b)
        };
        assert!(ends(&[0xe8, 1, 2, 3, 4]));
        assert!(ends(&[0xff, 0xd0]), "call rax");
        assert!(ends(&[0x41, 0xff, 0xd3]), "call r11");
        assert!(ends(&[0xff, 0x50, 0x08]), "call [rax+8]");
        assert!(ends(&[0xff, 0x15, 1, 2, 3, 4]), "call [rip+x]");
        assert!(ends(&[0xff, 0x94, 0x24, 1, 2, 3, 4]), "call [rsp+x]");
        assert!(!ends(&[0x90, 0x90]));
        assert!(!ends(&[0xff, 0xe0]), "jmp rax is no call");
        assert!(!ends(&[0x48, 0x89, 0xc7]), "mov");
    }

    /// A libc-like leaf without a frame at pc, its return address at sp+16, then a
    /// chain of two frame records, the outermost ending in 0.
    fn stack() -> (Fake, u64, u64) {
        let mut m = Fake::default();
        let pc = CODE + 0x10;
        let sp = STACK_LO + 0x100;
        let (r1, r2, r3) = (CODE + 0x200, CODE + 0x300, CODE + 0x400);
        for r in [r1, r2, r3] {
            call_before(&mut m, r);
        }
        m.put_word(sp, 0x4242); // a local
        m.put_word(sp + 8, DATA + 0x10); // a pointer into data: junk as a frame
        m.put_word(sp + 16, r1); // the leaf's return address
        let rec1 = sp + 0x40;
        let rec2 = sp + 0x80;
        m.put_word(rec1, rec2);
        m.put_word(rec1 + 8, r2);
        m.put_word(rec2, 0);
        m.put_word(rec2 + 8, r3);
        (m, pc, sp)
    }

    #[test]
    fn leaf_return_address_then_the_frame_chain() {
        let (m, pc, sp) = stack();
        let regions = regions();
        let mut w = Walker::new(&regions, &m, Arch::X86_64);
        assert_eq!(w.walk(pc, sp), vec![pc, CODE + 0x200, CODE + 0x300, CODE + 0x400]);
    }

    #[test]
    fn data_addresses_and_addresses_not_after_a_call_are_never_frames() {
        let (mut m, pc, sp) = stack();
        // A code address that does not follow a call (a function pointer).
        m.put_word(sp + 24, CODE + 0x800);
        let regions = regions();
        let frames = Walker::new(&regions, &m, Arch::X86_64).walk(pc, sp);
        assert!(!frames.contains(&(DATA + 0x10)), "{frames:x?}");
        assert!(!frames.contains(&(CODE + 0x800)), "{frames:x?}");
        for f in &frames {
            assert!((CODE..CODE + 0x2000).contains(f), "{f:#x} outside code");
        }
    }

    #[test]
    fn a_pc_outside_code_gives_no_stack_and_unreadable_memory_stops_cleanly() {
        let (m, _, sp) = stack();
        let regions = regions();
        assert!(Walker::new(&regions, &m, Arch::X86_64).walk(DATA + 4, sp).is_empty());
        // sp outside any mapping: only the pc.
        assert_eq!(
            Walker::new(&regions, &m, Arch::X86_64).walk(CODE + 0x10, 0x10),
            vec![CODE + 0x10]
        );
        let empty = Fake::default();
        let regions = regions.clone();
        let got = Walker::new(&regions, &empty, Arch::Other).walk(CODE + 0x10, 0x6000_0000);
        assert_eq!(got, vec![CODE + 0x10]);
    }

    #[test]
    fn a_chain_that_loops_or_goes_down_ends() {
        let mut m = Fake::default();
        let (r1, r2) = (CODE + 0x200, CODE + 0x300);
        call_before(&mut m, r1);
        call_before(&mut m, r2);
        let sp = STACK_LO + 0x100;
        let rec1 = sp + 0x40;
        let rec2 = sp + 0x80;
        m.put_word(rec1, rec2);
        m.put_word(rec1 + 8, r1);
        m.put_word(rec2, rec1); // points back down: a loop
        m.put_word(rec2 + 8, r2);
        let regions = regions();
        let frames = Walker::new(&regions, &m, Arch::X86_64).walk(CODE + 0x10, sp);
        assert_eq!(frames, vec![CODE + 0x10, r1, r2]);
    }
}
