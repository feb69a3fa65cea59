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
}
