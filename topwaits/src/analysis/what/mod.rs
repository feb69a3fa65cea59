//! What each wait was for: the classification of a wait's [`What`] (its syscall,
//! that call's first argument, a kernel lock, a sleep's asked time, a preemption)
//! with its kernel and user frames into a [`WaitsOn`]. Pure: file descriptors,
//! sockets and processes are resolved through [`Resolve`] (`/proc` in [`procfs`]).

pub mod procfs;
mod runtimes;

pub use runtimes::{kind_by_frames as runtime_by_frames, Runtime, JAVA_MONITOR, OBJECT_WAIT};

use std::collections::{BTreeSet, HashMap};

use topwaits_common::{what as bits, What};

use crate::model::label::WaitsOn;
use crate::model::Record;
use crate::sys::syscalls::syscall_info;

/// What a file descriptor was when it was resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FdKind {
    /// A regular file or a block device, with the device it lives on.
    File { device: Option<String> },
    /// A pipe or a FIFO, by inode.
    Pipe { inode: u64 },
    /// A socket, by inode.
    Socket { inode: u64 },
    /// An epoll set.
    Epoll,
    /// Anything else: a terminal, an eventfd, ...
    Other,
}

/// A resolved file descriptor: its `/proc/PID/fd` link and kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fd {
    pub target: String,
    pub kind: FdKind,
}

/// What classification asks of the system.
pub trait Resolve {
    /// File descriptor `fd` of process `tgid`, if it is still open.
    fn fd(&mut self, tgid: u32, fd: u64) -> Option<Fd>;
    /// A socket of `tgid`'s network namespace by inode ("TCP a:p -> b:q, state").
    fn socket(&mut self, tgid: u32, inode: u64) -> Option<String>;
    /// The processes holding each of the pipes `inodes` open ("pid 12 cat (w)"),
    /// by inode: asked once for all of a report's pipes, since finding them
    /// means reading every process's descriptors.
    fn pipe_holders(&mut self, inodes: &BTreeSet<u64>) -> HashMap<u64, Vec<String>>;
    /// The descriptors an epoll set watches, each with what it is.
    fn epoll_fds(&mut self, tgid: u32, epfd: u64) -> Vec<String>;
    /// A process by tgid ("pid 12 (cat)").
    fn process(&mut self, tgid: u32) -> Option<String>;
    /// The kernel symbol at exactly `addr` (a static lock), if any.
    fn kernel_symbol(&mut self, addr: u64) -> Option<String>;
    /// Takes the kernel locks of the report to label that a kernel symbol
    /// names exactly, by address (see `stacks::symbolize::Resolved`).
    fn take_kernel_objects(&mut self, _named: crate::util::fasthash::FastMap<u64, String>) {}
    /// The name of the Go runtime's wait reason `reason` in process `tgid`.
    fn go_wait_reason(&mut self, _tgid: u32, _reason: u64) -> Option<String> {
        None
    }
    /// The object Java monitor `monitor` (an `ObjectMonitor*`) of process
    /// `tgid` locks, as jstack names it: `<0x...> (a java.lang.Object)`.
    fn java_monitor(&mut self, _tgid: u32, _monitor: u64) -> Option<String> {
        None
    }
    /// The name of the JVM's own lock (`VMOperation_lock`) whose condition
    /// variable holds the futex word at `addr` in process `tgid`.
    fn jvm_lock(&mut self, _tgid: u32, _addr: u64) -> Option<String> {
        None
    }
}

/// Parts of the names of glibc's mutex lock path.
const MUTEX_FRAMES: &[&str] =
    &["mutex_lock", "mutex_timedlock", "mutex_clocklock", "lll_lock_wait"];

/// Lock-free futex waits that user frames name, by a part of the function.
const NAMED_FUTEX: &[(&str, &str)] = &[
    ("cond_wait", "condition variable"),
    ("cond_timedwait", "condition variable"),
    ("cond_clockwait", "condition variable"),
    ("sem_wait", "semaphore"),
    ("sem_timedwait", "semaphore"),
    ("sem_clockwait", "semaphore"),
    ("rwlock", "rwlock"),
    ("barrier_wait", "barrier"),
    ("pthread_join", "thread join"),
    ("clockjoin", "thread join"),
];

/// What the user frames nearest the leaf say a futex wait is: `Some(None)` for a
/// mutex, `Some(Some(name))` for a named lock-free kind, `None` when none tells.
/// The frames nearest the leaf decide: a condvar wait takes a mutex too, higher up.
pub fn futex_by_frames(frames: &[&str]) -> Option<Option<&'static str>> {
    for name in frames.iter().take(4) {
        if MUTEX_FRAMES.iter().any(|m| name.contains(m)) {
            return Some(None);
        }
        if let Some((_, what)) = NAMED_FUTEX.iter().find(|(part, _)| name.contains(part)) {
            return Some(Some(what));
        }
    }
    None
}

/// `futex` operations that take a PI lock.
const FUTEX_LOCK_PI: u32 = 6;
const FUTEX_LOCK_PI2: u32 = 13;

/// Kernel functions that wait for block I/O.
const IO_FRAMES: &[&str] = &[
    "io_schedule",
    "blk_",
    "bio_",
    "submit_bio",
    "folio_wait",
    "wait_on_page",
    "jbd2",
    "bit_wait_io",
];

/// Kernel functions (callers of the lock) that name an rwsem.
const MMAP_LOCK_FRAMES: &[&str] = &[
    "mmap_lock",
    "mmap_read_lock",
    "mmap_write_lock",
    "lock_mm_and_find_vma",
    "vm_mmap",
    "vm_munmap",
    "__vm_munmap",
    "do_user_addr_fault",
    "do_mprotect",
    "do_madvise",
    "__do_sys_brk",
];
const INODE_LOCK_FRAMES: &[&str] = &[
    "inode_lock",
    "_file_write_iter",
    "lookup_slow",
    "filename_create",
    "do_truncate",
    "iterate_dir",
];

fn any_frame(frames: &[&str], parts: &[&str]) -> bool {
    frames.iter().any(|f| parts.iter().any(|p| f.contains(p)))
}

/// A user page fault: its frames, and no syscall entry below them.
fn in_page_fault(kernel: &[&str]) -> bool {
    any_frame(kernel, &["exc_page_fault", "do_user_addr_fault"])
        && !any_frame(kernel, &["do_syscall_64", "entry_SYSCALL"])
}

/// What every wait's label asks of its kernel frames, found by substring: worked
/// out once per distinct kernel stack of a report (records share their stacks).
#[derive(Clone, Copy)]
struct KernelFacts {
    /// Waiting on block I/O ([`IO_FRAMES`]).
    io: bool,
    /// In a user page fault ([`in_page_fault`]).
    fault: bool,
}

impl KernelFacts {
    fn of(kernel: &[&str]) -> Self {
        KernelFacts { io: any_frame(kernel, IO_FRAMES), fault: in_page_fault(kernel) }
    }
}

/// The kernel lock in `w`, named by its address or by the functions that took it.
fn kernel_lock(w: &What, kernel: &[&str], r: &mut dyn Resolve) -> WaitsOn {
    let f = w.flags & bits::LOCK_FLAGS;
    let (lock, mode) = if f & bits::LCB_MUTEX != 0 {
        (if f & bits::LCB_RT != 0 { "rt_mutex" } else { "mutex" }, None)
    } else if f & (bits::LCB_READ | bits::LCB_WRITE) != 0 {
        let mode = if f & bits::LCB_WRITE != 0 { "write" } else { "read" };
        (if f & bits::LCB_PERCPU != 0 { "percpu rwsem" } else { "rwsem" }, Some(mode.to_string()))
    } else if f & bits::LCB_RT != 0 {
        ("rt_mutex", None)
    } else {
        ("semaphore", None)
    };
    let name = r.kernel_symbol(w.obj).or_else(|| {
        if lock.ends_with("rwsem") && any_frame(kernel, MMAP_LOCK_FRAMES) {
            Some("mmap_lock".to_string())
        } else if any_frame(kernel, INODE_LOCK_FRAMES) {
            Some("i_rwsem".to_string())
        } else {
            None
        }
    });
    WaitsOn::KernelLock { lock: lock.to_string(), mode, addr: Some(w.obj), name }
}

/// The first kernel function that is not the scheduler's own: where a wait that no
/// syscall explains sat.
fn telling_kernel_frame(kernel: &[&str]) -> Option<String> {
    const SCHED: &[&str] =
        &["schedule", "__schedule", "preempt_schedule", "do_nanosleep", "io_schedule"];
    kernel
        .iter()
        .find(|f| !SCHED.iter().any(|s| f.starts_with(s) || f.ends_with(s)))
        .map(|f| format!("in {f}"))
}

/// The locks of Go's `sync` package, by a frame of their slow path, with the
/// name a goroutine's wait on them gets.
const GO_LOCK_FRAMES: &[(&str, &str)] = &[
    ("sync.(*Mutex).lockSlow", "sync.Mutex"),
    ("sync.(*Mutex).Lock", "sync.Mutex"),
    ("sync.(*RWMutex).RLock", "sync.RWMutex (read)"),
    ("sync.(*RWMutex).Lock", "sync.RWMutex"),
    ("sync.(*WaitGroup).Wait", "sync.WaitGroup"),
    ("sync.(*Cond).Wait", "sync.Cond"),
];

/// A goroutine's wait for the runtime's wait `reason`: a sleep is a sleep; a
/// semaphore wait is named by the `sync` lock its frames go through.
pub fn goroutine(reason: &str, user: &[&str]) -> WaitsOn {
    if reason == "sleep" {
        return WaitsOn::Sleep {
            requested_ns: None,
            syscall: "time.Sleep".into(),
            to_deadline: false,
        };
    }
    let named = user
        .iter()
        .find_map(|f| GO_LOCK_FRAMES.iter().find(|(frame, _)| f.starts_with(frame)))
        .map(|(_, name)| name.to_string());
    let reason = match (reason, named) {
        (_, Some(lock)) => lock,
        ("IO wait", None) => "network I/O".to_string(),
        (r, None) => r.to_string(),
    };
    WaitsOn::Goroutine { reason }
}

/// Classifies one wait. `kernel` and `user` are the frame names, leaf first.
pub fn classify(
    w: &What,
    kernel: &[&str],
    user: &[&str],
    tgid: u32,
    r: &mut dyn Resolve,
) -> WaitsOn {
    let mut on = without_holders(w, kernel, KernelFacts::of(kernel), user, tgid, r);
    with_pipe_holders(std::iter::once(&mut on), r);
    on
}

/// Fills in the holders of every pipe waited on in `waits`, asked of `r` at once.
fn with_pipe_holders<'a>(waits: impl Iterator<Item = &'a mut WaitsOn>, r: &mut dyn Resolve) {
    let mut pipes: Vec<&mut WaitsOn> =
        waits.filter(|w| matches!(w, WaitsOn::Pipe { inode: Some(_), .. })).collect();
    if pipes.is_empty() {
        return;
    }
    let inodes: BTreeSet<u64> = pipes
        .iter()
        .filter_map(|w| match w {
            WaitsOn::Pipe { inode, .. } => *inode,
            _ => None,
        })
        .collect();
    let holders = r.pipe_holders(&inodes);
    for w in pipes.iter_mut() {
        if let WaitsOn::Pipe { inode: Some(i), holders: h, .. } = w {
            *h = holders.get(i).cloned().unwrap_or_default();
        }
    }
}

/// [`classify`], but a pipe's holders are left for [`with_pipe_holders`].
fn without_holders(
    w: &What,
    kernel: &[&str],
    facts: KernelFacts,
    user: &[&str],
    tgid: u32,
    r: &mut dyn Resolve,
) -> WaitsOn {
    if w.flags & bits::GOROUTINE != 0 {
        let reason =
            r.go_wait_reason(tgid, w.arg0).unwrap_or_else(|| format!("wait reason {}", w.arg0));
        return goroutine(&reason, user);
    }
    if w.flags & bits::PREEMPTED != 0 {
        let ran_instead = (w.obj != 0)
            .then(|| r.process(w.obj as u32).unwrap_or_else(|| format!("pid {}", w.obj)));
        return WaitsOn::RunQueue { ran_instead };
    }
    if w.flags & bits::KLOCK != 0 {
        return kernel_lock(w, kernel, r);
    }
    let io = facts.io;
    if facts.fault {
        return WaitsOn::PageFault { major: io };
    }
    let Some(nr) = w.nr.checked_sub(1) else {
        if io {
            return WaitsOn::Disk { device: None, file: None, syscall: None };
        }
        return WaitsOn::Other {
            what: telling_kernel_frame(kernel).unwrap_or_else(|| "not in a syscall".to_string()),
        };
    };
    let Some(info) = syscall_info(nr as u64) else {
        if io {
            return WaitsOn::Disk { device: None, file: None, syscall: None };
        }
        return WaitsOn::Other { what: format!("syscall {nr}") };
    };
    let syscall = info.name.to_string();
    match info.name {
        "futex" | "futex_waitv" => {
            let op = (w.flags >> bits::FUTEX_OP_SHIFT) & 0x7f;
            if w.flags & bits::FUTEX_OP != 0 && matches!(op, FUTEX_LOCK_PI | FUTEX_LOCK_PI2) {
                return WaitsOn::Mutex { addr: w.arg0, pi: true };
            }
            let asked = (w.flags & bits::ASKED != 0).then_some(w.obj);
            if let Some(runtime) = runtimes::by_frames(user, asked, w.arg0) {
                if w.flags & bits::JMONITOR != 0 {
                    return runtimes::in_monitor(runtime, w.obj, r.java_monitor(tgid, w.obj));
                }
                return runtimes::internal_named(runtime, |addr| r.jvm_lock(tgid, addr));
            }
            match futex_by_frames(user) {
                Some(None) => WaitsOn::Mutex { addr: w.arg0, pi: false },
                Some(Some(name)) => WaitsOn::Futex { lock: name.to_string(), addr: w.arg0 },
                None => WaitsOn::Futex { lock: "futex".to_string(), addr: w.arg0 },
            }
        }
        "nanosleep" | "clock_nanosleep" => WaitsOn::Sleep {
            requested_ns: (w.flags & bits::SLEEP != 0).then_some(w.obj),
            syscall,
            to_deadline: w.flags & bits::SLEEP_DEADLINE != 0,
        },
        "wait4" | "waitid" => WaitsOn::Child { syscall },
        "pause" | "rt_sigsuspend" | "rt_sigtimedwait" => WaitsOn::Signal { syscall },
        // select on no descriptors is how portable code sleeps (PostgreSQL's
        // pg_usleep): nothing to poll but the time.
        "select" | "pselect6" if w.arg0 == 0 => {
            WaitsOn::Sleep { requested_ns: None, syscall, to_deadline: false }
        }
        "poll" | "ppoll" | "select" | "pselect6" => WaitsOn::Poll { via: syscall, fds: Vec::new() },
        "epoll_wait" | "epoll_pwait" | "epoll_pwait2" => {
            WaitsOn::Poll { fds: r.epoll_fds(tgid, w.arg0), via: syscall }
        }
        "sync" => WaitsOn::Disk { device: None, file: None, syscall: Some(syscall) },
        _ if info.fd_arg == Some(0) => by_fd(w.arg0, syscall, io, tgid, r),
        _ if io => WaitsOn::Disk { device: None, file: None, syscall: Some(syscall) },
        _ => WaitsOn::Other { what: format!("in {syscall}") },
    }
}

/// A wait in a call on file descriptor `fd`, by what the descriptor is.
fn by_fd(fd: u64, syscall: String, io: bool, tgid: u32, r: &mut dyn Resolve) -> WaitsOn {
    let Some(resolved) = r.fd(tgid, fd) else {
        if io {
            return WaitsOn::Disk { device: None, file: None, syscall: Some(syscall) };
        }
        return WaitsOn::File { fd, target: None, syscall };
    };
    match resolved.kind {
        FdKind::Socket { inode } => WaitsOn::Socket { fd, socket: r.socket(tgid, inode), syscall },
        FdKind::Pipe { inode } => {
            WaitsOn::Pipe { fd, inode: Some(inode), holders: Vec::new(), syscall }
        }
        FdKind::File { device } => {
            WaitsOn::Disk { device, file: Some(resolved.target), syscall: Some(syscall) }
        }
        FdKind::Epoll => WaitsOn::Poll { fds: r.epoll_fds(tgid, fd), via: syscall },
        FdKind::Other => WaitsOn::File { fd, target: Some(resolved.target), syscall },
    }
}

/// Labels `records`, each with the [`What`] of the same index. The holders of
/// all their pipes are found in one pass over the processes' descriptors.
pub fn label(records: &mut [Record], whats: &[What], r: &mut dyn Resolve) {
    // By the address of the kernel stack's shared frames.
    let mut facts: HashMap<usize, KernelFacts> = HashMap::new();
    for (rec, w) in records.iter_mut().zip(whats) {
        if rec.on_cpu() {
            // Samples of a running thread: no wait to classify.
            continue;
        }
        let kernel: Vec<_> = rec.kernel.frames().iter().map(|f| f.name()).collect();
        let user: Vec<_> = rec.user.frames().iter().map(|f| f.name()).collect();
        let (kernel, user): (Vec<&str>, Vec<&str>) =
            (kernel.iter().map(AsRef::as_ref).collect(), user.iter().map(AsRef::as_ref).collect());
        let shared = rec.kernel.frames().as_ptr() as usize;
        let facts = *facts.entry(shared).or_insert_with(|| KernelFacts::of(&kernel));
        rec.waits_on = Some(without_holders(w, &kernel, facts, &user, rec.tgid, r));
    }
    with_pipe_holders(records.iter_mut().filter_map(|rec| rec.waits_on.as_mut()), r);
}

#[cfg(test)]
pub(crate) mod tests;
