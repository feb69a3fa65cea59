//! The Python frames of a thread blocked right now (a wait that began before
//! the trace, or `topwaits blocked`), read from the interpreter's memory as the
//! in-kernel walker reads them (`topwaits-ebpf/src/pyframes.rs`): one word per
//! frame, grouped by the evaluator call that runs them, innermost first, to
//! stand in for the evaluator's native frames of a walk in user space.

use std::collections::HashMap;

use topwaits_common::python::{py_flags, py_word, PyProc, NONE, PY_THREAD_SCAN};

use super::{check_live, interpreter_of, probe::Probe, walker_for};
use crate::stacks::frame_scan::Memory;
use crate::sys::procfs;

/// Most Python frames read for one thread.
const MAX_FRAMES: usize = 256;

/// Each process's interpreter, found and checked once (None: no Python there,
/// or one whose frames cannot be read).
#[derive(Default)]
pub struct Interpreters {
    files: HashMap<(u64, u64), Option<super::probe::PyFile>>,
    procs: HashMap<u32, Option<PyProc>>,
}

impl Interpreters {
    /// Process `tgid`'s interpreter, as the walker would be given it.
    pub fn of(&mut self, tgid: u32) -> Option<PyProc> {
        if let Some(p) = self.procs.get(&tgid) {
            return *p;
        }
        let maps: Vec<procfs::Mapping> = procfs::maps_of(tgid);
        let found =
            interpreter_of(&mut self.files, tgid, &maps).and_then(|(file, bias)| match check_live(
                tgid, &file, bias,
            ) {
                // A 3.10 thread state names its thread by pthread_t, which a
                // thread's registers in /proc do not show.
                Probe::Ready(i) if i.layout.walker.flags & py_flags::BY_PTHREAD == 0 => {
                    Some(walker_for(tgid, &i))
                }
                _ => None,
            });
        self.procs.insert(tgid, found);
        found
    }
}

/// Whether a native frame at `pc` is the evaluator's (it runs Python frames).
pub fn in_evaluator(p: &PyProc, pc: u64) -> bool {
    (p.eval[0] <= pc && pc < p.eval[1]) || (p.eval[2] <= pc && pc < p.eval[3])
}

/// Thread `tid`'s Python frames as words, one group per evaluator call,
/// innermost first; empty when its thread state is not found.
pub fn groups(mem: &dyn Memory, p: &PyProc, tid: u32) -> Vec<Vec<u64>> {
    let word = |a: u64| mem.word(a).unwrap_or(0);
    let mut t = word(p.threads_head);
    for _ in 0..PY_THREAD_SCAN {
        if t == 0 || word(t + p.tstate_tid as u64) == tid as u64 {
            break;
        }
        t = word(t + p.tstate_next as u64);
    }
    if t == 0 {
        return Vec::new();
    }
    let mut f = word(t + p.tstate_frame as u64);
    if p.cframe_frame != NONE && f != 0 {
        f = word(f + p.cframe_frame as u64);
    }
    let mut out: Vec<Vec<u64>> = vec![Vec::new()];
    for _ in 0..MAX_FRAMES {
        if f == 0 {
            break;
        }
        let byte = |off: u16| mem.byte(f + off as u64).unwrap_or(0);
        let below = word(f + p.frame_previous as u64);
        let shim = p.owner_cstack != NONE && u16::from(byte(p.frame_owner)) == p.owner_cstack;
        if !shim {
            let code = word(f + p.frame_code as u64);
            out.last_mut()
                .expect("never empty")
                .push(py_word(code, index_plus_one(p, code, word(f + p.frame_instr as u64))));
        }
        let entry = shim
            || p.flags & py_flags::ONE_FRAME != 0
            || (p.frame_entry != NONE && byte(p.frame_entry) != 0);
        if entry {
            out.push(Vec::new());
        }
        f = below;
    }
    out.retain(|g| !g.is_empty());
    out
}

/// A frame's instruction index plus one (0: not started), from its instruction
/// field, as the walker computes it.
fn index_plus_one(p: &PyProc, code: u64, instr: u64) -> u64 {
    if p.flags & py_flags::LASTI != 0 {
        return (instr as u32 as i32 as i64 + 1).max(0) as u64;
    }
    let base = code + p.code_units as u64;
    if instr + 2 >= base {
        (instr + 2 - base) / 2
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::python::names::tests::FakeMem;
    use topwaits_common::python::py_parts;

    /// A 3.11-like layout over fabricated memory: one thread (tid 7) in two
    /// evaluator calls, the outer running two frames, the inner one.
    #[test]
    fn frames_are_grouped_by_their_evaluator_call_innermost_first() {
        let l = crate::stacks::python::layout::of(3, 11).unwrap();
        let p = l.for_walker(0x1000, [0x5000, 0x6000, 0, 0]);
        let mut mem = FakeMem::default();
        let (tstate, cframe) = (0x2000u64, 0x2800u64);
        mem.put_word(0x1000, tstate);
        mem.put_word(tstate + p.tstate_tid as u64, 7);
        mem.put_word(tstate + p.tstate_next as u64, 0);
        mem.put_word(tstate + p.tstate_frame as u64, cframe);
        let frames = [0x3000u64, 0x3100, 0x3200];
        mem.put_word(cframe + p.cframe_frame as u64, frames[0]);
        // The innermost is its call's entry; the next two are the outer call's,
        // the last of them its entry.
        for (i, (&f, entry)) in frames.iter().zip([1u8, 0, 1]).enumerate() {
            mem.put_word(f + p.frame_code as u64, 0x9000 + i as u64 * 0x100);
            mem.put_word(
                f + p.frame_instr as u64,
                0x9000 + i as u64 * 0x100 + p.code_units as u64 + 2 * 4,
            );
            mem.put_word(f + p.frame_previous as u64, frames.get(i + 1).copied().unwrap_or(0));
            mem.put(f + p.frame_entry as u64, &[entry]);
        }
        let g = groups(&mem, &p, 7);
        let codes: Vec<Vec<u64>> =
            g.iter().map(|g| g.iter().map(|&w| py_parts(w).0).collect()).collect();
        assert_eq!(codes, vec![vec![0x9000], vec![0x9100, 0x9200]]);
        assert_eq!(py_parts(g[0][0]).1, Some(4), "the instruction index");
        assert!(groups(&mem, &p, 8).is_empty(), "no thread state for tid 8");
        assert!(in_evaluator(&p, 0x5800) && !in_evaluator(&p, 0x6000));
    }
}
