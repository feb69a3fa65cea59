//! Finds a CPython interpreter in a process and checks its layout against the
//! running interpreter before anything is read with it: the file that defines
//! `_PyRuntime` (the python binary or libpython), its version (`Py_Version`),
//! and then, in the process's memory, that each thread state points back to its
//! interpreter, that their thread ids are the process's, and that a frame's code
//! object is of `PyCode_Type`.

use topwaits_common::python::{py_flags, NONE};

use super::layout::{self, Layout, OBJECT_TYPE};
use crate::stacks::frame_scan::Memory;
use crate::sys::elf;
use crate::sys::procfs::Mapping;

/// The symbols of an interpreter file, at file addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyFile {
    pub runtime: u64,
    /// `Py_Version` (3.11 on); None in older versions.
    pub version: Option<u64>,
    /// Without `Py_Version`: whether it defines `Py_Is`, new in 3.10 (so it is
    /// 3.10, not older).
    pub has_py_is: bool,
    /// `_PyEval_EvalFrameDefault`, and its cold part when the symbol table names it.
    pub eval: (u64, u64),
    pub eval_cold: Option<(u64, u64)>,
    pub code_type: u64,
    segments: Vec<elf::Segment>,
}

#[cfg(test)]
impl PyFile {
    /// A file with no symbols and no segments, for the tracker's tests.
    pub fn empty() -> PyFile {
        PyFile {
            runtime: 0,
            version: None,
            has_py_is: false,
            eval: (0, 0),
            eval_cold: None,
            code_type: 0,
            segments: Vec::new(),
        }
    }
}

const RUNTIME: &str = "_PyRuntime";
const VERSION: &str = "Py_Version";
const EVAL: &str = "_PyEval_EvalFrameDefault";
const EVAL_COLD: &str = "_PyEval_EvalFrameDefault.cold";
const CODE_TYPE: &str = "PyCode_Type";
const PY_IS: &str = "Py_Is";

/// The interpreter symbols of an ELF file; None when it is not an interpreter
/// (most files: their dynamic symbols alone are read).
pub fn file_symbols<R: std::io::Read + std::io::Seek>(f: &mut R) -> Option<PyFile> {
    let quick = elf::symbols(f, &[RUNTIME], false).ok()?;
    if quick.is_empty() {
        return None;
    }
    let found =
        elf::symbols(f, &[RUNTIME, VERSION, EVAL, EVAL_COLD, CODE_TYPE, PY_IS], true).ok()?;
    let get = |name: &str| found.iter().find(|(n, _, _)| n == name).map(|(_, a, s)| (*a, *s));
    let segments = elf::load_segments(f).ok()?;
    Some(PyFile {
        runtime: get(RUNTIME)?.0,
        version: get(VERSION).map(|v| v.0),
        has_py_is: get(PY_IS).is_some(),
        eval: get(EVAL).map(|(a, s)| (a, a + s))?,
        eval_cold: get(EVAL_COLD).map(|(a, s)| (a, a + s)),
        code_type: get(CODE_TYPE)?.0,
        segments,
    })
}

impl PyFile {
    /// The load bias of the file in a process that maps it at `m`.
    pub fn bias(&self, m: &Mapping) -> Option<u64> {
        Some(m.start.wrapping_sub(elf::mapping_vaddr(&self.segments, m.offset, m.exec)?))
    }
}

/// An interpreter found and checked in a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interp {
    pub layout: &'static Layout,
    /// Where the interpreter keeps its thread-list head.
    pub threads_head: u64,
    /// The evaluator's code in memory (start, end, and its cold part's or zeros).
    pub eval: [u64; 4],
    pub code_type: u64,
}

/// What a process's interpreter turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Not initialized yet (no interpreter or no thread state), or no Python
    /// frame yet to check the layout on: look again later.
    NotReady,
    /// A version topwaits has no layout for.
    Unsupported(String),
    /// The layout does not match the running interpreter (what failed).
    Mismatch(&'static str),
    Ready(Interp),
}

/// Most thread states looked at, and frames followed to find a code object.
const THREADS_CHECKED: usize = 256;
const FRAMES_CHECKED: usize = 8;

/// Checks the interpreter of `file` loaded with `bias` in the process whose
/// memory is `mem`; `is_thread` says whether an id is one of its threads.
pub fn check(mem: &dyn Memory, file: &PyFile, bias: u64, is_thread: &dyn Fn(u64) -> bool) -> Probe {
    let (major, minor) = match file.version {
        Some(version) => match mem.word(bias.wrapping_add(version)) {
            Some(v) => ((v >> 24) as u8, (v >> 16) as u8),
            None => return Probe::NotReady,
        },
        None if file.has_py_is => (3, 10),
        None => {
            return Probe::Unsupported(format!(
                "Python 3.9 or older (Python frames are named for {})",
                layout::KNOWN
            ))
        }
    };
    let Some(l) = layout::of(major, minor) else {
        return Probe::Unsupported(format!(
            "Python {major}.{minor} (Python frames are named for {})",
            layout::KNOWN
        ));
    };
    let runtime = bias.wrapping_add(file.runtime);
    let code_type = bias.wrapping_add(file.code_type);
    let interp = match mem.word(runtime + l.runtime_interp) {
        Some(0) | None => return Probe::NotReady,
        Some(i) => i,
    };
    let threads_head = interp + l.interp_threads;
    let mut t = match mem.word(threads_head) {
        Some(0) | None => return Probe::NotReady,
        Some(t) => t,
    };
    let (mut ours, mut code_checked) = (false, false);
    for _ in 0..THREADS_CHECKED {
        if t == 0 {
            break;
        }
        if mem.word(t + l.tstate_interp as u64) != Some(interp) {
            return Probe::Mismatch("a thread state does not point back to its interpreter");
        }
        let id = mem.word(t + l.walker.tstate_tid as u64);
        ours |= if l.walker.flags & py_flags::BY_PTHREAD != 0 {
            // A pthread_t is the thread's control block, whose first word (glibc,
            // x86-64) points to itself.
            id.is_some_and(|id| id != 0 && mem.word(id) == Some(id))
        } else {
            id.is_some_and(is_thread)
        };
        if !code_checked {
            match first_code(mem, l, t) {
                Some(code) if mem.word(code + OBJECT_TYPE) == Some(code_type) => {
                    code_checked = true
                }
                Some(_) => return Probe::Mismatch("a frame's code object is not of PyCode_Type"),
                None => {}
            }
        }
        t = mem.word(t + l.walker.tstate_next as u64).unwrap_or(0);
    }
    if !ours {
        return Probe::Mismatch("no thread state holds one of the process's thread ids");
    }
    if !code_checked {
        return Probe::NotReady;
    }
    let cold = file
        .eval_cold
        .map_or([0, 0], |(start, end)| [bias.wrapping_add(start), bias.wrapping_add(end)]);
    let eval = [bias.wrapping_add(file.eval.0), bias.wrapping_add(file.eval.1), cold[0], cold[1]];
    Probe::Ready(Interp { layout: l, threads_head, eval, code_type })
}

/// Thread state `t`'s innermost interpreter frame (0: none).
fn top_frame(mem: &dyn Memory, l: &Layout, t: u64) -> u64 {
    let f = mem.word(t + l.walker.tstate_frame as u64).unwrap_or(0);
    if l.walker.cframe_frame != NONE && f != 0 {
        mem.word(f + l.walker.cframe_frame as u64).unwrap_or(0)
    } else {
        f
    }
}

/// The code objects of the Python frames from frame `f` down, innermost first,
/// the evaluator calls' shim frames left out; at most `limit` frames looked at.
fn codes_from(mem: &dyn Memory, l: &Layout, mut f: u64, limit: usize) -> Vec<u64> {
    let w = &l.walker;
    let mut out = Vec::new();
    for _ in 0..limit {
        if f == 0 {
            break;
        }
        let shim = w.owner_cstack != NONE
            && mem.byte(f + w.frame_owner as u64).map(u16::from) == Some(w.owner_cstack);
        if !shim {
            out.extend(mem.word(f + w.frame_code as u64).filter(|&c| c != 0));
        }
        f = mem.word(f + w.frame_previous as u64).unwrap_or(0);
    }
    out
}

/// The code object of thread state `t`'s innermost Python frame, past shims.
fn first_code(mem: &dyn Memory, l: &Layout, t: u64) -> Option<u64> {
    codes_from(mem, l, top_frame(mem, l, t), FRAMES_CHECKED).first().copied()
}

/// The code objects of the Python frames of the thread whose state holds `id`
/// (its thread id, or 3.10's `pthread_t`; None: the newest thread state),
/// innermost first, shims left out (as the walker sees them, for checks and tests).
pub fn code_chain(mem: &dyn Memory, i: &Interp, id: Option<u64>) -> Vec<u64> {
    let l = i.layout;
    let mut t = mem.word(i.threads_head).unwrap_or(0);
    for _ in 0..THREADS_CHECKED {
        if t == 0 || id.is_none() || mem.word(t + l.walker.tstate_tid as u64) == id {
            break;
        }
        t = mem.word(t + l.walker.tstate_next as u64).unwrap_or(0);
    }
    if t == 0 {
        return Vec::new();
    }
    codes_from(mem, l, top_frame(mem, l, t), 256)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::python::names;
    use crate::sys::memory::ProcessMemory;
    use crate::sys::procfs;

    /// The interpreters on this machine: the distribution's, and pyenv's builds.
    fn interpreters() -> Vec<String> {
        let mut out = vec!["/usr/bin/python3".to_string()];
        for v in ["3.10", "3.11", "3.12", "3.13"] {
            let Ok(dir) = std::fs::read_dir("/root/.pyenv/versions") else { break };
            for e in dir.flatten() {
                let bin = e.path().join(format!("bin/python{v}"));
                if e.file_name().to_string_lossy().starts_with(&format!("{v}.")) && bin.exists() {
                    out.push(bin.to_string_lossy().into_owned());
                }
            }
        }
        out.into_iter().filter(|p| std::path::Path::new(p).exists()).collect()
    }

    /// A fabricated 3.12 process: version, runtime, interpreter, one thread
    /// state with a frame whose code object is of `code_type`.
    fn fabricated(tstate_interp: u64, code_type: u64) -> (names::tests::FakeMem, PyFile) {
        let l = layout::of(3, 12).unwrap();
        let mut mem = names::tests::FakeMem::default();
        let (interp, t, frame, code) = (0x10_000u64, 0x20_000u64, 0x30_000u64, 0x40_000u64);
        let file = PyFile {
            runtime: 0x1000,
            version: Some(0x2000),
            has_py_is: true,
            eval: (0x5000, 0x6000),
            eval_cold: None,
            code_type: 0x3000,
            segments: Vec::new(),
        };
        mem.put_word(0x2000, 0x030c_01f0);
        let mut runtime = vec![0u8; l.runtime_interp as usize + 8];
        runtime[l.runtime_interp as usize..].copy_from_slice(&interp.to_le_bytes());
        mem.put(0x1000, &runtime);
        mem.put_word(interp + l.interp_threads, t);
        let mut ts = vec![0u8; 256];
        for (off, v) in [
            (l.tstate_interp, tstate_interp),
            (l.walker.tstate_tid, 77),
            (l.walker.tstate_frame, 0x50_000),
            (l.walker.tstate_next, 0),
        ] {
            ts[off as usize..][..8].copy_from_slice(&v.to_le_bytes());
        }
        mem.put(t, &ts);
        mem.put_word(0x50_000 + l.walker.cframe_frame as u64, frame);
        let mut f = vec![0u8; 80];
        f[l.walker.frame_code as usize..][..8].copy_from_slice(&code.to_le_bytes());
        mem.put(frame, &f);
        mem.put_word(code + OBJECT_TYPE, code_type);
        (mem, file)
    }

    #[test]
    fn a_layout_that_does_not_match_is_refused_with_what_failed() {
        let ours = |tid: u64| tid == 77;
        let (mem, file) = fabricated(0x10_000, 0x3000);
        let Probe::Ready(i) = check(&mem, &file, 0, &ours) else {
            panic!("{:?}", check(&mem, &file, 0, &ours))
        };
        assert_eq!(
            (i.layout.version, i.threads_head, i.eval),
            ((3, 12), 0x10_000 + 72, [0x5000, 0x6000, 0, 0])
        );
        assert_eq!(code_chain(&mem, &i, Some(77)), [0x40_000]);
        assert_eq!(code_chain(&mem, &i, None), [0x40_000]);
        assert_eq!(code_chain(&mem, &i, Some(78)), Vec::<u64>::new());
        let (mem, file) = fabricated(0x99_000, 0x3000);
        assert!(
            matches!(check(&mem, &file, 0, &ours), Probe::Mismatch(w) if w.contains("interpreter"))
        );
        let (mem, file) = fabricated(0x10_000, 0x4000);
        assert!(
            matches!(check(&mem, &file, 0, &ours), Probe::Mismatch(w) if w.contains("PyCode_Type"))
        );
        let (mem, file) = fabricated(0x10_000, 0x3000);
        assert!(
            matches!(check(&mem, &file, 0, &|_| false), Probe::Mismatch(w) if w.contains("thread ids"))
        );
        let (mut mem, file) = fabricated(0x10_000, 0x3000);
        mem.put_word(0x2000, 0x030e_0000);
        assert!(
            matches!(check(&mem, &file, 0, &ours), Probe::Unsupported(w) if w.contains("3.14"))
        );
        let (mem, mut file) = fabricated(0x10_000, 0x3000);
        (file.version, file.has_py_is) = (None, false);
        assert!(
            matches!(check(&mem, &file, 0, &ours), Probe::Unsupported(w) if w.contains("3.9 or older"))
        );
    }

    const SCRIPT: &str = "import time\nclass Box:\n    def waiting_here(self):\n        time.sleep(30)\nBox().waiting_here()\n";

    /// Each interpreter here is found, checked and read: the main thread's frames
    /// are the script's, innermost first, with their lines.
    #[test]
    fn every_python_here_is_checked_and_its_frames_named() {
        let all = interpreters();
        if all.is_empty() {
            eprintln!("skipped: no python3 on this machine");
            return;
        }
        let mut named = 0;
        for python in all {
            let mut child =
                std::process::Command::new(&python).args(["-c", SCRIPT]).spawn().unwrap();
            let pid = child.id();
            let mem = ProcessMemory { pid };
            let is_thread =
                |tid: u64| std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists();
            let t0 = std::time::Instant::now();
            let mut last = None;
            let outcome = loop {
                let maps: Vec<Mapping> =
                    procfs::maps_of(pid).into_iter().filter(|m| m.exec).collect();
                let found = maps.iter().find_map(|m| {
                    let mut f = std::fs::File::open(&m.path).ok()?;
                    let file = file_symbols(&mut f)?;
                    Some((file.bias(m)?, file))
                });
                let probe = found.map(|(bias, file)| check(&mem, &file, bias, &is_thread));
                match probe {
                    Some(Probe::Ready(i)) => {
                        // The script runs one thread: the only thread state.
                        let chain = code_chain(&mem, &i, None);
                        let funcs: Vec<_> = chain
                            .iter()
                            .filter_map(|&c| names::function(&mem, i.layout, i.code_type, c))
                            .collect();
                        if funcs.first().is_some_and(|f| f.qualname.ends_with("waiting_here")) {
                            break Ok((i, funcs));
                        }
                    }
                    Some(p @ Probe::Unsupported(_)) => break Err(p),
                    // Read while the interpreter starts, a frame can be torn (pushed
                    // or popped between two reads): looked at again, and the
                    // mismatch stands only if it lasts.
                    Some(p @ Probe::Mismatch(_)) => last = Some(p),
                    _ => {}
                }
                if t0.elapsed() > std::time::Duration::from_secs(10) {
                    break Err(last.unwrap_or(Probe::NotReady));
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            };
            let _ = child.kill();
            let _ = child.wait();
            let version = std::process::Command::new(&python).arg("--version").output().unwrap();
            let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
            let (i, funcs) = outcome.unwrap_or_else(|e| panic!("{python} ({version}): {e:?}"));
            assert!(
                version.contains(&format!("{}.{}", i.layout.version.0, i.layout.version.1)),
                "{version} read as {:?}",
                i.layout.version
            );
            let names: Vec<&str> = funcs.iter().map(|f| f.qualname.as_str()).collect();
            // 3.10's code objects have no qualified name.
            let inner =
                if i.layout.version == (3, 10) { "waiting_here" } else { "Box.waiting_here" };
            assert_eq!(names, [inner, "<module>"], "{python}");
            assert_eq!(funcs[0].file, "<string>");
            assert_eq!(funcs[0].first_line, 3);
            named += 1;
        }
        assert!(named >= 1, "no interpreter named");
    }
}
