//! Frames of JIT runtimes in user stacks: where the walker finds a V8 or
//! HotSpot process's generated code and the function each of its frames runs
//! ([`JitProc`], filled by user space from the runtime's own description of
//! itself), and how such a frame is written as one stack word ([`v8_word`],
//! [`jvm_word`]), named in user space.

/// The tag of a JavaScript frame's word: bits 61 and 60, with 62 and 63 clear
/// (see `crate::python::PY_FRAME`).
pub const V8_FRAME: u64 = 3 << 60;

/// The bits of a V8 heap pointer a word keeps.
const V8_PTR_BITS: u64 = (1 << 47) - 1;

/// The word for a frame running the function whose `SharedFunctionInfo` is at
/// tagged pointer `shared`.
#[inline(always)]
pub const fn v8_word(shared: u64) -> u64 {
    V8_FRAME | (shared & V8_PTR_BITS)
}

/// Whether a user stack's word is a JavaScript frame.
#[inline(always)]
pub const fn is_v8_frame(word: u64) -> bool {
    word & (15 << 60) == V8_FRAME
}

/// The tagged `SharedFunctionInfo` pointer of a JavaScript frame's word.
pub const fn v8_shared(word: u64) -> u64 {
    word & V8_PTR_BITS
}

/// The tag of an interpreted Java frame's word: bit 60 alone of the top four.
pub const JVM_FRAME: u64 = 1 << 60;

/// Where an interpreted Java frame's word keeps the low bits of its
/// bytecode pointer (bits 47-58), and the bit that says they are there.
const JVM_BCP_SHIFT: u32 = 47;
pub const JVM_BCP_BITS: u64 = (1 << 12) - 1;
const JVM_BCP_HERE: u64 = 1 << 59;

/// The word for an interpreted Java frame running the method at `method` (a
/// HotSpot `Method*`), at the bytecode at `bcp` (0: not known). Of the
/// pointer only its low 12 bits are kept, which give the bytecode's index in
/// a method of up to 4,096 bytes of code: [`jvm_bcp_low`].
#[inline(always)]
pub const fn jvm_word(method: u64, bcp: u64) -> u64 {
    let at = if bcp == 0 { 0 } else { JVM_BCP_HERE | (bcp & JVM_BCP_BITS) << JVM_BCP_SHIFT };
    JVM_FRAME | at | (method & V8_PTR_BITS)
}

/// The low 12 bits of an interpreted Java frame's bytecode pointer, if its
/// word keeps them.
pub const fn jvm_bcp_low(word: u64) -> Option<u64> {
    if word & JVM_BCP_HERE == 0 {
        return None;
    }
    Some(word >> JVM_BCP_SHIFT & JVM_BCP_BITS)
}

/// Whether a user stack's word is an interpreted Java frame.
#[inline(always)]
pub const fn is_jvm_frame(word: u64) -> bool {
    word & (15 << 60) == JVM_FRAME
}

/// The `Method*` of an interpreted Java frame's word.
pub const fn jvm_method(word: u64) -> u64 {
    word & V8_PTR_BITS
}

/// [`JitProc::kind`] of a V8 process.
pub const KIND_V8: u32 = 0;
/// [`JitProc::kind`] of a HotSpot JVM.
pub const KIND_HOTSPOT: u32 = 1;

/// One V8 or HotSpot process, for the walker. In `JIT_PROCS` under the tgid.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JitProc {
    /// V8: the embedded builtins in memory, up to two [start, end) ranges:
    /// the binary's own copy and the one V8 may remap beside its heap (0, 0:
    /// none). A frame there, or in code in no file, may run a JavaScript
    /// function. HotSpot: the template interpreter's code, where every frame
    /// runs a Java method.
    pub blob: [u64; 4],
    /// Slots of a frame, from its frame pointer: V8's function (HotSpot's
    /// `Method*`) and V8's context (a typed frame keeps a Smi marker there;
    /// HotSpot's slot here is the interpreter's bytecode pointer).
    pub fp_function: i32,
    pub fp_context: i32,
    /// Where a `JSFunction` keeps its `SharedFunctionInfo`.
    pub shared: u32,
    /// [`KIND_V8`] or [`KIND_HOTSPOT`].
    pub kind: u32,
}

/// A V8 heap object's tag in the low two bits of a pointer (a Smi has 0 in
/// bit 0).
const HEAP_OBJECT: u64 = 1;

impl JitProc {
    /// Whether the entry is one (a zeroed default is none).
    #[inline(always)]
    pub fn present(&self) -> bool {
        self.shared != 0 || self.kind == KIND_HOTSPOT
    }

    /// Whether a frame at `pc` (in a file's mapping or not) may run a function
    /// of the runtime's: V8's builtins or code in no file; HotSpot's
    /// interpreter alone (its compiled code keeps no `Method*` in the frame).
    #[inline(always)]
    pub fn may_run_function(&self, pc: u64, in_file: bool) -> bool {
        self.in_builtins(pc) || (!in_file && self.kind == KIND_V8)
    }

    /// Whether `pc` lies in the process's embedded builtins.
    #[inline(always)]
    pub fn in_builtins(&self, pc: u64) -> bool {
        (self.blob[0] <= pc && pc < self.blob[1]) || (self.blob[2] <= pc && pc < self.blob[3])
    }

    /// The word of the JavaScript frame whose frame pointer is `bp`, with
    /// `read` giving the process's words: if its context slot holds a heap
    /// object (a typed frame, such as an exit or entry frame, holds a Smi
    /// marker there) and its function slot a function whose
    /// `SharedFunctionInfo` can be read. The in-kernel walker and the walks in
    /// user space read frames alike through it.
    #[inline(always)]
    pub fn frame_word(&self, bp: u64, read: impl Fn(u64) -> Option<u64>) -> Option<u64> {
        if self.kind == KIND_HOTSPOT {
            // An interpreted frame keeps its Method*, an aligned pointer into
            // the metaspace, and the pointer to the bytecode it runs (where
            // it calls from, in a caller's frame).
            let method = read(bp.wrapping_add_signed(self.fp_function as i64))?;
            if method == 0 || method & 7 != 0 || method > V8_PTR_BITS {
                return None;
            }
            let bcp = read(bp.wrapping_add_signed(self.fp_context as i64)).unwrap_or(0);
            return Some(jvm_word(method, bcp));
        }
        let context = read(bp.wrapping_add_signed(self.fp_context as i64))?;
        let function = read(bp.wrapping_add_signed(self.fp_function as i64))?;
        if context & 3 != HEAP_OBJECT || function & 3 != HEAP_OBJECT {
            return None;
        }
        let shared = read(function - HEAP_OBJECT + self.shared as u64)?;
        (shared & 3 == HEAP_OBJECT).then(|| v8_word(shared))
    }
}

/// One code heap of a HotSpot JVM's code cache: its reserved range and its
/// segment map (a byte per segment: how many segments back its block
/// begins, 0 at the block's start, 0xff where free).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JvmHeap {
    pub low: u64,
    pub high: u64,
    pub segmap: u64,
}

/// The steps back through a segment map the walker takes: a block of up to
/// 32 x 254 segments (1 MiB of 128-byte segments) is found.
pub const JVM_HOPS: usize = 32;

/// A HotSpot JVM's code cache, for stepping over compiled frames, which keep
/// no frame pointer: each code blob says how large its frames are. In
/// `JVM_CODE` under the tgid.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JvmCode {
    pub heaps: [JvmHeap; 3],
    pub log2_segment: u32,
    /// `sizeof(HeapBlock)`: the blob follows its block's header.
    pub block_size: u32,
    /// Where a `CodeBlob` keeps its frame size, in words.
    pub frame_size: u32,
    pub _pad: u32,
}

/// One step back through a segment map ([`jvm_hop`]).
pub enum JvmHop {
    /// The segment is its block's first.
    Start,
    /// The block begins at or before this segment.
    Back(u64),
    /// The segment is free, or the map unreadable.
    Nothing,
}

/// One step back through a segment map, from segment `seg` whose byte is `byte`.
#[inline(always)]
pub fn jvm_hop(byte: Option<u8>, seg: u64) -> JvmHop {
    match byte {
        Some(0) => JvmHop::Start,
        Some(0xff) | None => JvmHop::Nothing,
        Some(hop) => seg.checked_sub(hop as u64).map_or(JvmHop::Nothing, JvmHop::Back),
    }
}

impl JvmCode {
    /// Where the code blob holding `pc` begins (past its block's header).
    /// `start` walks a segment map back from a segment to its block's first
    /// ([`jvm_hop`] at a time).
    #[inline(always)]
    pub fn blob_at(&self, pc: u64, start: impl FnOnce(u64, u64) -> Option<u64>) -> Option<u64> {
        let mut heap = None;
        for h in &self.heaps {
            if h.low <= pc && pc < h.high {
                heap = Some(*h);
            }
        }
        let h = heap?;
        let log2 = (self.log2_segment & 31) as u64;
        let seg = start(h.segmap, (pc - h.low) >> log2)?;
        Some(h.low + (seg << log2) + self.block_size as u64)
    }

    /// The frame size in words (the return address and saved frame pointer
    /// included) of the code blob holding `pc` ([`JvmCode::blob_at`]), where
    /// it has one: compiled methods and runtime stubs do; the interpreter and
    /// the call stub (0) keep frame pointers instead. `int` reads a 32-bit
    /// value.
    #[inline(always)]
    pub fn frame_words(
        &self,
        pc: u64,
        start: impl FnOnce(u64, u64) -> Option<u64>,
        int: impl Fn(u64) -> Option<u32>,
    ) -> Option<u64> {
        let blob = self.blob_at(pc, start)?;
        let words = int(blob + self.frame_size as u64)?;
        (2..8192).contains(&words).then_some(words as u64)
    }
}

/// [`JvmCode::blob_at`]'s `start` for plain code: up to `hops` hops, taken in
/// a loop (the walker takes [`JVM_HOPS`]).
pub fn jvm_block_start(
    byte: impl Fn(u64) -> Option<u8>,
    hops: usize,
) -> impl FnOnce(u64, u64) -> Option<u64> {
    move |map, mut seg| {
        for _ in 0..hops {
            match jvm_hop(byte(map + seg), seg) {
                JvmHop::Start => return Some(seg),
                JvmHop::Back(earlier) => seg = earlier,
                JvmHop::Nothing => return None,
            }
        }
        None
    }
}

/// Most V8 and HotSpot processes the walker keeps.
pub const MAX_JIT_PROCS: u32 = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v8_word_keeps_its_pointer_and_is_told_from_python_cuts_and_addresses() {
        let shared = 0x1d2c_0a84_1f69;
        let w = v8_word(shared);
        assert!(is_v8_frame(w) && v8_shared(w) == shared);
        assert!(!crate::python::is_py_frame(w) && !crate::walker::is_cut_mark(w));
        assert!(!is_v8_frame(crate::python::py_word(shared, 8191)));
        assert!(!is_v8_frame(shared) && !is_v8_frame(crate::walker::CUT_MARK | 3));
        assert!(!is_v8_frame(u64::MAX) && !is_v8_frame(crate::LEAF_WORD | shared));
        let j = jvm_word(0x7f3a_2c01_0400, 0x7f3a_2c02_1234);
        assert!(is_jvm_frame(j) && jvm_method(j) == 0x7f3a_2c01_0400 && !is_v8_frame(j));
        assert_eq!(jvm_bcp_low(j), Some(0x234));
        assert_eq!(jvm_bcp_low(jvm_word(0x7f3a_2c01_0400, 0)), None, "no bytecode pointer read");
        assert!(!is_jvm_frame(w) && !is_jvm_frame(crate::python::py_word(shared, 1)));
        assert!(!crate::python::is_py_frame(j) && !crate::walker::is_cut_mark(j));
        assert!(!is_jvm_frame(shared) && !is_jvm_frame(crate::LEAF_WORD | j));
        assert_eq!(core::mem::size_of::<JitProc>(), 48);
    }

    #[test]
    fn a_frame_is_javascript_only_where_its_slots_say_so() {
        let p = JitProc {
            blob: [0x1000, 0x2000, 0x7f00, 0x7f80],
            fp_function: -16,
            fp_context: -8,
            shared: 24,
            kind: KIND_V8,
        };
        assert!(p.in_builtins(0x1000) && p.in_builtins(0x7f7f));
        assert!(!p.in_builtins(0x2000) && !p.in_builtins(0x7f80) && !p.in_builtins(0xfff));
        // Context 0x5001 and function 0x6001 are heap objects; the function's
        // SharedFunctionInfo is at 0x6000 + 24.
        let words = |ctx: u64| {
            move |a: u64| match a {
                0x8ff8 => Some(ctx),
                0x8ff0 => Some(0x6001),
                0x6018 => Some(0x3001),
                _ => None,
            }
        };
        assert_eq!(p.frame_word(0x9000, words(0x5001)), Some(v8_word(0x3001)));
        // A typed frame's Smi marker where the context goes.
        assert_eq!(p.frame_word(0x9000, words(4 << 1)), None);
        assert_eq!(p.frame_word(0xa000, words(0x5001)), None);
        assert!(p.present() && p.may_run_function(0x3000, false));
        assert!(!p.may_run_function(0x3000, true) && p.may_run_function(0x1000, true));
    }

    #[test]
    fn a_compiled_frame_is_sized_by_its_blob_found_through_the_segment_map() {
        let mut c =
            JvmCode { log2_segment: 7, block_size: 16, frame_size: 28, ..Default::default() };
        c.heaps[1] = JvmHeap { low: 0x10_0000, high: 0x20_0000, segmap: 0x1000 };
        // Segments: a blob at 0 (2 segments), one at 2 (4), then free.
        let map = [0u8, 1, 0, 1, 2, 3, 0xff];
        let byte = |a: u64| a.checked_sub(0x1000).and_then(|i| map.get(i as usize).copied());
        let int = |a: u64| match a {
            0x10_002c => Some(0),
            0x10_012c => Some(6),
            _ => None,
        };
        assert_eq!(
            c.frame_words(0x10_0000 + 5 * 128 + 9, jvm_block_start(byte, JVM_HOPS), int),
            Some(6)
        );
        assert_eq!(
            c.frame_words(0x10_0000 + 2 * 128, jvm_block_start(byte, JVM_HOPS), int),
            Some(6)
        );
        // The call stub's blob keeps a frame pointer instead: no size.
        assert_eq!(c.frame_words(0x10_0000 + 100, jvm_block_start(byte, JVM_HOPS), int), None);
        assert_eq!(
            c.frame_words(0x10_0000 + 6 * 128, jvm_block_start(byte, JVM_HOPS), int),
            None,
            "free"
        );
        assert_eq!(
            c.frame_words(0x20_0000, jvm_block_start(byte, JVM_HOPS), int),
            None,
            "in no heap"
        );
        // A chain of hops longer than the walker takes is not followed.
        let mut long = [1u8; 40];
        long[0] = 0;
        let byte = |a: u64| a.checked_sub(0x1000).and_then(|i| long.get(i as usize).copied());
        assert_eq!(c.frame_words(0x10_0000 + 39 * 128, jvm_block_start(byte, JVM_HOPS), int), None);
        assert_eq!(c.frame_words(0x10_0000 + 32 * 128, jvm_block_start(byte, JVM_HOPS), int), None);
        let int = |a: u64| (a == 0x10_002c).then_some(9);
        assert_eq!(
            c.frame_words(0x10_0000 + 31 * 128, jvm_block_start(byte, JVM_HOPS), int),
            Some(9)
        );
    }

    #[test]
    fn an_interpreted_java_frame_gives_its_method_and_nothing_else_does() {
        let p = JitProc {
            blob: [0x1000, 0x2000, 0, 0],
            fp_function: -24,
            kind: KIND_HOTSPOT,
            ..Default::default()
        };
        assert!(p.present() && !JitProc::default().present());
        assert!(p.may_run_function(0x1800, false) && p.may_run_function(0x1800, true));
        // Compiled code and stubs keep no Method*: they are not looked at.
        assert!(!p.may_run_function(0x3000, false) && !p.may_run_function(0x2000, false));
        let words = |m: u64| move |a: u64| (a == 0x8fe8).then_some(m);
        assert_eq!(
            p.frame_word(0x9000, words(0x7f00_1234_5678)),
            Some(jvm_word(0x7f00_1234_5678, 0)),
            "a bytecode pointer that does not read"
        );
        let p = JitProc { fp_context: -64, ..p };
        let both = |a: u64| match a {
            0x8fe8 => Some(0x7f00_1234_5678),
            0x8fc0 => Some(0x7f00_2000_0abc),
            _ => None,
        };
        let w = p.frame_word(0x9000, both).unwrap();
        assert_eq!((jvm_method(w), jvm_bcp_low(w)), (0x7f00_1234_5678, Some(0xabc)));
        // Null, misaligned or kernel-range words are no Method*.
        assert_eq!(p.frame_word(0x9000, words(0)), None);
        assert_eq!(p.frame_word(0x9000, words(0x7f00_1234_5679)), None);
        assert_eq!(p.frame_word(0x9000, words(0xffff_8000_0000_0000)), None);
        assert_eq!(p.frame_word(0xa000, words(0x7f00_1234_5678)), None);
    }
}
