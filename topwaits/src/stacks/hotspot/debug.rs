//! Where in its Java methods a frame was: a return address into an nmethod
//! is found among the nmethod's `PcDesc`s, whose scope, decoded, gives the
//! methods the compiler inlined at that call with their bytecode indexes; an
//! interpreted frame's index comes from its bytecode pointer. Each index is
//! turned into a source line through its method's line number table. Scopes
//! are read where JDK 17 keeps them (in the nmethod) and where JDK 25 does
//! (its immutable and mutable data, apart from the code cache), as each one's
//! vmStructs describe them; line tables from JDK 17 to 25.

use super::names::{const_method, method_name, symbol};
use super::Layout;
use crate::sys::memory::Memory;

/// Where this JDK's nmethods keep what their scopes are read from, by the
/// offsets of the fields that say so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScopeHome {
    /// Not described by this JDK's tables (JDK 23 and 24 keep the metadata
    /// where they do not say): a compiled frame is its method alone.
    #[default]
    Unknown,
    /// JDK 17 to 22, all in the nmethod.
    InBlob(InBlob),
    /// JDK 25 on, apart from the code cache.
    Apart(Apart),
}

/// JDK 17's fields: `CodeBlob::_code_begin` and
/// `CompiledMethod::_scopes_data_begin` (pointers), and the ints
/// `nmethod::_scopes_pcs_offset`, `_dependencies_offset` (where the
/// `PcDesc`s end) and `_metadata_offset`, from the nmethod's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InBlob {
    pub code_begin: u64,
    pub scopes_data: u64,
    pub pcs: u64,
    pub dependencies: u64,
    pub metadata: u64,
}

/// JDK 25's: `CodeBlob::_code_offset`; the `PcDesc`s then the scopes data
/// in `nmethod::_immutable_data` (of `_immutable_data_size` bytes) from
/// `_scopes_pcs_offset` and `_scopes_data_offset`; the metadata in
/// `CodeBlob::_mutable_data` (`_mutable_data_size` bytes) past its
/// `_relocation_size` bytes of relocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Apart {
    pub code_offset: u64,
    pub immutable: u64,
    pub immutable_size: u64,
    pub pcs: u64,
    pub scopes_data: u64,
    pub mutable: u64,
    pub mutable_size: u64,
    pub relocation_size: u64,
}

/// The offsets this module reads by, from vmStructs: the line number tables'
/// always, the scopes of compiled code where the tables say where they are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DebugLayout {
    pub home: ScopeHome,
    /// `sizeof(PcDesc)`, its `_pc_offset` and `_scope_decode_offset`.
    pub pc_desc_size: u64,
    pub pc_offset: u64,
    pub scope_decode_offset: u64,
    /// `sizeof(ConstMethod)` (its bytecodes follow it, and the line number
    /// table them), its `_flags`, `_code_size` and `_constMethod_size` (in
    /// words).
    pub const_size: u64,
    pub const_flags: u64,
    pub const_code_size: u64,
    pub const_method_size: u64,
    /// `ConstantPool::_source_file_name_index`.
    pub cp_source_file: u64,
    /// The byte value HotSpot's compressed ints never use (1 since JDK 21,
    /// which keeps them free of zero bytes: their digits are stored plus
    /// one), told by the flags' field (`_flags._flags` since then).
    pub excluded: u32,
}

/// The fields [`ScopeHome::InBlob`] is read by, in its fields' order.
const IN_BLOB: [(&str, &str); 5] = [
    ("CodeBlob", "_code_begin"),
    ("CompiledMethod", "_scopes_data_begin"),
    ("nmethod", "_scopes_pcs_offset"),
    ("nmethod", "_dependencies_offset"),
    ("nmethod", "_metadata_offset"),
];
/// The fields [`ScopeHome::Apart`] is read by, in its fields' order.
const APART: [(&str, &str); 8] = [
    ("CodeBlob", "_code_offset"),
    ("nmethod", "_immutable_data"),
    ("nmethod", "_immutable_data_size"),
    ("nmethod", "_scopes_pcs_offset"),
    ("nmethod", "_scopes_data_offset"),
    ("CodeBlob", "_mutable_data"),
    ("CodeBlob", "_mutable_data_size"),
    ("CodeBlob", "_relocation_size"),
];
/// A `PcDesc`'s two ints, read in either home.
const PC_DESC: [(&str, &str); 2] = [("PcDesc", "_pc_offset"), ("PcDesc", "_scope_decode_offset")];

/// Every field the scopes may be read by (the layout reads their types' rows
/// of the struct table).
pub fn scope_fields() -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    IN_BLOB.iter().chain(&APART).chain(&PC_DESC)
}

/// The line offsets, in the order [`DebugLayout::of`] takes them; the flags
/// by their name up to JDK 20, and since.
pub const LINE_FIELDS: [(&str, &str); 5] = [
    ("ConstMethod", "_code_size"),
    ("ConstMethod", "_constMethod_size"),
    ("ConstantPool", "_source_file_name_index"),
    ("ConstMethod", "_flags"),
    ("ConstMethod", "_flags._flags"),
];

/// The types whose sizes it needs.
pub const SIZES: [&str; 2] = ["PcDesc", "ConstMethod"];

/// `ConstMethod::_has_linenumber_table`, bit 0 of its flags from JDK 8 to 25.
const HAS_LINE_NUMBERS: u16 = 1;

/// The little-endian `u2` at `addr`.
fn u16_at(mem: &dyn Memory, addr: u64) -> Option<u16> {
    let b = mem.bytes(addr, 2)?;
    Some(u16::from_le_bytes([b[0], b[1]]))
}

/// Most `PcDesc`s read from one nmethod, and most scopes followed out of one
/// call (HotSpot's inlining depth is 15 by default).
const MAX_PC_DESCS: u64 = 1 << 16;
const MAX_SCOPES: usize = 64;
/// Most bytes of a line number table read.
const MAX_LINE_TABLE: u64 = 1 << 16;
/// Largest `PcDesc` believed (JDK 17 to 25: 16 bytes).
const MAX_PC_DESC_SIZE: u64 = 64;

impl DebugLayout {
    /// From the fields found (`field`: a field's offset, None where the table
    /// lacks it) and the sizes; None where a line field is missing, and
    /// without scopes where one of theirs is.
    pub fn of(
        field: impl Fn(&str, &str) -> Option<u64>,
        size: impl Fn(&str) -> Option<u64>,
    ) -> Option<Self> {
        let [code_size, method_size, source, old_flags, new_flags] =
            LINE_FIELDS.map(|(ty, f)| field(ty, f));
        let (const_flags, excluded) = match (old_flags, new_flags) {
            (Some(f), _) => (f, 0),
            (None, Some(f)) => (f, 1),
            (None, None) => return None,
        };
        let d = DebugLayout {
            const_flags,
            excluded,
            const_code_size: code_size?,
            const_method_size: method_size?,
            cp_source_file: source?,
            const_size: size("ConstMethod")?,
            ..Default::default()
        };
        // Scopes are read by slicing each PcDesc's two ints out of it: where
        // the table says they do not fit (no JDK's does), none are read.
        let pc_desc_size = size("PcDesc").filter(|&s| (8..=MAX_PC_DESC_SIZE).contains(&s));
        let [pc_offset, scope_decode_offset] = PC_DESC.map(|(ty, f)| field(ty, f));
        let (Some(pc_desc_size), Some(pc_offset), Some(scope_decode_offset)) =
            (pc_desc_size, pc_offset, scope_decode_offset)
        else {
            return Some(d);
        };
        if pc_offset.max(scope_decode_offset).checked_add(4).is_none_or(|e| e > pc_desc_size) {
            return Some(d);
        }
        let home = match (IN_BLOB.map(|(ty, f)| field(ty, f)), APART.map(|(ty, f)| field(ty, f))) {
            (
                [Some(code_begin), Some(scopes_data), Some(pcs), Some(dependencies), Some(metadata)],
                _,
            ) => ScopeHome::InBlob(InBlob { code_begin, scopes_data, pcs, dependencies, metadata }),
            (_, [Some(c), Some(i), Some(is), Some(p), Some(sd), Some(m), Some(ms), Some(r)]) => {
                ScopeHome::Apart(Apart {
                    code_offset: c,
                    immutable: i,
                    immutable_size: is,
                    pcs: p,
                    scopes_data: sd,
                    mutable: m,
                    mutable_size: ms,
                    relocation_size: r,
                })
            }
            _ => return Some(d),
        };
        Some(DebugLayout { home, pc_desc_size, pc_offset, scope_decode_offset, ..d })
    }

    /// Whether compiled frames' scopes are read.
    pub fn scopes(&self) -> bool {
        self.home != ScopeHome::Unknown
    }
}

/// Where one nmethod's scopes are: its code's start, then its `PcDesc`s,
/// scopes data and metadata, each as [start, end).
#[derive(Debug, PartialEq, Eq)]
struct Sections {
    code: u64,
    pcs: (u64, u64),
    data: (u64, u64),
    metadata: (u64, u64),
}

/// The sections of nmethod `nm`, None where they do not read or lie out of
/// order.
fn sections(mem: &dyn Memory, home: &ScopeHome, nm: u64) -> Option<Sections> {
    let int = |at: u64| mem.u32(at).map(u64::from);
    let s = match home {
        ScopeHome::Unknown => return None,
        ScopeHome::InBlob(b) => {
            // The metadata, then the scopes data, then the PcDescs.
            let pcs = (nm + int(nm + b.pcs)?, nm + int(nm + b.dependencies)?);
            let data = (mem.word(nm + b.scopes_data)?, pcs.0);
            let metadata = (nm + int(nm + b.metadata)?, data.0);
            Sections { code: mem.word(nm + b.code_begin)?, pcs, data, metadata }
        }
        ScopeHome::Apart(a) => {
            let imm = mem.word(nm + a.immutable)?;
            let data_at = imm + int(nm + a.scopes_data)?;
            let muts = mem.word(nm + a.mutable)?;
            Sections {
                code: nm + int(nm + a.code_offset)?,
                pcs: (imm + int(nm + a.pcs)?, data_at),
                data: (data_at, imm + int(nm + a.immutable_size)?),
                metadata: (muts + int(nm + a.relocation_size)?, muts + int(nm + a.mutable_size)?),
            }
        }
    };
    let ordered = |(a, b): (u64, u64)| a != 0 && a <= b;
    (ordered(s.pcs) && ordered(s.data) && ordered(s.metadata)).then_some(s)
}

/// One int of HotSpot's `CompressedReadStream` (UNSIGNED5): a digit under
/// `L` is the value; one from `L` up is followed by more, each adding 64
/// times more, up to five, the last of any value. Each digit is stored plus
/// `x` (see [`DebugLayout::excluded`]), and `L` leaves 64 high digits under
/// 256: 192 - `x`.
fn read_int(bytes: &[u8], pos: &mut usize, x: u32) -> Option<u32> {
    let l = 192 - x;
    let mut digit = || {
        let b = (*bytes.get(*pos)? as u32).checked_sub(x)?;
        *pos += 1;
        Some(b)
    };
    let b0 = digit()?;
    if b0 < l {
        return Some(b0);
    }
    let mut sum = b0;
    let mut shift = 6;
    for i in 1..=4 {
        let b = digit()?;
        sum = sum.wrapping_add(b << shift);
        if b < l || i == 4 {
            return Some(sum);
        }
        shift += 6;
    }
    None
}

/// A signed int of the same stream (zigzag: the sign in the low bit).
fn read_signed(bytes: &[u8], pos: &mut usize, x: u32) -> Option<i32> {
    let v = read_int(bytes, pos, x)?;
    Some((v >> 1) as i32 ^ -((v & 1) as i32))
}

/// The `Method*` and bytecode index of each scope of the call in nmethod
/// `nm` that returns to `ret`, innermost (the method inlined deepest) first;
/// None where no `PcDesc` is at that return address, or what it names does
/// not read or does not end in the nmethod's own method (the outermost scope
/// is always the method compiled: a check of the layout read by).
pub fn scopes_at(
    mem: &dyn Memory,
    l: &Layout,
    d: &DebugLayout,
    nm: u64,
    ret: u64,
) -> Option<Vec<(u64, i32)>> {
    let s = sections(mem, &d.home, nm)?;
    let offset = i32::try_from(ret.checked_sub(s.code)?).ok()?;
    let n = ((s.pcs.1 - s.pcs.0) / d.pc_desc_size).min(MAX_PC_DESCS);
    let descs = mem.bytes(s.pcs.0, (n * d.pc_desc_size) as usize)?;
    let field = |i: u64, at: u64| {
        let o = (i * d.pc_desc_size + at) as usize;
        i32::from_le_bytes(descs[o..o + 4].try_into().unwrap())
    };
    // Sorted by pc offset (the first, at -1, a sentinel).
    let (mut lo, mut hi) = (0u64, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if field(mid, d.pc_offset) < offset {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if lo >= n || field(lo, d.pc_offset) != offset {
        return None;
    }
    let mut decode = field(lo, d.scope_decode_offset) as u32;
    let (data, data_len) = (s.data.0, s.data.1 - s.data.0);
    let mut out = Vec::new();
    while decode != 0 && out.len() < MAX_SCOPES {
        if decode as u64 >= data_len {
            return None;
        }
        let at = data + decode as u64;
        // Three ints of at most five bytes each, as far as they read.
        let mut head = [0u8; 15];
        let want = head.len().min((data_len - decode as u64) as usize);
        let got = mem.read(at, &mut head[..want]);
        let head = &head[..got];
        let mut pos = 0;
        let sender = read_int(head, &mut pos, d.excluded)?;
        let index = read_int(head, &mut pos, d.excluded)? as u64;
        let bci = (read_int(head, &mut pos, d.excluded)? as i32).wrapping_sub(1);
        let slot = s.metadata.0 + 8 * index.checked_sub(1)?;
        if slot + 8 > s.metadata.1 {
            return None;
        }
        out.push((mem.word(slot).filter(|&m| m != 0)?, bci));
        decode = sender;
    }
    let outermost = out.last()?.0;
    (decode == 0 && mem.word(nm + l.compiled_method) == Some(outermost)).then_some(out)
}

/// The source line of bytecode index `bci` of `Method*` `method`, as HotSpot
/// finds it: the table's entry at that index, else the last one before it.
pub fn line_of(
    mem: &dyn Memory,
    l: &Layout,
    d: &DebugLayout,
    method: u64,
    bci: i32,
) -> Option<u32> {
    let cm = const_method(mem, l, method)?;
    if u16_at(mem, cm + d.const_flags)? & HAS_LINE_NUMBERS == 0 {
        return None;
    }
    let code_size = u16_at(mem, cm + d.const_code_size)?;
    let size = 8 * mem.u32(cm + d.const_method_size)? as u64;
    let table = d.const_size + code_size as u64;
    let mut bytes = vec![0u8; size.checked_sub(table)?.min(MAX_LINE_TABLE) as usize];
    let got = mem.read(cm + table, &mut bytes);
    bytes.truncate(got);
    let target = bci.max(0);
    let (mut at_bci, mut line) = (0i32, 0i32);
    let mut best: Option<(i32, i32)> = None;
    let mut pos = 0;
    loop {
        let b = *bytes.get(pos)?;
        pos += 1;
        match b {
            0 => break,
            0xff => {
                at_bci = at_bci.wrapping_add(read_signed(&bytes, &mut pos, d.excluded)?);
                line = line.wrapping_add(read_signed(&bytes, &mut pos, d.excluded)?);
            }
            b => {
                at_bci = at_bci.wrapping_add((b >> 3) as i32);
                line = line.wrapping_add((b & 7) as i32);
            }
        }
        if at_bci == target {
            return u32::try_from(line).ok();
        }
        if at_bci < target && best.is_none_or(|(b, _)| at_bci >= b) {
            best = Some((at_bci, line));
        }
    }
    best.and_then(|(_, line)| u32::try_from(line).ok())
}

/// The source file `Method*` `method`'s class was compiled from.
pub fn source_file(mem: &dyn Memory, l: &Layout, d: &DebugLayout, method: u64) -> Option<String> {
    let cm = const_method(mem, l, method)?;
    let cp = mem.word(cm + l.const_constants).filter(|&p| p != 0)?;
    let index = u16_at(mem, cp + d.cp_source_file)? as u64;
    if index == 0 {
        return None;
    }
    symbol(mem, l, mem.word(cp + l.cp_size + 8 * index)?)
}

/// `Class.method (File.java:LINE)`, with as much of the place as reads: the
/// line where each of `bcis` (the indexes the frame may be at) has the same.
pub fn placed_name(
    mem: &dyn Memory,
    l: &Layout,
    d: &DebugLayout,
    method: u64,
    bcis: &[i32],
) -> Option<String> {
    let name = method_name(mem, l, method)?;
    let mut lines = bcis.iter().map(|&bci| line_of(mem, l, d, method, bci));
    let first = lines.next().flatten();
    let line = first.filter(|&f| lines.all(|other| other == Some(f)));
    Some(match (source_file(mem, l, d, method), line) {
        (Some(file), Some(line)) => format!("{name} ({file}:{line})"),
        (Some(file), None) => format!("{name} ({file})"),
        _ => name,
    })
}

/// The bytecode indexes an interpreted frame of `Method*` `method` whose
/// bytecode pointer ends in `low` (its low 12 bits, see `jvm_bcp_low`) may be
/// at: one where the method's code is short enough that those bits tell,
/// else one per 4 KiB of its code.
pub fn interpreted_bcis(
    mem: &dyn Memory,
    l: &Layout,
    d: &DebugLayout,
    method: u64,
    low: u64,
) -> Option<Vec<i32>> {
    use topwaits_common::jit::JVM_BCP_BITS;
    let cm = const_method(mem, l, method)?;
    let code_size = u16_at(mem, cm + d.const_code_size)? as u64;
    let first = low.wrapping_sub(cm.wrapping_add(d.const_size)) & JVM_BCP_BITS;
    let bcis: Vec<i32> =
        (first..code_size).step_by(JVM_BCP_BITS as usize + 1).map(|b| b as i32).collect();
    (!bcis.is_empty()).then_some(bcis)
}

/// The Java frames of the call in nmethod `nm` that returns to `ret`,
/// innermost first, each named with its place; None where its scopes do not
/// read (the caller then names the compiled method alone).
pub fn frames_at(
    mem: &dyn Memory,
    l: &Layout,
    d: &DebugLayout,
    nm: u64,
    ret: u64,
) -> Option<Vec<String>> {
    let scopes = scopes_at(mem, l, d, nm, ret)?;
    scopes.iter().map(|&(m, bci)| placed_name(mem, l, d, m, &[bci])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// HotSpot's writer for [`read_int`], as `CompressedWriteStream` codes
    /// with `x` excluded.
    pub(crate) fn write_int(out: &mut Vec<u8>, mut v: u32, x: u32) {
        let l = 192 - x;
        for i in 0..5 {
            if v < l || i == 4 {
                out.push((x + v) as u8);
                return;
            }
            v -= l;
            out.push((x + l + v % 64) as u8);
            v /= 64;
        }
    }

    #[test]
    fn compressed_ints_read_back_as_hotspot_writes_them() {
        for v in [0u32, 1, 191, 192, 255, 256, 12_345, 1 << 20, 123_456_789, 1 << 30] {
            // Up to JDK 20, and since JDK 21 with the zero byte excluded.
            for x in [0, 1] {
                let mut b = Vec::new();
                write_int(&mut b, v, x);
                let mut pos = 0;
                assert_eq!(read_int(&b, &mut pos, x), Some(v), "{v} as {b:?}");
                assert_eq!(pos, b.len());
                assert!(x == 0 || !b.contains(&0), "{b:?}");
            }
        }
        // A stream that ends inside an int, or holds the excluded byte.
        assert_eq!(read_int(&[200], &mut 0, 0), None);
        assert_eq!(read_int(&[0], &mut 0, 1), None);
        for v in [0i32, 1, -1, 63, -64, 1000, -1000] {
            let mut b = Vec::new();
            write_int(&mut b, ((v << 1) ^ (v >> 31)) as u32, 0);
            assert_eq!(read_signed(&b, &mut 0, 0), Some(v));
        }
    }
}
