//! JavaScript frames for the user stack walker: each V8 process's layout. In
//! such a process, a frame in V8's builtins or in code in no file may run a
//! JavaScript function; if its slots say so (`V8Proc::frame_word`), its word
//! names the function instead of a return address no symbol table holds.

use aya_ebpf::{macros::map, maps::HashMap};
use topwaits_common::v8::{V8Proc, MAX_V8_PROCS};

/// Each V8 process's builtins and frame layout, by tgid (from user space).
#[map]
pub static V8_PROCS: HashMap<u32, V8Proc> = HashMap::with_max_entries(MAX_V8_PROCS, 0);
