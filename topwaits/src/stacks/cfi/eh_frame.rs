//! The reader of an `.eh_frame` section: its CIEs and FDEs parsed, and each FDE's
//! call frame program run with only the state a [`Rule`] needs (the CFA, the
//! return address's rule, the caller's frame pointer's rule), into rows. Written
//! for speed: a table is built while the traced program waits for it, and a
//! general evaluator (gimli's, which the tests hold this one to) copies its
//! whole register set at every row; this one keeps three rules and caches each
//! CIE's initial state.

use std::collections::HashMap;

use anyhow::{anyhow, Result};

use super::{plt_threshold, Base, Row, Rule};

/// DWARF register numbers of x86-64.
const RBP: u64 = 6;
const RSP: u64 = 7;
const RA: u64 = 16;

/// How deep `DW_CFA_remember_state` may nest before a program is refused.
const MAX_REMEMBERED: usize = 16;

/// A register's rule, as far as a [`Rule`] tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reg {
    /// No rule given: the register keeps its value (the ABI's default).
    Unset,
    Undefined,
    SameValue,
    /// Saved at CFA + the offset.
    Offset(i64),
    /// Any other rule (in a register, by an expression, a value offset).
    Other,
}

/// How the CFA is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cfa {
    Reg {
        reg: u64,
        offset: i64,
    },
    /// By a DWARF expression: its bytes within the section.
    Expr {
        at: usize,
        len: usize,
    },
}

/// The rules in force at one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State {
    cfa: Cfa,
    ra: Reg,
    bp: Reg,
}

const START: State =
    State { cfa: Cfa::Reg { reg: RSP, offset: 0 }, ra: Reg::Unset, bp: Reg::Unset };

/// What an FDE needs from its CIE.
#[derive(Clone, Copy, Debug)]
struct Cie {
    code_align: u64,
    data_align: i64,
    /// The encoding of the FDE's addresses (`DW_EH_PE_*`).
    encoding: u8,
    /// Whether FDEs carry augmentation data (a `z` augmentation).
    augmented: bool,
    signal: bool,
    /// The state after the CIE's initial instructions: what `DW_CFA_restore`
    /// returns a register to.
    initial: State,
}

/// The section, and the addresses its pointers may be relative to.
struct Section<'a> {
    data: &'a [u8],
    /// Where the section is loaded (for pc-relative pointers).
    addr: u64,
    /// Where `.text` is loaded (for text-relative ones).
    text: u64,
}

/// A cursor over the section's bytes; every read checks its bounds.
struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
    end: usize,
}

impl<'a> Cursor<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.end)?;
        let b = &self.data[self.at..end];
        self.at = end;
        Some(b)
    }
    fn u8(&mut self) -> Option<u8> {
        self.bytes(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.bytes(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        self.bytes(4).map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()))
    }
    fn u64(&mut self) -> Option<u64> {
        self.bytes(8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }
    /// A LEB128 number's bits, and how many it was given (for the sign).
    fn leb(&mut self) -> Option<(u64, u32)> {
        let (mut v, mut shift) = (0u64, 0u32);
        loop {
            let b = self.u8()?;
            if shift < 64 {
                v |= u64::from(b & 0x7f) << shift;
            }
            shift += 7;
            if b & 0x80 == 0 {
                return Some((v, shift));
            }
        }
    }
    fn uleb(&mut self) -> Option<u64> {
        self.leb().map(|(v, _)| v)
    }
    fn sleb(&mut self) -> Option<i64> {
        let (v, bits) = self.leb()?;
        let negative = bits < 64 && v >> (bits - 1) & 1 != 0;
        Some(if negative { (v | u64::MAX << bits) as i64 } else { v as i64 })
    }
    /// A pointer in encoding `enc`. None for encodings a table cannot use
    /// (indirect, data- or function-relative, aligned).
    fn pointer(&mut self, enc: u8, sec: &Section) -> Option<u64> {
        let base = match enc & 0x70 {
            0x00 => 0,
            0x10 => sec.addr.wrapping_add(self.at as u64),
            0x20 => sec.text,
            _ => return None,
        };
        if enc & 0x80 != 0 {
            return None;
        }
        Some(base.wrapping_add(self.value(enc)?))
    }
    /// A value in the format of encoding `enc` (its low four bits).
    fn value(&mut self, enc: u8) -> Option<u64> {
        Some(match enc & 0x0f {
            0x00 => self.u64()?,
            0x01 => self.uleb()?,
            0x02 => u64::from(self.u16()?),
            0x03 => u64::from(self.u32()?),
            0x04 => self.u64()?,
            0x09 => self.sleb()? as u64,
            0x0a => self.u16()? as i16 as u64,
            0x0b => self.u32()? as i32 as u64,
            0x0c => self.u64()?,
            _ => return None,
        })
    }
}

/// The rows of every FDE of `data` (an `.eh_frame` loaded at `section_addr`,
/// in a file whose `.text` is at `text_addr`) pushed to `rows`, and each FDE's
/// span, in the section's order. An FDE that cannot be
/// read is left out (its code then has no rule: walks stop there); the section
/// itself is refused only when its entries' lengths do not hold together.
pub fn fdes(
    data: &[u8],
    section_addr: u64,
    text_addr: u64,
    rows: &mut Vec<Row>,
) -> Result<Vec<Span>> {
    let sec = Section { data, addr: section_addr, text: text_addr };
    let mut spans = Vec::new();
    let mut cies: HashMap<usize, Option<Cie>> = HashMap::new();
    let mut at = 0usize;
    while at < data.len() {
        let mut c = Cursor { data, at, end: data.len() };
        let bad = || anyhow!("bad .eh_frame entry at offset {at:#x}");
        let (length, wide) = match c.u32().ok_or_else(bad)? {
            0 => break,
            0xffff_ffff => (c.u64().ok_or_else(bad)?, true),
            n => (u64::from(n), false),
        };
        let end = usize::try_from(length)
            .ok()
            .and_then(|l| c.at.checked_add(l))
            .filter(|&e| e <= data.len())
            .ok_or_else(bad)?;
        c.end = end;
        let id_at = c.at;
        let id = if wide { c.u64() } else { c.u32().map(u64::from) }.ok_or_else(bad)?;
        at = end;
        if id == 0 {
            continue;
        }
        let Some(cie_at) = usize::try_from(id).ok().and_then(|id| id_at.checked_sub(id)) else {
            continue;
        };
        let cie = *cies.entry(cie_at).or_insert_with(|| cie(&sec, cie_at));
        let Some(cie) = cie else { continue };
        let mark = rows.len();
        match fde(&mut c, &cie, &sec, rows) {
            Some((start, end)) => spans.push(Span { start, end, rows: mark..rows.len() }),
            None => rows.truncate(mark),
        }
    }
    Ok(spans)
}

/// One FDE: the code it covers, from `start` up to `end`, and its rows' indices.
#[derive(Clone, Debug)]
pub struct Span {
    pub start: u64,
    pub end: u64,
    pub rows: std::ops::Range<usize>,
}

/// The CIE at offset `at`, or None when it cannot be read or uses what a table
/// cannot follow.
fn cie(sec: &Section, at: usize) -> Option<Cie> {
    let data = sec.data;
    let mut c = Cursor { data, at, end: data.len() };
    let length = match c.u32()? {
        0 | 0xffff_ffff => return None,
        n => n as usize,
    };
    c.end = c.at.checked_add(length).filter(|&e| e <= data.len())?;
    if c.u32()? != 0 {
        return None;
    }
    let version = c.u8()?;
    if !matches!(version, 1 | 3 | 4) {
        return None;
    }
    let aug_start = c.at;
    while c.u8()? != 0 {}
    let augmentation = &data[aug_start..c.at - 1];
    if version == 4 {
        // Address and segment selector sizes.
        if c.u8()? != 8 || c.u8()? != 0 {
            return None;
        }
    }
    let code_align = c.uleb()?;
    let data_align = c.sleb()?;
    let _ra_register = if version == 1 { u64::from(c.u8()?) } else { c.uleb()? };
    let mut cie = Cie {
        code_align,
        data_align,
        encoding: 0,
        augmented: false,
        signal: false,
        initial: START,
    };
    if let Some((&b'z', rest)) = augmentation.split_first() {
        cie.augmented = true;
        let len = usize::try_from(c.uleb()?).ok()?;
        let aug_end = c.at.checked_add(len).filter(|&e| e <= c.end)?;
        for ch in rest {
            match ch {
                b'L' => _ = c.u8()?,
                b'P' => {
                    let enc = c.u8()?;
                    c.value(enc)?;
                }
                b'R' => cie.encoding = c.u8()?,
                b'S' => cie.signal = true,
                _ => return None,
            }
        }
        c.at = aug_end;
    } else if !augmentation.is_empty() {
        return None;
    }
    let mut state = START;
    run(&mut c, &cie, None, &mut state, sec, &mut |_, _| {})?;
    cie.initial = state;
    Some(cie)
}

/// Reads the FDE after its CIE pointer and pushes its rows; its start and end
/// addresses, or None when it cannot be read.
fn fde(c: &mut Cursor, cie: &Cie, sec: &Section, rows: &mut Vec<Row>) -> Option<(u64, u64)> {
    let start = c.pointer(cie.encoding, sec)?;
    let len = c.value(cie.encoding)?;
    if cie.augmented {
        let n = usize::try_from(c.uleb()?).ok()?;
        c.bytes(n)?;
    }
    let mut state = cie.initial;
    let mut push = |pc: u64, s: &State| {
        rows.push(Row { pc, rule: if cie.signal { Rule::Signal } else { rule_of(s, sec.data) } })
    };
    let last = run(c, cie, Some(start), &mut state, sec, &mut push)?;
    push(last, &state);
    Some((start, start.wrapping_add(len)))
}

/// The [`Rule`] that a state comes to.
fn rule_of(s: &State, data: &[u8]) -> Rule {
    match s.ra {
        Reg::Undefined => return Rule::End,
        Reg::Unset | Reg::Offset(-8) => {}
        _ => return Rule::Stop,
    }
    match s.cfa {
        Cfa::Reg { reg, offset } => {
            let base = match reg {
                RSP => Base::Sp,
                RBP => Base::Bp,
                _ => return Rule::Stop,
            };
            let bp_at = match s.bp {
                Reg::Unset | Reg::SameValue => None,
                Reg::Offset(o) => match i32::try_from(o) {
                    Ok(o) => Some(o),
                    Err(_) => return Rule::Stop,
                },
                _ => return Rule::Stop,
            };
            i32::try_from(offset).map_or(Rule::Stop, |offset| Rule::Cfa { base, offset, bp_at })
        }
        Cfa::Expr { at, len } => plt_threshold(&data[at..at + len])
            .map_or(Rule::Stop, |threshold| Rule::Plt { threshold }),
    }
}

/// Runs a call frame program to its end. `pc`: the FDE's start (None for a
/// CIE's initial instructions); `row` is called with the address and state of
/// every row that an advance ends. Returns the address of the last row (whose
/// state is left in `state`), or None for a program that cannot be followed.
fn run(
    c: &mut Cursor,
    cie: &Cie,
    pc: Option<u64>,
    state: &mut State,
    sec: &Section,
    row: &mut dyn FnMut(u64, &State),
) -> Option<u64> {
    let mut stack = Vec::new();
    let in_fde = pc.is_some();
    let mut pc = pc.unwrap_or(0);
    while c.at < c.end {
        let op = c.u8()?;
        match step(op, c, cie, sec, in_fde, state, &mut stack)? {
            Step::Stay => {}
            Step::SetLoc(to) => {
                if to < pc {
                    return None;
                }
                row(pc, state);
                pc = to;
            }
            Step::Advance(delta) => {
                row(pc, state);
                pc = pc.wrapping_add(delta.wrapping_mul(cie.code_align));
            }
        }
    }
    Some(pc)
}

/// What one instruction does to the location.
enum Step {
    /// Nothing: the rules changed, or nothing did.
    Stay,
    /// Advance by this many code alignment units, ending a row.
    Advance(u64),
    /// Go to this address, ending a row.
    SetLoc(u64),
}

/// Runs one instruction, `op`, its operands read from `c`; None for one that
/// cannot be followed.
fn step(
    op: u8,
    c: &mut Cursor,
    cie: &Cie,
    sec: &Section,
    in_fde: bool,
    state: &mut State,
    stack: &mut Vec<State>,
) -> Option<Step> {
    let factored = |n: i64| n.wrapping_mul(cie.data_align);
    let low = u64::from(op & 0x3f);
    Some(match op >> 6 {
        1 => Step::Advance(low),
        2 => {
            set_reg(state, low, Reg::Offset(factored(c.uleb()? as i64)));
            Step::Stay
        }
        3 => {
            restore_reg(state, low, cie, in_fde)?;
            Step::Stay
        }
        _ => match op {
            0x00 => Step::Stay,
            0x01 => Step::SetLoc(c.pointer(cie.encoding, sec)?),
            0x02 => Step::Advance(u64::from(c.u8()?)),
            0x03 => Step::Advance(u64::from(c.u16()?)),
            0x04 => Step::Advance(u64::from(c.u32()?)),
            0x06 => {
                restore_reg(state, c.uleb()?, cie, in_fde)?;
                Step::Stay
            }
            0x0a => {
                if stack.len() >= MAX_REMEMBERED {
                    return None;
                }
                stack.push(*state);
                Step::Stay
            }
            0x0b => {
                *state = stack.pop()?;
                Step::Stay
            }
            0x0c..=0x0f | 0x12 | 0x13 => {
                cfa_rule(op, c, state, factored)?;
                Step::Stay
            }
            0x2e => {
                c.uleb()?;
                Step::Stay
            }
            _ => {
                register_rule(op, c, state, factored)?;
                Step::Stay
            }
        },
    })
}

/// A rule for the return address or the frame pointer (others are not kept).
fn set_reg(s: &mut State, reg: u64, r: Reg) {
    match reg {
        RA => s.ra = r,
        RBP => s.bp = r,
        _ => {}
    }
}

/// A register's rule back to the CIE's; only an FDE has initial rules to go
/// back to.
fn restore_reg(s: &mut State, reg: u64, cie: &Cie, in_fde: bool) -> Option<()> {
    in_fde.then_some(())?;
    match reg {
        RA => s.ra = cie.initial.ra,
        RBP => s.bp = cie.initial.bp,
        _ => {}
    }
    Some(())
}

/// The instructions that define the CFA.
fn cfa_rule(
    op: u8,
    c: &mut Cursor,
    state: &mut State,
    factored: impl Fn(i64) -> i64,
) -> Option<()> {
    state.cfa = match op {
        0x0c => Cfa::Reg { reg: c.uleb()?, offset: c.uleb()? as i64 },
        0x0d => {
            let Cfa::Reg { offset, .. } = state.cfa else { return None };
            Cfa::Reg { reg: c.uleb()?, offset }
        }
        0x0e => {
            let Cfa::Reg { reg, .. } = state.cfa else { return None };
            Cfa::Reg { reg, offset: c.uleb()? as i64 }
        }
        0x0f => {
            let len = usize::try_from(c.uleb()?).ok()?;
            let at = c.at;
            c.bytes(len)?;
            Cfa::Expr { at, len }
        }
        0x12 => {
            let (reg, off) = (c.uleb()?, c.sleb()?);
            Cfa::Reg { reg, offset: factored(off) }
        }
        0x13 => {
            let Cfa::Reg { reg, .. } = state.cfa else { return None };
            Cfa::Reg { reg, offset: factored(c.sleb()?) }
        }
        _ => return None,
    };
    Some(())
}

/// The instructions that give a register a rule; None for an unknown one.
fn register_rule(
    op: u8,
    c: &mut Cursor,
    state: &mut State,
    factored: impl Fn(i64) -> i64,
) -> Option<()> {
    match op {
        0x05 => {
            let (reg, off) = (c.uleb()?, c.uleb()? as i64);
            set_reg(state, reg, Reg::Offset(factored(off)));
        }
        0x07 => set_reg(state, c.uleb()?, Reg::Undefined),
        0x08 => set_reg(state, c.uleb()?, Reg::SameValue),
        // register, val_offset, val_offset_sf: a rule a table cannot
        // follow (a LEB128 is as long read signed or not).
        0x09 | 0x14 | 0x15 => {
            let reg = c.uleb()?;
            c.uleb()?;
            set_reg(state, reg, Reg::Other);
        }
        0x10 | 0x16 => {
            let reg = c.uleb()?;
            let len = usize::try_from(c.uleb()?).ok()?;
            c.bytes(len)?;
            set_reg(state, reg, Reg::Other);
        }
        0x11 => {
            let (reg, off) = (c.uleb()?, c.sleb()?);
            set_reg(state, reg, Reg::Offset(factored(off)));
        }
        0x2f => {
            let (reg, off) = (c.uleb()?, c.uleb()? as i64);
            set_reg(state, reg, Reg::Offset(factored(off.wrapping_neg())));
        }
        _ => return None,
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::super::Table;
    use super::*;
    use gimli::{
        BaseAddresses, CfaRule, CieOrFde, EhFrame, LittleEndian, RegisterRule, UnwindContext,
        UnwindSection as _, X86_64,
    };

    /// The rows of every FDE as gimli's general evaluator gives them, in the
    /// form [`fdes`] gives them; Err where gimli refuses the section.
    fn by_gimli(
        data: &[u8],
        eh_frame_addr: u64,
        text_addr: u64,
    ) -> Result<(Vec<Row>, Vec<Span>), gimli::Error> {
        let eh = EhFrame::new(data, LittleEndian);
        let bases = BaseAddresses::default().set_eh_frame(eh_frame_addr).set_text(text_addr);
        let mut ctx = Box::new(UnwindContext::new());
        let (mut rows, mut spans) = (Vec::new(), Vec::new());
        let mut entries = eh.entries(&bases);
        while let Some(entry) = entries.next()? {
            let CieOrFde::Fde(partial) = entry else { continue };
            let Ok(fde) = partial.parse(EhFrame::cie_from_offset) else { continue };
            let signal = fde.cie().is_signal_trampoline();
            let mark = rows.len();
            let mut table = fde.rows(&eh, &bases, &mut ctx)?;
            while let Some(row) = table.next_row()? {
                let rule = match row.register(X86_64::RA) {
                    Some(RegisterRule::Undefined) => Rule::End,
                    Some(RegisterRule::Offset(-8)) | None => match row.cfa() {
                        CfaRule::RegisterAndOffset { register, offset } => {
                            let base = match *register {
                                X86_64::RSP => Some(Base::Sp),
                                X86_64::RBP => Some(Base::Bp),
                                _ => None,
                            };
                            let bp_at = match row.register(X86_64::RBP) {
                                None | Some(RegisterRule::SameValue) => Some(None),
                                Some(RegisterRule::Offset(o)) => i32::try_from(o).ok().map(Some),
                                _ => None,
                            };
                            match (base, i32::try_from(*offset), bp_at) {
                                (Some(base), Ok(offset), Some(bp_at)) => {
                                    Rule::Cfa { base, offset, bp_at }
                                }
                                _ => Rule::Stop,
                            }
                        }
                        CfaRule::Expression(e) => {
                            let bytes =
                                e.get(&eh).ok().map(|x| x.0.slice().to_vec()).unwrap_or_default();
                            plt_threshold(&bytes)
                                .map_or(Rule::Stop, |threshold| Rule::Plt { threshold })
                        }
                    },
                    Some(_) => Rule::Stop,
                };
                rows.push(Row {
                    pc: row.start_address(),
                    rule: if signal { Rule::Signal } else { rule },
                });
            }
            spans.push(Span {
                start: fde.initial_address(),
                end: fde.end_address(),
                rows: mark..rows.len(),
            });
        }
        Ok((rows, spans))
    }

    /// The ELF files of a directory, smallest first, up to `n` of them.
    fn elf_files(dir: &str, n: usize) -> Vec<std::path::PathBuf> {
        let mut files: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let meta = std::fs::metadata(e.path()).ok()?;
                let mut magic = [0u8; 4];
                std::io::Read::read_exact(&mut std::fs::File::open(e.path()).ok()?, &mut magic)
                    .ok()?;
                (meta.is_file() && magic == *b"\x7fELF").then(|| (meta.len(), e.path()))
            })
            .collect();
        files.sort();
        files.into_iter().take(n).map(|f| f.1).collect()
    }

    /// Every FDE of the machine's own programs and libraries (and of the
    /// largest ones the tracer meets most) reads into the same rows as
    /// gimli's evaluator gives.
    #[test]
    fn the_machines_binaries_give_the_rows_gimli_gives() {
        let mut files = elf_files("/usr/bin", 120);
        files.extend(elf_files("/usr/lib/x86_64-linux-gnu", 120));
        for big in [
            "/usr/bin/perf",
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/bin/python3",
        ] {
            if std::path::Path::new(big).exists() {
                files.push(big.into());
            }
        }
        let (mut compared, mut fdes_seen) = (0, 0);
        for path in &files {
            let mut f = std::io::BufReader::new(std::fs::File::open(path).unwrap());
            let Ok(Some((eh_addr, data))) = crate::sys::elf::section_with_addr(&mut f, ".eh_frame")
            else {
                continue;
            };
            let text_addr =
                crate::sys::elf::section_addr(&mut f, ".text").ok().flatten().unwrap_or(0);
            let Ok((want_rows, want)) = by_gimli(&data, eh_addr, text_addr) else { continue };
            let mut rows = Vec::new();
            let got = fdes(&data, eh_addr, text_addr, &mut rows)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(got.len(), want.len(), "{}: FDEs", path.display());
            for (g, w) in got.iter().zip(&want) {
                assert_eq!((g.start, g.end), (w.start, w.end), "{}", path.display());
                assert_eq!(
                    rows[g.rows.clone()],
                    want_rows[w.rows.clone()],
                    "{}: FDE at {:#x}",
                    path.display(),
                    g.start
                );
            }
            compared += 1;
            fdes_seen += got.len();
        }
        assert!(
            compared >= 50 && fdes_seen >= 10_000,
            "only {compared} files ({fdes_seen} FDEs) compared"
        );
    }

    /// Builds an `.eh_frame` of one CIE (`zR`, pc-relative sdata4 addresses,
    /// code alignment 1, data alignment -8) and FDEs with the given programs,
    /// each covering 0x100 bytes from 0x1000 apart; the section is at 0.
    fn section(cie_program: &[u8], fdes: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        let entry = |out: &mut Vec<u8>, body: Vec<u8>| {
            out.extend((body.len() as u32).to_le_bytes());
            out.extend(body);
        };
        let mut cie = vec![0, 0, 0, 0, 1, b'z', b'R', 0, 1, 0x78, 16, 1, 0x1b];
        cie.extend(cie_program);
        entry(&mut out, cie);
        for (i, program) in fdes.iter().enumerate() {
            let at = out.len();
            let mut body = ((at + 4) as u32).to_le_bytes().to_vec();
            // pc-relative: the address minus where the field is.
            let field = (at + 8) as i64;
            body.extend(((0x1000 * (i as i64 + 1)) - field).to_le_bytes()[..4].to_vec());
            body.extend(0x100u32.to_le_bytes());
            body.push(0);
            body.extend(*program);
            entry(&mut out, body);
        }
        out
    }

    /// The CIE's usual start: CFA = rsp + 8, the return address at CFA - 8.
    const CIE_START: &[u8] = &[0x0c, 7, 8, 0x90, 1];

    #[test]
    fn remembered_state_comes_back_at_its_restore() {
        // push rbp; mov rsp, rbp; ...; remember; leave; ret path; restore.
        let program: &[u8] =
            &[0x41, 0x0e, 16, 0x86, 2, 0x43, 0x0d, 6, 0x50, 0x0a, 0x0c, 7, 8, 0x41, 0x0b];
        let data = section(CIE_START, &[program]);
        let t = Table::from_eh_frame(&data, 0, 0).unwrap();
        let framed = Rule::Cfa { base: Base::Bp, offset: 16, bp_at: Some(-16) };
        assert_eq!(t.lookup(0x1000), Rule::Cfa { base: Base::Sp, offset: 8, bp_at: None });
        assert_eq!(t.lookup(0x1001), Rule::Cfa { base: Base::Sp, offset: 16, bp_at: Some(-16) });
        assert_eq!(t.lookup(0x1004), framed);
        assert_eq!(t.lookup(0x1014), Rule::Cfa { base: Base::Sp, offset: 8, bp_at: Some(-16) });
        assert_eq!(t.lookup(0x1015), framed, "restore_state brings back the framed rules");
        assert_eq!(t.lookup(0x1100), Rule::Stop, "past the FDE");
    }

    #[test]
    fn an_fde_that_cannot_be_read_is_left_out_and_the_rest_kept() {
        // An unknown opcode (0x3f) in the first FDE; a restore_state with nothing remembered in the second.
        let data = section(CIE_START, &[&[0x41, 0x3f], &[0x0b], &[0x41, 0x0e, 16]]);
        let t = Table::from_eh_frame(&data, 0, 0).unwrap();
        assert_eq!(t.lookup(0x1000), Rule::Stop);
        assert_eq!(t.lookup(0x2000), Rule::Stop);
        assert_eq!(t.lookup(0x3001), Rule::Cfa { base: Base::Sp, offset: 16, bp_at: None });
    }

    #[test]
    fn a_section_whose_lengths_do_not_hold_together_is_refused() {
        let mut data = section(CIE_START, &[&[0x41, 0x0e, 16]]);
        data.truncate(data.len() - 2);
        assert!(fdes(&data, 0, 0, &mut Vec::new()).is_err());
        // A zero length ends the section.
        let mut data = section(CIE_START, &[&[0x41, 0x0e, 16]]);
        data.extend([0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(fdes(&data, 0, 0, &mut Vec::new()).unwrap().len(), 1);
    }
}
