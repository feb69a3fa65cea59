//! Python frames in user stacks: how the walker finds a CPython thread's frame
//! chain ([`PyProc`], filled by user space per process and checked against the
//! running interpreter first) and how it writes each Python frame as one stack
//! word ([`py_word`]), resolved to a function, file and line in user space.

/// The tag of a Python frame's word: bit 61, with bits 60, 62 and 63 clear
/// (user addresses have none of them; cut marks have bit 62; V8's frames,
/// `crate::v8`, bits 61 and 60).
pub const PY_FRAME: u64 = 1 << 61;

/// A code object's address takes the low 47 bits of a Python frame's word; the
/// instruction index (in code units, plus one, 0 before the first) the next 13.
pub const PY_CODE_BITS: u32 = 47;
pub const PY_INSTR_MAX: u64 = (1 << 13) - 1;

/// The word for a frame running `code` at instruction `index + 1` (saturated).
#[inline(always)]
pub const fn py_word(code: u64, index_plus_one: u64) -> u64 {
    let i = if index_plus_one > PY_INSTR_MAX { PY_INSTR_MAX } else { index_plus_one };
    PY_FRAME | i << PY_CODE_BITS | (code & ((1 << PY_CODE_BITS) - 1))
}

/// Whether a user stack's word is a Python frame.
#[inline(always)]
pub const fn is_py_frame(word: u64) -> bool {
    word & (15 << 60) == PY_FRAME
}

/// The code object and instruction index (None: before the first) of a Python
/// frame's word.
pub const fn py_parts(word: u64) -> (u64, Option<u64>) {
    let i = (word >> PY_CODE_BITS) & PY_INSTR_MAX;
    (word & ((1 << PY_CODE_BITS) - 1), if i == 0 { None } else { Some(i - 1) })
}

/// Field offsets not in use.
pub const NONE: u16 = u16::MAX;

/// One Python process, for the walker: where its interpreter keeps its threads,
/// where its evaluator's code lies, and the offsets of the fields it reads, as
/// for the interpreter's version. In `PY_PROCS` under the tgid.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyProc {
    /// The address of the interpreter's thread-list head pointer.
    pub threads_head: u64,
    /// `_PyEval_EvalFrameDefault` in memory: [start, end), and its cold part's
    /// (0, 0 when it has none). A native frame there runs Python frames.
    pub eval: [u64; 4],
    /// In a thread state: the next one, the thread's id (`native_thread_id`), and
    /// its frame (or its `_PyCFrame`, whose `current_frame` is at `cframe_frame`).
    pub tstate_next: u16,
    pub tstate_tid: u16,
    pub tstate_frame: u16,
    pub cframe_frame: u16,
    /// In an interpreter frame: its code object, the frame below, its instruction
    /// pointer, `is_entry` (3.11), and its owner.
    pub frame_code: u16,
    pub frame_previous: u16,
    pub frame_instr: u16,
    pub frame_entry: u16,
    pub frame_owner: u16,
    /// Where a code object's bytecode starts (its instruction pointer's base).
    pub code_units: u16,
    /// The owner value of the shim frame at the base of each evaluator call
    /// (3.12 on), or [`NONE`].
    pub owner_cstack: u16,
    /// Of [`py_flags`].
    pub flags: u16,
    /// The process's PID namespace (the `st_dev` and `st_ino` of its
    /// `/proc/PID/ns/pid`) when it is not topwaits' own, else zeros: a thread
    /// state holds the thread's id as its own namespace numbers it.
    pub pid_ns_dev: u64,
    pub pid_ns_ino: u64,
}

/// How an interpreter differs from 3.11's model ([`PyProc::flags`]).
pub mod py_flags {
    /// A thread state names its thread by `pthread_t` (the thread's fs base),
    /// not by its thread id (3.10).
    pub const BY_PTHREAD: u16 = 1;
    /// Each evaluator call runs exactly one frame (3.10).
    pub const ONE_FRAME: u16 = 2;
    /// The frame's instruction field is an `int` index, not a pointer (3.10).
    pub const LASTI: u16 = 4;
}

/// Most Python processes the walker keeps.
pub const MAX_PY_PROCS: u32 = 1024;
/// Thread states remembered per thread id.
pub const MAX_PY_THREADS: u32 = 16384;
/// Thread states looked through to find a thread's own.
pub const PY_THREAD_SCAN: u32 = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_words_parts_round_trip_and_stay_clear_of_addresses_and_marks() {
        let code = 0x7f12_3456_7890;
        let w = py_word(code, 42);
        assert!(is_py_frame(w) && !crate::walker::is_cut_mark(w));
        assert_eq!(py_parts(w), (code, Some(41)));
        assert_eq!(py_parts(py_word(code, 0)), (code, None));
        assert_eq!(py_parts(py_word(code, 1 << 20)).1, Some(PY_INSTR_MAX - 1));
        assert!(
            !is_py_frame(code)
                && !is_py_frame(crate::walker::CUT_MARK | 3)
                && !is_py_frame(u64::MAX)
        );
        assert_eq!(core::mem::size_of::<PyProc>(), 80);
    }
}
