//! Names Java frames: an interpreted frame's `Method*` (the walker's word)
//! gives its class and method through the method's constant pool; code in
//! the JVM's code cache is found by the cache's segment map, and named as the
//! method compiled there or the stub it is. What cannot be read is said so.

use std::collections::HashMap;

use topwaits_common::jit::{jvm_bcp_low, jvm_block_start, jvm_method};

use super::{Jvms, Layout};
use crate::model::Frame;
use crate::sys::memory::{Memory, ProcessMemory};
use crate::sys::procfs;

/// The longest name part kept (bytes).
const MAX_NAME: usize = 300;
/// Most steps back through the segment map to a block's start.
const MAX_HOPS: usize = 4096;

/// A `Symbol`'s text, if it reads as one.
pub(super) fn symbol(mem: &dyn Memory, l: &Layout, sym: u64) -> Option<String> {
    let len = mem.bytes(sym.checked_add(l.symbol_length)?, 2)?;
    let len = u16::from_le_bytes([len[0], len[1]]) as usize;
    if len == 0 || len > MAX_NAME {
        return None;
    }
    let s = String::from_utf8(mem.bytes(sym + l.symbol_body, len)?).ok()?;
    s.chars().all(|c| !c.is_control()).then_some(s)
}

/// The `ConstMethod*` of the `Method*` at `method`, if it reads and is set.
pub(super) fn const_method(mem: &dyn Memory, l: &Layout, method: u64) -> Option<u64> {
    mem.word(method.checked_add(l.method_const)?).filter(|&p| p != 0)
}

/// `Class.method` of the `Method*` at `method`, the class with dots for its
/// package's slashes.
pub fn method_name(mem: &dyn Memory, l: &Layout, method: u64) -> Option<String> {
    let cm = const_method(mem, l, method)?;
    let cp = mem.word(cm + l.const_constants).filter(|&p| p != 0)?;
    let index = mem.bytes(cm + l.const_name_index, 2)?;
    let index = u16::from_le_bytes([index[0], index[1]]) as u64;
    let holder = mem.word(cp + l.cp_holder).filter(|&p| p != 0)?;
    let class = symbol(mem, l, mem.word(holder + l.klass_name)?)?;
    let name = symbol(mem, l, mem.word(cp + l.cp_size + 8 * index)?)?;
    Some(format!("{}.{name}", class_name(&class)))
}

/// A class's name as Java writes it: dots between the package's parts, and
/// without the address a hidden class (a lambda's) carries, which differs
/// from run to run (`Turns$$Lambda$1+0x00007f420c000a08`).
pub(super) fn class_name(internal: &str) -> String {
    let name = match internal.rfind("+0x") {
        Some(i) if internal[i + 3..].chars().all(|c| c.is_ascii_hexdigit()) => &internal[..i],
        _ => internal,
    };
    name.replace('/', ".")
}

/// What the code cache holds at a pc: the Java frames of compiled code, or
/// the name of the stub (`Interpreter`, `StubRoutines (1)`, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Code {
    /// Innermost first: at a call whose scopes read (see `debug`), the methods
    /// inlined there and last the one compiled, each with its source line;
    /// else the compiled method alone.
    Method(Vec<String>),
    Stub(String),
}

/// The code blob in the cache that holds `pc` (a return address less one),
/// named: found as the walker finds it, with more hops allowed (user space
/// has no verifier to please).
pub fn code_at(mem: &dyn Memory, l: &Layout, pc: u64) -> Option<Code> {
    let code = super::code_of(mem, l)?;
    let blob = code.blob_at(pc, jvm_block_start(|a| mem.byte(a), MAX_HOPS))?;
    if mem.byte(blob - l.block_size + l.block_used)? == 0 {
        return None;
    }
    let name = super::c_string(mem, mem.word(blob + l.blob_name)?)?;
    // The stubs' blob holds many; the one a stack meets is where a call from
    // the JVM's C++ into Java returns, named as HotSpot's own stack dumps do.
    // Its frame's address is the call's, a few bytes before the return.
    let returns = l.call_stub_return != 0;
    if returns && mem.word(l.call_stub_return).is_some_and(|r| r >= pc && r - pc < 8) {
        return Some(Code::Stub("StubRoutines::call_stub".into()));
    }
    if name.contains("nmethod") {
        // A call's return address is the byte after `pc`.
        let ret = pc.checked_add(1)?;
        if let Some(frames) = l.debug.and_then(|d| super::debug::frames_at(mem, l, &d, blob, ret)) {
            return Some(Code::Method(frames));
        }
        let method = mem.word(blob + l.compiled_method)?;
        return method_name(mem, l, method).map(|m| Code::Method(vec![m]));
    }
    Some(Code::Stub(name))
}

/// The name of the interpreted frame of word `word`: its method, placed at
/// its line where the layout and its bytecode pointer tell it.
pub fn interpreted_name(mem: &dyn Memory, l: &Layout, word: u64) -> Option<String> {
    let method = jvm_method(word);
    let placed = l.debug.zip(jvm_bcp_low(word)).and_then(|(d, low)| {
        let bcis = super::debug::interpreted_bcis(mem, l, &d, method, low)?;
        super::debug::placed_name(mem, l, &d, method, &bcis)
    });
    placed.or_else(|| method_name(mem, l, method))
}

/// The frame shown for a Java method or stub, or for a word that did not read.
fn frame_of(addr: u64, name: Option<String>) -> Frame {
    Frame {
        addr,
        symbol: Some(name.unwrap_or_else(|| "[java:unreadable]".into()).into()),
        module: None,
        offset: None,
    }
}

/// Names Java frame words and code cache addresses, caching each process's
/// layout and each name read.
#[derive(Default)]
pub struct Resolver {
    jvms: Jvms,
    /// Each process's layout, None where it is no JVM.
    layouts: HashMap<u32, Option<Layout>>,
    names: HashMap<(u32, u64), Option<String>>,
    /// The frames of each code cache address, innermost first.
    code: HashMap<(u32, u64), Option<Vec<String>>>,
}

impl Resolver {
    /// Forgets what it read of `tgid`, gone for good.
    pub fn forget(&mut self, tgid: u32) {
        self.layouts.remove(&tgid);
        self.jvms.forget(tgid);
        self.names.retain(|&(t, _), _| t != tgid);
        self.code.retain(|&(t, _), _| t != tgid);
    }

    /// Kept once read, and for a process that maps no JVM; a JVM that is
    /// still starting (its tables not filled in yet) is read again.
    fn layout(&mut self, tgid: u32) -> Option<Layout> {
        if let Some(&l) = self.layouts.get(&tgid) {
            return l;
        }
        let maps = procfs::maps_of(tgid);
        let l = self.jvms.layout(tgid, &maps);
        if l.is_some() || super::jvm_mapping(&maps).is_none() {
            self.layouts.insert(tgid, l);
        }
        l
    }

    /// The frame for interpreted-frame word `word` of process `tgid`, with
    /// its line where its bytecode tells it.
    pub fn frame(&mut self, tgid: u32, word: u64) -> Frame {
        let layout = self.layout(tgid);
        let name = self.names.entry((tgid, word)).or_insert_with(|| {
            layout.and_then(|l| interpreted_name(&ProcessMemory { pid: tgid }, &l, word))
        });
        frame_of(word, name.clone())
    }

    /// The frames for return address `ret` of process `tgid`, in no file, if
    /// the process is a JVM and its code cache holds the address: innermost
    /// first, the methods inlined at the call before the one compiled.
    pub fn code(&mut self, tgid: u32, ret: u64) -> Option<Vec<Frame>> {
        let l = self.layout(tgid)?;
        let names = self.code.entry((tgid, ret)).or_insert_with(|| {
            code_at(&ProcessMemory { pid: tgid }, &l, ret.wrapping_sub(1)).map(|c| match c {
                Code::Method(frames) => frames,
                Code::Stub(s) => vec![format!("[jvm:{s}]")],
            })
        });
        let names = names.as_ref()?;
        Some(names.iter().map(|n| frame_of(ret, Some(n.clone()))).collect())
    }
}
