//! User stacks walked from the binaries' unwind tables (`--unwind cfi`, the
//! default): from the registers the task entered the kernel with, each frame's
//! caller is found by the rule of its address in the table user space built
//! from the file's `.eh_frame` (see `topwaits_common::walker`), with frame
//! pointers only where a mapping has no table. A stack that cannot be followed to
//! the thread's first frame ends with a `CUT_MARK` frame saying why.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task_btf, bpf_loop, bpf_task_pt_regs},
    macros::map,
    maps::{Array, HashMap, PerCpuArray},
};
use topwaits_common::{
    jit::{jvm_hop, JitProc, JvmHop, JVM_HOPS, KIND_HOTSPOT},
    proc_event,
    python::PyProc,
    walker::{
        cut, file_state, node_key, rule, FileInfo, Node, ProcMaps, CUT_MARK, IN_HASH, MAX_LEVELS,
        MAX_MAPS, NODE_ROWS, REUSE_SLOTS, SIG_BP, SIG_IP, SIG_SP, WALK_DEPTH,
    },
    KernelStack, ProcEvent, KSTACK_DEPTH, STACK_STORED,
};

use crate::jsframes::{JIT_PROCS, JVM_CODE};
use crate::maps::{proc_event, send_proc_event, settings, GROWS, USTACKS};
use crate::pyframes::{self, PY_PROCS};
use crate::taskmap::{LastWalk, TaskState};
use crate::uread::{user_byte, user_u32, user_word, StackWindow};

/// Unwind tree nodes of the files that did not fit into
/// [`UNWIND_NODE_ARRAY`], by `node_key`; sized at load time.
#[map]
pub static UNWIND_NODES: HashMap<u64, Node> = HashMap::with_max_entries(1, GROWS);

/// Unwind tree nodes of the first files, each tree's levels in order from the
/// index its `FileInfo::base` says; sized at load time.
#[map]
pub static UNWIND_NODE_ARRAY: Array<Node> = Array::with_max_entries(1, 0);

/// What is known of each file's table, by file index.
#[map]
pub static UNWIND_FILES: Array<FileInfo> =
    Array::with_max_entries(topwaits_common::walker::MAX_FILES, 0);

/// Each traced process's executable mappings, by tgid; sized at load time.
#[map]
pub static UNWIND_PROCS: HashMap<u32, ProcMaps> = HashMap::with_max_entries(1, GROWS);

/// The registers carried from frame to frame, and how the walk ended.
#[repr(C)]
struct Walk {
    pc: u64,
    sp: u64,
    bp: u64,
    /// Frames written.
    n: u64,
    /// 0 while walking or once whole; else one of `cut`.
    cut: u64,
    /// Why frames were followed by frame pointers where a table was wanted (a
    /// table still loading, or one that did not fit): the stack is marked so even
    /// if it reaches the thread's entry. 0: never.
    soft: u64,
    /// Non-zero once a frame was followed by frame pointers where a table or a
    /// mapping was wanted: in code built without them, the addresses from
    /// there on may be any word of the stack, so they ask user space for
    /// nothing (a process's exit, walked through its libraries' destructors
    /// while their tables were loading, asked for its maps to be read again,
    /// for addresses that were never code).
    guessed: u64,
    /// Non-zero when `pc` is exact (the first frame, or the one a signal
    /// interrupted) rather than a return address.
    exact: u64,
    tgid: u64,
    /// Non-zero when the walk samples where the task's code ran rather than
    /// where it chose to block: it was running (preempted, or sampled on a
    /// CPU), or waits in a page fault. See [`ask_for_table`].
    running: u64,
    /// [`pyframes::epoch`] when the walk began.
    epoch: u64,
    /// The innermost Python frame not yet written (0: none, or not Python).
    py: u64,
    /// Non-zero while the Python frames of an evaluator call are being written,
    /// in place of its native frame.
    py_mode: u64,
    /// Non-zero when the current native frame was written as Python frames: it is
    /// stepped over, not written.
    skip: u64,
    /// Non-zero while every frame past the first came from a known stack slot,
    /// so the walk can be reused (see [`reuse`]).
    reusable: u64,
    /// The stack slot each frame after the first was read from.
    slots: [u64; REUSE_SLOTS],
    /// Interpreter memory read for Python frames.
    pywin: pyframes::FrameWindow,
    /// The process's V8 layout (all zeros: none), copied at the walk's start.
    v8: JitProc,
    /// Rules this CPU looked up lately (kept from walk to walk).
    cache: RuleCache,
    /// Stack read at once.
    stack: StackWindow,
}

/// The stack word at `addr`, through the walk's window.
#[inline(always)]
fn stack_word(w: &mut Walk, addr: u64) -> Option<u64> {
    w.stack.word(addr)
}

/// Entries of a CPU's rule cache.
const CACHED_RULES: usize = 512;

/// Rules looked up lately on one CPU, direct-mapped by (file, address): the same
/// return addresses come back switch after switch, and a hit saves the descent
/// through the file's tree (a hash lookup per level). Only final answers are
/// kept: a file's table never changes once in place, and file indexes are never
/// reused.
#[repr(C)]
struct RuleCache {
    /// [`rule_key`]s; 0 is empty.
    keys: [u64; CACHED_RULES],
    rules: [u32; CACHED_RULES],
}

/// File addresses the cache keeps (47 bits: every ELF file's).
const CACHED_ADDR: u64 = (1 << 47) - 1;

/// The cache key of `addr` in file `file`, never 0.
#[inline(always)]
fn rule_key(file: u32, addr: u64) -> u64 {
    1 << 63 | (file as u64) << 47 | (addr & CACHED_ADDR)
}

/// The cache slot of `key`.
#[inline(always)]
fn rule_slot(key: u64) -> usize {
    ((key ^ key >> 9 ^ key >> 47) as usize) & (CACHED_RULES - 1)
}

/// The rule word of file address `addr` in file `file`, from the cache or the
/// file's tree (then kept when final), or a cut reason.
#[inline(always)]
fn cached_rule(
    cache: &mut RuleCache,
    file: u32,
    addr: u64,
    tgid: u64,
    running: u64,
    ask: bool,
) -> Result<u32, u64> {
    let key = rule_key(file, addr);
    let i = rule_slot(key);
    if addr <= CACHED_ADDR && cache.keys[i] == key {
        return Ok(cache.rules[i]);
    }
    let found = match rule_of(file, addr, tgid, running, ask) {
        // Past every row of a table in place: no rule, for good.
        Err(cut::NO_INFO) => Ok(rule::STOP),
        other => other,
    };
    if let (Ok(word), true) = (found, addr <= CACHED_ADDR) {
        (cache.keys[i], cache.rules[i]) = (key, word);
    }
    found
}

/// The next frame's return address, read at stack slot `slot`, which is recorded
/// for [`reuse`].
#[inline(always)]
fn return_at(w: &mut Walk, slot: u64) -> Option<u64> {
    let pc = stack_word(w, slot)?;
    let i = w.n as usize;
    if (1..=REUSE_SLOTS).contains(&i) {
        w.slots[(i - 1) & (REUSE_SLOTS - 1)] = slot;
    } else {
        w.reusable = 0;
    }
    Some(pc)
}

#[map]
static SCRATCH_WALK: PerCpuArray<Walk> = PerCpuArray::with_max_entries(1, 0);

/// What the loop body reaches, on the BPF stack (`bpf_loop` passes one pointer).
#[repr(C)]
struct Ctx {
    walk: *mut Walk,
    maps: *mut ProcMaps,
    frames: *mut KernelStack,
    /// The process's Python layout, or null.
    py: *const PyProc,
}

/// Indexes of x86-64's registers in `struct pt_regs`.
pub const REGS_BP: usize = 4;
pub const REGS_R10: usize = 7;
pub const REGS_AX: usize = 10;
pub const REGS_DX: usize = 12;
pub const REGS_SI: usize = 13;
pub const REGS_DI: usize = 14;
pub const REGS_ORIG_AX: usize = 15;
pub const REGS_IP: usize = 16;
pub const REGS_CS: usize = 17;
pub const REGS_SP: usize = 19;
/// The six bytes before a return address into CPython's perf trampoline, read
/// as a little-endian word's low 48 bits: `48 83 ec 08` (sub $8,%rsp) and `ff d1`
/// (call *%rcx).
const PERF_TRAMPOLINE: u64 = 0xd1ff_08ec_8348;

/// The code segment of 64-bit user mode (`__USER_CS`).
pub const USER_CS: u64 = 0x33;

/// The user registers a walk starts from: (ip, sp, bp).
pub type Regs = (u64, u64, u64);

/// The registers the current task entered the kernel with, if it came from 64-bit
/// user mode. x86-64 only: elsewhere none, and stacks are walked by frame
/// pointers. Read once per stack, for [`reuse`], [`walk`] and [`remember`].
#[inline(always)]
pub fn user_regs() -> Option<Regs> {
    let regs = PtRegs::current()?;
    if regs.word(REGS_CS) != USER_CS {
        return None;
    }
    Some((regs.word(REGS_IP), regs.word(REGS_SP), regs.word(REGS_BP)))
}

/// `-ENOSYS`, which the syscall entry leaves in `ax` until the call returns.
const IN_SYSCALL_AX: u64 = -38i64 as u64;

/// Whether the current task entered the kernel by a syscall (not by a page
/// fault or another exception, whose error code sits where a syscall's number
/// would, so that only `ax` tells them apart). True where it cannot be told.
#[inline(always)]
pub fn in_syscall() -> bool {
    PtRegs::current().is_none_or(|regs| regs.word(REGS_AX) == IN_SYSCALL_AX)
}

/// The registers the current task entered the kernel with (`struct pt_regs` at
/// the top of its kernel stack), as the kernel's BTF types them: each is one load
/// of the program, where a `bpf_probe_read_kernel` call cost tens of nanoseconds
/// (a switch read them seven times: the walk, the call site of the kernel stack,
/// the label). x86-64 only, and only with the kernel's BTF.
pub struct PtRegs(*const u64);

impl PtRegs {
    #[inline(always)]
    pub fn current() -> Option<PtRegs> {
        if !cfg!(bpf_target_arch = "x86_64") || settings().task_storage == 0 {
            return None;
        }
        // SAFETY: helper calls; the task pointer comes from the kernel, typed by BTF.
        let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as *const u64;
        (!regs.is_null()).then_some(PtRegs(regs))
    }

    /// Another task's registers, from `bpf_task_pt_regs` (the task iterator).
    #[inline(always)]
    pub fn at(regs: *const u64) -> PtRegs {
        PtRegs(regs)
    }

    /// Register `i` (its index in `struct pt_regs`, one of the `REGS_` constants).
    #[inline(always)]
    pub fn word(&self, i: usize) -> u64 {
        // SAFETY: a load within `struct pt_regs`, which the verifier checks against
        // the kernel's BTF; a fault reads as 0.
        unsafe { core::ptr::read_volatile(self.0.add(i)) }
    }
}

/// The index of the last of 64 sorted words whose value (shifted right by
/// `shift`) is at most `x`, found in six steps; 0 when even the first is above.
#[inline(always)]
fn last_at_most(words: &[u64; 64], x: u64, shift: u32) -> usize {
    let mut lo = 0usize;
    let mut w = 32usize;
    while w > 0 {
        let i = (lo + w) & 63;
        if words[i] >> shift <= x {
            lo = i;
        }
        w >>= 1;
    }
    lo
}

/// The mapping of `pc` among a process's sorted mappings.
#[inline(always)]
fn mapping_of(maps: &ProcMaps, pc: u64) -> Option<(u64, u32)> {
    let mut lo = 0usize;
    let mut w = MAX_MAPS / 2;
    while w > 0 {
        let i = (lo + w) & (MAX_MAPS - 1);
        if maps.maps[i].start <= pc {
            lo = i;
        }
        w >>= 1;
    }
    let m = &maps.maps[lo & (MAX_MAPS - 1)];
    (m.start <= pc && pc < m.end).then_some((m.bias, m.file))
}

/// The rule word of file address `addr` in file `file`'s tree, or a cut reason.
/// A file whose table was never asked for is asked for when `ask`.
#[inline(always)]
fn rule_of(file: u32, addr: u64, tgid: u64, running: u64, ask: bool) -> Result<u32, u64> {
    // Read in place: a copy on the stack would cost 24 of its 512 bytes.
    let Some(info) = UNWIND_FILES.get(file) else {
        return Err(cut::LOADING);
    };
    match info.state {
        file_state::READY => {}
        file_state::LOADING => return Err(cut::LOADING),
        file_state::UNBUILT => {
            if ask {
                ask_for_table(file, tgid as u32, running);
            }
            return Err(cut::LOADING);
        }
        file_state::PAUSED => {
            if ask && running == 0 {
                ask_for_table(file, tgid as u32, 0);
            }
            return Err(cut::LOADING);
        }
        file_state::NO_TABLE => return Ok(rule::STOP | 1 << 31),
        _ => return Err(cut::FULL),
    }
    let mut level = info.levels;
    let mut index = 0u32;
    for _ in 0..MAX_LEVELS {
        if level == 0 {
            break;
        }
        level -= 1;
        let base = info.base[(level & (MAX_LEVELS - 1)) as usize];
        let node = if base != IN_HASH {
            UNWIND_NODE_ARRAY.get(base.wrapping_add(index))
        } else {
            // SAFETY: a value of a map lookup; nodes are written once, before
            // the file is marked ready, and never changed.
            UNWIND_NODES.get_ptr(&node_key(file, level, index)).map(|p| unsafe { &*p })
        };
        let Some(node) = node else {
            return Err(cut::NO_INFO);
        };
        let i = last_at_most(node, addr, 32);
        let entry = node[i];
        if entry >> 32 > addr {
            return Err(cut::NO_INFO);
        }
        if level == 0 {
            return Ok(entry as u32);
        }
        index = index * NODE_ROWS as u32 + i as u32;
    }
    Err(cut::NO_INFO)
}

/// Asks user space for file `file`'s table, met in process `tgid`, marking it
/// loading first so that the walks meeting it meanwhile ask no more (two CPUs
/// racing ask twice, which user space takes once). `running`: met in the stack
/// of a task that was running or faulting, not blocking in a syscall, which
/// user space counts before it builds (code that only ran once, such as a
/// library's constructor or destructor, would otherwise have its table built
/// for nothing).
#[inline(always)]
fn ask_for_table(file: u32, tgid: u32, running: u64) {
    if let Some(info) = UNWIND_FILES.get_ptr_mut(file) {
        // SAFETY: a map value; user space writes it only to install the table.
        unsafe { (*info).state = file_state::LOADING };
    }
    let kind = if running != 0 { proc_event::TABLE_RUNNING } else { proc_event::TABLE };
    send_proc_event(&ProcEvent { tgid, kind, parent: file, maps_version: 0 });
}

/// One frame-pointer step: (pc, sp, bp) of the caller, if the frame pointer leads
/// somewhere readable.
#[inline(always)]
fn fp_step(w: &mut Walk) -> Option<(u64, u64, u64)> {
    let bp = w.bp;
    if bp == 0 {
        return None;
    }
    let caller_bp = stack_word(w, bp)?;
    Some((return_at(w, bp + 8)?, bp + 16, caller_bp))
}

/// Steps to the caller by frame pointer where no table serves; a walk that
/// cannot go on (or meets a zero return address) is cut for `why`. The loop's
/// verdict: 0 to go on, 1 to stop.
#[inline(always)]
fn by_frame_pointer(w: &mut Walk, why: u64) -> i64 {
    match fp_step(w) {
        Some((pc, sp, bp)) if pc != 0 => {
            (w.pc, w.sp, w.bp) = (pc, sp, bp);
            0
        }
        _ => {
            w.cut = why;
            1
        }
    }
}

/// One step through the Python frames of the evaluator call at hand, or the
/// switch into them at an evaluator's frame (they come from the interpreter's
/// memory, not the stack). True when the step is done.
#[inline(always)]
fn python_step(w: &mut Walk, frames: &mut KernelStack, n: usize, py: &PyProc) -> bool {
    if w.py_mode != 0 {
        let (word, below, last) = pyframes::step(py, w.py, &mut w.pywin);
        if let Some(word) = word {
            frames[n] = word;
            w.n = n as u64 + 1;
        }
        w.py = below;
        if last || below == 0 {
            w.py_mode = 0;
        }
        return true;
    }
    if w.skip == 0 && w.py != 0 && pyframes::in_evaluator(py, w.pc) {
        w.reusable = 0;
        w.py_mode = 1;
        w.skip = 1;
        return true;
    }
    false
}

/// A pc in no mapping the walker knows: user space is asked for the maps
/// (once), CPython's perf trampoline is stepped over, else frame pointers.
/// The loop's verdict.
#[inline(always)]
fn unmapped(w: &mut Walk, maps: &mut ProcMaps, at: u64) -> i64 {
    if maps.missed == 0 && w.guessed == 0 {
        maps.missed = 1;
        proc_event(w.tgid as u32, proc_event::MAPS);
    }
    // CPython's perf trampoline (`-X perf`, 3.12 on): `sub $8,%rsp; call
    // *%rcx` just before the return address, and no frame pointer.
    if at != w.pc && user_word(w.pc - 6).is_some_and(|b| b & 0xffff_ffff_ffff == PERF_TRAMPOLINE) {
        return match return_at(w, w.sp + 8) {
            Some(pc) if pc != 0 => {
                (w.pc, w.sp) = (pc, w.sp + 16);
                0
            }
            _ => {
                w.cut = cut::UNREADABLE;
                1
            }
        };
    }
    if w.v8.kind == KIND_HOTSPOT && !w.v8.in_builtins(at) && compiled_step(w, at) {
        return 0;
    }
    w.guessed = 1;
    by_frame_pointer(w, cut::UNMAPPED)
}

/// A segment map's walk back to its block's first segment (`Hops::seg`),
/// shared with [`hop`].
#[repr(C)]
struct Hops {
    map: u64,
    seg: u64,
    /// 0 while walking, 1 at the block's start, 2 where there is none.
    end: u64,
}

/// `bpf_loop` body: one step back through a segment map. Its own loop keeps
/// the walker's loop body, which the verifier walks through at each call
/// site, to one step's instructions.
unsafe extern "C" fn hop(_i: u64, ctx: *mut core::ffi::c_void) -> i64 {
    // SAFETY: `ctx` is the `Hops` that `block_start` passed, on its stack.
    let h = unsafe { &mut *ctx.cast::<Hops>() };
    match jvm_hop(user_byte(h.map + h.seg), h.seg) {
        JvmHop::Start => h.end = 1,
        JvmHop::Back(earlier) => {
            h.seg = earlier;
            return 0;
        }
        JvmHop::Nothing => h.end = 2,
    }
    1
}

/// The first segment of the block holding segment `seg` of segment map `map`.
#[inline(always)]
fn block_start(map: u64, seg: u64) -> Option<u64> {
    let mut h = Hops { map, seg, end: 0 };
    // SAFETY: the callback writes `h` through the pointer, for this call only;
    // it is read back as the callback left it.
    let (end, seg) = unsafe {
        bpf_loop(JVM_HOPS as u32, hop as *mut core::ffi::c_void, (&raw mut h).cast(), 0);
        (core::ptr::read_volatile(&raw const h.end), core::ptr::read_volatile(&raw const h.seg))
    };
    (end == 1).then_some(seg)
}

/// Steps over a JVM's compiled frame (or runtime stub) at `at` by the frame
/// size its code blob gives: the return address and the saved frame pointer
/// are the top two words of the frame. False where the code cache gives no
/// size (the interpreter, the call stub), which keep frame pointers.
#[inline(always)]
fn compiled_step(w: &mut Walk, at: u64) -> bool {
    let Some(code) = JVM_CODE.get_ptr(&(w.tgid as u32)) else { return false };
    // SAFETY: a map value, alive for the program run.
    let Some(words) = unsafe { &*code }.frame_words(at, block_start, user_u32) else {
        return false;
    };
    let cfa = w.sp + 8 * words;
    match (return_at(w, cfa - 8), stack_word(w, cfa - 16)) {
        (Some(pc), Some(bp)) if pc != 0 => {
            (w.pc, w.sp, w.bp) = (pc, cfa, bp);
            true
        }
        _ => false,
    }
}

/// The caller's (pc, sp, bp) by a table's rule `word` for the frame at file
/// address `addr`; Err with the loop's verdict where the walk ends.
#[inline(always)]
fn by_rule(w: &mut Walk, word: u32, addr: u64) -> Result<(u64, u64, u64), i64> {
    let next = match word & 15 {
        rule::CFA_SP | rule::CFA_BP => {
            let base = if word & 15 == rule::CFA_SP { w.sp } else { w.bp };
            let cfa = base + ((word >> 8) & 0xffff) as u64;
            let bp_words = (word >> 24) as u8 as i8;
            let bp = if bp_words == 0 {
                Some(w.bp)
            } else {
                stack_word(w, cfa.wrapping_add_signed(bp_words as i64 * 8))
            };
            match (return_at(w, cfa - 8), bp) {
                (Some(pc), Some(bp)) => (pc, cfa, bp),
                _ => {
                    w.cut = cut::UNREADABLE;
                    return Err(1);
                }
            }
        }
        rule::PLT => {
            let cfa = w.sp + if (addr & 15) as u32 >= (word >> 4) & 15 { 16 } else { 8 };
            match return_at(w, cfa - 8) {
                Some(pc) => (pc, cfa, w.bp),
                None => {
                    w.cut = cut::UNREADABLE;
                    return Err(1);
                }
            }
        }
        rule::SIGNAL => {
            match (user_word(w.sp + SIG_IP), user_word(w.sp + SIG_SP), user_word(w.sp + SIG_BP)) {
                (Some(pc), Some(sp), Some(bp)) => {
                    // The interrupted registers are not a stack slot's: never reused.
                    w.exact = 1;
                    w.reusable = 0;
                    (pc, sp, bp)
                }
                _ => {
                    w.cut = cut::UNREADABLE;
                    return Err(1);
                }
            }
        }
        rule::END => return Err(1),
        // STOP, in a file with no table: frame pointers are all there is.
        _ if word & 1 << 31 != 0 => match fp_step(w) {
            Some(next) => next,
            None => {
                w.cut = cut::NO_INFO;
                return Err(1);
            }
        },
        _ => {
            w.cut = cut::NO_INFO;
            return Err(1);
        }
    };
    Ok(next)
}

/// `bpf_loop` body: writes the current frame and steps to its caller. Returns 1
/// (stop) once the stack is whole or cut.
unsafe extern "C" fn step(_i: u64, ctx: *mut core::ffi::c_void) -> i64 {
    // SAFETY: `ctx` is the `Ctx` that `walk` passed, on its stack; its pointers
    // are map values, alive for the whole program run.
    let (w, maps, frames, py) = unsafe {
        let c = &*ctx.cast::<Ctx>();
        (&mut *c.walk, &mut *c.maps, &mut *c.frames, c.py.as_ref())
    };
    let n = w.n as usize;
    if n >= WALK_DEPTH as usize || n >= KSTACK_DEPTH {
        w.cut = cut::DEPTH;
        return 1;
    }
    if let Some(py) = py {
        if python_step(w, frames, n, py) {
            return 0;
        }
    }
    // A JavaScript function's frame (never the first: its frame pointer may
    // not be set up yet) is looked for in V8's code, in builtins or in no file.
    let js = w.v8.present() && w.skip == 0 && w.exact == 0;
    if w.skip == 0 {
        frames[n] = w.pc;
        w.n = n as u64 + 1;
    }
    w.skip = 0;
    // A return address is the instruction after the call: the call's own rule is
    // one byte back.
    let at = w.pc - (w.exact == 0) as u64;
    w.exact = 0;
    let mapping = mapping_of(maps, at);
    if js && w.v8.may_run_function(at, mapping.is_some()) {
        js_frame(w, frames, n);
    }
    let Some((bias, file)) = mapping else {
        return unmapped(w, maps, at);
    };
    let addr = at.wrapping_sub(bias);
    let word = match cached_rule(&mut w.cache, file, addr, w.tgid, w.running, w.guessed == 0) {
        Ok(word) => word,
        // No table yet: frame pointers, for what they give, and the stack marked.
        Err(why @ (cut::LOADING | cut::FULL)) => {
            w.soft = why;
            w.guessed = 1;
            return by_frame_pointer(w, why);
        }
        Err(why) => {
            w.cut = why;
            return 1;
        }
    };
    let (pc, sp, bp) = match by_rule(w, word, addr) {
        Ok(next) => next,
        Err(verdict) => return verdict,
    };
    if pc == 0 {
        // The outermost frame by convention: nothing called it.
        return 1;
    }
    (w.pc, w.sp, w.bp) = (pc, sp, bp);
    0
}

/// Writes frame `n` as the JavaScript function it runs, where its slots name
/// one; such a walk is not reused (the interpreter's frames share their
/// return addresses, whatever function they run).
#[inline(always)]
fn js_frame(w: &mut Walk, frames: &mut KernelStack, n: usize) {
    // Plain reads, not the walk's stack window: their few branches keep the
    // verifier's work on the walker's loop body small.
    if let Some(word) = w.v8.frame_word(w.bp, user_word) {
        frames[n] = word;
        w.reusable = 0;
    }
}

/// What [`walk`] did.
pub enum Walked {
    /// The task did not come from 64-bit user mode: frame pointers, as before.
    NotUser,
    /// User space has not yet told the walker where the process maps its code.
    NoMaps,
    /// This many frames written, a cut mark included.
    Frames(usize),
}

/// Walks the current task's user stack, from `regs` (None: it did not come from
/// user mode), into `frames`.
#[inline(always)]
pub fn walk(tgid: u32, regs: Option<Regs>, frames: *mut KernelStack, running: bool) -> Walked {
    let Some((ip, sp, bp)) = regs else { return Walked::NotUser };
    let Some(maps) = UNWIND_PROCS.get_ptr_mut(&tgid) else { return Walked::NoMaps };
    let Some(w) = SCRATCH_WALK.get_ptr_mut(0) else { return Walked::NotUser };
    // SAFETY: per-CPU scratch, used by this program run alone.
    unsafe {
        let w = &mut *w;
        (w.pc, w.sp, w.bp, w.n, w.cut, w.soft, w.guessed, w.exact, w.tgid) =
            (ip, sp, bp, 0, 0, 0, 0, 1, tgid as u64);
        (w.py, w.py_mode, w.skip, w.reusable, w.running) = (0, 0, 0, 1, running as u64);
        w.stack.clear();
        w.pywin.clear();
        w.epoch = pyframes::epoch();
    }
    let py = PY_PROCS.get_ptr(&tgid).unwrap_or(core::ptr::null());
    // SAFETY: a map value, alive for the program run; the scratch as above.
    if let Some(p) = unsafe { py.as_ref() } {
        unsafe { (*w).py = pyframes::current_frame(p, bpf_get_current_pid_tgid() as u32) };
    }
    // SAFETY: per-CPU scratch, as above; the layout is copied, so that the
    // walk's steps branch on its values rather than on a pointer.
    unsafe {
        (*w).v8 = match JIT_PROCS.get_ptr(&tgid) {
            Some(v8) => *v8,
            None => JitProc::default(),
        };
    }
    let mut ctx = Ctx { walk: w, maps, frames, py };
    // SAFETY: the callback reads `ctx` through the pointer, for this call only.
    unsafe {
        // Python frames and stepped-over evaluator frames take turns of their own.
        bpf_loop(2 * WALK_DEPTH + 2, step as *mut core::ffi::c_void, (&raw mut ctx).cast(), 0);
        core::ptr::write_volatile(
            &raw mut ctx,
            Ctx {
                walk: core::ptr::null_mut(),
                maps: core::ptr::null_mut(),
                frames: core::ptr::null_mut(),
                py: core::ptr::null(),
            },
        );
    }
    // SAFETY: as above; volatile, as the callback wrote it behind the compiler's back.
    let (n, why) = unsafe {
        let cut = core::ptr::read_volatile(&(*w).cut);
        (
            core::ptr::read_volatile(&(*w).n) as usize,
            if cut != 0 { cut } else { core::ptr::read_volatile(&(*w).soft) },
        )
    };
    let n = if why == 0 { n } else { mark(frames, n, why) };
    // Words past the last frame are left from earlier walks: user space reads up
    // to the first zero.
    if n < KSTACK_DEPTH {
        // SAFETY: the per-CPU buffer the caller passed; n is in bounds.
        unsafe { (*frames)[n] = 0 };
    }
    Walked::Frames(n)
}

/// Gives a process just forked its parent's mappings and Python and V8 layouts, which
/// it shares until it execs: its first stacks are walked whole, before user space
/// has read the fork's event (sent without waking it, see `proc_event::BATCH_NS`).
/// What user space set already stays; a full map leaves the child to user space.
/// Returns the version of the mappings copied, so that user space need not
/// write them again: 0 when none were, or when the walker had found them
/// lacking (the copy would keep that mark, and never ask for a read).
#[inline(always)]
pub fn inherit(parent: u32, child: u32) -> u32 {
    const NOEXIST: u64 = aya_ebpf::bindings::BPF_NOEXIST as u64;
    let mut version = 0;
    if let Some(maps) = UNWIND_PROCS.get_ptr(&parent) {
        // SAFETY: a map value, alive for the program run; the helper copies it.
        // Read before the copy: an update of the parent's in between makes the
        // copy newer than the version said, which user space then writes over.
        let (copied, missed) = unsafe { ((*maps).version, (*maps).missed) };
        if UNWIND_PROCS.insert(&child, unsafe { &*maps }, NOEXIST).is_ok() && missed == 0 {
            version = copied;
        }
    }
    if let Some(py) = PY_PROCS.get_ptr(&parent) {
        // SAFETY: as above.
        let _ = PY_PROCS.insert(&child, unsafe { &*py }, NOEXIST);
    }
    if let Some(v8) = JIT_PROCS.get_ptr(&parent) {
        // SAFETY: as above.
        let _ = JIT_PROCS.insert(&child, unsafe { &*v8 }, NOEXIST);
    }
    version
}

/// Appends the cut mark `why` after `n` frames; the new length.
#[inline(always)]
pub fn mark(frames: *mut KernelStack, n: usize, why: u64) -> usize {
    let n = n.min(KSTACK_DEPTH - 1);
    // SAFETY: the per-CPU buffer the caller passed.
    unsafe { (*frames)[n] = CUT_MARK | why };
    n + 1
}

/// The current task's user stack reference from its last walk, if it entered the
/// kernel with the same registers, every return address is still in its slot
/// (and the stack is still kept), and no Python layout became known since.
#[inline(always)]
pub fn reuse((ip, sp, bp): Regs, state: *mut TaskState) -> Option<u64> {
    // SAFETY: the task's own storage, used by this program run alone.
    let last = unsafe { &(*state).walk };
    if last.n == 0
        || last.ip != ip
        || last.sp != sp
        || last.bp != bp
        || last.epoch != pyframes::epoch()
    {
        return None;
    }
    let frames = USTACKS.get_ptr(&last.stack)?;
    let w = SCRATCH_WALK.get_ptr_mut(0)?;
    let slots = (last.n - 1).min(REUSE_SLOTS as u64);
    // SAFETY: per-CPU scratch, used by this program run alone. The window reads
    // no further than the last slot.
    let window = unsafe {
        (*w).stack
            .clear_up_to(last.slots[(slots as usize).wrapping_sub(1) & (REUSE_SLOTS - 1)] + 8);
        &raw mut (*w).stack
    };
    // Frame i + 1 was read at slot i: checked in a bpf_loop, whose body the
    // verifier checks once, through a window that reads several slots at once.
    let mut check = Check { last, frames, window, ok: 1 };
    // SAFETY: the callback reads `check` through the pointer, for this call only.
    unsafe {
        bpf_loop(slots as u32, check_slot as *mut core::ffi::c_void, (&raw mut check).cast(), 0);
    }
    // SAFETY: volatile, as the callback wrote it behind the compiler's back.
    (unsafe { core::ptr::read_volatile(&check.ok) } == 1).then_some(last.stack)
}

/// The check of a last walk's slots against its kept frames.
#[repr(C)]
struct Check {
    last: *const LastWalk,
    frames: *const KernelStack,
    window: *mut StackWindow,
    ok: u64,
}

/// `bpf_loop` body: compares slot `i` with frame `i + 1`; 1 (stop) on a change.
unsafe extern "C" fn check_slot(i: u64, ctx: *mut core::ffi::c_void) -> i64 {
    // SAFETY: `ctx` is the `Check` that `reuse` passed, on its stack; its
    // pointers are map values alive for the program run.
    let (c, last, frames, window) = unsafe {
        let c = &mut *ctx.cast::<Check>();
        let (last, frames, window) = (&*c.last, &*c.frames, &mut *c.window);
        (c, last, frames, window)
    };
    let i = i as usize & (REUSE_SLOTS - 1);
    if window.word(last.slots[i]) != Some(frames[i + 1]) {
        c.ok = 0;
        return 1;
    }
    0
}

/// Keeps the walk just done from `regs` (its frames kept as `stack`) for
/// [`reuse`], when it is whole, clean and shallow enough.
#[inline(always)]
pub fn remember(stack: u64, n: usize, (ip, sp, bp): Regs, state: *mut TaskState) {
    let Some(w) = SCRATCH_WALK.get_ptr(0) else { return };
    // SAFETY: per-CPU scratch, used by this program run alone.
    let w = unsafe { &*w };
    if w.reusable == 0
        || w.cut != 0
        || w.soft != 0
        || n == 0
        || n > REUSE_SLOTS + 1
        || stack & STACK_STORED == 0
    {
        return;
    }
    // SAFETY: the task's own storage, used by this program run alone.
    let last = unsafe { &mut (*state).walk };
    (last.ip, last.sp, last.bp, last.stack, last.n, last.epoch) =
        (ip, sp, bp, stack, n as u64, w.epoch);
    last.slots = w.slots;
}
