//! CPython's struct layouts on x86-64, per minor version: the offsets of the
//! fields the walker and the name reader use, as the release builds of 3.10,
//! 3.11, 3.12 and 3.13 lay them out (measured with `offsetof` against each version's
//! own headers). A build that differs (a debug build, another ABI) is caught by
//! the checks in `probe` before any offset is used.

use topwaits_common::python::{py_flags, PyProc, NONE};

/// The offsets of one CPython minor version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub version: (u8, u8),
    /// `_PyRuntime.interpreters.head`, and the thread-list head in an interpreter.
    pub runtime_interp: u64,
    pub interp_threads: u64,
    pub tstate_interp: u16,
    /// What the walker reads (its thread-list head and evaluator left at 0).
    pub walker: PyProc,
    pub code_filename: u64,
    pub code_qualname: u64,
    pub code_firstlineno: u64,
    pub code_linetable: u64,
    /// Sizes of `PyASCIIObject` and `PyCompactUnicodeObject`: where a compact
    /// string's characters start.
    pub ascii_data: u64,
    pub compact_data: u64,
    /// The line table is 3.10's (start delta, line delta) pairs rather than the
    /// location table of 3.11 on.
    pub line_pairs: bool,
}

/// Offsets shared by every version here.
pub const OBJECT_TYPE: u64 = 8;
pub const VAR_SIZE: u64 = 16;
pub const BYTES_DATA: u64 = 32;
pub const UNICODE_LENGTH: u64 = 16;
pub const UNICODE_STATE: u64 = 32;

/// 3.10: a thread state names its thread by `pthread_t`, frames are objects
/// (one per evaluator call) with an `int` instruction index, and code objects
/// have no qualified name (`co_name` stands in).
const V3_10: Layout = Layout {
    version: (3, 10),
    runtime_interp: 32,
    interp_threads: 8,
    tstate_interp: 16,
    walker: PyProc {
        threads_head: 0,
        eval: [0; 4],
        tstate_next: 8,
        tstate_tid: 176,
        tstate_frame: 24,
        cframe_frame: NONE,
        frame_code: 32,
        frame_previous: 24,
        frame_instr: 96,
        frame_entry: NONE,
        frame_owner: NONE,
        code_units: NONE,
        owner_cstack: NONE,
        flags: py_flags::BY_PTHREAD | py_flags::ONE_FRAME | py_flags::LASTI,
        pid_ns_dev: 0,
        pid_ns_ino: 0,
    },
    code_filename: 104,
    code_qualname: 112,
    code_firstlineno: 40,
    code_linetable: 120,
    ascii_data: 48,
    compact_data: 72,
    line_pairs: true,
};

const V3_11: Layout = Layout {
    version: (3, 11),
    runtime_interp: 40,
    interp_threads: 16,
    tstate_interp: 16,
    walker: PyProc {
        threads_head: 0,
        eval: [0; 4],
        tstate_next: 8,
        tstate_tid: 160,
        tstate_frame: 56,
        cframe_frame: 8,
        frame_code: 32,
        frame_previous: 48,
        frame_instr: 56,
        frame_entry: 68,
        frame_owner: 69,
        code_units: 184,
        owner_cstack: NONE,
        flags: 0,
        pid_ns_dev: 0,
        pid_ns_ino: 0,
    },
    code_filename: 112,
    code_qualname: 128,
    code_firstlineno: 72,
    code_linetable: 136,
    ascii_data: 48,
    compact_data: 72,
    line_pairs: false,
};

/// 3.12: frames start with their code object, the evaluator's calls end at a
/// shim frame owned by the C stack, and strings lost a field.
const V3_12: Layout = Layout {
    version: (3, 12),
    interp_threads: 72,
    walker: PyProc {
        tstate_tid: 144,
        cframe_frame: 0,
        frame_code: 0,
        frame_previous: 8,
        frame_entry: NONE,
        frame_owner: 70,
        code_units: 192,
        owner_cstack: 3,
        ..V3_11.walker
    },
    code_firstlineno: 68,
    ascii_data: 40,
    compact_data: 56,
    ..V3_11
};

/// 3.13: the thread state holds its frame itself (no `_PyCFrame`).
const V3_13: Layout = Layout {
    version: (3, 13),
    runtime_interp: 632,
    interp_threads: 7344,
    walker: PyProc {
        tstate_tid: 160,
        tstate_frame: 72,
        cframe_frame: NONE,
        code_units: 200,
        ..V3_12.walker
    },
    ..V3_12
};

/// The layout of CPython `major.minor`, if it is one topwaits knows.
pub fn of(major: u8, minor: u8) -> Option<&'static Layout> {
    [&V3_10, &V3_11, &V3_12, &V3_13].into_iter().find(|l| l.version == (major, minor))
}

/// The versions topwaits names frames of, for messages.
pub const KNOWN: &str = "3.10 to 3.13";

impl Layout {
    /// What the walker needs, for a process whose thread-list head is at
    /// `threads_head` and whose evaluator lies at `eval` (start, end, and its cold
    /// part's or zeros).
    pub fn for_walker(&self, threads_head: u64, eval: [u64; 4]) -> PyProc {
        PyProc { threads_head, eval, ..self.walker }
    }
}
