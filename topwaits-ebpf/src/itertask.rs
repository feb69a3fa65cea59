//! The context of the task iterators (`iter/task` programs: `task_regs`,
//! `seed_waits`): the task at hand and the file their records go to.

use core::ffi::c_void;

use aya_ebpf::{
    bindings::{seq_file, task_struct},
    helpers::bpf_seq_write,
};

/// `struct bpf_iter__task`: the iterator's context, one pointer per field.
#[repr(C)]
struct IterTask {
    meta: *const IterMeta,
    task: *mut task_struct,
}

/// The head of `struct bpf_iter_meta`: the output file.
#[repr(C)]
struct IterMeta {
    seq: *mut seq_file,
}

/// One step of a task iterator: the task it hands over and its output file;
/// None at the end (the last call has no task).
#[inline(always)]
pub fn task_and_output(ctx: *mut c_void) -> Option<(*mut task_struct, Output)> {
    // SAFETY: the context the kernel passes an `iter/task` program, whose two
    // pointers the verifier types by BTF; `task` is null once, at the end.
    let (meta, task) =
        unsafe { ((*(ctx as *const IterTask)).meta, (*(ctx as *const IterTask)).task) };
    if task.is_null() || meta.is_null() {
        return None;
    }
    // SAFETY: `meta` is the iterator's own, checked above.
    Some((task, Output(unsafe { (*meta).seq })))
}

/// The file a task iterator's records are read from.
pub struct Output(*mut seq_file);

impl Output {
    /// Writes `record` (a `#[repr(C)]` value) as it lies in memory.
    #[inline(always)]
    pub fn write<T>(&self, record: &T) {
        // SAFETY: the iterator's file, and a value of that size.
        unsafe {
            bpf_seq_write(self.0, (record as *const T).cast(), core::mem::size_of::<T>() as u32)
        };
    }
}
