//! Python frames for the user stack walker: finds the current thread's CPython
//! frame chain (its thread state, found once per thread in the interpreter's
//! thread list and kept), and writes one word per Python frame in place of each
//! native frame of the evaluator (see `topwaits_common::python`).

use aya_ebpf::{
    bindings::bpf_pidns_info,
    helpers::{
        bpf_get_current_task, bpf_get_ns_current_pid_tgid, bpf_loop, bpf_probe_read_kernel,
        generated as gen,
    },
    macros::map,
    maps::{Array, HashMap, LruHashMap},
};
use topwaits_common::python::{
    py_flags, py_word, PyProc, MAX_PY_PROCS, MAX_PY_THREADS, NONE, PY_THREAD_SCAN,
};

use crate::maps::settings;
use crate::uread::{user_word, PAGE};

/// Each Python process's interpreter layout, by tgid (written by user space once
/// it has checked the layout against the running interpreter).
#[map]
pub static PY_PROCS: HashMap<u32, PyProc> = HashMap::with_max_entries(MAX_PY_PROCS, 0);

/// How many times user space has made a Python layout known (it writes the
/// layout first): a walk made before, whose evaluator frames are native ones, is
/// not reused after.
#[map]
pub static PY_EPOCH: Array<u64> = Array::with_max_entries(1, 0);

/// The current [`PY_EPOCH`].
#[inline(always)]
pub fn epoch() -> u64 {
    PY_EPOCH.get(0).copied().unwrap_or(0)
}

/// Each thread's thread state, by thread id, checked before each use.
#[map]
static PY_THREADS: LruHashMap<u32, u64> = LruHashMap::with_max_entries(MAX_PY_THREADS, 0);

#[inline(always)]
fn word(addr: u64) -> u64 {
    user_word(addr).unwrap_or(0)
}

/// What a thread state holds to name the current thread: its thread id (as
/// its own PID namespace numbers it), or (3.10) its `pthread_t`, the thread's
/// fs base.
#[inline(always)]
fn thread_name(p: &PyProc, tid: u32) -> Option<u64> {
    if p.flags & py_flags::BY_PTHREAD == 0 {
        if p.pid_ns_ino == 0 {
            return Some(tid as u64);
        }
        let mut ids = bpf_pidns_info { pid: 0, tgid: 0 };
        // SAFETY: the helper writes the struct it is given, of the size given.
        let r = unsafe {
            bpf_get_ns_current_pid_tgid(
                p.pid_ns_dev,
                p.pid_ns_ino,
                &mut ids,
                core::mem::size_of::<bpf_pidns_info>() as u32,
            )
        };
        return (r == 0).then_some(ids.pid as u64);
    }
    let off = settings().task.fsbase;
    if off == u32::MAX {
        return None;
    }
    // SAFETY: helper calls on the running task, checked by the helper.
    unsafe { bpf_probe_read_kernel((bpf_get_current_task() + off as u64) as *const u64).ok() }
}

/// The thread state of thread `tid`: the one kept, if it is still the thread's,
/// else found in the interpreter's list (the first [`PY_THREAD_SCAN`]).
#[inline(always)]
fn thread_state(p: &PyProc, tid: u32) -> Option<u64> {
    let name = thread_name(p, tid)?;
    // SAFETY: a map value read at once; a stale one is caught by the check below.
    if let Some(t) = PY_THREADS.get_ptr(&tid).map(|t| unsafe { *t }) {
        if t != 0 && word(t + p.tstate_tid as u64) == name {
            return Some(t);
        }
    }
    // A bpf_loop, whose body the verifier checks once (an unrolled scan of the
    // list would multiply the program's verification by its length).
    let mut scan = Scan { p, name, t: word(p.threads_head), found: 0 };
    // SAFETY: the callback reads `scan` through the pointer, for this call only.
    unsafe {
        bpf_loop(PY_THREAD_SCAN, scan_one as *mut core::ffi::c_void, (&raw mut scan).cast(), 0);
    }
    // SAFETY: volatile, as the callback wrote it behind the compiler's back.
    let found = unsafe { core::ptr::read_volatile(&scan.found) };
    if found == 0 {
        return None;
    }
    let _ = PY_THREADS.insert(&tid, &found, 0);
    Some(found)
}

/// A scan of the thread list for the state that names the current thread.
#[repr(C)]
struct Scan {
    p: *const PyProc,
    name: u64,
    t: u64,
    found: u64,
}

/// `bpf_loop` body: looks at one thread state; 1 (stop) at the end or a match.
unsafe extern "C" fn scan_one(_i: u64, ctx: *mut core::ffi::c_void) -> i64 {
    // SAFETY: `ctx` is the `Scan` that `thread_state` passed, on its stack; `p`
    // is a map value alive for the program run.
    let (s, p) = unsafe {
        let s = &mut *ctx.cast::<Scan>();
        let p = &*s.p;
        (s, p)
    };
    if s.t == 0 {
        return 1;
    }
    if word(s.t + p.tstate_tid as u64) == s.name {
        s.found = s.t;
        return 1;
    }
    s.t = word(s.t + p.tstate_next as u64);
    0
}

/// The current thread's innermost Python frame, 0 when it has none.
#[inline(always)]
pub fn current_frame(p: &PyProc, tid: u32) -> u64 {
    let Some(t) = thread_state(p, tid) else { return 0 };
    let f = word(t + p.tstate_frame as u64);
    if p.cframe_frame == NONE || f == 0 {
        f
    } else {
        word(f + p.cframe_frame as u64)
    }
}

/// Bytes of an interpreter frame the walker reads (3.10's frame object reaches
/// 100): every field it uses lies in them, in every version.
pub const FRAME_BYTES: u64 = 128;

/// Bytes of interpreter memory read at once.
const WINDOW: usize = 1024;

/// Interpreter memory read at once: a frame and what lies below it. From 3.11
/// a thread's frames sit one above the other in its data stack, so one read
/// serves several of them.
#[repr(C)]
pub struct FrameWindow {
    base: u64,
    /// Bytes held from `base`; 0: none.
    len: u64,
    bytes: [u8; WINDOW],
}

impl FrameWindow {
    /// Forgets what was read (interpreter memory changes between walks).
    #[inline(always)]
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Makes the window hold `frame`'s first [`FRAME_BYTES`]: the memory below it
    /// as well, down to its page's start (which is mapped, as the frame is).
    /// The frame's offset in the window, or None when it cannot be read.
    #[inline(always)]
    fn hold(&mut self, frame: u64) -> Option<usize> {
        let end = frame.checked_add(FRAME_BYTES)?;
        if frame >= self.base && end <= self.base + self.len {
            return Some((frame - self.base) as usize);
        }
        let page = frame & !(PAGE - 1);
        let mut base = end.saturating_sub(WINDOW as u64);
        if base < page {
            base = page;
        }
        let mut len = end - base;
        if len > WINDOW as u64 {
            len = WINDOW as u64;
        }
        // SAFETY: the helper checks the source and fails cleanly; it writes at
        // most `len` bytes, no more than the window holds, into this map value.
        let ret = unsafe {
            gen::bpf_probe_read_user(
                self.bytes.as_mut_ptr().cast(),
                len as u32,
                base as *const core::ffi::c_void,
            )
        };
        if ret != 0 {
            self.len = 0;
            return None;
        }
        (self.base, self.len) = (base, len);
        Some((frame - base) as usize)
    }

    #[inline(always)]
    fn word(&self, at: usize) -> u64 {
        let o = at & (WINDOW - 8) & !7;
        let b = &self.bytes;
        u64::from_le_bytes([
            b[o],
            b[o + 1],
            b[o + 2],
            b[o + 3],
            b[o + 4],
            b[o + 5],
            b[o + 6],
            b[o + 7],
        ])
    }

    #[inline(always)]
    fn byte(&self, at: usize) -> u8 {
        self.bytes[at & (WINDOW - 1)]
    }
}

/// Whether the native frame at `pc` runs Python frames (it is the evaluator's).
#[inline(always)]
pub fn in_evaluator(p: &PyProc, pc: u64) -> bool {
    (p.eval[0] <= pc && pc < p.eval[1]) || (p.eval[2] <= pc && pc < p.eval[3])
}

/// One step down the Python frame chain from `frame`: the word to write (None
/// for the evaluator call's base shim, which is not a Python frame), the frame
/// below, and whether the evaluator call's frames end here.
/// The frame is read through `win` (one helper call serves several frames, not
/// five per frame); a frame that cannot be read ends the chain.
#[inline(always)]
pub fn step(p: &PyProc, frame: u64, win: &mut FrameWindow) -> (Option<u64>, u64, bool) {
    let Some(at0) = win.hold(frame) else { return (None, 0, true) };
    let at = |off: u16| win.word(at0 + (off as usize & (FRAME_BYTES as usize - 1)));
    let byte_at = |off: u16| win.byte(at0 + (off as usize & (FRAME_BYTES as usize - 1)));
    let below = at(p.frame_previous);
    if p.owner_cstack != NONE && byte_at(p.frame_owner) as u16 == p.owner_cstack {
        return (None, below, true);
    }
    let code = at(p.frame_code);
    let instr = at(p.frame_instr);
    let index_plus_one = if p.flags & py_flags::LASTI != 0 {
        // An int: the index of the last instruction, -1 before the first.
        (instr as u32 as i32 as i64 + 1).max(0) as u64
    } else {
        // Code units are two bytes; one before the first is "not started".
        let base = code + p.code_units as u64;
        if instr + 2 >= base {
            (instr + 2 - base) / 2
        } else {
            0
        }
    };
    let entry = p.flags & py_flags::ONE_FRAME != 0
        || (p.frame_entry != NONE && byte_at(p.frame_entry) != 0);
    (Some(py_word(code, index_plus_one)), below, entry)
}
