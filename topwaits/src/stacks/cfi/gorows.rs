//! A Go program's unwind rows, from Go's own function table (see
//! `stacks::golang`): at each pc the CFA is the stack pointer plus the frame
//! size Go keeps there (`pcsp`) and the return address, as exact as
//! `.eh_frame`'s rows; the functions that begin a goroutine's or a thread's
//! stack end it, whole.

use super::{Base, Row, Rule};
use crate::stacks::golang::{is_first_frame, Pclntab};

/// The largest CFA offset a rule holds (bytes): a frame larger than this is
/// not followed.
const MAX_CFA: i32 = 0xffff;

/// The unwind rows of a Go program's functions, sorted: at each pc, the CFA is
/// the stack pointer plus the frame size and the return address; where a
/// function has a frame, it saved its caller's frame pointer just below the
/// return address (Go's prologue: `SUB $n, SP; MOV BP, n-8(SP)`). The first
/// frames of a stack (`golang::is_first_frame`) end it. Between functions, and in a
/// function whose table is damaged, nothing is followed.
pub fn rows(tab: &Pclntab) -> Vec<Row> {
    let mut out = Vec::with_capacity(tab.len() * 4);
    for f in tab.funcs() {
        if tab.name(f).is_some_and(is_first_frame) {
            out.push(Row { pc: f.entry, rule: Rule::End });
        } else if let Some(sizes) = tab.frame_sizes(f) {
            for (from, _, size) in sizes {
                let rule = match size {
                    0 => Rule::Cfa { base: Base::Sp, offset: 8, bp_at: None },
                    s if s > 0 && s <= MAX_CFA - 8 => {
                        Rule::Cfa { base: Base::Sp, offset: s + 8, bp_at: Some(-16) }
                    }
                    _ => Rule::Stop,
                };
                out.push(Row { pc: from, rule });
            }
        } else {
            out.push(Row { pc: f.entry, rule: Rule::Stop });
        }
        out.push(Row { pc: f.end, rule: Rule::Stop });
    }
    out.sort_by_key(|r| r.pc);
    // Where a function ends at the next one's entry, the next one's row holds.
    out.dedup_by(|later, earlier| {
        if later.pc == earlier.pc {
            if earlier.rule == Rule::Stop {
                *earlier = *later;
            }
            true
        } else {
            false
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::golang::pclntab_of;
    use crate::stacks::golang::tests::{go_program, nm};

    /// A stripped Go program's table: a function's own frame, with its caller's
    /// frame pointer below the return address; a goroutine's end at goexit;
    /// and the file's table holds them (it has no `.eh_frame` of its own).
    #[test]
    fn a_stripped_go_program_gets_exact_rows_from_its_own_table() {
        let Some((full, stripped)) = go_program("rows") else {
            eprintln!("skipped: no Go toolchain (apt golang-go)");
            return;
        };
        let tab = pclntab_of(&mut std::fs::File::open(&stripped).unwrap())
            .unwrap()
            .expect("a Go program has its table");
        let work = nm(&full, "main.work").expect("main.work");
        let end = tab.func_at(work).unwrap().end;
        let rows = rows(&tab);
        assert!(rows.windows(2).all(|w| w[0].pc < w[1].pc), "sorted, one row per address");
        let at = |pc: u64| rows[rows.partition_point(|r| r.pc <= pc) - 1].rule;
        assert_eq!(
            at(work),
            Rule::Cfa { base: Base::Sp, offset: 8, bp_at: None },
            "at its entry, only the return address"
        );
        assert!(
            rows.iter().any(|r| r.pc > work
                && r.pc < end
                && matches!(r.rule, Rule::Cfa { offset, bp_at: Some(-16), .. } if offset > 8)),
            "its frame, with the caller's frame pointer below the return address"
        );
        let goexit = nm(&full, "runtime.goexit.abi0")
            .or_else(|| nm(&full, "runtime.goexit"))
            .expect("runtime.goexit");
        assert_eq!(at(goexit + 1), Rule::End, "a goroutine's stack ends at goexit");
        let table = super::super::table_of_file(&stripped).unwrap().expect("a table from Go's own");
        assert_eq!(table.lookup(work), at(work));
        let _ = std::fs::remove_dir_all(full.parent().unwrap());
    }
}
