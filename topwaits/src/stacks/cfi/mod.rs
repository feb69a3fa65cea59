//! Unwind tables for code built without frame pointers (most of a distribution's
//! binaries and libraries): an ELF file's `.eh_frame` call frame information,
//! evaluated (by `eh_frame.rs`) into one compact row per address range, sorted by address,
//! in the form an unwinder applies at each frame (the CFA from the stack or frame
//! pointer plus an offset, the return address just below it, the caller's frame
//! pointer saved at a fixed offset or left alone). Pure: built from bytes, and
//! tested on ELF files compiled in the tests and on fabricated stack memory.
//!
//! x86-64 only for now. [`step`] is the reference for the rules an in-kernel
//! walker applies; rows it cannot follow (a CFA given by a DWARF expression other
//! than the PLT's, a return address not at CFA-8) are [`Rule::Stop`], so a walk
//! ends there, marked, rather than guessing.

use std::io::{Read, Seek};

use anyhow::{anyhow, Context as _, Result};

use topwaits_common::walker::{SIG_BP, SIG_IP, SIG_SP};

use crate::sys::elf;

pub mod cache;
mod eh_frame;
mod gorows;
pub mod loader;
pub mod now;
pub mod tree;
pub mod v8rows;

/// The register a CFA is computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    Sp,
    Bp,
}

/// How to find the caller's registers at an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// CFA = `base` + `offset`; the return address is at CFA-8; the caller's frame
    /// pointer is saved at CFA + `bp_at`, or (None) is still in the register.
    Cfa { base: Base, offset: i32, bp_at: Option<i32> },
    /// A PLT stub: CFA = sp + 8, and 8 more once `pc & 15` reaches `threshold` (the
    /// stub has pushed its argument).
    Plt { threshold: u8 },
    /// The thread's first frame (`_start`, `clone3`'s child): the return address
    /// is undefined, and the stack ends here, whole.
    End,
    /// A signal trampoline (`__restore_rt`, its CIE marked `S`): the registers the
    /// signal interrupted are in the `ucontext` at sp, and the pc found there is
    /// exact, not a return address.
    Signal,
    /// Nothing an unwinder can follow: the walk stops here, cut.
    Stop,
}

/// One row: `rule` holds from `pc` (a virtual address of the file) up to the next
/// row's `pc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub pc: u64,
    pub rule: Rule,
}

/// The rows of one file, sorted by address, gaps between functions filled with
/// [`Rule::Stop`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    pub rows: Vec<Row>,
}

/// The DWARF expression of glibc's and binutils' PLT stubs:
/// `DW_OP_breg7 (rsp) 8; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and;
/// DW_OP_litN; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus`, with N the threshold.
fn plt_threshold(expr: &[u8]) -> Option<u8> {
    const DW_OP_LIT0: u8 = 0x30;
    match expr {
        [0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, lit, 0x2a, 0x33, 0x24, 0x22]
            if (DW_OP_LIT0..DW_OP_LIT0 + 32).contains(lit) =>
        {
            Some(lit - DW_OP_LIT0)
        }
        _ => None,
    }
}

impl Table {
    /// The table of an `.eh_frame` section loaded at `eh_frame_addr`, in a file
    /// whose `.text` is at `text_addr` (pointer encodings relative to either).
    pub fn from_eh_frame(data: &[u8], eh_frame_addr: u64, text_addr: u64) -> Result<Table> {
        // About one row per 8 bytes of the section in a distribution's files.
        let mut rows = Vec::with_capacity(data.len() / 8);
        let mut spans = eh_frame::fdes(data, eh_frame_addr, text_addr, &mut rows)?;
        spans.sort_by_key(|s| s.start);
        let mut out: Vec<Row> = Vec::with_capacity(rows.len() + spans.len());
        let mut covered_to = 0u64;
        for s in spans {
            if s.start < covered_to {
                // Overlapping FDEs (rare, and a linker bug): the first one wins.
                continue;
            }
            out.extend(rows[s.rows].iter().filter(|r| r.pc < s.end));
            out.push(Row { pc: s.end, rule: Rule::Stop });
            covered_to = s.end;
        }
        // A row that starts where the previous gap-filler was is the one that holds.
        out.dedup_by(|later, earlier| {
            if later.pc == earlier.pc {
                *earlier = *later;
                true
            } else {
                false
            }
        });
        Ok(Table { rows: out })
    }

    /// The table of an ELF file, or None when it has neither `.eh_frame` nor,
    /// as a Go program, Go's own function table: a Go program's functions get
    /// their rows from that table (its `.eh_frame`, if any, covers only its C
    /// parts), as `gorows` gives them; V8's embedded builtins get frame-pointer
    /// rows (`v8rows`).
    pub fn from_elf<R: Read + Seek>(f: &mut R) -> Result<Option<Table>> {
        let eh = match elf::section_with_addr(f, ".eh_frame")? {
            Some((eh_addr, data)) => {
                let text_addr = elf::section_addr(f, ".text")?.unwrap_or(0);
                Some(Table::from_eh_frame(&data, eh_addr, text_addr)?)
            }
            None => None,
        };
        let go = match crate::stacks::golang::pclntab_of(f) {
            Ok(t) => t,
            Err(e) => {
                log::debug!("Go's function table not read: {e:#}");
                None
            }
        };
        let eh = match (eh, go) {
            (eh, Some(go)) => Some(eh.unwrap_or_default().with(gorows::rows(&go))),
            (eh, None) => eh,
        };
        Ok(match v8rows::rows(f) {
            Ok(Some(blob)) => Some(eh.unwrap_or_default().with(blob)),
            Ok(None) => eh,
            Err(e) => {
                log::debug!("V8's builtins not found: {e:#}");
                eh
            }
        })
    }

    /// The table with `rows` (sorted) laid over the places where it says
    /// nothing (its gaps, [`Rule::Stop`]): a Go program's functions over the
    /// gaps between the FDEs of its C parts.
    pub fn with(self, rows: Vec<Row>) -> Table {
        if self.rows.is_empty() {
            return Table { rows };
        }
        let mut out: Vec<Row> = Vec::with_capacity(self.rows.len() + rows.len());
        let mut covered = rows.iter().peekable();
        for r in &self.rows {
            // The added rows up to this one, where this table said nothing.
            while let Some(g) = covered.next_if(|g| g.pc < r.pc) {
                if self.lookup(g.pc) == Rule::Stop {
                    out.push(*g);
                }
            }
            out.push(*r);
        }
        out.extend(covered.filter(|g| self.lookup(g.pc) == Rule::Stop).copied());
        out.sort_by_key(|r| r.pc);
        // One row an address: a rule over a gap's Stop.
        out.dedup_by(|later, earlier| {
            if later.pc != earlier.pc {
                return false;
            }
            if earlier.rule == Rule::Stop {
                *earlier = *later;
            }
            true
        });
        Table { rows: out }
    }

    /// The rule at virtual address `pc`.
    pub fn lookup(&self, pc: u64) -> Rule {
        match self.rows.partition_point(|r| r.pc <= pc) {
            0 => Rule::Stop,
            i => self.rows[i - 1].rule,
        }
    }
}

/// The registers an unwinder carries from frame to frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regs {
    pub pc: u64,
    pub sp: u64,
    pub bp: u64,
}

/// What one step of a walk found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The caller's registers.
    Caller(Regs),
    /// The registers a signal interrupted: their pc is exact, looked up as a leaf's.
    Interrupted(Regs),
    /// The thread's first frame: the stack is whole.
    End,
    /// The walk cannot go on (no rule, or memory unreadable): the stack is cut.
    Cut,
}

/// One step from the frame whose registers are `regs`, with `bias` the load
/// address minus the file's virtual addresses. `leaf`: the pc is where the thread
/// stopped, not a return address (which points past its call, so the rule of the
/// call itself is found one byte back). `read` reads a word of the stack.
pub fn step(
    table: &Table,
    bias: u64,
    regs: Regs,
    leaf: bool,
    read: impl Fn(u64) -> Option<u64>,
) -> Step {
    let at = regs.pc.wrapping_sub(bias).wrapping_sub(u64::from(!leaf));
    let (cfa, bp_at) = match table.lookup(at) {
        Rule::End => return Step::End,
        Rule::Signal => {
            let (Some(pc), Some(sp), Some(bp)) =
                (read(regs.sp + SIG_IP), read(regs.sp + SIG_SP), read(regs.sp + SIG_BP))
            else {
                return Step::Cut;
            };
            return Step::Interrupted(Regs { pc, sp, bp });
        }
        Rule::Stop => return Step::Cut,
        Rule::Plt { threshold } => {
            (regs.sp.wrapping_add(if (at & 15) as u8 >= threshold { 16 } else { 8 }), None)
        }
        Rule::Cfa { base, offset, bp_at } => {
            let from = if base == Base::Sp { regs.sp } else { regs.bp };
            (from.wrapping_add_signed(offset.into()), bp_at)
        }
    };
    let bp = match bp_at {
        Some(off) => match read(cfa.wrapping_add_signed(off.into())) {
            Some(v) => v,
            None => return Step::Cut,
        },
        None => regs.bp,
    };
    match read(cfa.wrapping_sub(8)) {
        // A zero return address marks the outermost frame by convention.
        Some(0) => Step::End,
        None => Step::Cut,
        Some(pc) => Step::Caller(Regs { pc, sp: cfa, bp }),
    }
}

/// The table of the ELF file at `path`, or None when it has no `.eh_frame`.
pub fn table_of_file(path: &std::path::Path) -> Result<Option<Table>> {
    let mut f =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    Table::from_elf(&mut f).map_err(|e| anyhow!("{}: {e:#}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    // The address of a symbol in an ELF file, from `nm`.
    use crate::stacks::golang::tests::nm as symbol;

    /// Compiles a C file in a scratch directory for tests; the path of the binary.
    fn compile_c(tag: &str, source: &str, flags: &[&str]) -> Option<std::path::PathBuf> {
        let dir = std::env::temp_dir().join(format!("tw-cfi-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let src = dir.join("prog.c");
        std::fs::write(&src, source).ok()?;
        let exe = dir.join("prog");
        let out = std::process::Command::new("cc")
            .args(flags)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .output()
            .ok()?;
        out.status.success().then_some(exe)
    }

    const PROG: &str = r#"
        #include <unistd.h>
        volatile long sink;
        __attribute__((noinline)) long leaf(long x) { long a[8]; for (int i = 0; i < 8; i++) a[i] = x + i; sink = a[3]; return a[7]; }
        __attribute__((noinline)) long middle(long x) { long y = leaf(x) * 3; sink = y; return y + 1; }
        int main(int argc, char **argv) { return (int)middle(argc); }
    "#;

    #[test]
    fn a_program_without_frame_pointers_gets_rows_from_its_cfi() {
        let Some(exe) = compile_c(
            "nofp",
            PROG,
            &["-O2", "-fomit-frame-pointer", "-fasynchronous-unwind-tables"],
        ) else {
            eprintln!("skipped: no C compiler");
            return;
        };
        let table = table_of_file(&exe).unwrap().expect("an .eh_frame");
        assert!(table.rows.windows(2).all(|w| w[0].pc < w[1].pc), "sorted, one row per address");
        let main = symbol(&exe, "main").unwrap();
        let middle = symbol(&exe, "middle").unwrap();
        // At a function's first instruction the CFA is sp + 8 (just the return address).
        assert_eq!(table.lookup(middle), Rule::Cfa { base: Base::Sp, offset: 8, bp_at: None });
        assert_eq!(table.lookup(main), Rule::Cfa { base: Base::Sp, offset: 8, bp_at: None });
        // Somewhere in `middle` (it calls `leaf`) the stack has grown.
        let grown = table.rows.iter().any(|r| {
            r.pc > middle
                && r.pc < middle + 64
                && matches!(r.rule, Rule::Cfa { base: Base::Sp, offset, .. } if offset > 8)
        });
        assert!(
            grown,
            "{:?}",
            table.rows.iter().filter(|r| r.pc >= middle && r.pc < middle + 64).collect::<Vec<_>>()
        );
        // `_start`'s CFI marks the end of the stack.
        if let Some(start) = symbol(&exe, "_start") {
            assert!(
                matches!(table.lookup(start + 1), Rule::End | Rule::Cfa { .. }),
                "{:?}",
                table.lookup(start + 1)
            );
        }
        let _ = std::fs::remove_dir_all(exe.parent().unwrap());
    }

    /// Debian's own binaries and libc keep no frame pointers but have CFI: every
    /// exported function's entry has a rule, and the tables are whole (sorted,
    /// with most of the text covered by followable rows).
    #[test]
    fn distribution_binaries_without_frame_pointers_get_whole_tables() {
        for (path, func) in [
            ("/usr/bin/gzip", None),
            ("/lib/x86_64-linux-gnu/libc.so.6", Some("__read")),
            ("/usr/bin/python3", None),
        ] {
            let path = std::path::Path::new(path);
            if !path.exists() {
                eprintln!("skipped {}: not installed", path.display());
                continue;
            }
            let t = table_of_file(path).unwrap().expect("an .eh_frame");
            assert!(t.rows.len() > 500, "{}: {} rows", path.display(), t.rows.len());
            assert!(t.rows.windows(2).all(|w| w[0].pc < w[1].pc));
            let followable = t
                .rows
                .iter()
                .filter(|r| matches!(r.rule, Rule::Cfa { .. } | Rule::Plt { .. }))
                .count();
            assert!(
                followable * 10 >= t.rows.len() * 8,
                "{}: {followable} of {} rows followable",
                path.display(),
                t.rows.len()
            );
            if let Some(f) = func.and_then(|f| symbol(path, f).or_else(|| dynamic_symbol(path, f)))
            {
                assert_eq!(
                    t.lookup(f),
                    Rule::Cfa { base: Base::Sp, offset: 8, bp_at: None },
                    "{} at its entry",
                    func.unwrap()
                );
            }
        }
    }

    fn dynamic_symbol(path: &std::path::Path, name: &str) -> Option<u64> {
        let out = std::process::Command::new("nm").arg("-D").arg(path).output().ok()?;
        String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
            let mut it = l.split_whitespace();
            let (addr, _, n) = (it.next()?, it.next()?, it.next()?);
            (n.split('@').next() == Some(name)).then(|| u64::from_str_radix(addr, 16).ok())?
        })
    }

    #[test]
    fn the_plt_stubs_rule_is_recognised() {
        let expr = [0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22];
        assert_eq!(plt_threshold(&expr), Some(11));
        assert_eq!(plt_threshold(&expr[1..]), None);
        let table = Table {
            rows: vec![
                Row { pc: 0x1000, rule: Rule::Plt { threshold: 11 } },
                Row { pc: 0x1100, rule: Rule::Stop },
            ],
        };
        // The return address lies just below the CFA (0x7000) either way.
        let mem = |a: u64| (a == 0x6ff8).then_some(0x4242);
        // Before the push (pc & 15 < 11): CFA = sp + 8.
        assert_eq!(
            step(&table, 0, Regs { pc: 0x1006, sp: 0x6ff8, bp: 1 }, true, mem),
            Step::Caller(Regs { pc: 0x4242, sp: 0x7000, bp: 1 })
        );
        // After it: CFA = sp + 16.
        assert_eq!(
            step(&table, 0, Regs { pc: 0x100b, sp: 0x6ff0, bp: 1 }, true, mem),
            Step::Caller(Regs { pc: 0x4242, sp: 0x7000, bp: 1 })
        );
    }

    /// A fabricated stack of three frames: `c` (leaf, CFA = sp + 32, bp untouched)
    /// called from `b` (bp-based frame: CFA = bp + 16, caller's bp at CFA - 16),
    /// called from `a`, the thread's first frame.
    #[test]
    fn a_walk_follows_sp_and_bp_rules_to_the_threads_entry_with_a_load_bias() {
        let table = Table {
            rows: vec![
                Row { pc: 0x100, rule: Rule::End },
                Row { pc: 0x200, rule: Rule::Cfa { base: Base::Bp, offset: 16, bp_at: Some(-16) } },
                Row { pc: 0x300, rule: Rule::Cfa { base: Base::Sp, offset: 32, bp_at: None } },
                Row { pc: 0x400, rule: Rule::Stop },
            ],
        };
        let bias = 0x5555_0000_0000;
        let stack = [(0x7f00 + 24, bias + 0x250), (0x7f40, 0x7f90), (0x7f48, bias + 0x180)];
        let read = |a: u64| stack.iter().find(|(at, _)| *at == a).map(|(_, v)| *v);
        let mut regs = Regs { pc: bias + 0x310, sp: 0x7f00, bp: 0x7f40 };
        let mut pcs = vec![regs.pc - bias];
        let mut leaf = true;
        let end = loop {
            match step(&table, bias, regs, leaf, read) {
                Step::Caller(r) => {
                    regs = r;
                    pcs.push(r.pc - bias);
                    leaf = false;
                }
                other => break other,
            }
        };
        assert_eq!(pcs, [0x310, 0x250, 0x180]);
        assert_eq!(end, Step::End, "reached the thread's entry");
        assert_eq!(regs.bp, 0x7f90, "the caller's frame pointer was restored");
    }

    #[test]
    fn a_return_address_is_looked_up_one_byte_back_and_unreadable_memory_cuts() {
        // A call that is the last instruction of `f` (at 0x1ff) returns to 0x200,
        // the next function: the rule is f's.
        let table = Table {
            rows: vec![
                Row { pc: 0x100, rule: Rule::Cfa { base: Base::Sp, offset: 16, bp_at: None } },
                Row { pc: 0x200, rule: Rule::Stop },
            ],
        };
        let read = |a: u64| (a == 0x1008).then_some(0x999);
        assert_eq!(
            step(&table, 0, Regs { pc: 0x200, sp: 0x1000, bp: 0 }, false, read),
            Step::Caller(Regs { pc: 0x999, sp: 0x1010, bp: 0 })
        );
        assert_eq!(
            step(&table, 0, Regs { pc: 0x200, sp: 0x1000, bp: 0 }, true, read),
            Step::Cut,
            "as a leaf, 0x200 is past f"
        );
        assert_eq!(
            step(&table, 0, Regs { pc: 0x150, sp: 0x2000, bp: 0 }, true, read),
            Step::Cut,
            "nothing readable there"
        );
        assert_eq!(
            step(&table, 0, Regs { pc: 0x50, sp: 0x1000, bp: 0 }, true, read),
            Step::Cut,
            "no row before the first"
        );
    }
}
