//! Task-local storage (`BPF_MAP_TYPE_TASK_STORAGE`): a value that lives in the
//! running task's own `task_struct` storage, found without hashing and freed by the
//! kernel when the task is. aya-ebpf 0.2 has no wrapper for it, so this module
//! declares the BTF map definition (`.maps` section) the kernel requires for it.
//! The helpers take the running task as the kernel's BTF types it; on a kernel
//! without BTF (`Settings::task_storage` 0) they are never called, and the
//! storage reads as empty.

use aya_ebpf::{
    bindings::{
        bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE, task_struct, BPF_F_NO_PREALLOC,
        BPF_LOCAL_STORAGE_GET_F_CREATE,
    },
    helpers::generated::{bpf_get_current_task_btf, bpf_task_storage_delete, bpf_task_storage_get},
};

use aya_ebpf::macros::btf_map;
use topwaits_common::{limits::CACHED_PER_TASK, walker::REUSE_SLOTS, StackCache};

use crate::maps::settings;

/// What each task keeps in its own storage, as one value so that a hook looks it
/// up once (a lookup costs about 200 ns): the kernel stacks it had, for `kcache`,
/// and its last user stack walk, for `uwalk`.
#[repr(C)]
pub struct TaskState {
    /// Where its kernel stacks lay (see `StackCache`): the stacks last learned,
    /// newest first, each with its call site (one site often alternates between
    /// two stacks: a read that blocks, and one preempted on its way out).
    pub kstacks: [StackCache; CACHED_PER_TASK],
    pub walk: LastWalk,
}

/// A task's last user stack walk, for reuse: the registers it started from, the
/// stack's reference, its frames, and the slot each frame after the first came from.
#[repr(C)]
pub struct LastWalk {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    pub stack: u64,
    pub n: u64,
    /// `pyframes::epoch` when it was walked.
    pub epoch: u64,
    pub slots: [u64; REUSE_SLOTS],
}

/// Each task's [`TaskState`]. Per task rather than an LRU of task and call site:
/// an LRU that all tasks share is preallocated, and once more tasks block than it
/// holds, every switch evicts, unwinds and learns again (10,000 sleeping threads
/// cost 4x the per-switch time of 10). Task storage rather than a hash map keyed
/// by task: no hashing, no bucket to miss in cache, no limit on tasks, and freed
/// with the task. Only the task's own hooks use it, as the running task.
#[btf_map]
pub static TASKS: TaskStorage<TaskState> = TaskStorage::new();

/// The BTF shape of a map definition: each field's pointee carries one
/// attribute (an array's length for the numbers), read by the loader from BTF.
#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [i32; BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: the fields are placeholders the loader reads from BTF; never dereferenced.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> TaskStorage<T> {
    pub const fn new() -> Self {
        Self {
            r#type: core::ptr::null(),
            key: core::ptr::null(),
            value: core::ptr::null(),
            max_entries: core::ptr::null(),
            map_flags: core::ptr::null(),
        }
    }

    /// The running task, typed by the kernel's BTF; null without it.
    #[inline(always)]
    fn task() -> *mut task_struct {
        if settings().task_storage == 0 {
            return core::ptr::null_mut();
        }
        // SAFETY: the helper has no arguments and returns the running task.
        unsafe { bpf_get_current_task_btf() }
    }

    #[inline(always)]
    fn as_ptr(&self) -> *mut core::ffi::c_void {
        core::ptr::from_ref(self).cast_mut().cast()
    }

    /// The running task's value, or null; `flags` as the helper takes them.
    #[inline(always)]
    fn get(&self, flags: u64) -> Option<*mut T> {
        let task = Self::task();
        if task.is_null() {
            return None;
        }
        // SAFETY: the helper takes the task pointer the kernel just gave, and
        // returns the task's value or null; a null initial value creates a zeroed one.
        let p = unsafe { bpf_task_storage_get(self.as_ptr(), task, core::ptr::null_mut(), flags) };
        (!p.is_null()).then_some(p.cast())
    }

    /// The running task's value, if it has one.
    #[inline(always)]
    pub fn current(&self) -> Option<*mut T> {
        self.get(0)
    }

    /// The running task's value, created (zeroed) if it has none; None when the
    /// kernel cannot allocate it, or when a BPF program on this CPU is already in
    /// task storage (the helper then refuses, rather than deadlock).
    #[inline(always)]
    pub fn current_or_zeroed(&self) -> Option<*mut T> {
        self.get(BPF_LOCAL_STORAGE_GET_F_CREATE as u64)
    }

    /// Frees the running task's value now rather than when the task is freed.
    #[inline(always)]
    pub fn remove_current(&self) {
        let task = Self::task();
        if !task.is_null() {
            // SAFETY: as in `get`.
            let _ = unsafe { bpf_task_storage_delete(self.as_ptr(), task) };
        }
    }
}
