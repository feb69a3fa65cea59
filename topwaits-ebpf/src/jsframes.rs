//! JavaScript frames for the user stack walker: in a V8 process, a frame in
//! V8's builtins or in code in no file may run a JavaScript function; if its
//! slots say so, its word names the function (see `topwaits_common::v8`)
//! instead of a return address no symbol table holds.

use aya_ebpf::{macros::map, maps::HashMap};
use topwaits_common::v8::{v8_word, V8Proc, MAX_V8_PROCS};

use crate::uread::user_word;

/// Each V8 process's builtins and frame layout, by tgid (from user space).
#[map]
pub static V8_PROCS: HashMap<u32, V8Proc> = HashMap::with_max_entries(MAX_V8_PROCS, 0);

/// A V8 heap object's tag in the low bits of a pointer (a Smi has 0 in bit 0).
const HEAP_OBJECT: u64 = 1;

/// Whether `pc` lies in the process's embedded builtins.
#[inline(always)]
pub fn in_builtins(v8: &V8Proc, pc: u64) -> bool {
    (v8.blob[0] <= pc && pc < v8.blob[1]) || (v8.blob[2] <= pc && pc < v8.blob[3])
}

/// The word of the JavaScript frame whose frame pointer is `bp`, if its
/// context slot holds a heap object (a typed frame, such as an exit or entry
/// frame, holds a Smi marker there) and its function slot a function whose
/// `SharedFunctionInfo` can be read.
#[inline(always)]
pub fn frame_word(v8: &V8Proc, bp: u64) -> Option<u64> {
    // Plain reads, not the walk's stack window: their few branches keep the
    // verifier's work on the walker's loop body small.
    let context = user_word(bp.wrapping_add_signed(v8.fp_context as i64))?;
    let function = user_word(bp.wrapping_add_signed(v8.fp_function as i64))?;
    if context & 3 != HEAP_OBJECT || function & 3 != HEAP_OBJECT {
        return None;
    }
    let shared = user_word(function - HEAP_OBJECT + v8.shared as u64)?;
    (shared & 3 == HEAP_OBJECT).then(|| v8_word(shared))
}
