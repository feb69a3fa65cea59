//! Default and hard limits.

/// Default `--stack-storage-size`: the most kernel stacks, and the most user
/// stacks, kept (each map allocates its entries as stacks arrive).
pub const DEFAULT_STACK_STORAGE: u32 = 16384;
/// Default `--max-entries` of the aggregate map.
pub const DEFAULT_MAX_ENTRIES: u32 = 32768;
/// `topwaits threads`: the user stacks its goroutine waits name.
pub const THREADS_GOROUTINE_STACKS: u32 = 4096;
/// Kernel stacks kept for reuse per task (each with its call site), newest
/// first: a task that blocks at more sites than this unwinds again.
pub const CACHED_PER_TASK: usize = 3;
/// Capacity of the per-task start map.
pub const START_ENTRIES: u32 = 65536;
/// Kernel stack layouts shared by all tasks, and the call sites they are kept
/// under (entries are allocated as stacks are learned).
pub const LAYOUTS: u32 = 16384;
pub const LAYOUT_SITES: u32 = 4096;
/// Words of the `STARTED` map: one byte per hash of a task address (65,536).
pub const STARTED_WORDS: u32 = 8192;
/// Capacity of the pid/tid filter map.
pub const MAX_FILTER_IDS: u32 = 4096;
/// Unwind tree nodes (512 bytes each, allocated as tables load: 32 MiB at
/// most) and processes (2 KiB each) the user stack walker keeps.
pub const UNWIND_NODES: u32 = 65536;
/// Unwind tree nodes kept in an array first (512 bytes each, allocated at
/// once: 2 MiB): written without an allocation each, and found without
/// hashing. Tables beyond go to the hash map above.
pub const UNWIND_ARRAY_NODES: u32 = 4096;
pub const UNWIND_PROCS: u32 = 16384;
/// Capacity of the wake-dependency map of `topwaits threads`.
pub const DEPS_ENTRIES: u32 = 16384;
/// Processes whose maps the walker asked user space for, least recently
/// asked forgotten first.
pub const ASKED_PROCS: u32 = 4096;
