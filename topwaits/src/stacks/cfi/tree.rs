//! A file's unwind table in the form the in-kernel walker searches: rows encoded
//! as words (`topwaits_common::walker`), cut into nodes of 64 sorted entries, with
//! levels of nodes above them holding each child's first address, so that a
//! lookup is one map lookup and six comparisons per level. [`lookup`] is the
//! walker's search, in Rust, to test the tree against [`Table::lookup`].

use topwaits_common::walker::{node_key, rule, rule_word, Node, MAX_LEVELS, NODE_PAD, NODE_ROWS};

use super::{Base, Rule, Table};

/// The rule word of `rule`: a rule whose numbers do not fit (a frame of 64 KiB
/// or more, a frame pointer saved far from the CFA) becomes a stop.
pub fn encode(r: Rule) -> u32 {
    match r {
        Rule::Stop => rule::STOP,
        Rule::End => rule::END,
        Rule::Signal => rule::SIGNAL,
        Rule::Plt { threshold } => rule_word(rule::PLT, u32::from(threshold.min(15)), 0, 0),
        Rule::Cfa { base, offset, bp_at } => {
            let kind = if base == Base::Sp { rule::CFA_SP } else { rule::CFA_BP };
            let Ok(off) = u16::try_from(offset) else { return rule::STOP };
            let bp_words = match bp_at {
                None => 0,
                Some(at) if at % 8 == 0 && at != 0 => match i8::try_from(at / 8) {
                    Ok(w) => w,
                    Err(_) => return rule::STOP,
                },
                Some(_) => return rule::STOP,
            };
            rule_word(kind, 0, u32::from(off), bp_words)
        }
    }
}

/// The rule a rule word stands for, as the walker reads it.
pub fn decode(word: u32) -> Rule {
    let (kind, threshold, offset, bp_words) =
        (word & 15, (word >> 4) & 15, (word >> 8) & 0xffff, (word >> 24) as u8 as i8);
    match kind {
        rule::CFA_SP | rule::CFA_BP => Rule::Cfa {
            base: if kind == rule::CFA_SP { Base::Sp } else { Base::Bp },
            offset: offset as i32,
            bp_at: (bp_words != 0).then_some(i32::from(bp_words) * 8),
        },
        rule::PLT => Rule::Plt { threshold: threshold as u8 },
        rule::END => Rule::End,
        rule::SIGNAL => Rule::Signal,
        _ => Rule::Stop,
    }
}

/// A table's rows as the walker's entries (address above, rule word below),
/// what the cache keeps; None when an address is beyond 32 bits (the walker
/// keeps 32-bit file addresses).
pub fn entries(table: &Table) -> Option<Vec<u64>> {
    if table.rows.iter().any(|r| r.pc >= u64::from(u32::MAX)) {
        return None;
    }
    Some(table.rows.iter().map(|r| r.pc << 32 | u64::from(encode(r.rule))).collect())
}

/// The table the walker sees in `entries` (rules that did not fit its words
/// are stops there too).
pub fn table_of(entries: &[u64]) -> Table {
    Table {
        rows: entries.iter().map(|&e| super::Row { pc: e >> 32, rule: decode(e as u32) }).collect(),
    }
}

/// A file's tree: its nodes, each with its level (0: the leaves) and index
/// in `places`, and how many levels it has. The nodes are kept apart from
/// their places so that they go into the kernel as they are, without a copy.
#[derive(Debug, Default)]
pub struct Tree {
    pub levels: u32,
    pub places: Vec<(u32, u32)>,
    pub nodes: Vec<Node>,
}

impl Tree {
    /// The nodes' keys for file `file`, in the order of [`Tree::nodes`].
    pub fn keys(&self, file: u32) -> Vec<u64> {
        self.places.iter().map(|&(level, index)| node_key(file, level, index)).collect()
    }

    /// Where each level's first node lies once the nodes are placed in order
    /// from index `first` (see `FileInfo::base`).
    pub fn bases(&self, first: u32) -> [u32; MAX_LEVELS as usize] {
        let mut bases = [0; MAX_LEVELS as usize];
        for (i, &(level, index)) in self.places.iter().enumerate() {
            if index == 0 {
                bases[level as usize] = first + i as u32;
            }
        }
        bases
    }

    /// The node at `level` and `index`.
    pub fn node(&self, level: u32, index: u32) -> Option<Node> {
        self.places.iter().position(|&p| p == (level, index)).map(|i| self.nodes[i])
    }

    /// Bytes the nodes take as values.
    pub fn bytes(&self) -> usize {
        self.nodes.len() * std::mem::size_of::<Node>()
    }
}

/// Cuts `entries` into nodes of [`NODE_ROWS`], padded, at the end of `nodes`.
fn nodes_of(entries: &[u64], nodes: &mut Vec<Node>) {
    nodes.extend(entries.chunks(NODE_ROWS).map(|c| {
        let mut node = [NODE_PAD; NODE_ROWS];
        node[..c.len()].copy_from_slice(c);
        node
    }))
}

/// The tree of `table`; None when it has no rows, or an address beyond 32 bits
/// (the walker keeps 32-bit file addresses), or more rows than [`MAX_LEVELS`]
/// levels hold.
pub fn build(table: &Table) -> Option<Tree> {
    build_from(entries(table)?)
}

/// The tree of a table's [`entries`]; None when there are none, or more than
/// [`MAX_LEVELS`] levels hold.
pub fn build_from(entries: Vec<u64>) -> Option<Tree> {
    if entries.is_empty() {
        return None;
    }
    // The leaves and the levels above (a 64th of them, and so on): one allocation.
    let leaves = entries.len().div_ceil(NODE_ROWS);
    let mut tree = Tree {
        nodes: Vec::with_capacity(leaves + leaves / 32 + MAX_LEVELS as usize),
        ..Tree::default()
    };
    let mut below = entries;
    for level in 0..MAX_LEVELS {
        let first = tree.nodes.len();
        nodes_of(&below, &mut tree.nodes);
        let made = &tree.nodes[first..];
        tree.places.extend((0..made.len() as u32).map(|i| (level, i)));
        tree.levels = level + 1;
        if made.len() == 1 {
            return Some(tree);
        }
        below = made.iter().map(|n| n[0] >> 32 << 32).collect();
    }
    None
}

/// The walker's search: the rule word of file address `addr`, with `get` the node
/// map; None where no row covers it.
pub fn lookup(levels: u32, get: impl Fn(u32, u32) -> Option<Node>, addr: u64) -> Option<u32> {
    let mut index = 0u32;
    for level in (0..levels).rev() {
        let node = get(level, index)?;
        let mut lo = 0usize;
        let mut w = NODE_ROWS / 2;
        while w > 0 {
            if node[lo + w] >> 32 <= addr {
                lo += w;
            }
            w /= 2;
        }
        if node[lo] >> 32 > addr {
            return None;
        }
        if level == 0 {
            return Some(node[lo] as u32);
        }
        index = index * NODE_ROWS as u32 + lo as u32;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::cfi::Row;

    /// Every rule the walker's words hold comes back as it went in; what they
    /// cannot hold is a stop, on both sides.
    #[test]
    fn rule_words_decode_to_their_rules() {
        let rules = [
            Rule::Stop,
            Rule::End,
            Rule::Signal,
            Rule::Plt { threshold: 11 },
            Rule::Cfa { base: Base::Sp, offset: 8, bp_at: None },
            Rule::Cfa { base: Base::Bp, offset: 16, bp_at: Some(-16) },
            Rule::Cfa { base: Base::Sp, offset: 400, bp_at: Some(-56) },
        ];
        for r in rules {
            assert_eq!(decode(encode(r)), r);
        }
        assert_eq!(
            decode(encode(Rule::Cfa { base: Base::Sp, offset: 1 << 20, bp_at: None })),
            Rule::Stop
        );
        let t = Table {
            rows: rules
                .iter()
                .enumerate()
                .map(|(i, &rule)| Row { pc: 0x100 * i as u64, rule })
                .collect(),
        };
        assert_eq!(table_of(&entries(&t).unwrap()), t);
        assert!(entries(&Table { rows: vec![Row { pc: 1 << 40, rule: Rule::End }] }).is_none());
    }

    fn find(tree: &Tree) -> impl Fn(u32, u32) -> Option<Node> + '_ {
        |level, index| tree.node(level, index)
    }

    #[test]
    fn rules_encode_into_words_and_what_does_not_fit_stops() {
        let w = encode(Rule::Cfa { base: Base::Bp, offset: 16, bp_at: Some(-16) });
        assert_eq!((w & 15, (w >> 8) & 0xffff, (w >> 24) as u8 as i8), (rule::CFA_BP, 16, -2));
        assert_eq!(
            encode(Rule::Cfa { base: Base::Sp, offset: 8, bp_at: None }) >> 24,
            0,
            "bp left in its register"
        );
        assert_eq!((encode(Rule::Plt { threshold: 11 }) >> 4) & 15, 11);
        assert_eq!(encode(Rule::Cfa { base: Base::Sp, offset: 70_000, bp_at: None }), rule::STOP);
        assert_eq!(encode(Rule::Cfa { base: Base::Sp, offset: 8, bp_at: Some(-12) }), rule::STOP);
        assert_eq!(encode(Rule::Cfa { base: Base::Sp, offset: -8, bp_at: None }), rule::STOP);
        assert_eq!(encode(Rule::Signal), rule::SIGNAL);
    }

    /// Tables of one row up to three levels' worth: every address between and
    /// around the rows finds what the table's own lookup finds.
    #[test]
    fn the_tree_search_finds_what_the_table_finds_at_every_size() {
        for rows in [1usize, 63, 64, 65, 4095, 4096, 4097, 9000] {
            let table = Table {
                rows: (0..rows)
                    .map(|i| Row {
                        pc: 0x1000 + 16 * i as u64,
                        rule: if i % 3 == 0 {
                            Rule::Stop
                        } else {
                            Rule::Cfa {
                                base: Base::Sp,
                                offset: 8 * (i % 50) as i32 + 8,
                                bp_at: None,
                            }
                        },
                    })
                    .collect(),
            };
            let tree = build(&table).unwrap();
            let want_levels = if rows <= 64 {
                1
            } else if rows <= 4096 {
                2
            } else {
                3
            };
            assert_eq!(tree.levels, want_levels, "{rows} rows");
            let get = find(&tree);
            for addr in (0xff0..0x1000 + 16 * rows as u64 + 32).step_by(5) {
                let want = (addr >= 0x1000).then(|| encode(table.lookup(addr)));
                assert_eq!(lookup(tree.levels, &get, addr), want, "{rows} rows, address {addr:#x}");
            }
        }
    }

    #[test]
    fn a_real_librarys_tree_agrees_with_its_table() {
        let path = std::path::Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        if !path.exists() {
            eprintln!("skipped: no libc.so.6 here");
            return;
        }
        let table = crate::stacks::cfi::table_of_file(path).unwrap().unwrap();
        let tree = build(&table).unwrap();
        assert!(tree.levels >= 2, "{} rows in {} levels", table.rows.len(), tree.levels);
        let get = find(&tree);
        for r in table.rows.iter().step_by(97) {
            assert_eq!(lookup(tree.levels, &get, r.pc + 1), Some(encode(table.lookup(r.pc + 1))));
        }
        // Keys of different files never meet.
        let (a, b) = (tree.keys(1), tree.keys(2));
        assert_eq!(a.len(), tree.nodes.len());
        assert!(a.iter().all(|k| !b.contains(k)));
    }

    #[test]
    fn a_table_beyond_32_bit_addresses_gets_no_tree() {
        assert!(build(&Table { rows: vec![Row { pc: 1 << 33, rule: Rule::Stop }] }).is_none());
        assert!(build(&Table::default()).is_none());
    }
}
