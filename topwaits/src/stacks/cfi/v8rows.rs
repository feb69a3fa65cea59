//! The rows of V8's embedded builtins (node, and programs linking V8): code V8
//! generated at build time and linked into the binary as one blob, which no
//! `.eh_frame` entry covers. V8 keeps frame pointers in all the code it
//! generates, so over the blob the caller is found by the frame pointer.

use std::io::{Read, Seek};

use anyhow::Result;

use super::{Base, Row, Rule};
use crate::stacks::v8::blob_of;

/// The frame-pointer rule: CFA = bp + 16, the caller's bp saved at CFA-16.
pub const FRAME_POINTER: Rule = Rule::Cfa { base: Base::Bp, offset: 16, bp_at: Some(-16) };

/// The rows over a V8 file's embedded builtins, or None where the file holds
/// no V8 (or keeps no symbol table to find the blob by).
pub fn rows<R: Read + Seek>(f: &mut R) -> Result<Option<Vec<Row>>> {
    Ok(blob_of(f)?.and_then(|(start, size)| blob_rows(start, size)))
}

/// The rows over `size` bytes of builtins at `start`: frame pointers, then
/// nothing past the end.
fn blob_rows(start: u64, size: u64) -> Option<Vec<Row>> {
    (size > 0).then(|| {
        vec![Row { pc: start, rule: FRAME_POINTER }, Row { pc: start + size, rule: Rule::Stop }]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::cfi::Table;

    #[test]
    fn the_blob_is_walked_by_frame_pointers_and_nothing_past_it() {
        let rows = blob_rows(0x1000, 0x200).unwrap();
        let t = Table::default().with(rows);
        assert_eq!(t.lookup(0xfff), Rule::Stop);
        assert_eq!(t.lookup(0x1000), FRAME_POINTER);
        assert_eq!(t.lookup(0x11ff), FRAME_POINTER);
        assert_eq!(t.lookup(0x1200), Rule::Stop);
        assert!(blob_rows(0x1000, 0).is_none());
    }

    #[test]
    fn rows_over_a_gap_keep_the_tables_own_rows() {
        let eh = Table {
            rows: vec![
                Row { pc: 0x100, rule: Rule::Cfa { base: Base::Sp, offset: 8, bp_at: None } },
                Row { pc: 0x180, rule: Rule::Stop },
            ],
        };
        let t = eh.with(blob_rows(0x1000, 0x200).unwrap());
        assert_eq!(t.lookup(0x120), Rule::Cfa { base: Base::Sp, offset: 8, bp_at: None });
        assert_eq!(t.lookup(0x200), Rule::Stop);
        assert_eq!(t.lookup(0x1100), FRAME_POINTER);
        assert_eq!(t.lookup(0x1200), Rule::Stop);
    }

    /// Debian's node, where installed: its builtins' blob is found and covered.
    #[test]
    fn nodes_builtins_get_frame_pointer_rows() {
        let Ok(mut f) = std::fs::File::open("/usr/bin/node") else {
            eprintln!("skipped: no /usr/bin/node");
            return;
        };
        let Some(rows) = rows(&mut f).unwrap() else {
            eprintln!("skipped: /usr/bin/node keeps no symbol table");
            return;
        };
        assert_eq!(rows[0].rule, FRAME_POINTER);
        let size = rows[1].pc - rows[0].pc;
        assert!((64 << 10..256 << 20).contains(&size), "blob of {size} bytes");
    }
}
