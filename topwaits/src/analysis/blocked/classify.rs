//! What a blocked thread waits on, from its syscall, its user frames and the futex
//! word: a lock with an owner (a glibc mutex, a PI futex), a futex without one
//! (condition variable, semaphore, ...), a file descriptor, a sleep, or a child.
//! Pure: memory comes in as a function.

use crate::analysis::what::{Runtime, JAVA_MONITOR, OBJECT_WAIT};
use crate::stacks::hotspot::monitors::MonitorWait;
use crate::sys::thread::Syscall;

pub use crate::sys::syscalls::{syscall_info, syscall_info_by_name, SyscallInfo};

/// `futex` operations (the low bits of `op`).
const FUTEX_WAIT: u64 = 0;
const FUTEX_LOCK_PI: u64 = 6;
const FUTEX_WAIT_BITSET: u64 = 9;
const FUTEX_WAIT_REQUEUE_PI: u64 = 11;
const FUTEX_LOCK_PI2: u64 = 13;
const FUTEX_PRIVATE: u64 = 128;
/// The owner's tid in a PI futex word.
const FUTEX_TID_MASK: u32 = 0x3fff_ffff;
/// Where glibc's `pthread_mutex_t` keeps the owner's tid, after the lock word
/// (`__lock`, `__count`, `__owner`) on x86-64 and arm64.
pub const GLIBC_MUTEX_OWNER_OFFSET: u64 = 8;

/// What a futex wait is, as far as can be told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FutexKind {
    /// A glibc mutex: the user frames name the mutex lock path.
    Mutex,
    /// A glibc mutex by its shape alone: the lock word says "locked with waiters"
    /// and the owner field names a live thread, but no frame confirms it.
    LikelyMutex,
    /// A priority-inheritance futex: its word holds the owner's tid.
    PiLock,
    /// A lock-free kind named by the user frames.
    Named(&'static str),
    /// A language runtime's wait, named by its frames (a Java monitor): the
    /// futex is the waiting thread's own, so its address says nothing.
    Runtime(&'static str),
    /// A Java monitor read from the JVM: `addr` is the `ObjectMonitor`,
    /// `object` names what it locks; entering a `synchronized`, or waiting in
    /// `Object.wait` for a notify.
    JavaMonitor { object: String, entering: bool },
    /// `pthread_join`: the futex is the joined thread's tid field, which the kernel
    /// clears when that thread exits; the "owner" is that thread.
    Join,
    /// Nothing tells.
    Unknown,
}

pub use crate::sys::thread::{epoll_fds, fd_access, Holder, MAX_POLL_FDS};

/// What a blocked thread waits on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitOn {
    /// A futex at `addr`; `owner` where the lock records one.
    Futex { addr: u64, kind: FutexKind, owner: Option<u32>, private: bool },
    /// A file descriptor: what it is, and for a pipe or socket, the other processes
    /// that hold it (pid, comm, access `r`/`w`/`rw`).
    Fd { fd: u64, target: String, holders: Vec<(u32, Vec<u8>, &'static str)> },
    /// Several file descriptors at once (`via` poll, ppoll or an epoll set): each
    /// fd with what it is; `more` counts those left out of a long list.
    Poll { via: &'static str, fds: Vec<(u64, String)>, more: usize },
    /// A sleep for a set time.
    Sleep,
    /// A child process to change state.
    Child,
    /// Something else: the syscall's name, or the kernel function it waits in.
    Other(String),
    /// Not in a syscall (running, or blocked in a page fault).
    NoSyscall(String),
}

impl WaitOn {
    /// How reports name it.
    pub fn describe(&self) -> String {
        match self {
            WaitOn::Futex { addr, kind, owner, .. } => {
                let what = match kind {
                    FutexKind::Mutex => "mutex".to_string(),
                    FutexKind::LikelyMutex => "mutex (by its layout)".to_string(),
                    FutexKind::PiLock => "PI lock".to_string(),
                    FutexKind::Named(n) | FutexKind::Runtime(n) => n.to_string(),
                    FutexKind::JavaMonitor { object, entering: true } => {
                        format!("Java monitor {object} (synchronized)")
                    }
                    FutexKind::JavaMonitor { object, entering: false } => {
                        format!("a notify of {object} (Object.wait)")
                    }
                    FutexKind::Join => "thread join".to_string(),
                    FutexKind::Unknown => "futex".to_string(),
                };
                match (kind, owner) {
                    (FutexKind::Join, Some(o)) => format!("the exit of tid {o} (thread join)"),
                    (FutexKind::Join, None) => "the exit of a thread (thread join)".to_string(),
                    (FutexKind::Runtime(_), _) | (FutexKind::JavaMonitor { .. }, None) => what,
                    (FutexKind::JavaMonitor { .. }, Some(o)) => format!("{what} held by tid {o}"),
                    (_, Some(o)) => format!("{what} {addr:#x} held by tid {o}"),
                    (FutexKind::Mutex | FutexKind::PiLock, None) => {
                        format!("{what} {addr:#x}, owner not recorded")
                    }
                    _ => format!("{what} {addr:#x} (no owner: anyone may wake it)"),
                }
            }
            WaitOn::Fd { fd, target, .. } => format!("fd {fd} ({target})"),
            WaitOn::Poll { via, fds, more } => {
                let list: Vec<String> = fds.iter().map(|(fd, t)| format!("{fd} ({t})")).collect();
                let more = if *more > 0 { format!(" and {more} more") } else { String::new() };
                format!("fds {}{more} ({via})", list.join(", "))
            }
            WaitOn::Sleep => "a timed sleep".to_string(),
            WaitOn::Child => "a child process".to_string(),
            WaitOn::Other(s) | WaitOn::NoSyscall(s) => s.clone(),
        }
    }

    /// The lock's name in the wait-for graph.
    pub fn lock_name(&self) -> String {
        match self {
            WaitOn::Futex { addr, kind: FutexKind::PiLock, .. } => format!("PI lock {addr:#x}"),
            WaitOn::Futex { owner: Some(o), kind: FutexKind::Join, .. } => {
                format!("exit of tid {o}")
            }
            WaitOn::Futex { kind: FutexKind::Runtime(n), .. } => n.to_string(),
            WaitOn::Futex { kind: FutexKind::JavaMonitor { object, .. }, .. } => {
                format!("Java monitor {object}")
            }
            WaitOn::Futex { addr, .. } => format!("mutex {addr:#x}"),
            other => other.describe(),
        }
    }
}

/// What [`futex`] can ask about threads.
pub struct Threads<'a> {
    /// Whether a tid exists (an owner may live in another process).
    pub live: &'a dyn Fn(u32) -> bool,
    /// Whether a tid is a thread of the waiter's own process.
    pub sibling: &'a dyn Fn(u32) -> bool,
}

/// Classifies a futex wait. `frames` are the user function names, leaf first;
/// `read_u32` reads the process's memory.
pub fn futex(
    s: &Syscall,
    tid: u32,
    frames: &[&str],
    read_u32: &dyn Fn(u64) -> Option<u32>,
    threads: &Threads,
) -> WaitOn {
    let (addr, op, val) = (s.args[0], s.args[1], s.args[2]);
    let private = op & FUTEX_PRIVATE != 0;
    let cmd = op & 127;
    if matches!(cmd, FUTEX_LOCK_PI | FUTEX_LOCK_PI2) {
        let owner = read_u32(addr).map(|w| w & FUTEX_TID_MASK).filter(|&o| o != 0);
        return WaitOn::Futex { addr, kind: FutexKind::PiLock, owner, private };
    }
    if !matches!(cmd, FUTEX_WAIT | FUTEX_WAIT_BITSET | FUTEX_WAIT_REQUEUE_PI) {
        return WaitOn::Other(format!("futex op {cmd}"));
    }
    // pthread_join waits until the joined thread's tid field, which holds its tid,
    // changes: the expected value is a sibling's tid, and the word still holds it.
    // Lock words hold 0 to 2, and tids 1 and 2 are init and kthreadd.
    let joined = u32::try_from(val)
        .ok()
        .filter(|&v| v > 2 && v != tid && read_u32(addr) == Some(v) && (threads.sibling)(v));
    match crate::analysis::what::runtime_by_frames(frames) {
        Some(Runtime::Sleep) => return WaitOn::Sleep,
        Some(Runtime::Named(what)) => {
            return WaitOn::Futex { addr, kind: FutexKind::Runtime(what), owner: None, private }
        }
        Some(Runtime::Own(what)) => {
            return WaitOn::Futex { addr, kind: FutexKind::Named(what), owner: None, private }
        }
        None => {}
    }
    match crate::analysis::what::futex_by_frames(frames) {
        Some(None) => {
            let owner = read_u32(addr + GLIBC_MUTEX_OWNER_OFFSET).filter(|&o| o != 0 && o != tid);
            return WaitOn::Futex { addr, kind: FutexKind::Mutex, owner, private };
        }
        Some(Some(what)) => {
            let (kind, owner) = if what == "thread join" {
                (FutexKind::Join, joined)
            } else {
                (FutexKind::Named(what), None)
            };
            return WaitOn::Futex { addr, kind, owner, private };
        }
        None => {}
    }
    if let Some(t) = joined {
        return WaitOn::Futex { addr, kind: FutexKind::Join, owner: Some(t), private };
    }
    // No telling frame: glibc's lock path waits for the value 2 ("locked, with
    // waiters"); take the owner field only if it names a live thread.
    if val == 2 && read_u32(addr).is_some_and(|w| w != 0) {
        if let Some(owner) = read_u32(addr + GLIBC_MUTEX_OWNER_OFFSET)
            .filter(|&o| o != 0 && o != tid && (threads.live)(o))
        {
            return WaitOn::Futex {
                addr,
                kind: FutexKind::LikelyMutex,
                owner: Some(owner),
                private,
            };
        }
    }
    WaitOn::Futex { addr, kind: FutexKind::Unknown, owner: None, private }
}

/// A JVM thread's monitor wait, named by its runtime's frames, made the
/// monitor itself where the JVM says which (read by `stacks::hotspot`): its
/// object, and for a contended `synchronized` its owner. A wait the JVM does
/// not confirm (the thread has moved on since its frames were read) stays as
/// it was.
pub fn java_monitor(wait: &mut WaitOn, m: &MonitorWait) {
    let WaitOn::Futex { addr, kind, owner, .. } = wait else { return };
    let FutexKind::Runtime(what) = kind else { return };
    let agrees = if m.entering { *what == JAVA_MONITOR } else { *what == OBJECT_WAIT };
    if !agrees {
        return;
    }
    *addr = m.monitor;
    *kind = FutexKind::JavaMonitor { object: m.name(), entering: m.entering };
    *owner = m.owner;
}

/// Classifies a wait that is not on a futex, from the syscall alone.
pub fn by_syscall(info: Option<SyscallInfo>, nr: u64) -> WaitOn {
    match info.map(|i| i.name) {
        Some("nanosleep" | "clock_nanosleep") => WaitOn::Sleep,
        Some("wait4" | "waitid") => WaitOn::Child,
        Some(name @ ("poll" | "ppoll")) => WaitOn::Poll { via: name, fds: Vec::new(), more: 0 },
        Some(name) => WaitOn::Other(format!("in {name}")),
        None => WaitOn::Other(format!("in syscall {nr}")),
    }
}

/// The fds of a `struct pollfd` array (8 bytes each: an `int` fd, then two
/// `short`s); negative fds, which poll ignores, are left out.
pub fn pollfds(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .filter_map(|c| u64::try_from(i32::from_ne_bytes([c[0], c[1], c[2], c[3]])).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANY: Threads = Threads { live: &|_| true, sibling: &|_| false };

    fn call(op: u64, val: u64) -> Syscall {
        Syscall { nr: 202, args: [0x1000, op, val, 0, 0, 0], sp: 0, pc: 0 }
    }

    /// Memory with a lock word at 0x1000 and an owner field at 0x1008.
    fn mem(word: u32, owner: u32) -> impl Fn(u64) -> Option<u32> {
        move |a| match a {
            0x1000 => Some(word),
            0x1008 => Some(owner),
            _ => None,
        }
    }

    #[test]
    fn glibc_mutex_names_its_owner() {
        let w = futex(
            &call(128, 2),
            7,
            &["__lll_lock_wait", "pthread_mutex_lock", "worker"],
            &mem(2, 42),
            &ANY,
        );
        assert_eq!(
            w,
            WaitOn::Futex { addr: 0x1000, kind: FutexKind::Mutex, owner: Some(42), private: true }
        );
        assert_eq!(w.describe(), "mutex 0x1000 held by tid 42");
        assert_eq!(w.lock_name(), "mutex 0x1000");
    }

    #[test]
    fn a_mutex_without_owner_says_so() {
        let w = futex(&call(128, 2), 7, &["___pthread_mutex_lock"], &mem(2, 0), &ANY);
        assert_eq!(w.describe(), "mutex 0x1000, owner not recorded");
        let own = futex(&call(128, 2), 7, &["pthread_mutex_lock"], &mem(2, 7), &ANY);
        assert!(
            matches!(own, WaitOn::Futex { owner: None, .. }),
            "a thread never waits on itself: {own:?}"
        );
    }

    #[test]
    fn a_jvms_waits_are_named_as_the_other_views_name_them() {
        let park =
            ["__futex_abstimed_wait_common", "pthread_cond_wait", "os::PlatformEvent::park()"];
        let monitor =
            [&park[..], &["ObjectMonitor::EnterI(JavaThread*)", "ObjectMonitor::enter"]].concat();
        let w = futex(&call(137, 0), 7, &monitor, &mem(0, 0), &ANY);
        assert_eq!(w.describe(), "Java monitor (synchronized)");
        assert_eq!(w.lock_name(), "Java monitor (synchronized)");
        let sleep = [&park[..], &["JavaThread::sleep(long)", "JVM_Sleep"]].concat();
        assert_eq!(futex(&call(137, 0), 7, &sleep, &mem(0, 0), &ANY), WaitOn::Sleep);
    }

    #[test]
    fn condvars_and_semaphores_have_no_owner() {
        let w = futex(
            &call(137, 0),
            7,
            &["__futex_abstimed_wait_common", "__pthread_cond_wait", "consumer"],
            &mem(2, 42),
            &ANY,
        );
        assert_eq!(
            w,
            WaitOn::Futex {
                addr: 0x1000,
                kind: FutexKind::Named("condition variable"),
                owner: None,
                private: true
            }
        );
        assert!(w.describe().contains("no owner"), "{}", w.describe());
        let s = futex(
            &call(128, 0),
            7,
            &["do_futex_wait", "__new_sem_wait_slow64", "sem_wait"],
            &mem(0, 0),
            &ANY,
        );
        assert!(matches!(s, WaitOn::Futex { kind: FutexKind::Named("semaphore"), .. }), "{s:?}");
    }

    #[test]
    fn layout_alone_needs_a_live_owner() {
        let w = futex(
            &call(128, 2),
            7,
            &[],
            &mem(2, 42),
            &Threads { live: &|t| t == 42, sibling: &|_| false },
        );
        assert!(
            matches!(w, WaitOn::Futex { kind: FutexKind::LikelyMutex, owner: Some(42), .. }),
            "{w:?}"
        );
        let dead = futex(
            &call(128, 2),
            7,
            &[],
            &mem(2, 42),
            &Threads { live: &|_| false, sibling: &|_| false },
        );
        assert!(
            matches!(dead, WaitOn::Futex { kind: FutexKind::Unknown, owner: None, .. }),
            "{dead:?}"
        );
        let other_value = futex(&call(128, 0), 7, &[], &mem(2, 42), &ANY);
        assert!(matches!(other_value, WaitOn::Futex { kind: FutexKind::Unknown, .. }));
        let unreadable = futex(&call(128, 2), 7, &[], &|_| None, &ANY);
        assert!(matches!(unreadable, WaitOn::Futex { kind: FutexKind::Unknown, .. }));
    }

    #[test]
    fn a_join_waits_for_the_joined_thread() {
        let siblings = Threads { live: &|_| true, sibling: &|t| t == 0x277b };
        // Unresolved libc frames, as on Debian: the value and the word tell.
        let w = futex(
            &call(0x109, 0x277b),
            7,
            &["libc.so.6+0x85f16", "main"],
            &mem(0x277b, 0),
            &siblings,
        );
        assert_eq!(
            w,
            WaitOn::Futex {
                addr: 0x1000,
                kind: FutexKind::Join,
                owner: Some(0x277b),
                private: false
            }
        );
        assert_eq!(w.describe(), "the exit of tid 10107 (thread join)");
        assert_eq!(w.lock_name(), "exit of tid 10107");
        // A mutex word of 2 is no join, even where a thread 2 exists.
        let m = futex(
            &call(128, 2),
            7,
            &[],
            &mem(2, 42),
            &Threads { live: &|_| true, sibling: &|_| true },
        );
        assert!(matches!(m, WaitOn::Futex { kind: FutexKind::LikelyMutex, .. }), "{m:?}");
    }

    #[test]
    fn a_jvm_monitor_wait_becomes_the_monitor_with_its_object_and_owner() {
        let runtime = |what| WaitOn::Futex {
            addr: 0x7f00,
            kind: FutexKind::Runtime(what),
            owner: None,
            private: true,
        };
        let m = MonitorWait {
            monitor: 0x5000,
            thread: 0x9000,
            object: Some(0x7_0000_0000),
            class: Some("Deadlock$First".into()),
            owner: Some(42),
            entering: true,
        };
        let mut w = runtime(JAVA_MONITOR);
        java_monitor(&mut w, &m);
        assert_eq!(
            w.describe(),
            "Java monitor <0x0000000700000000> (a Deadlock$First) (synchronized) held by tid 42"
        );
        assert_eq!(w.lock_name(), "Java monitor <0x0000000700000000> (a Deadlock$First)");
        assert!(matches!(w, WaitOn::Futex { addr: 0x5000, owner: Some(42), .. }), "{w:?}");
        // The JVM says Object.wait while the frames said entering (the thread
        // moved on between the two reads): the wait stays as the frames said.
        let waiting = MonitorWait { entering: false, owner: None, ..m.clone() };
        let mut w = runtime(JAVA_MONITOR);
        java_monitor(&mut w, &waiting);
        assert_eq!(w, runtime(JAVA_MONITOR));
        let mut w = runtime(OBJECT_WAIT);
        java_monitor(&mut w, &waiting);
        assert_eq!(
            w.describe(),
            "a notify of <0x0000000700000000> (a Deadlock$First) (Object.wait)"
        );
        // Other waits are left alone.
        let mut sleep = WaitOn::Sleep;
        java_monitor(&mut sleep, &m);
        assert_eq!(sleep, WaitOn::Sleep);
    }

    #[test]
    fn pi_futex_word_holds_the_owner() {
        let w = futex(&call(6 | 128, 0), 7, &[], &mem(0x8000_0000 | 99, 0), &ANY);
        assert_eq!(
            w,
            WaitOn::Futex { addr: 0x1000, kind: FutexKind::PiLock, owner: Some(99), private: true }
        );
        assert_eq!(w.lock_name(), "PI lock 0x1000");
    }

    #[test]
    fn other_waits_by_syscall() {
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(syscall_info(0), Some(SyscallInfo { name: "read", fd_arg: Some(0) }));
            assert_eq!(by_syscall(syscall_info(230), 230), WaitOn::Sleep);
            assert_eq!(by_syscall(syscall_info(61), 61), WaitOn::Child);
            assert_eq!(
                by_syscall(syscall_info(7), 7),
                WaitOn::Poll { via: "poll", fds: vec![], more: 0 }
            );
            assert_eq!(by_syscall(syscall_info(1), 1).describe(), "in write");
        }
        assert_eq!(by_syscall(None, 9999).describe(), "in syscall 9999");
        assert_eq!(futex(&call(3, 0), 1, &[], &|_| None, &ANY), WaitOn::Other("futex op 3".into()));
    }

    #[test]
    fn poll_and_epoll_fd_lists() {
        let mut b = Vec::new();
        for (fd, ev) in [(3i32, 1i16), (-1, 1), (7, 4)] {
            b.extend_from_slice(&fd.to_ne_bytes());
            b.extend_from_slice(&ev.to_ne_bytes());
            b.extend_from_slice(&0i16.to_ne_bytes());
        }
        b.extend_from_slice(&[1, 2, 3]); // a torn tail is ignored
        assert_eq!(pollfds(&b), [3, 7]);
        let info = "pos:\t0\nflags:\t02\nmnt_id:\t16\nino:\t1057\ntfd:        5 events:       19 data:                5  pos:0 ino:3f0 sdev:8\ntfd:        9 events:       19 data:                9  pos:0 ino:3f1 sdev:8\n";
        assert_eq!(epoll_fds(info), [5, 9]);
        assert!(epoll_fds("garbage").is_empty());
        let w = WaitOn::Poll { via: "epoll_wait", fds: vec![(5, "socket:[1]".into())], more: 2 };
        assert_eq!(w.describe(), "fds 5 (socket:[1]) and 2 more (epoll_wait)");
    }

    #[test]
    fn fd_access_modes() {
        assert_eq!(fd_access("pos:\t0\nflags:\t0100001\nmnt_id:\t15\n"), "w");
        assert_eq!(fd_access("flags:\t02000000\n"), "r");
        assert_eq!(fd_access("flags:\t02\n"), "rw");
        assert_eq!(fd_access(""), "?");
    }
}
