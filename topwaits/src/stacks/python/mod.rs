//! Python frames: finding and checking CPython interpreters in traced processes
//! for the walker (the [`Tracker`], fed by the unwind table loader's reads of
//! each process's mappings), and naming the walker's Python frame words in the
//! report (the [`Resolver`]).

pub mod layout;
pub mod names;
pub mod now;
pub mod probe;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use topwaits_common::python::{py_parts, PyProc};

use crate::model::Frame;
use crate::sys::memory::ProcessMemory;
use crate::sys::procfs::{self, Mapping};
use probe::{Interp, Probe, PyFile};

/// Where the walker's Python layouts go.
pub trait PySink {
    fn put_python(&mut self, tgid: u32, p: &PyProc) -> Result<()>;
    fn drop_python(&mut self, tgid: u32);
}

/// The interpreter file a process maps, with its load bias, if any. Files are
/// looked at once each (by device and inode), and only those that can hold
/// one (see [`may_hold_interpreter`]).
fn interpreter_of(
    files: &mut HashMap<(u64, u64), Option<PyFile>>,
    tgid: u32,
    maps: &[Mapping],
) -> Option<(PyFile, u64)> {
    let exe = procfs::exe_path(tgid);
    let exe = exe.as_deref();
    for m in maps.iter().filter(|m| may_hold_interpreter(m, exe)) {
        let file = files
            .entry((m.dev, m.inode))
            .or_insert_with(|| {
                probe::file_symbols(&mut std::io::BufReader::new(procfs::open_mapped(tgid, m)?))
            })
            .clone();
        if let Some(f) = file {
            let bias = f.bias(m)?;
            return Some((f, bias));
        }
    }
    None
}

/// Whether mapping `m` of a process whose executable is `exe` can hold a
/// CPython interpreter: the executable itself (python3 links it in, and so
/// may a program that embeds it), or a library named for it (libpython3.x,
/// which perf, uwsgi, and PyInstaller's bundles load). Looking at every
/// file's dynamic symbols instead cost about a millisecond for each new
/// program of perf's size, on the main thread, as it arrived.
fn may_hold_interpreter(m: &Mapping, exe: Option<&str>) -> bool {
    let name = m.path.rsplit('/').next().unwrap_or(&m.path);
    name.contains("python") || exe.is_some_and(|e| e == m.path)
}

/// Checks the interpreter of `file` in live process `tgid`. A process in
/// another PID namespace has its threads' ids as that namespace numbers them.
/// The namespace is looked at only once thread ids are: an interpreter not
/// started yet (perf links libpython and may never start it) is found so
/// before, at each of its retries.
fn check_live(tgid: u32, file: &PyFile, bias: u64) -> Probe {
    let mem = ProcessMemory { pid: tgid };
    // None: in this process's PID namespace.
    let own: std::cell::OnceCell<Option<std::collections::HashSet<u64>>> =
        std::cell::OnceCell::new();
    let is_thread = |tid: u64| {
        let own = own.get_or_init(|| {
            procfs::foreign_pid_ns_id(tgid)?;
            Some(
                crate::sys::thread::tids_of(tgid)
                    .into_iter()
                    .filter_map(|t| procfs::ns_ids(tgid, t))
                    .map(|(_, t)| u64::from(t))
                    .collect(),
            )
        });
        match own {
            None => std::path::Path::new(&format!("/proc/{tgid}/task/{tid}")).exists(),
            Some(own) => own.contains(&tid),
        }
    };
    probe::check(&mem, file, bias, &is_thread)
}

/// What the walker is given for interpreter `i` of process `tgid`, with the
/// process's PID namespace where it has its own.
fn walker_for(tgid: u32, i: &Interp) -> PyProc {
    let (pid_ns_dev, pid_ns_ino) = procfs::foreign_pid_ns_id(tgid).unwrap_or((0, 0));
    PyProc { pid_ns_dev, pid_ns_ino, ..i.layout.for_walker(i.threads_head, i.eval) }
}

/// The id by which thread `tid` of process `tgid` is known to its thread
/// state under walker `p`: its own namespace's where it has one.
pub fn thread_id_seen(p: &PyProc, tgid: u32, tid: u32) -> u32 {
    if p.pid_ns_ino == 0 {
        return tid;
    }
    procfs::ns_ids(tgid, tid).map_or(tid, |(_, t)| t)
}

/// First and longest wait before an interpreter that was not ready is looked at
/// again.
const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(2);

struct Pending {
    file: PyFile,
    bias: u64,
    at: Instant,
    wait: Duration,
    /// Mismatches read so far: a frame read while the interpreter changes it can
    /// look torn, so a mismatch is final only once it has been read again.
    mismatches: u32,
}

/// Reads of a mismatched layout before it is taken as final.
const MISMATCH_TRIES: u32 = 3;

/// The traced processes' interpreters, kept in the walker's map.
#[derive(Default)]
pub struct Tracker {
    files: HashMap<(u64, u64), Option<PyFile>>,
    ready: HashMap<u32, PyProc>,
    pending: HashMap<u32, Pending>,
    /// Processes that may have an entry in the walker's map: put there, or
    /// copied there by the fork hook from a parent's. Only their forks need
    /// theirs dropped; under `perf bench sched messaging` that was 200 deletes
    /// of nothing a run.
    seeded: std::collections::HashSet<u32>,
    /// Why interpreters were left unnamed: each reason, and how many processes.
    pub problems: Vec<(String, u64)>,
}

impl Tracker {
    /// A process's mappings were read (first seen, exec, or a library loaded).
    pub fn on_maps(&mut self, tgid: u32, maps: &[Mapping], sink: &mut dyn PySink) {
        if self.ready.contains_key(&tgid) || self.pending.contains_key(&tgid) {
            return;
        }
        if let Some((file, bias)) = interpreter_of(&mut self.files, tgid, maps) {
            self.try_ready(
                tgid,
                Pending { file, bias, at: Instant::now(), wait: RETRY_MIN, mismatches: 0 },
                sink,
            );
        }
    }

    /// A process replaced its image: whatever it ran before is gone. It stays
    /// seeded: a fork of it whose event is still to come may have copied its
    /// old entry.
    pub fn on_exec(&mut self, tgid: u32, sink: &mut dyn PySink) {
        self.pending.remove(&tgid);
        if self.ready.remove(&tgid).is_some() {
            sink.drop_python(tgid);
        }
    }

    /// A fork runs its parent's interpreter at the same addresses. A child of a
    /// seeded parent not (or no longer) ready loses what the fork hook copied for
    /// it from the kernel's map, which may be stale: the parent may have exec'd
    /// since.
    pub fn on_fork(&mut self, child: u32, parent: u32, sink: &mut dyn PySink) {
        match self.ready.get(&parent).copied() {
            Some(p) => {
                if sink.put_python(child, &p).is_ok() {
                    self.ready.insert(child, p);
                }
            }
            None if self.seeded.contains(&parent) => sink.drop_python(child),
            None => return,
        }
        self.seeded.insert(child);
    }

    /// Looks again at the interpreters that were not ready, when due; how long
    /// until the next one is due (None: none waits).
    pub fn beat(&mut self, sink: &mut dyn PySink) -> Option<Duration> {
        let now = Instant::now();
        let due: Vec<u32> =
            self.pending.iter().filter(|(_, p)| now >= p.at + p.wait).map(|(t, _)| *t).collect();
        for tgid in due {
            let Some(p) = self.pending.remove(&tgid) else { continue };
            if procfs::alive(tgid) {
                self.try_ready(tgid, p, sink);
            }
        }
        let now = Instant::now();
        self.pending.values().map(|p| (p.at + p.wait).saturating_duration_since(now)).min()
    }

    /// Forgets a process that has exited.
    pub fn forget(&mut self, tgid: u32, sink: &mut dyn PySink) {
        self.on_exec(tgid, sink);
        self.seeded.remove(&tgid);
    }

    fn try_ready(&mut self, tgid: u32, p: Pending, sink: &mut dyn PySink) {
        let probe = check_live(tgid, &p.file, p.bias);
        log::debug!("the interpreter of process {tgid}: {probe:?}");
        self.settle(tgid, p, probe, sink);
    }

    /// Acts on what a look at process `tgid`'s interpreter found: ready, not yet
    /// (looked at again later), or not to be named (said as a problem).
    fn settle(&mut self, tgid: u32, mut p: Pending, probe: Probe, sink: &mut dyn PySink) {
        let torn = matches!(probe, Probe::Mismatch(_));
        match probe {
            Probe::Ready(i) => {
                let walker = walker_for(tgid, &i);
                match sink.put_python(tgid, &walker) {
                    Ok(()) => {
                        log::debug!(
                            "Python {}.{} in process {tgid}: its frames are named",
                            i.layout.version.0,
                            i.layout.version.1
                        );
                        self.ready.insert(tgid, walker);
                        self.seeded.insert(tgid);
                    }
                    Err(e) => self
                        .problem(format!("the walker's table of Python processes is full ({e:#})")),
                }
            }
            Probe::Mismatch(what) if p.mismatches >= MISMATCH_TRIES => self
                .problem(format!("the interpreter's layout does not match its version's: {what}")),
            Probe::Mismatch(_) | Probe::NotReady => {
                p.mismatches += u32::from(torn);
                p.at = Instant::now();
                p.wait = (p.wait * 2).min(RETRY_MAX);
                self.pending.insert(tgid, p);
            }
            Probe::Unsupported(what) => self.problem(what),
        }
    }

    fn problem(&mut self, what: String) {
        match self.problems.iter_mut().find(|(w, _)| *w == what) {
            Some((_, n)) => *n += 1,
            None => self.problems.push((what, 1)),
        }
    }

    /// What went unnamed, one line each.
    pub fn warnings(&self) -> Vec<String> {
        self.problems
            .iter()
            .map(|(what, n)| {
                format!("Python frames of {n} processes are shown as the interpreter's own: {what}")
            })
            .collect()
    }
}

/// Names Python frame words in the report, reading code objects from the
/// processes while they live (kept once read).
#[derive(Default)]
pub struct Resolver {
    files: HashMap<(u64, u64), Option<PyFile>>,
    interps: HashMap<u32, Option<Interp>>,
    functions: HashMap<(u32, u64), Option<names::Function>>,
}

impl Resolver {
    /// Forgets what it read of `tgid`, gone for good.
    pub fn forget(&mut self, tgid: u32) {
        self.interps.remove(&tgid);
        self.functions.retain(|&(t, _), _| t != tgid);
    }

    /// The frame for Python word `word` of process `tgid`.
    pub fn frame(&mut self, tgid: u32, word: u64) -> Frame {
        let (code, index) = py_parts(word);
        let files = &mut self.files;
        let interp = *self.interps.entry(tgid).or_insert_with(|| {
            let maps = procfs::maps_of(tgid);
            let (file, bias) = interpreter_of(files, tgid, &maps)?;
            match check_live(tgid, &file, bias) {
                Probe::Ready(i) => Some(i),
                _ => None,
            }
        });
        let function = self.functions.entry((tgid, code)).or_insert_with(|| {
            interp.and_then(|i| {
                names::function(&ProcessMemory { pid: tgid }, i.layout, i.code_type, code)
            })
        });
        match function {
            Some(f) => {
                let short = f.file.rsplit('/').next().unwrap_or(&f.file);
                Frame {
                    addr: word,
                    symbol: Some(format!("{} ({short}:{})", f.qualname, f.line(index)).into()),
                    module: Some(f.file.as_str().into()),
                    offset: None,
                }
            }
            None => {
                Frame { addr: word, symbol: Some("[python]".into()), module: None, offset: None }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoSink;

    impl PySink for NoSink {
        fn put_python(&mut self, _: u32, _: &PyProc) -> Result<()> {
            Ok(())
        }
        fn drop_python(&mut self, _: u32) {}
    }

    /// The files looked at for an interpreter: the executable and libraries
    /// named for Python, not the rest of what a program maps (perf maps forty
    /// files and links libpython).
    #[test]
    fn only_the_executable_and_python_libraries_are_looked_at() {
        let at = |path: &str| Mapping {
            start: 0,
            end: 1,
            offset: 0,
            path: path.into(),
            exec: true,
            dev: 0,
            inode: 0,
        };
        let exe = Some("/usr/bin/perf");
        assert!(may_hold_interpreter(&at("/usr/bin/perf"), exe));
        assert!(may_hold_interpreter(&at("/usr/lib/x86_64-linux-gnu/libpython3.13.so.1.0"), exe));
        assert!(!may_hold_interpreter(&at("/usr/lib/x86_64-linux-gnu/libc.so.6"), exe));
        assert!(!may_hold_interpreter(&at("/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33"), exe));
        // A statically linked interpreter under another name (an application
        // that embeds it) is found as the executable.
        assert!(may_hold_interpreter(&at("/opt/app/bin/server"), Some("/opt/app/bin/server")));
        // A directory named for Python does not make every file in it one.
        assert!(!may_hold_interpreter(&at("/opt/python/lib/libssl.so.3"), None));
        assert!(may_hold_interpreter(&at("/root/.pyenv/versions/3.11.7/bin/python3.11"), None));
    }

    /// What the fork hook copied for a child of a parent that is not ready is
    /// dropped: the parent may have exec'd since the copy; so are its own
    /// children's, which may have copied it before the drop. A process that
    /// never had an entry has nothing for its forks to copy.
    #[test]
    fn a_fork_of_a_parent_not_ready_drops_the_childs_copy() {
        struct Dropped(Vec<u32>);
        impl PySink for Dropped {
            fn put_python(&mut self, _: u32, _: &PyProc) -> Result<()> {
                Ok(())
            }
            fn drop_python(&mut self, tgid: u32) {
                self.0.push(tgid);
            }
        }
        let mut t = Tracker::default();
        let mut sink = Dropped(Vec::new());
        t.on_fork(501, 500, &mut sink);
        assert!(sink.0.is_empty(), "500 never had an entry");
        t.ready.insert(500, PyProc::default());
        t.seeded.insert(500);
        t.on_exec(500, &mut sink);
        t.on_fork(502, 500, &mut sink);
        t.on_fork(503, 502, &mut sink);
        t.on_fork(504, 501, &mut sink);
        assert_eq!(
            sink.0,
            [500, 502, 503],
            "its old entry dropped at its exec, and its children's copies"
        );
        assert!(!t.ready.contains_key(&502));
        t.forget(500, &mut sink);
        t.on_fork(505, 500, &mut sink);
        assert_eq!(sink.0.len(), 3, "an exited process's forks are all seen");
    }

    /// A frame read while the interpreter changes it can look torn: a mismatch is
    /// read again, and said as a problem only once it lasts.
    #[test]
    fn a_mismatch_is_looked_at_again_before_it_is_final() {
        let file = PyFile::empty();
        let mut t = Tracker::default();
        let mut p = Pending { file, bias: 0, at: Instant::now(), wait: RETRY_MIN, mismatches: 0 };
        for round in 0..MISMATCH_TRIES {
            t.settle(7, p, Probe::Mismatch("torn"), &mut NoSink);
            assert!(t.problems.is_empty(), "round {round}: {:?}", t.problems);
            p = t.pending.remove(&7).expect("looked at again");
        }
        assert_eq!(p.mismatches, MISMATCH_TRIES);
        t.settle(7, p, Probe::Mismatch("torn"), &mut NoSink);
        assert!(t.pending.is_empty());
        assert_eq!(t.warnings().len(), 1);
        assert!(t.warnings()[0].contains("torn"), "{:?}", t.warnings());
    }
}
