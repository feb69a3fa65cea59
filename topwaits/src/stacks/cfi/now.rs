//! The user stack of a thread blocked right now (a wait that began before the
//! trace, or `topwaits blocked`), walked in user space by the same rules as the
//! in-kernel walker ([`super::step`] over each file's table), from the pc and sp
//! that `/proc/TID/syscall` shows and stack memory read from the process.
//!
//! The frame pointer is not shown there, so it is unknown until a frame's rule
//! restores it: a rule that needs it before then ends the walk, marked cut.
//! Code in a file with no unwind table is walked by scanning the stack for
//! return addresses ([`crate::stacks::frame_scan::Walker`]), and the stack is marked as a
//! guess: stale return addresses in a long-running thread's stack look like
//! frames, so nothing scanned is ever reported as a whole stack.

use std::collections::HashMap;
use std::sync::Arc;

use topwaits_common::jit::{jvm_block_start, JitProc, JvmCode, JVM_HOPS};
use topwaits_common::python::PyProc;
use topwaits_common::walker::{cut, CUT_MARK};

use super::cache::{self, Cache};
use super::{step, Base, Regs, Rule, Step, Table};
use crate::stacks::frame_scan::{Arch, Memory, Region, Walker, MAX_FRAMES};
use crate::stacks::python;
use crate::sys::{elf, procfs};

/// The last word of a stack whose frames below it were found by scanning the
/// stack, not unwound: a guess (shown as `[cut:scanned-guess]`).
pub const GUESSED: u64 = CUT_MARK | cut::GUESSED;

/// One executable mapping: where it lies, its load bias (its address less the
/// file's virtual address), and its file's table (None: the file has none).
#[derive(Clone, Debug)]
pub struct Code {
    pub start: u64,
    pub end: u64,
    pub bias: u64,
    pub table: Option<Arc<Table>>,
}

/// The mapping `pc` lies in, from mappings sorted by start.
fn code_at(code: &[Code], pc: u64) -> Option<&Code> {
    let i = code.partition_point(|c| c.start <= pc);
    code.get(i.checked_sub(1)?).filter(|c| pc < c.end)
}

/// The stack of a thread stopped at `pc` with stack pointer `sp`, and frame
/// pointer `bp` where it is known, leaf first; its last word a cut mark (see
/// `topwaits_common::walker::cut`) unless it was unwound to the thread's first
/// frame. `regions` are all the process's mappings, for the scan of code
/// without a table.
pub fn walk(
    code: &[Code],
    regions: &[Region],
    mem: &dyn Memory,
    (pc, sp, bp): (u64, u64, Option<u64>),
    mut py: Option<Python>,
    jit: Option<&(JitProc, Option<JvmCode>)>,
) -> Vec<u64> {
    let js = jit.map(|j| &j.0);
    let jvm_code = jit.and_then(|j| j.1.as_ref());
    let mut frames = Vec::new();
    // A native frame of the evaluator stands for its call's Python frames, as
    // in the in-kernel walk.
    let mut push = |frames: &mut Vec<u64>, pc: u64| match py
        .as_mut()
        .filter(|py| python::now::in_evaluator(&py.proc, pc))
    {
        Some(py) if py.next < py.groups.len() => {
            frames.extend(&py.groups[py.next]);
            py.next += 1;
        }
        _ => frames.push(pc),
    };
    push(&mut frames, pc);
    let read = |a: u64| mem.word(a);
    let mut regs = Regs { pc, sp, bp: bp.unwrap_or(0) };
    let (mut leaf, mut bp_known) = (true, bp.is_some());
    loop {
        if frames.len() >= MAX_FRAMES {
            frames.push(CUT_MARK | cut::DEPTH);
            return frames;
        }
        let Some(c) = code_at(code, regs.pc) else {
            // A JVM's compiled code is stepped over by its frame size, as in
            // the in-kernel walk; V8's generated code, in no file, and the
            // JVM's interpreter keep frame pointers.
            let sized = jvm_code.and_then(|c| {
                let at = regs.pc.wrapping_sub(u64::from(!leaf));
                let start = jvm_block_start(|a| mem.byte(a), JVM_HOPS);
                let words = c.frame_words(at, start, |a| mem.u32(a))?;
                let cfa = regs.sp + 8 * words;
                let pc = read(cfa - 8).filter(|&pc| pc != 0)?;
                Some(Regs { pc, sp: cfa, bp: read(cfa - 16)? })
            });
            if let Some(r) = sized {
                (regs, leaf, bp_known) = (r, false, true);
                push_js(&mut frames, (code, js), regs, mem, &mut push);
                continue;
            }
            match js.filter(|_| bp_known).and_then(|_| by_frame_pointer(regs, read)) {
                Some(r) => {
                    (regs, leaf) = (r, false);
                    push_js(&mut frames, (code, js), regs, mem, &mut push);
                    continue;
                }
                None => {
                    frames.push(CUT_MARK | cut::UNMAPPED);
                    return frames;
                }
            }
        };
        let Some(table) = &c.table else {
            // No table: what a scan finds above here, marked as a guess.
            let scanned = Walker::new(regions, mem, Arch::native()).walk(regs.pc, regs.sp);
            frames.extend(scanned.into_iter().skip(1));
            frames.push(GUESSED);
            return frames;
        };
        let rule = table.lookup(regs.pc.wrapping_sub(c.bias).wrapping_sub(u64::from(!leaf)));
        if matches!(rule, Rule::Cfa { base: Base::Bp, .. }) && !bp_known {
            frames.push(CUT_MARK | cut::BP_UNKNOWN);
            return frames;
        }
        match step(table, c.bias, regs, leaf, read) {
            Step::Caller(r) => {
                bp_known |= matches!(rule, Rule::Cfa { bp_at: Some(_), .. });
                regs = r;
                leaf = false;
                if bp_known {
                    push_js(&mut frames, (code, js), regs, mem, &mut push);
                    continue;
                }
            }
            Step::Interrupted(r) => {
                bp_known = true;
                regs = r;
                leaf = true;
            }
            Step::End => return frames,
            Step::Cut => {
                frames.push(
                    CUT_MARK | if rule == Rule::Stop { cut::NO_INFO } else { cut::UNREADABLE },
                );
                return frames;
            }
        }
        push(&mut frames, regs.pc);
    }
}

/// The caller's registers by the frame pointer, if it leads somewhere readable.
fn by_frame_pointer(r: Regs, read: impl Fn(u64) -> Option<u64>) -> Option<Regs> {
    let pc = read(r.bp.checked_add(8)?)?;
    (r.bp != 0 && pc != 0).then_some(Regs { pc, sp: r.bp + 16, bp: read(r.bp)? })
}

/// Pushes the frame at `r` (a return address, its frame pointer known): as
/// the JavaScript function or Java method it runs where the runtime's code
/// and the frame's slots say so, as in the in-kernel walk; else as `push`
/// does.
fn push_js(
    frames: &mut Vec<u64>,
    (code, js): (&[Code], Option<&JitProc>),
    r: Regs,
    mem: &dyn Memory,
    push: &mut impl FnMut(&mut Vec<u64>, u64),
) {
    let word = js.and_then(|p| {
        let at = r.pc.wrapping_sub(1);
        let runs = p.may_run_function(at, code_at(code, at).is_some());
        runs.then(|| p.frame_word(r.bp, |a| mem.word(a))).flatten()
    });
    match word {
        Some(w) => frames.push(w),
        None => push(frames, r.pc),
    }
}

/// A Python thread's frames for a walk: its interpreter, and its frame words
/// grouped by evaluator call, innermost first ([`python::now::groups`]).
pub struct Python {
    pub proc: PyProc,
    pub groups: Vec<Vec<u64>>,
    /// The next group to stand for an evaluator frame.
    pub next: usize,
}

/// Tables of the files processes map, each built once (by device and inode),
/// and each process's executable mappings with them.
#[derive(Default)]
pub struct Tables {
    files: HashMap<(u64, u64), Option<Arc<Table>>>,
    procs: HashMap<u32, Arc<Vec<Code>>>,
    cache: Option<Cache>,
}

impl Tables {
    /// Tables read from `cache` where it holds them, and kept there when built.
    pub fn with_cache(cache: Option<Cache>) -> Tables {
        Tables { cache, ..Tables::default() }
    }

    /// Process `tgid`'s executable mappings with their tables, read once.
    pub fn code_of(&mut self, tgid: u32) -> Arc<Vec<Code>> {
        if let Some(c) = self.procs.get(&tgid) {
            return c.clone();
        }
        let mut code: Vec<Code> = procfs::maps_of(tgid)
            .iter()
            .filter(|m| m.exec)
            .filter_map(|m| self.code(tgid, m))
            .collect();
        code.sort_by_key(|c| c.start);
        let code = Arc::new(code);
        self.procs.insert(tgid, code.clone());
        code
    }

    /// One mapping with its file's table; None when the file cannot be read.
    fn code(&mut self, tgid: u32, m: &procfs::Mapping) -> Option<Code> {
        let file = procfs::open_mapped(tgid, m)?;
        let vaddr = elf::mapping_vaddr(
            &elf::load_segments(&mut std::io::BufReader::new(&file)).ok()?,
            m.offset,
            m.exec,
        )?;
        let cache = self.cache.as_ref();
        let table = self
            .files
            .entry((m.dev, m.inode))
            .or_insert_with(|| match cache::entries_of(cache, file, || {}) {
                Ok((entries, _)) => entries.map(|e| Arc::new(super::tree::table_of(&e))),
                Err(e) => {
                    log::debug!("no unwind table for {}: {e:#}", m.path);
                    None
                }
            })
            .clone();
        Some(Code { start: m.start, end: m.end, bias: m.start.wrapping_sub(vaddr), table })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Stack memory as words at addresses.
    struct Words(BTreeMap<u64, u64>);

    impl Memory for Words {
        fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
            match (buf.len(), self.0.get(&addr)) {
                (8, Some(w)) => {
                    buf.copy_from_slice(&w.to_le_bytes());
                    8
                }
                _ => 0,
            }
        }
    }

    fn cfa(base: Base, offset: i32, bp_at: Option<i32>) -> Rule {
        Rule::Cfa { base, offset, bp_at }
    }

    /// A file whose functions are: `entry` at 0x100 (the thread's first frame),
    /// `outer` at 0x200 (saves bp), `uses_bp` at 0x300 (CFA from bp), `inner`
    /// at 0x400 (sp-based), `leaf` at 0x500 (sp-based).
    fn table() -> Arc<Table> {
        Arc::new(Table {
            rows: vec![
                super::super::Row { pc: 0x100, rule: Rule::End },
                super::super::Row { pc: 0x200, rule: cfa(Base::Sp, 32, Some(-16)) },
                super::super::Row { pc: 0x300, rule: cfa(Base::Bp, 16, Some(-16)) },
                super::super::Row { pc: 0x400, rule: cfa(Base::Sp, 48, None) },
                super::super::Row { pc: 0x500, rule: cfa(Base::Sp, 16, None) },
                super::super::Row { pc: 0x600, rule: Rule::Stop },
            ],
        })
    }

    const BIAS: u64 = 0x5555_0000_0000;

    fn code(table: Option<Arc<Table>>) -> Vec<Code> {
        vec![Code { start: BIAS + 0x100, end: BIAS + 0x600, bias: BIAS, table }]
    }

    /// leaf (sp 0x1000, CFA 0x1010) <- inner (CFA 0x1040) <- entry. Stale return
    /// addresses of calls that have returned lie between the frames: a scan
    /// would take them, the tables never look at them.
    #[test]
    fn a_walk_by_the_tables_skips_stale_return_addresses_and_reaches_the_entry() {
        let mut m = BTreeMap::new();
        m.insert(0x1008, BIAS + 0x420); // leaf's return address, into inner
        m.insert(0x1018, BIAS + 0x210); // stale: a call outer made long ago
        m.insert(0x1020, BIAS + 0x520); // stale
        m.insert(0x1038, BIAS + 0x150); // inner's return address, into entry
        let stack =
            walk(&code(Some(table())), &[], &Words(m), (BIAS + 0x510, 0x1000, None), None, None);
        assert_eq!(
            stack,
            vec![BIAS + 0x510, BIAS + 0x420, BIAS + 0x150],
            "whole, with no stale frame"
        );
    }

    /// A rule that needs bp before any frame restored it ends the walk, marked;
    /// once a frame has restored it, bp-based frames are followed.
    #[test]
    fn bp_is_used_only_once_a_frame_restored_it() {
        let mut m = BTreeMap::new();
        m.insert(0x1008, BIAS + 0x320); // leaf returns into uses_bp
        let stack =
            walk(&code(Some(table())), &[], &Words(m), (BIAS + 0x510, 0x1000, None), None, None);
        assert_eq!(stack, vec![BIAS + 0x510, BIAS + 0x320, CUT_MARK | cut::BP_UNKNOWN]);
        // Given the frame pointer (the task iterator reads it), the same walk
        // goes on: uses_bp's CFA is bp + 16.
        let mut m = BTreeMap::new();
        m.insert(0x1008, BIAS + 0x320);
        m.insert(0x2000, 0);
        m.insert(0x2008, BIAS + 0x150);
        let stack = walk(
            &code(Some(table())),
            &[],
            &Words(m),
            (BIAS + 0x510, 0x1000, Some(0x2000)),
            None,
            None,
        );
        assert_eq!(stack, vec![BIAS + 0x510, BIAS + 0x320, BIAS + 0x150]);

        // outer (sp 0x1000, CFA 0x1020) saves the caller's bp (0x1100) at
        // CFA-16 and returns into uses_bp, whose CFA is bp + 16.
        let mut m = BTreeMap::new();
        m.insert(0x1010, 0x1100);
        m.insert(0x1018, BIAS + 0x320);
        m.insert(0x1108, BIAS + 0x150);
        m.insert(0x1100, 0);
        let stack =
            walk(&code(Some(table())), &[], &Words(m), (BIAS + 0x210, 0x1000, None), None, None);
        assert_eq!(stack, vec![BIAS + 0x210, BIAS + 0x320, BIAS + 0x150]);
    }

    #[test]
    fn unreadable_memory_unmapped_code_and_no_rule_are_cut_and_marked() {
        let t = Some(table());
        assert_eq!(
            walk(
                &code(t.clone()),
                &[],
                &Words(BTreeMap::new()),
                (BIAS + 0x510, 0x1000, None),
                None,
                None
            )
            .last(),
            Some(&(CUT_MARK | cut::UNREADABLE))
        );
        assert_eq!(
            walk(&code(t.clone()), &[], &Words(BTreeMap::new()), (0x42, 0x1000, None), None, None),
            vec![0x42, CUT_MARK | cut::UNMAPPED]
        );
        let mut m = BTreeMap::new();
        m.insert(0x1008, BIAS + 0x650); // into the Stop row's range
        let c = vec![Code { start: BIAS + 0x100, end: BIAS + 0x700, bias: BIAS, table: t }];
        assert_eq!(
            walk(&c, &[], &Words(m), (BIAS + 0x510, 0x1000, None), None, None).last(),
            Some(&(CUT_MARK | cut::NO_INFO))
        );
    }

    /// A Python thread: each native frame of the evaluator stands for its
    /// call's Python frames, the innermost call's first; a frame past the last
    /// group stays native.
    #[test]
    fn evaluator_frames_stand_for_their_calls_python_frames() {
        // leaf <- inner (as the evaluator) <- entry; the walk sees inner twice
        // over, once per call, when leaf's return into inner is followed by
        // another return into inner below it.
        let mut m = BTreeMap::new();
        m.insert(0x1008, BIAS + 0x420);
        m.insert(0x1038, BIAS + 0x420);
        m.insert(0x1068, BIAS + 0x150);
        let proc = PyProc { eval: [BIAS + 0x400, BIAS + 0x500, 0, 0], ..PyProc::default() };
        let py = Python { proc, groups: vec![vec![0xa1], vec![0xb1, 0xb2]], next: 0 };
        let stack = walk(
            &code(Some(table())),
            &[],
            &Words(m),
            (BIAS + 0x510, 0x1000, None),
            Some(py),
            None,
        );
        assert_eq!(stack, vec![BIAS + 0x510, 0xa1, 0xb1, 0xb2, BIAS + 0x150]);
        let py = Python { proc, groups: vec![vec![0xa1]], next: 0 };
        let mut m = BTreeMap::new();
        m.insert(0x1008, BIAS + 0x420);
        m.insert(0x1038, BIAS + 0x420);
        m.insert(0x1068, BIAS + 0x150);
        let stack = walk(
            &code(Some(table())),
            &[],
            &Words(m),
            (BIAS + 0x510, 0x1000, None),
            Some(py),
            None,
        );
        assert_eq!(
            stack,
            vec![BIAS + 0x510, 0xa1, BIAS + 0x420, BIAS + 0x150],
            "no group left: native"
        );
    }

    /// A file without a table: what a scan finds, ending in the guess mark.
    #[test]
    fn code_without_a_table_is_scanned_and_marked_a_guess() {
        let stack = walk(
            &code(None),
            &[],
            &Words(BTreeMap::new()),
            (BIAS + 0x510, 0x1000, None),
            None,
            None,
        );
        assert_eq!(stack, vec![BIAS + 0x510, GUESSED]);
        assert!(topwaits_common::walker::is_cut_mark(GUESSED));
    }
}
