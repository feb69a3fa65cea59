//! Names a JavaScript frame's word: its `SharedFunctionInfo`, read from the
//! process's memory with the layout V8 describes itself by, gives the
//! function's name and its script's. Each object read is checked to be of the
//! type expected first; what does not check out is said so, never guessed.

use std::collections::HashMap;

use topwaits_common::jit::v8_shared;

use super::{v8_of, Layout, V8File};
use crate::model::Frame;
use crate::sys::memory::{Memory, ProcessMemory};
use crate::sys::procfs;

/// The longest name kept (characters), and how deep a string's parts are followed.
const MAX_CHARS: usize = 200;
const MAX_DEPTH: u32 = 4;
/// The ScopeInfo slots past its variables looked through for the function's
/// name (an optional class variable slot, then the function variable's name,
/// its slot, and the inferred name, which V8's own debug name falls back to).
const NAME_SLOTS: u64 = 4;

/// A function's name ("" for an anonymous one) and its script's, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    pub name: String,
    pub script: Option<String>,
}

/// Reads V8 objects of one process.
struct Heap<'a> {
    mem: &'a dyn Memory,
    l: &'a Layout,
}

impl Heap<'_> {
    /// The tagged field at `offset` of object `obj`.
    fn field(&self, obj: u64, offset: i32) -> Option<u64> {
        self.mem.word(obj.wrapping_sub(1).wrapping_add_signed(offset as i64))
    }

    /// The instance type of heap object `obj` (None: not a heap object).
    fn type_of(&self, obj: u64) -> Option<u16> {
        if obj & 3 != 1 {
            return None;
        }
        let map = self.field(obj, self.l.heap_object_map)?;
        if map & 3 != 1 {
            return None;
        }
        let b = self
            .mem
            .bytes(map.wrapping_sub(1).wrapping_add_signed(self.l.map_instance_type as i64), 2)?;
        Some(u16::from_le_bytes([b[0], b[1]]))
    }

    /// String `obj`, if it is one that can be read (sequential, cons or thin).
    fn string(&self, obj: u64, depth: u32) -> Option<String> {
        let t = self.type_of(obj)? as i32;
        if t >= self.l.first_nonstring || depth > MAX_DEPTH {
            return None;
        }
        let len = self
            .mem
            .bytes(obj.wrapping_sub(1).wrapping_add_signed(self.l.string_length as i64), 4)?;
        let len = i32::from_le_bytes(len.try_into().ok()?).clamp(0, MAX_CHARS as i32) as usize;
        let repr = t & self.l.repr_mask;
        if repr == self.l.seq_tag {
            let at = obj.wrapping_sub(1).wrapping_add_signed(self.l.seq_chars as i64);
            return if t & self.l.encoding_mask == self.l.one_byte {
                Some(self.mem.bytes(at, len)?.iter().map(|&b| b as char).collect())
            } else {
                let b = self.mem.bytes(at, len * 2)?;
                let units = b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]));
                Some(char::decode_utf16(units).map(|c| c.unwrap_or('?')).collect())
            };
        }
        if repr == self.l.cons_tag {
            let first = self.string(self.field(obj, self.l.cons_first)?, depth + 1)?;
            let second = self.string(self.field(obj, self.l.cons_second)?, depth + 1)?;
            return Some((first + &second).chars().take(MAX_CHARS).collect());
        }
        if repr == self.l.thin_tag {
            return self.string(self.field(obj, self.l.thin_actual)?, depth + 1);
        }
        None
    }

    /// The name a ScopeInfo keeps for its function: the first string in the
    /// slots past its context locals' names and infos.
    fn scope_name(&self, info: u64) -> Option<String> {
        let slot = |i: u64| self.field(info, 8 * (1 + i as i32));
        let locals = slot(self.l.scope_locals as u64)?;
        if locals & 1 != 0 {
            return None;
        }
        let n = (locals >> 32) as i64 as u64;
        // Up to 75 names are kept inline; past that, one hash table holds them.
        let names = if n < 75 { n } else { 1 };
        let first = self.l.scope_first_vars as u64 + names + n;
        (first..first + NAME_SLOTS).find_map(|i| self.string(slot(i)?, 0))
    }

    /// The function of `SharedFunctionInfo` `shared`, if it is one.
    fn function(&self, shared: u64) -> Option<Function> {
        if self.type_of(shared)? as i32 != self.l.type_shared {
            return None;
        }
        let held = self.field(shared, self.l.shared_name)?;
        let name = if held & 1 == 0 {
            String::new()
        } else if self.type_of(held)? as i32 == self.l.type_scope_info {
            self.scope_name(held).unwrap_or_default()
        } else {
            self.string(held, 0).unwrap_or_default()
        };
        let script = self.field(shared, self.l.shared_script).and_then(|s| {
            if self.type_of(s)? as i32 != self.l.type_script {
                return None;
            }
            self.string(self.field(s, self.l.script_name)?, 0).filter(|n| !n.is_empty())
        });
        Some(Function { name, script })
    }
}

/// The function whose tagged `SharedFunctionInfo` pointer is `shared`, read
/// through `mem` by layout `l`.
pub fn function(mem: &dyn Memory, l: &Layout, shared: u64) -> Option<Function> {
    Heap { mem, l }.function(shared)
}

/// The frame for function `f`, word `word`.
pub fn frame_of(word: u64, f: Option<&Function>) -> Frame {
    let Some(f) = f else {
        return Frame {
            addr: word,
            symbol: Some("[js:unreadable]".into()),
            module: None,
            offset: None,
        };
    };
    let name = if f.name.is_empty() { "(anonymous)" } else { &f.name };
    let symbol = match &f.script {
        Some(s) => format!("{name} ({})", s.rsplit('/').next().unwrap_or(s)),
        None => name.to_string(),
    };
    Frame {
        addr: word,
        symbol: Some(symbol.into()),
        module: f.script.as_deref().map(Into::into),
        offset: None,
    }
}

/// Names JavaScript frame words, caching each process's layout and each
/// function read.
#[derive(Default)]
pub struct Resolver {
    files: HashMap<(u64, u64), Option<V8File>>,
    layouts: HashMap<u32, Option<Layout>>,
    functions: HashMap<(u32, u64), Option<Function>>,
}

impl Resolver {
    /// Forgets what it read of `tgid`, gone for good.
    pub fn forget(&mut self, tgid: u32) {
        self.layouts.remove(&tgid);
        self.functions.retain(|&(t, _), _| t != tgid);
    }

    /// The frame for JavaScript word `word` of process `tgid`.
    pub fn frame(&mut self, tgid: u32, word: u64) -> Frame {
        let shared = v8_shared(word);
        let files = &mut self.files;
        let layout = *self.layouts.entry(tgid).or_insert_with(|| {
            let maps = procfs::maps_of(tgid);
            v8_of(files, tgid, &maps).map(|(f, _)| f.layout)
        });
        let f = self.functions.entry((tgid, shared)).or_insert_with(|| {
            layout.and_then(|l| function(&ProcessMemory { pid: tgid }, &l, shared))
        });
        frame_of(word, f.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::memory::Bytes;

    /// node 20's values.
    fn layout() -> Layout {
        Layout {
            fp_function: -16,
            fp_context: -8,
            function_shared: 24,
            heap_object_map: 0,
            map_instance_type: 12,
            shared_name: 16,
            shared_script: 32,
            script_name: 16,
            string_length: 12,
            seq_chars: 16,
            cons_first: 16,
            cons_second: 24,
            thin_actual: 16,
            first_nonstring: 128,
            repr_mask: 7,
            encoding_mask: 8,
            one_byte: 8,
            seq_tag: 0,
            cons_tag: 1,
            thin_tag: 5,
            type_shared: 262,
            type_scope_info: 261,
            type_script: 167,
            scope_locals: 2,
            scope_first_vars: 3,
        }
    }

    /// A map of instance type `t` at `at` (untagged); its tagged pointer.
    fn map(m: &mut Bytes, at: u64, t: u16) -> u64 {
        m.put(at + 12, &t.to_le_bytes());
        at + 1
    }

    /// An object of map `map` at `at`; its tagged pointer.
    fn object(m: &mut Bytes, at: u64, map: u64) -> u64 {
        m.put_word(at, map);
        at + 1
    }

    fn one_byte(m: &mut Bytes, at: u64, s: &str) -> u64 {
        let t = map(m, at + 0x800, 8);
        let p = object(m, at, t);
        m.put(at + 12, &(s.len() as i32).to_le_bytes());
        m.put(at + 16, s.as_bytes());
        p
    }

    fn smi(v: u64) -> u64 {
        v << 32
    }

    #[test]
    fn a_function_is_named_with_its_script_from_a_plain_name() {
        let mut m = Bytes::default();
        let name = one_byte(&mut m, 0x1000, "innerWaitForChild");
        let path = one_byte(&mut m, 0x2000, "/tmp/app/block.js");
        let script_map = map(&mut m, 0x3800, 167);
        let script = object(&mut m, 0x3000, script_map);
        m.put_word(0x3000 + 16, path);
        let shared_map = map(&mut m, 0x4800, 262);
        let shared = object(&mut m, 0x4000, shared_map);
        m.put_word(0x4000 + 16, name);
        m.put_word(0x4000 + 32, script);
        let f = function(&m, &layout(), shared).unwrap();
        assert_eq!(f.name, "innerWaitForChild");
        let fr = frame_of(0, Some(&f));
        assert_eq!(fr.symbol.as_deref(), Some("innerWaitForChild (block.js)"));
        assert_eq!(fr.module.as_deref(), Some("/tmp/app/block.js"));
    }

    #[test]
    fn a_name_kept_in_a_scope_info_is_found_past_its_locals() {
        let mut m = Bytes::default();
        let name = one_byte(&mut m, 0x1000, "handler");
        let local = one_byte(&mut m, 0x2000, "counter");
        let info_map = map(&mut m, 0x3800, 261);
        let info = object(&mut m, 0x3000, info_map);
        // flags, parameters, one context local: its name, its info, then the name.
        let slots = [smi(0), smi(1), smi(1), local, smi(0), name];
        for (i, s) in slots.iter().enumerate() {
            m.put_word(0x3000 + 8 * (1 + i as u64), *s);
        }
        let shared_map = map(&mut m, 0x4800, 262);
        let shared = object(&mut m, 0x4000, shared_map);
        m.put_word(0x4000 + 16, info);
        let f = function(&m, &layout(), shared).unwrap();
        assert_eq!((f.name.as_str(), f.script), ("handler", None));
    }

    #[test]
    fn strings_in_parts_are_joined_and_what_is_no_function_is_said_so() {
        let mut m = Bytes::default();
        let (a, b) = (one_byte(&mut m, 0x1000, "get"), one_byte(&mut m, 0x2000, "User"));
        let cons_map = map(&mut m, 0x3800, 41);
        let cons = object(&mut m, 0x3000, cons_map);
        m.put(0x3000 + 12, &7i32.to_le_bytes());
        m.put_word(0x3000 + 16, a);
        m.put_word(0x3000 + 24, b);
        let shared_map = map(&mut m, 0x4800, 262);
        let shared = object(&mut m, 0x4000, shared_map);
        m.put_word(0x4000 + 16, cons);
        assert_eq!(function(&m, &layout(), shared).unwrap().name, "getUser");
        // A string where a SharedFunctionInfo was expected, a Smi, unread memory.
        assert_eq!(function(&m, &layout(), a), None);
        assert_eq!(function(&m, &layout(), smi(3)), None);
        assert_eq!(function(&m, &layout(), 0x9_0001), None);
        assert_eq!(frame_of(7, None).symbol.as_deref(), Some("[js:unreadable]"));
        // An anonymous function: a Smi where the name goes.
        m.put_word(0x4000 + 16, smi(0));
        let f = function(&m, &layout(), shared).unwrap();
        assert_eq!(frame_of(0, Some(&f)).symbol.as_deref(), Some("(anonymous)"));
    }
}
