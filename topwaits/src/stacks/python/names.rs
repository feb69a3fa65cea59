//! Names a Python frame's word (a code object and an instruction index) from the
//! process's memory: the function's qualified name (3.10: its name), its file,
//! and the line of the instruction, from the code object's location table (the
//! format of CPython 3.11 on, described in CPython's `Objects/locations.md`) or
//! 3.10's line table of (bytecode delta, line delta) pairs.

use super::layout::{Layout, BYTES_DATA, OBJECT_TYPE, UNICODE_LENGTH, UNICODE_STATE, VAR_SIZE};
use crate::stacks::frame_scan::Memory;

/// A Python function, as a code object describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    pub qualname: String,
    pub file: String,
    pub first_line: u32,
    pub linetable: Vec<u8>,
    /// The table is 3.10's pairs.
    pub pairs: bool,
}

impl Function {
    /// The line of instruction `index` (code units), if the table has one.
    pub fn line(&self, index: Option<u64>) -> u32 {
        let line = |i| {
            if self.pairs {
                line_of_pairs(&self.linetable, self.first_line, i)
            } else {
                line_of(&self.linetable, self.first_line, i)
            }
        };
        index.and_then(line).unwrap_or(self.first_line)
    }
}

/// The line of code unit `index` in a 3.10 line table starting at line `first`:
/// pairs of (bytes of bytecode covered, signed line delta), where a delta of
/// -128 means the bytes have no line.
pub fn line_of_pairs(table: &[u8], first: u32, index: u64) -> Option<u32> {
    let (offset, mut start, mut line) = (index * 2, 0u64, first as i64);
    for pair in table.chunks_exact(2) {
        let (bytes, delta) = (pair[0] as u64, pair[1] as i8);
        if delta != i8::MIN {
            line += delta as i64;
        }
        let end = start + bytes;
        if offset < end {
            return if delta == i8::MIN { None } else { u32::try_from(line).ok() };
        }
        start = end;
    }
    None
}

/// Longest string and location table read.
const MAX_STRING: u64 = 4096;
const MAX_TABLE: u64 = 1 << 20;

/// A `str` object's text: compact strings only (every name and file name of a
/// code object is one), in any of the three character widths.
pub fn string(mem: &dyn Memory, l: &Layout, addr: u64) -> Option<String> {
    let len = mem.word(addr + UNICODE_LENGTH)?;
    let state = mem.bytes(addr + UNICODE_STATE, 4)?;
    let state = u32::from_le_bytes(state.try_into().ok()?);
    let (kind, compact, ascii) = ((state >> 2) & 7, state >> 5 & 1 == 1, state >> 6 & 1 == 1);
    if !compact || len > MAX_STRING {
        return None;
    }
    if ascii {
        return String::from_utf8(mem.bytes(addr + l.ascii_data, len as usize)?).ok();
    }
    let bytes = mem.bytes(addr + l.compact_data, (len * kind as u64) as usize)?;
    let chars: Option<String> = match kind {
        1 => Some(bytes.iter().map(|&b| b as char).collect()),
        2 => char::decode_utf16(bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])))
            .collect::<Result<_, _>>()
            .ok(),
        4 => bytes
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        _ => None,
    };
    chars
}

/// Reads the code object at `code`, checked to be one (its type is `code_type`).
pub fn function(mem: &dyn Memory, l: &Layout, code_type: u64, code: u64) -> Option<Function> {
    if mem.word(code + OBJECT_TYPE)? != code_type {
        return None;
    }
    let qualname = string(mem, l, mem.word(code + l.code_qualname)?)?;
    let file = string(mem, l, mem.word(code + l.code_filename)?)?;
    let first_line = mem
        .bytes(code + l.code_firstlineno, 4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()))?;
    let table = mem.word(code + l.code_linetable)?;
    let size = mem.word(table + VAR_SIZE)?.min(MAX_TABLE);
    let linetable = mem.bytes(table + BYTES_DATA, size as usize)?;
    Some(Function { qualname, file, first_line, linetable, pairs: l.line_pairs })
}

/// An unsigned varint of the location table: 6 bits a byte, low first, bit 6
/// set while more follow.
fn varint(t: &[u8], at: &mut usize) -> Option<u64> {
    let (mut v, mut shift) = (0u64, 0u32);
    loop {
        let b = *t.get(*at)?;
        *at += 1;
        v |= ((b & 63) as u64) << shift;
        if b & 64 == 0 || shift > 56 {
            return Some(v);
        }
        shift += 6;
    }
}

/// A signed varint: the sign in the lowest bit.
fn svarint(t: &[u8], at: &mut usize) -> Option<i64> {
    let v = varint(t, at)?;
    Some(if v & 1 == 1 { -((v >> 1) as i64) } else { (v >> 1) as i64 })
}

/// The line of code unit `index` in a 3.11+ location table starting at line
/// `first`; None when the table has no line for it.
pub fn line_of(table: &[u8], first: u32, index: u64) -> Option<u32> {
    let (mut at, mut unit, mut line) = (0usize, 0u64, first as i64);
    while at < table.len() {
        let head = table[at];
        at += 1;
        if head & 0x80 == 0 {
            return None;
        }
        let code = (head >> 3) & 15;
        let units = (head & 7) as u64 + 1;
        let here = match code {
            15 => None,
            14 => {
                line += svarint(table, &mut at)?;
                varint(table, &mut at)?;
                varint(table, &mut at)?;
                varint(table, &mut at)?;
                Some(line)
            }
            13 => {
                line += svarint(table, &mut at)?;
                Some(line)
            }
            10..=12 => {
                line += (code - 10) as i64;
                at += 2;
                Some(line)
            }
            _ => {
                at += 1;
                Some(line)
            }
        };
        if index < unit + units {
            return here.and_then(|l| u32::try_from(l).ok());
        }
        unit += units;
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::stacks::python::layout;
    use std::collections::BTreeMap;

    /// Process memory made of byte runs at addresses.
    #[derive(Default)]
    pub struct FakeMem(pub BTreeMap<u64, Vec<u8>>);

    impl FakeMem {
        pub fn put(&mut self, addr: u64, bytes: &[u8]) {
            self.0.insert(addr, bytes.to_vec());
        }
        pub fn put_word(&mut self, addr: u64, v: u64) {
            self.put(addr, &v.to_le_bytes());
        }
    }

    impl Memory for FakeMem {
        fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
            let Some((start, bytes)) = self.0.range(..=addr).next_back() else { return 0 };
            let off = (addr - start) as usize;
            if off + buf.len() > bytes.len() {
                return 0;
            }
            buf.copy_from_slice(&bytes[off..off + buf.len()]);
            buf.len()
        }
    }

    /// A compact ASCII `str` object at `addr`, as layout `l` places it.
    pub fn put_ascii(mem: &mut FakeMem, l: &Layout, addr: u64, text: &str) {
        let mut b = vec![0u8; l.ascii_data as usize + text.len() + 1];
        b[UNICODE_LENGTH as usize..][..8].copy_from_slice(&(text.len() as u64).to_le_bytes());
        let state: u32 = 1 << 2 | 1 << 5 | 1 << 6;
        b[UNICODE_STATE as usize..][..4].copy_from_slice(&state.to_le_bytes());
        b[l.ascii_data as usize..][..text.len()].copy_from_slice(text.as_bytes());
        mem.put(addr, &b);
    }

    #[test]
    fn lines_come_from_each_form_of_location_entry() {
        // Instructions 0-1: no-column form, line +2 (svarint 4); 2: short form,
        // same line; 3-4: one-line form, line +1; 5: no location; 6: long form,
        // line -1 (svarint 3) with end line and columns.
        let table = [
            0x80 | 13 << 3 | 1,
            4,
            0x80,
            7,
            0x80 | 11 << 3 | 1,
            1,
            5,
            0x80 | 15 << 3,
            0x80 | 14 << 3,
            3,
            0,
            1,
            9,
        ];
        let lines: Vec<Option<u32>> = (0..8).map(|i| line_of(&table, 10, i)).collect();
        assert_eq!(lines, [Some(12), Some(12), Some(12), Some(13), Some(13), None, Some(12), None]);
        // A varint of two bytes: line +40 (svarint 80 = 16 | 64 << 0, then 1).
        assert_eq!(line_of(&[0x80 | 13 << 3, 80 & 63 | 64, 80 >> 6], 1, 0), Some(41));
        assert_eq!(line_of(&[0x13], 1, 0), None, "a table that does not start an entry");
        assert_eq!(line_of(&[0x80 | 14 << 3], 1, 0), None, "a cut-off entry");
    }

    #[test]
    fn lines_come_from_3_10_pairs() {
        // Bytes 0-5 (units 0-2): line +1; 6-7: no line; 8-9: line +2 from the
        // last known; a zero-byte entry moves the line without covering code.
        let table = [6, 1, 2, 0x80, 0, 1, 2, 1];
        let lines: Vec<Option<u32>> = (0..6).map(|i| line_of_pairs(&table, 20, i)).collect();
        assert_eq!(lines, [Some(21), Some(21), Some(21), None, Some(23), None]);
    }

    #[test]
    fn a_code_object_is_read_only_when_it_is_one() {
        let l = layout::of(3, 12).unwrap();
        let (code, ty) = (0x1000u64, 0x9000u64);
        let mut mem = FakeMem::default();
        let mut obj = vec![0u8; 256];
        obj[OBJECT_TYPE as usize..][..8].copy_from_slice(&ty.to_le_bytes());
        obj[l.code_qualname as usize..][..8].copy_from_slice(&0x2000u64.to_le_bytes());
        obj[l.code_filename as usize..][..8].copy_from_slice(&0x3000u64.to_le_bytes());
        obj[l.code_firstlineno as usize..][..4].copy_from_slice(&7u32.to_le_bytes());
        obj[l.code_linetable as usize..][..8].copy_from_slice(&0x4000u64.to_le_bytes());
        mem.put(code, &obj);
        put_ascii(&mut mem, l, 0x2000, "Server.handle");
        put_ascii(&mut mem, l, 0x3000, "/srv/app.py");
        let mut table = vec![0u8; BYTES_DATA as usize + 2];
        table[VAR_SIZE as usize] = 2;
        table[BYTES_DATA as usize..].copy_from_slice(&[0x80 | 13 << 3, 6]);
        mem.put(0x4000, &table);
        let f = function(&mem, l, ty, code).unwrap();
        assert_eq!(
            (f.qualname.as_str(), f.file.as_str(), f.first_line),
            ("Server.handle", "/srv/app.py", 7)
        );
        assert_eq!(f.line(Some(0)), 10);
        assert_eq!(f.line(None), 7, "before the first instruction: the def line");
        assert_eq!(function(&mem, l, ty + 8, code), None, "another type is not a code object");
    }

    #[test]
    fn strings_of_each_width_are_read() {
        let l = layout::of(3, 11).unwrap();
        let mut mem = FakeMem::default();
        for (addr, kind, text) in
            [(0x100u64, 1u32, "café"), (0x200, 2, "Ωmega"), (0x300, 4, "𝔣unc")]
        {
            let n = text.chars().count();
            let mut b = vec![0u8; l.compact_data as usize + n * kind as usize];
            b[UNICODE_LENGTH as usize..][..8].copy_from_slice(&(n as u64).to_le_bytes());
            b[UNICODE_STATE as usize..][..4].copy_from_slice(&(kind << 2 | 1 << 5).to_le_bytes());
            for (i, c) in text.chars().enumerate() {
                let at = l.compact_data as usize + i * kind as usize;
                match kind {
                    1 => b[at] = c as u8,
                    2 => b[at..at + 2].copy_from_slice(&(c as u16).to_le_bytes()),
                    _ => b[at..at + 4].copy_from_slice(&(c as u32).to_le_bytes()),
                }
            }
            mem.put(addr, &b);
            assert_eq!(string(&mem, l, addr).as_deref(), Some(text));
        }
    }
}
