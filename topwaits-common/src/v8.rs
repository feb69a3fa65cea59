//! JavaScript frames in user stacks: where the walker finds a V8 process's
//! generated code and the function each of its frames runs ([`V8Proc`], filled
//! by user space from the program's postmortem metadata), and how such a frame
//! is written as one stack word ([`v8_word`]), named in user space.

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

/// One V8 process, for the walker. In `V8_PROCS` under the tgid.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct V8Proc {
    /// The embedded builtins in memory, up to two [start, end) ranges: the
    /// binary's own copy and the one V8 may remap beside its heap (0, 0: none).
    /// A frame there, or in code in no file, may run a JavaScript function.
    pub blob: [u64; 4],
    /// Slots of a JavaScript frame, from its frame pointer: the function it
    /// runs and its context (a typed frame keeps a Smi marker there instead).
    pub fp_function: i32,
    pub fp_context: i32,
    /// Where a `JSFunction` keeps its `SharedFunctionInfo`.
    pub shared: u32,
    pub _pad: u32,
}

/// A V8 heap object's tag in the low two bits of a pointer (a Smi has 0 in
/// bit 0).
const HEAP_OBJECT: u64 = 1;

impl V8Proc {
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
        let context = read(bp.wrapping_add_signed(self.fp_context as i64))?;
        let function = read(bp.wrapping_add_signed(self.fp_function as i64))?;
        if context & 3 != HEAP_OBJECT || function & 3 != HEAP_OBJECT {
            return None;
        }
        let shared = read(function - HEAP_OBJECT + self.shared as u64)?;
        (shared & 3 == HEAP_OBJECT).then(|| v8_word(shared))
    }
}

/// Most V8 processes the walker keeps.
pub const MAX_V8_PROCS: u32 = 1024;

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
        assert_eq!(core::mem::size_of::<V8Proc>(), 48);
    }

    #[test]
    fn a_frame_is_javascript_only_where_its_slots_say_so() {
        let p = V8Proc {
            blob: [0x1000, 0x2000, 0x7f00, 0x7f80],
            fp_function: -16,
            fp_context: -8,
            shared: 24,
            _pad: 0,
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
    }
}
