//! JavaScript and Java frames for the user stack walker: each V8 or HotSpot
//! process's layout. In a V8 process, a frame in V8's builtins or in code in
//! no file may run a JavaScript function; in a JVM, a frame in the
//! interpreter runs a Java method. Where its slots say so
//! (`JitProc::frame_word`), its word names the function instead of a return
//! address no symbol table holds. A JVM's compiled frames, which keep no
//! frame pointer, are stepped over by the size their code blob gives.

use aya_ebpf::{macros::map, maps::HashMap};
use topwaits_common::jit::{JitProc, JvmCode, MAX_JIT_PROCS};

/// Each V8 process's builtins and frame layout, by tgid (from user space).
#[map]
pub static JIT_PROCS: HashMap<u32, JitProc> = HashMap::with_max_entries(MAX_JIT_PROCS, 0);

/// Each JVM's code cache, by tgid (from user space).
#[map]
pub static JVM_CODE: HashMap<u32, JvmCode> = HashMap::with_max_entries(MAX_JIT_PROCS, 0);
