//! The in-kernel user stack walker's tables: where each process maps its code
//! ([`ProcMaps`]), each file's unwind rows as a tree of fixed-size nodes
//! ([`NODE_ROWS`] rows each, in [`crate::names::UNWIND_NODE_ARRAY`] or, once that
//! is full, [`crate::names::UNWIND_NODES`]), the encoding of a
//! row, and the mark a stack cut short carries as its last frame.

/// Rows (or child keys) in one node of a file's unwind tree.
pub const NODE_ROWS: usize = 64;

/// One node: rows sorted by address, `addr << 32 | rule`, padded with
/// [`NODE_PAD`]. In a leaf the low half is the rule; above the leaves, an entry is
/// the first address of a child node (child `index * NODE_ROWS + i`).
pub type Node = [u64; NODE_ROWS];

/// What pads a node after its last entry: never at or below any address.
pub const NODE_PAD: u64 = u64::MAX;

/// Most levels of a file's tree (64^4 rows is more than any file has).
pub const MAX_LEVELS: u32 = 4;

/// The key of node `index` at `level` (0: the leaves) of file `file`.
#[inline(always)]
pub const fn node_key(file: u32, level: u32, index: u32) -> u64 {
    (file as u64) << 32 | (level as u64) << 28 | (index as u64 & 0x0fff_ffff)
}

/// Kinds of rule, the low 4 bits of a row's rule word.
pub mod rule {
    /// Nothing an unwinder can follow: the walk stops, cut.
    pub const STOP: u32 = 0;
    /// CFA = sp + offset.
    pub const CFA_SP: u32 = 1;
    /// CFA = bp + offset.
    pub const CFA_BP: u32 = 2;
    /// A PLT stub: CFA = sp + 8, plus 8 once `pc & 15` reaches the threshold.
    pub const PLT: u32 = 3;
    /// The thread's first frame: the stack is whole.
    pub const END: u32 = 4;
    /// A signal trampoline (`__restore_rt`): the interrupted registers are in the
    /// signal frame at sp.
    pub const SIGNAL: u32 = 5;
}

/// A rule word: kind in bits 0-3, the PLT threshold in bits 4-7, the CFA offset
/// (bytes, unsigned) in bits 8-23, and where the caller's frame pointer is saved
/// (in words from the CFA, signed; 0: still in the register) in bits 24-31.
#[inline(always)]
pub const fn rule_word(kind: u32, threshold: u32, cfa_offset: u32, bp_words: i8) -> u32 {
    kind | (threshold & 15) << 4 | (cfa_offset & 0xffff) << 8 | (bp_words as u8 as u32) << 24
}

/// One executable file mapping of a process: `pc - bias` is the file's virtual
/// address of `pc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecMap {
    pub start: u64,
    pub end: u64,
    pub bias: u64,
    /// Index in [`crate::names::UNWIND_FILES`].
    pub file: u32,
    pub pad: u32,
}

/// Most executable mappings kept per process.
pub const MAX_MAPS: usize = 64;

/// A process's executable mappings, sorted by start, in
/// [`crate::names::UNWIND_PROCS`] under its tgid. Entries past `len` have
/// `start == u64::MAX`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcMaps {
    pub len: u32,
    /// Set by the walker when it met code in no mapping (a library loaded since,
    /// with `dlopen`): user space reads the process's maps again and clears it.
    pub missed: u32,
    /// Which reading of the mappings this is (never 0), so that user space
    /// knows whether the fork hook's copy for a child is the latest.
    pub version: u32,
    pub pad: u32,
    pub maps: [ExecMap; MAX_MAPS],
}

impl ProcMaps {
    pub const EMPTY: ProcMaps = ProcMaps {
        len: 0,
        missed: 0,
        version: 0,
        pad: 0,
        maps: [ExecMap { start: u64::MAX, end: 0, bias: 0, file: 0, pad: 0 }; MAX_MAPS],
    };
}

/// Most files with unwind tables.
pub const MAX_FILES: u32 = 4096;

/// What is known of a file's table, in [`crate::names::UNWIND_FILES`] at its index.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileInfo {
    /// One of [`file_state`].
    pub state: u32,
    /// Levels of its tree (1..=[`MAX_LEVELS`]) when ready.
    pub levels: u32,
    /// When ready: the index in the node array of each level's first node
    /// (a level's nodes follow it in order), or [`IN_HASH`] throughout for
    /// a tree kept in the node hash map under [`node_key`].
    pub base: [u32; MAX_LEVELS as usize],
}

/// [`FileInfo::base`] of a tree whose nodes are in the node hash map.
pub const IN_HASH: u32 = u32::MAX;

impl FileInfo {
    /// A file marked `state` (one of [`file_state`]), its table not in place.
    pub const fn marked(state: u32) -> Self {
        FileInfo { state, levels: 0, base: [IN_HASH; MAX_LEVELS as usize] }
    }

    /// A file whose tree of `levels` is in place, at `base` (see
    /// [`FileInfo::base`]).
    pub const fn ready(levels: u32, base: [u32; MAX_LEVELS as usize]) -> Self {
        FileInfo { state: file_state::READY, levels, base }
    }
}

/// Values of [`FileInfo::state`].
pub mod file_state {
    /// Its table is being built: a stack through it is cut, marked as loading.
    pub const LOADING: u32 = 0;
    /// Its table is in place.
    pub const READY: u32 = 1;
    /// It has no unwind information: frames through it follow frame pointers.
    pub const NO_TABLE: u32 = 2;
    /// Its table did not fit into the kernel's maps: a stack through it is cut.
    pub const FULL: u32 = 3;
    /// Known, its table not asked for: the first walk that meets it asks user
    /// space for it (marking it loading), so that only the files whose code
    /// stacks pass through get tables.
    pub const UNBUILT: u32 = 4;
    /// Known, unbuilt, and met by several walks of running tasks in a burst:
    /// such walks pass it as loading without asking again, while a walk of a
    /// blocking task asks for it as for an unbuilt one.
    pub const PAUSED: u32 = 5;
}

/// The last frame of a user stack cut short: this bit and one of [`cut`]. User
/// addresses never have bit 62 set.
pub const CUT_MARK: u64 = 1 << 62;

/// Whether a user stack's word is a cut mark rather than an address (kernel
/// addresses have bit 63 set as well; user addresses neither bit).
#[inline(always)]
pub const fn is_cut_mark(word: u64) -> bool {
    word & (CUT_MARK | 1 << 63) == CUT_MARK
}

/// Why a user stack was cut short.
pub mod cut {
    /// A table it needed was still being built.
    pub const LOADING: u64 = 1;
    /// Code with no unwind information (and no usable frame pointer there).
    pub const NO_INFO: u64 = 2;
    /// Stack memory that could not be read.
    pub const UNREADABLE: u64 = 3;
    /// The depth limit.
    pub const DEPTH: u64 = 4;
    /// Code outside every mapping known (JIT, or mapped since) where frame
    /// pointers did not lead on.
    pub const UNMAPPED: u64 = 5;
    /// More tables than the kernel maps hold (counted).
    pub const FULL: u64 = 6;
    /// A rule that needed the frame pointer, which a walk from `/proc` does not
    /// know until a frame restores it (user space only).
    pub const BP_UNKNOWN: u64 = 7;
    /// The frames below were found by scanning the stack for return addresses
    /// in code with no unwind table: a guess (user space only).
    pub const GUESSED: u64 = 8;
    /// Taken by frame pointers in the trace's first moments, while the walker
    /// itself was being loaded.
    pub const STARTING: u64 = 9;
    /// The thread ran while its stack was read from `/proc`: the words past
    /// its pc may be of another moment, so they are left out (user space only).
    pub const RAN: u64 = 10;
}

/// Most frames the walker follows.
pub const WALK_DEPTH: u32 = 126;

/// Deepest stack a task keeps for reuse: while it enters the kernel again with the
/// same registers and the return addresses at these stack slots are unchanged,
/// its last walk stands without walking again.
pub const REUSE_SLOTS: usize = 32;

/// Where a signal trampoline finds the interrupted bp, sp and ip (x86-64): in the
/// `ucontext` at sp, whose `uc_mcontext` (`struct sigcontext`) is 40 bytes in.
pub const SIG_BP: u64 = 40 + 10 * 8;
pub const SIG_SP: u64 = 40 + 15 * 8;
pub const SIG_IP: u64 = 40 + 16 * 8;
