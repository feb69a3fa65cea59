//! A thread as it is right now, read from `/proc` without stopping it: state, when
//! it began to wait (estimated from the scheduler's clock), its kernel stack as the
//! kernel prints it, its user stack (unwound from the tables, see
//! [`crate::stacks::cfi::now`]) and the syscall it is in. Used for waits that began
//! before a trace and by `topwaits blocked`.

use std::collections::HashMap;

use topwaits_common::walker::{cut, CUT_MARK};
use topwaits_common::TaskRegs;

use crate::model::Frame;
use crate::settings::Threads;
use crate::stacks::cfi::now::{self, Python, Tables};
use crate::stacks::frame_scan::{Arch, Region, Walker};
use crate::stacks::python::now::{groups, Interpreters};
use crate::sys::memory::ProcessMemory;
use crate::sys::procfs;
use crate::sys::schedclock::SchedClock;
use crate::sys::thread::{self, SyscallState};

/// The threads a selection names, as (tgid, tid): every thread of each `-p`
/// process, each `-t` thread, each thread in the cgroup, or otherwise every
/// thread on the system.
pub fn candidates(threads: &Threads) -> Vec<(u32, u32)> {
    let of = |p: u32| thread::tids_of(p).into_iter().map(move |t| (p, t));
    match threads {
        Threads::Pids(pids) => pids.iter().flat_map(|&p| of(p)).collect(),
        Threads::Tids(tids) => {
            tids.iter().filter_map(|&t| Some((procfs::tgid_of(t)?, t))).collect()
        }
        Threads::Cgroup(cg, _) => crate::sys::cgroup::threads_in(cg)
            .into_iter()
            .filter_map(|t| Some((procfs::tgid_of(t)?, t)))
            .collect(),
        _ => thread::all_pids().into_iter().flat_map(of).collect(),
    }
}

/// One thread, now.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub tgid: u32,
    pub tid: u32,
    pub comm: Vec<u8>,
    /// `R`, `S`, `D`, ... as in `/proc/.../stat`.
    pub state: char,
    pub flags: u32,
    /// When it last ran, as CLOCK_MONOTONIC ns: for a blocked thread, about when
    /// its wait began. An estimate; `None` when the clock could not be mapped.
    pub since: Option<u64>,
    /// The CPU it last ran on, whose task clock `since` was read from.
    pub cpu: u32,
    /// Kernel frames, leaf first, or why they could not be read.
    pub kernel: Result<Vec<Frame>, String>,
    /// User return addresses, leaf first (empty for kernel threads), the last
    /// a cut mark unless the stack was unwound whole.
    pub user: Vec<u64>,
    /// The syscall it is in, or why that is unknown.
    pub syscall: Result<SyscallState, String>,
}

impl Snapshot {
    /// Blocked in S or D state.
    pub fn blocked(&self) -> bool {
        matches!(self.state, 'S' | 'D')
    }
}

/// How many times a thread's stack is walked again when the thread was seen
/// to move while it was read.
const WALK_TRIES: usize = 3;
/// How many times, 100 µs apart, a thread seen running after a read that is
/// not sure is looked at again for it to block.
const RUN_WAITS: usize = 10;

/// Reads every thread's registers now (the task iterator).
pub type RegsReader = Box<dyn FnMut() -> HashMap<u32, TaskRegs>>;

/// Most times the registers are read again in one snapshot: a thread seen at
/// other registers than the iterator's has moved since, and is blocked again.
const MAX_REREADS: usize = 8;

/// Takes snapshots, keeping per-process mappings and the clock mapping.
#[derive(Default)]
pub struct Snapshotter {
    clock: SchedClock,
    regions: HashMap<u32, Vec<Region>>,
    tables: Tables,
    /// Threads' registers as the task iterator read them, by thread id.
    regs: HashMap<u32, TaskRegs>,
    /// Runs the task iterator again, for a thread that moved since it ran.
    reread: Option<RegsReader>,
    /// How many times it has.
    rereads: usize,
    /// Python processes' interpreters, for their Python frames.
    python: Interpreters,
    /// V8 and HotSpot processes' layouts, for their JavaScript and Java frames.
    jit: crate::stacks::jit::Procs,
}

/// A look at a thread: how many times it has had a CPU (from schedstat, read
/// first) and its syscall state.
type Look = (Option<u64>, Result<SyscallState, String>);

/// Whether a thread looked at as `before` and then as `after` stayed still in
/// between, so that what was read of its stack in between is of one moment.
/// A thread gone keeps what was read; one running now stayed still if it has
/// had no CPU since (it took one after the read). Without schedstat, only the
/// registers tell.
fn still(before: &Look, after: &Look) -> bool {
    let no_cpu_since = before.0 == after.0;
    match &after.1 {
        Err(_) => true,
        Ok(SyscallState::Running) => no_cpu_since && after.0.is_some(),
        now => no_cpu_since && *now == before.1,
    }
}

/// Kernel frames from `/proc/TID/stack`, which names functions but hides addresses.
fn kernel_frames(tgid: u32, tid: u32) -> Result<Vec<Frame>, String> {
    thread::kernel_stack(tgid, tid)
        .map(|frames| {
            frames
                .into_iter()
                .map(|f| Frame {
                    addr: 0,
                    symbol: Some(f.name.into()),
                    module: None,
                    offset: Some(f.offset),
                })
                .collect()
        })
        .map_err(|e| e.to_string())
}

impl Snapshotter {
    /// Takes the threads' registers as the task iterator read them (`bpf`):
    /// their frame pointers, which `/proc` does not show, let stacks through
    /// code built with frame pointers be unwound. A thread whose pc and sp have
    /// changed since is walked without.
    pub fn set_regs(&mut self, regs: HashMap<u32, TaskRegs>) {
        self.regs = regs;
    }

    /// Reads the registers with `read` now, and again (a few times at most)
    /// for a thread that has moved since.
    pub fn set_regs_reader(&mut self, mut read: RegsReader) {
        self.regs = read();
        self.reread = Some(read);
    }

    /// The frame pointer of thread `tid` blocked at `pc` and `sp`, where
    /// the iterator read it there.
    fn bp_of(&mut self, tid: u32, pc: u64, sp: u64) -> Option<u64> {
        let at = |regs: &HashMap<u32, TaskRegs>| {
            regs.get(&tid).filter(|r| (r.ip, r.sp) == (pc, sp)).map(|r| r.bp)
        };
        if let Some(bp) = at(&self.regs) {
            return Some(bp);
        }
        let read = self.reread.as_mut().filter(|_| self.rereads < MAX_REREADS)?;
        self.rereads += 1;
        // Fresh registers replace those read before; a read that fails
        // leaves them as they were.
        self.regs.extend(read());
        at(&self.regs)
    }

    /// Reads unwind tables from `cache` where it holds them, and keeps there
    /// those it builds.
    pub fn set_cache(&mut self, cache: Option<crate::stacks::cfi::cache::Cache>) {
        self.tables = Tables::with_cache(cache);
    }

    /// The thread now, or `None` when it is gone.
    pub fn take(&mut self, tgid: u32, tid: u32) -> Option<Snapshot> {
        let stat = thread::stat(tgid, tid)?;
        let since = thread::exec_start(tgid, tid).and_then(|t| self.clock.to_mono(t, stat.cpu));
        let (syscall, user) = self.stack_of(tgid, tid);
        Some(Snapshot {
            tgid,
            tid,
            comm: stat.comm,
            state: stat.state,
            flags: stat.flags,
            since,
            cpu: stat.cpu,
            kernel: kernel_frames(tgid, tid),
            user,
            syscall,
        })
    }

    /// The syscall thread `tid` is in and its user stack, read so that the
    /// words are of one moment: a thread that ran while its stack was read
    /// may be back in the same syscall at the same place with other words
    /// in between (its caller's next call, for one). Such a stack is read
    /// again until a read meets a thread that stayed still, or two reads at
    /// the same place agree; failing that, only its pc is sure.
    fn stack_of(&mut self, tgid: u32, tid: u32) -> (Result<SyscallState, String>, Vec<u64>) {
        let look =
            || (thread::arrivals(tgid, tid), thread::syscall(tgid, tid).map_err(|e| e.to_string()));
        let mut before = look();
        let mut last: Option<(Result<SyscallState, String>, Vec<u64>)> = None;
        let mut waits = 0;
        for _ in 0..=WALK_TRIES {
            // Running after a read that is not sure: a moment for it to block
            // again, where it most likely was.
            while before.1 == Ok(SyscallState::Running) && last.is_some() && waits < RUN_WAITS {
                std::thread::sleep(std::time::Duration::from_micros(100));
                waits += 1;
                before = look();
            }
            let user = self.walk_at(tgid, tid, &before.1);
            let after = look();
            let agrees =
                || last.as_ref().is_some_and(|(at, prev)| *at == before.1 && *prev == user);
            if still(&before, &after) || (!user.is_empty() && agrees()) {
                return (before.1, user);
            }
            if !user.is_empty() {
                last = Some((before.1, user));
            }
            before = after;
        }
        match last {
            Some((at, mut user)) => {
                user.truncate(1);
                user.push(CUT_MARK | cut::RAN);
                (at, user)
            }
            None => (before.1, Vec::new()),
        }
    }

    /// The user stack of a thread in state `syscall`: walked from its
    /// registers where it is blocked.
    fn walk_at(&mut self, tgid: u32, tid: u32, syscall: &Result<SyscallState, String>) -> Vec<u64> {
        match syscall {
            Ok(SyscallState::In(s)) => self.walk(tgid, tid, s.pc, s.sp),
            Ok(SyscallState::Blocked { sp, pc }) => self.walk(tgid, tid, *pc, *sp),
            _ => Vec::new(),
        }
    }

    /// The user stack of thread `tid` of `tgid`, off its CPU with the user
    /// registers `(pc, sp, bp)` (as a BPF iterator read them): unwound from the
    /// tables as [`Snapshotter::take`] unwinds it, with the frame pointer known.
    pub fn user_stack(&mut self, tgid: u32, tid: u32, (pc, sp, bp): (u64, u64, u64)) -> Vec<u64> {
        self.regs.insert(tid, TaskRegs { tid, tgid, ip: pc, sp, bp });
        self.walk(tgid, tid, pc, sp)
    }

    /// The user stack from its pc and sp: unwound from the tables on x86-64
    /// (the one architecture they are read for), else scanned, marked a guess.
    fn walk(&mut self, tgid: u32, tid: u32, pc: u64, sp: u64) -> Vec<u64> {
        if pc == 0 {
            return Vec::new();
        }
        let bp = if cfg!(target_arch = "x86_64") { self.bp_of(tid, pc, sp) } else { None };
        let regions = self.regions.entry(tgid).or_insert_with(|| procfs::regions_of(tgid));
        let mem = ProcessMemory { pid: tgid };
        if cfg!(target_arch = "x86_64") {
            let py = self.python.of(tgid).map(|proc| {
                let seen = crate::stacks::python::thread_id_seen(&proc, tgid, tid);
                Python { groups: groups(&mem, &proc, seen), proc, next: 0 }
            });
            let jit = self.jit.of(tgid);
            let code = self.tables.code_of(tgid);
            return now::walk(&code, regions, &mem, (pc, sp, bp), py, jit.as_ref());
        }
        let mut frames = Walker::new(regions, &mem, Arch::native()).walk(pc, sp);
        frames.push(now::GUESSED);
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_ran_while_its_stack_was_read_did_not_stay_still() {
        use crate::sys::thread::Syscall;
        let at = |pc| Ok(SyscallState::In(Syscall { nr: 232, args: [0; 6], sp: 0x7000, pc }));
        let (here, there) = (at(0x1000), at(0x2000));
        let running: Result<SyscallState, String> = Ok(SyscallState::Running);
        let look = |cpus: Option<u64>, s: &Result<SyscallState, String>| (cpus, s.clone());
        assert!(still(&look(Some(5), &here), &look(Some(5), &here)));
        assert!(!still(&look(Some(5), &here), &look(Some(6), &there)));
        // Woke, ran, and is blocked again at the same place: the words
        // between may be of the moment it ran.
        assert!(!still(&look(Some(5), &here), &look(Some(6), &here)));
        // Running now: after the read if it has had no CPU since.
        assert!(still(&look(Some(5), &here), &look(Some(5), &running)));
        assert!(!still(&look(Some(5), &here), &look(Some(6), &running)));
        assert!(still(&look(Some(5), &here), &look(None, &Err("gone".into()))));
        // No schedstat: the registers alone, and running is not sure.
        assert!(still(&look(None, &here), &look(None, &here)));
        assert!(!still(&look(None, &here), &look(None, &there)));
        assert!(!still(&look(None, &here), &look(None, &running)));
    }

    #[test]
    fn a_sleeping_thread_of_ours_shows_its_wait() {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send((unsafe { libc::gettid() } as u32, crate::util::clock::monotonic_now()))
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(300));
        });
        let (tid, began) = rx.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let s = Snapshotter::default().take(std::process::id(), tid).expect("the thread lives");
        t.join().unwrap();
        assert_eq!(s.state, 'S');
        assert!(s.blocked());
        let since = s.since.expect("an estimate");
        assert!((since as i64 - began as i64).abs() < 20_000_000, "since {since} vs {began}");
        // The rest needs root (syscall, stack); without it the reasons are kept.
        if unsafe { libc::geteuid() } == 0 {
            let k = s.kernel.expect("root reads kernel stacks");
            assert!(k.iter().any(|f| f.name().contains("nanosleep")), "{k:?}");
            assert!(matches!(s.syscall, Ok(SyscallState::In(_))), "{:?}", s.syscall);
            assert!(s.user.len() >= 2, "pc and at least one caller: {:x?}", s.user);
            // Unwound from the tables: whole, or cut only where a frame of this
            // test (built with frame pointers) needs the frame pointer, which
            // /proc does not show.
            use topwaits_common::walker::{cut, is_cut_mark, CUT_MARK};
            let marks: Vec<u64> = s.user.iter().copied().filter(|&w| is_cut_mark(w)).collect();
            assert!(marks.is_empty() || marks == [CUT_MARK | cut::BP_UNKNOWN], "{:x?}", s.user);
        } else {
            assert!(s.kernel.is_err());
        }
        assert!(
            Snapshotter::default().take(std::process::id(), u32::MAX - 1).is_none(),
            "a missing thread"
        );
    }
}
