//! Go's own function table, `.gopclntab` (the format of Go 1.18 and on): every
//! function's entry, name and frame size at each pc (`pcsp`), and the file and
//! line of each pc. The linker writes it into every Go binary, stripped or not,
//! as the runtime's tracebacks need it, so it names and unwinds Go code where
//! `.symtab` and `.eh_frame` are gone (Debian's etcd and prometheus keep only
//! the C parts' `.eh_frame`). Pure: parsed from bytes, every offset checked.

use anyhow::{bail, Result};

/// The layout of a table, by the magic it starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Go 1.18 and 1.19 (`0xfffffff0`).
    Go118,
    /// Go 1.20 and on (`0xfffffff1`): `_func` gained `startLine`.
    Go120,
}

impl Layout {
    /// The byte offset of `funcID` in a `_func`, and the size of the fixed
    /// part (the `pcdata` offsets follow it).
    fn func_id_at(self) -> usize {
        match self {
            Layout::Go118 => 36,
            Layout::Go120 => 40,
        }
    }

    fn func_size(self) -> usize {
        self.func_id_at() + 4
    }
}

/// The `pcdata` table that says which inlined call a pc is in (-1: none).
const PCDATA_INL_TREE_INDEX: usize = 2;

/// A parsed table: offsets into `data`, each checked to lie within it.
#[derive(Clone, Debug)]
pub struct Pclntab {
    data: Vec<u8>,
    pub layout: Layout,
    /// The address function entries are offsets from.
    text_start: u64,
    nfunc: usize,
    /// Multiplier of pc deltas in the value tables (1 on x86-64).
    quantum: u64,
    funcnames: usize,
    cutab: usize,
    filetab: usize,
    pctab: usize,
    functab: usize,
}

/// One function: where it starts and ends, and its `_func`'s offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Func {
    pub entry: u64,
    pub end: u64,
    off: usize,
}

fn u32_at(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(d: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(d.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// A LEB128 varint at `p`: (value, bytes read).
pub(super) fn varint(p: &[u8]) -> Option<(u32, usize)> {
    let mut v = 0u32;
    for (i, &b) in p.iter().enumerate().take(5) {
        v |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// The NUL-terminated string at `at`.
fn c_str(d: &[u8], at: usize) -> Option<&str> {
    let rest = d.get(at..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

impl Pclntab {
    /// Parses the section's bytes. `text_addr` is the address of the binary's
    /// `.text`, for a table whose text start the loader relocates (it reads 0
    /// in the file of a position-independent binary).
    pub fn parse(data: Vec<u8>, text_addr: u64) -> Result<Pclntab> {
        let layout = match u32_at(&data, 0) {
            Some(0xffff_fff0) => Layout::Go118,
            Some(0xffff_fff1) => Layout::Go120,
            Some(m) => bail!("a Go function table of a layout before Go 1.18 (magic {m:#x})"),
            None => bail!("a Go function table too short for its header"),
        };
        let (min_lc, ptr_size) =
            (data.get(6).copied().unwrap_or(0), data.get(7).copied().unwrap_or(0));
        if ptr_size != 8 || min_lc == 0 {
            bail!(
                "a Go function table for {ptr_size}-byte pointers: only 64-bit programs are read"
            );
        }
        let word = |i: usize| u64_at(&data, 8 + 8 * i).map(|v| v as usize);
        let (
            Some(nfunc),
            Some(text),
            Some(funcnames),
            Some(cutab),
            Some(filetab),
            Some(pctab),
            Some(functab),
        ) = (word(0), word(2), word(3), word(4), word(5), word(6), word(7))
        else {
            bail!("a Go function table too short for its header");
        };
        let within = |off: usize| off < data.len();
        if ![funcnames, cutab, filetab, pctab, functab].into_iter().all(within) {
            bail!("a Go function table whose offsets lie outside it");
        }
        // The functab: nfunc entries and an end, 8 bytes each.
        if nfunc
            .checked_add(1)
            .and_then(|n| n.checked_mul(8))
            .and_then(|n| n.checked_add(functab))
            .is_none_or(|end| end > data.len())
        {
            bail!("a Go function table of {nfunc} functions does not hold them");
        }
        let text_start = if text == 0 { text_addr } else { text as u64 };
        Ok(Pclntab {
            data,
            layout,
            text_start,
            nfunc,
            quantum: u64::from(min_lc),
            funcnames,
            cutab,
            filetab,
            pctab,
            functab,
        })
    }

    /// How many functions it has.
    pub fn len(&self) -> usize {
        self.nfunc
    }

    pub fn is_empty(&self) -> bool {
        self.nfunc == 0
    }

    /// Function `i` (0 to `len()`), if its entries hold together.
    fn func(&self, i: usize) -> Option<Func> {
        let at = self.functab + 8 * i;
        let (entry, off, next) =
            (u32_at(&self.data, at)?, u32_at(&self.data, at + 4)?, u32_at(&self.data, at + 8)?);
        let off = self.functab + off as usize;
        (off + self.layout.func_size() <= self.data.len() && next >= entry).then(|| Func {
            entry: self.text_start + u64::from(entry),
            end: self.text_start + u64::from(next),
            off,
        })
    }

    /// Every function, by address.
    pub fn funcs(&self) -> impl Iterator<Item = Func> + '_ {
        (0..self.nfunc).filter_map(|i| self.func(i))
    }

    /// The function whose code holds `pc`.
    pub fn func_at(&self, pc: u64) -> Option<Func> {
        let entry_of = |i: usize| {
            u32_at(&self.data, self.functab + 8 * i).map(|e| self.text_start + u64::from(e))
        };
        if pc < entry_of(0)? {
            return None;
        }
        // The last function whose entry is at most pc.
        let (mut lo, mut hi) = (0usize, self.nfunc);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if entry_of(mid)? <= pc {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        self.func(lo).filter(|f| pc < f.end)
    }

    fn field(&self, f: Func, at: usize) -> Option<u32> {
        u32_at(&self.data, f.off + at)
    }

    /// The function's name.
    pub fn name(&self, f: Func) -> Option<&str> {
        let nameoff = self.field(f, 4)? as i32;
        c_str(&self.data, self.funcnames + usize::try_from(nameoff).ok()?)
    }

    /// Its `funcID` (what the runtime treats it as: `goexit`, `mstart`, ...).
    pub fn func_id(&self, f: Func) -> Option<u8> {
        self.data.get(f.off + self.layout.func_id_at()).copied()
    }

    /// The value table at `off` in the pc tables, decoded over `f`: (from,
    /// to, value) for each run of pcs, in order; None where it is damaged.
    fn values(&self, f: Func, off: u32) -> Option<Vec<(u64, u64, i32)>> {
        if off == 0 {
            return Some(Vec::new());
        }
        let mut p = self.data.get(self.pctab + off as usize..)?;
        let (mut pc, mut val) = (f.entry, -1i32);
        let mut out = Vec::new();
        let mut first = true;
        loop {
            let (uv, n) = varint(p)?;
            if uv == 0 && !first {
                return Some(out);
            }
            first = false;
            p = p.get(n..)?;
            val = val.wrapping_add(((uv >> 1) as i32) ^ -((uv & 1) as i32));
            let (pcd, n) = varint(p)?;
            p = p.get(n..)?;
            let next = pc.checked_add(u64::from(pcd) * self.quantum)?;
            if next > f.end {
                return None;
            }
            out.push((pc, next, val));
            pc = next;
            if out.len() > 1 << 20 {
                return None;
            }
        }
    }

    /// The frame size (bytes below the return address) over `f`'s code: (from,
    /// to, size) runs, in order.
    pub fn frame_sizes(&self, f: Func) -> Option<Vec<(u64, u64, i32)>> {
        self.values(f, self.field(f, 16)?)
    }

    /// The value of the table at `off` at `pc`.
    fn value_at(&self, f: Func, off: u32, pc: u64) -> Option<i32> {
        self.values(f, off)?.into_iter().find(|&(from, to, _)| from <= pc && pc < to).map(|r| r.2)
    }

    /// The file and line `pc` of `f` came from, where it is the function's
    /// own code (in inlined code they are the inlined function's, which the
    /// function's name would not say).
    pub fn line(&self, f: Func, pc: u64) -> Option<(&str, u32)> {
        let npcdata = self.field(f, 28)? as usize;
        if npcdata > PCDATA_INL_TREE_INDEX {
            let inl = self.field(f, self.layout.func_size() + 4 * PCDATA_INL_TREE_INDEX)?;
            if inl != 0 && self.value_at(f, inl, pc).is_some_and(|v| v >= 0) {
                return None;
            }
        }
        let file = self.value_at(f, self.field(f, 20)?, pc)?;
        let line = self.value_at(f, self.field(f, 24)?, pc)?;
        let cu = self.field(f, 32)? as usize;
        let file_off = u32_at(&self.data, self.cutab + 4 * (cu + usize::try_from(file).ok()?))?;
        let name = c_str(&self.data, self.filetab + file_off as usize)?;
        Some((name, u32::try_from(line).ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_signed_deltas_decode_as_the_runtime_reads_them() {
        assert_eq!(varint(&[0x05]), Some((5, 1)));
        assert_eq!(varint(&[0x80, 0x01]), Some((128, 2)));
        assert_eq!(varint(&[0xff, 0xff, 0xff, 0xff, 0x0f]), Some((u32::MAX, 5)));
        assert_eq!(varint(&[0x80, 0x80]), None, "cut short");
        // Zigzag: 2 -> +1, 3 -> -2.
        let dec = |uv: u32| ((uv >> 1) as i32) ^ -((uv & 1) as i32);
        assert_eq!((dec(0), dec(2), dec(3), dec(48)), (0, 1, -2, 24));
    }

    /// A table of one function at 0x1000..0x1020, built by hand in the Go 1.20
    /// layout: its frame is 0 for 4 bytes, 24 for 24, 0 for the last 4.
    fn one_function() -> Vec<u8> {
        let mut d = vec![0u8; 0x200];
        d[..4].copy_from_slice(&0xffff_fff1u32.to_le_bytes());
        d[6] = 1;
        d[7] = 8;
        let header = [1u64, 1, 0x1000, 0x80, 0x90, 0xa0, 0xc0, 0x100];
        for (i, w) in header.iter().enumerate() {
            d[8 + 8 * i..16 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        d[0x80..0x88].copy_from_slice(b"main.f\0\0");
        d[0x90..0x94].copy_from_slice(&0u32.to_le_bytes());
        d[0xa0..0xa8].copy_from_slice(b"f.go\0\0\0\0");
        // pcsp at pctab+1: +1 for 4 (value 0), +24 for 24, -24 for 4, end.
        let pcsp = [0x02, 0x04, 0x30, 0x18, 0x2f, 0x04, 0x00];
        d[0xc1..0xc1 + pcsp.len()].copy_from_slice(&pcsp);
        // pcfile: 0 over all; pcln: line 7 over all.
        d[0xd0..0xd3].copy_from_slice(&[0x02, 0x20, 0x00]);
        d[0xd8..0xdb].copy_from_slice(&[0x10, 0x20, 0x00]);
        // functab: entry 0 at offset 0x40 from it, end at 0x20.
        d[0x100..0x104].copy_from_slice(&0u32.to_le_bytes());
        d[0x104..0x108].copy_from_slice(&0x40u32.to_le_bytes());
        d[0x108..0x10c].copy_from_slice(&0x20u32.to_le_bytes());
        let f = 0x140;
        let fields: [(usize, u32); 6] = [(0, 0), (4, 0), (16, 1), (20, 0x10), (24, 0x18), (28, 0)];
        for (at, v) in fields {
            d[f + at..f + at + 4].copy_from_slice(&v.to_le_bytes());
        }
        d[f + 40] = 3;
        d
    }

    #[test]
    fn a_function_is_found_with_its_name_frame_sizes_and_line() {
        let t = Pclntab::parse(one_function(), 0).unwrap();
        assert_eq!((t.layout, t.len()), (Layout::Go120, 1));
        let f = t.func_at(0x1010).expect("the function");
        assert_eq!((f.entry, f.end), (0x1000, 0x1020));
        assert_eq!(t.name(f), Some("main.f"));
        assert_eq!(t.func_id(f), Some(3));
        assert_eq!(
            t.frame_sizes(f),
            Some(vec![(0x1000, 0x1004, 0), (0x1004, 0x101c, 24), (0x101c, 0x1020, 0)])
        );
        assert_eq!(t.line(f, 0x1010), Some(("f.go", 7)));
        assert!(t.func_at(0x1020).is_none() && t.func_at(0xfff).is_none(), "outside its code");
    }

    #[test]
    fn damaged_tables_are_errors_or_nothing_never_a_panic() {
        assert!(Pclntab::parse(vec![0; 8], 0).is_err());
        assert!(Pclntab::parse(0xffff_fffbu32.to_le_bytes().repeat(20), 0).is_err(), "Go 1.2-1.15");
        let mut d = one_function();
        d[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(Pclntab::parse(d, 0).is_err(), "more functions than it holds");
        let mut d = one_function();
        d[0xc1] = 0x80;
        d[0xc2] = 0x80;
        d[0xc3] = 0x80;
        d[0xc4] = 0x80;
        d[0xc5] = 0x80;
        let t = Pclntab::parse(d, 0).unwrap();
        assert_eq!(t.frame_sizes(t.func_at(0x1000).unwrap()), None, "a varint that never ends");
        for cut in [0x50, 0x110, 0x148] {
            let t = Pclntab::parse(one_function()[..cut].to_vec(), 0);
            if let Ok(t) = t {
                let _ = t.funcs().count();
                let _ = t.func_at(0x1010).map(|f| (t.name(f), t.frame_sizes(f), t.line(f, 0x1010)));
            }
        }
    }
}
