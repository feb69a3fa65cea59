//! What a wait was for (`waits_on`), as reports show it: the kinds, each with its
//! own fields, a one-line description, and the short label the top view's
//! headers, `--by what` and `--what` use. Plain data; `what` classifies.

use serde::{Deserialize, Serialize};

/// What a wait was for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WaitsOn {
    /// A user mutex (a futex whose frames are glibc's lock path, or a PI futex).
    Mutex { addr: u64, pi: bool },
    /// A futex that is no mutex: `lock` is "condition variable", "semaphore",
    /// "rwlock", "barrier", "thread join", or "futex" when nothing tells.
    Futex { lock: String, addr: u64 },
    /// A kernel mutex, rwsem or semaphore (`lock:contention_begin`): `lock` its
    /// type, `mode` read or write for an rwsem, `name` where the address or the
    /// stack tells it (`mmap_lock`, an inode's `i_rwsem`, a static lock's symbol).
    KernelLock { lock: String, mode: Option<String>, addr: Option<u64>, name: Option<String> },
    /// Block I/O: the device, and the file when the wait was in a call on one.
    Disk { device: Option<String>, file: Option<String>, syscall: Option<String> },
    /// A socket: its protocol and addresses as `/proc/PID/net` names them.
    Socket { fd: u64, socket: Option<String>, syscall: String },
    /// A pipe or FIFO: the processes that hold it open (pid, comm, access).
    Pipe { fd: u64, inode: Option<u64>, holders: Vec<String>, syscall: String },
    /// poll, select or an epoll set, with the descriptors watched where known.
    Poll { via: String, fds: Vec<String> },
    /// A sleep: the time asked for where it was read; with `to_deadline`, a
    /// sleep to an absolute deadline, and `requested_ns` the most it had left
    /// (the time left at the switch, rounded up to 1, 2 or 5 times a power of ten).
    Sleep {
        requested_ns: Option<u64>,
        syscall: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        to_deadline: bool,
    },
    /// A page fault that blocked; `major` when it waited for I/O.
    PageFault { major: bool },
    /// Preempted while runnable; `ran_instead` the process put on the CPU.
    RunQueue { ran_instead: Option<String> },
    /// A child process to change state.
    Child { syscall: String },
    /// A signal.
    Signal { syscall: String },
    /// Another file descriptor (a terminal, an eventfd, ...), or one closed before
    /// it could be resolved (`target` none).
    File { fd: u64, target: Option<String>, syscall: String },
    /// A goroutine's wait in the Go runtime: `reason` the runtime's wait reason,
    /// or the lock its frames name (`sync.Mutex`, `sync.RWMutex (read)`).
    Goroutine { reason: String },
    /// Anything else: the syscall's name, or the kernel function it waited in.
    Other { what: String },
    /// Not a wait: the thread was running on a CPU (`--on-cpu` samples).
    Running,
}

/// `1.5 ms`, `20 s`: a duration for a label.
fn dur(ns: u64) -> String {
    match ns {
        n if n >= 1_000_000_000 => format!("{} s", trim(n as f64 / 1e9)),
        n if n >= 1_000_000 => format!("{} ms", trim(n as f64 / 1e6)),
        n if n >= 1_000 => format!("{} us", trim(n as f64 / 1e3)),
        n => format!("{n} ns"),
    }
}

fn trim(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The short label of a record's `waits_on`, or that it has none (a recording
/// made before labels, or `--no-labels`).
pub fn short_of(w: Option<&WaitsOn>) -> String {
    w.map_or_else(|| "not labelled".to_string(), WaitsOn::short)
}

impl WaitsOn {
    /// The kind's name, as JSON's `kind` spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            WaitsOn::Mutex { .. } => "mutex",
            WaitsOn::Futex { .. } => "futex",
            WaitsOn::KernelLock { .. } => "kernel_lock",
            WaitsOn::Disk { .. } => "disk",
            WaitsOn::Socket { .. } => "socket",
            WaitsOn::Pipe { .. } => "pipe",
            WaitsOn::Poll { .. } => "poll",
            WaitsOn::Sleep { .. } => "sleep",
            WaitsOn::PageFault { .. } => "page_fault",
            WaitsOn::RunQueue { .. } => "run_queue",
            WaitsOn::Child { .. } => "child",
            WaitsOn::Signal { .. } => "signal",
            WaitsOn::File { .. } => "file",
            WaitsOn::Goroutine { .. } => "goroutine",
            WaitsOn::Other { .. } => "other",
            WaitsOn::Running => "running",
        }
    }

    /// Whether it is a lock that `topwaits locks` ranks.
    pub fn is_lock(&self) -> bool {
        match self {
            WaitsOn::Mutex { .. } | WaitsOn::KernelLock { .. } => true,
            // A Java monitor that its hooks told apart from the others.
            WaitsOn::Futex { lock, addr } => {
                lock == "rwlock"
                    || (lock.starts_with("Java monitor ") && (lock.contains("<0x") || *addr != 0))
            }
            WaitsOn::Goroutine { reason } => {
                reason.starts_with("sync.") && reason.contains("Mutex")
            }
            _ => false,
        }
    }

    /// The lock itself, whatever the mode it was wanted in: readers and writers of
    /// one rwsem wait on one lock.
    pub fn lock(&self) -> WaitsOn {
        match self {
            WaitsOn::KernelLock { lock, addr, name, .. } => WaitsOn::KernelLock {
                lock: lock.clone(),
                mode: None,
                addr: *addr,
                name: name.clone(),
            },
            other => other.clone(),
        }
    }

    /// The short label: the top view's headers, `--by what`'s groups and the
    /// root frame of `--what`. Waits on the same thing share it.
    pub fn short(&self) -> String {
        match self {
            WaitsOn::Mutex { addr, pi: false } => format!("mutex {addr:#x}"),
            WaitsOn::Mutex { addr, pi: true } => format!("PI mutex {addr:#x}"),
            WaitsOn::Futex { lock, addr: 0 } => lock.clone(),
            WaitsOn::Futex { lock, addr } => format!("{lock} {addr:#x}"),
            WaitsOn::KernelLock { lock, mode, name, addr } => {
                let mut s = format!("kernel {lock}");
                if let Some(n) = name {
                    s += &format!(" {n}");
                } else if let Some(a) = addr {
                    s += &format!(" {a:#x}");
                }
                if let Some(m) = mode {
                    s += &format!(" ({m})");
                }
                s
            }
            WaitsOn::Disk { device: Some(d), .. } => format!("disk {d}"),
            WaitsOn::Disk { device: None, .. } => "disk".to_string(),
            WaitsOn::Socket { socket: Some(s), .. } => {
                format!("socket {}", s.split(", ").next().unwrap_or(s))
            }
            WaitsOn::Socket { socket: None, .. } => "socket".to_string(),
            WaitsOn::Pipe { .. } => "pipe".to_string(),
            WaitsOn::Poll { via, .. } => format!("event loop ({via})"),
            WaitsOn::Sleep { .. } => "sleep".to_string(),
            WaitsOn::PageFault { major: true } => "page fault (major)".to_string(),
            WaitsOn::PageFault { major: false } => "page fault".to_string(),
            WaitsOn::RunQueue { .. } => "run queue (preempted)".to_string(),
            WaitsOn::Child { .. } => "child exit".to_string(),
            WaitsOn::Signal { .. } => "signal".to_string(),
            WaitsOn::File { target: Some(t), .. } => format!("file {t}"),
            WaitsOn::File { target: None, syscall, .. } => format!("fd in {syscall}"),
            WaitsOn::Goroutine { reason } => reason.clone(),
            WaitsOn::Other { what } => what.clone(),
            WaitsOn::Running => "running".to_string(),
        }
    }

    /// [`WaitsOn::describe`] as a sentence about the waiting thread: `waits on
    /// mutex 0x…`, `waits in worker_thread`, `was preempted: … ran instead`.
    pub fn sentence(&self, mean_ns: u64) -> String {
        match self {
            WaitsOn::Other { what } if what.starts_with("in ") => format!("waits {what}"),
            WaitsOn::RunQueue { .. } => format!("was {}", self.describe(mean_ns)),
            WaitsOn::Running => "was running on a CPU (sampled)".to_string(),
            _ => format!("waits on {}", self.describe(mean_ns)),
        }
    }

    /// One line that says what the wait was for; `mean_ns` is the record's mean
    /// wait, which a sleep compares with what it asked for.
    pub fn describe(&self, mean_ns: u64) -> String {
        match self {
            WaitsOn::Mutex { addr, pi } => {
                format!("{} {addr:#x}", if *pi { "priority-inheritance mutex" } else { "mutex" })
            }
            WaitsOn::Futex { lock, addr } if lock == "futex" => {
                format!("futex {addr:#x} (not a known lock: no owner)")
            }
            WaitsOn::Futex { lock, addr: 0 } => lock.clone(),
            WaitsOn::Futex { lock, addr } => format!("{lock} {addr:#x}"),
            WaitsOn::KernelLock { .. } => self.short(),
            WaitsOn::Disk { device, file, syscall } => {
                let mut s = format!("disk {}", device.as_deref().unwrap_or("(device not known)"));
                if let Some(f) = file {
                    s += &format!(", file {f}");
                }
                if let Some(c) = syscall {
                    s += &format!(", in {c}");
                }
                s
            }
            WaitsOn::Socket { fd, socket, syscall } => {
                format!(
                    "socket fd {fd} ({}), in {syscall}",
                    socket.as_deref().unwrap_or("closed before it could be resolved")
                )
            }
            WaitsOn::Pipe { fd, holders, syscall, .. } if holders.is_empty() => {
                format!("pipe fd {fd}, in {syscall}")
            }
            WaitsOn::Pipe { fd, holders, syscall, .. } => {
                format!("pipe fd {fd} held by {}, in {syscall}", holders.join(", "))
            }
            // An event loop waits for everything its program waits for (a lock,
            // a client, a timer): what its syscall says is only that it polled.
            WaitsOn::Poll { via, fds } if fds.is_empty() => format!("event loop ({via})"),
            WaitsOn::Poll { via, fds } => format!("event loop ({via} on {})", fds.join(", ")),
            WaitsOn::Sleep { requested_ns: Some(r), syscall, to_deadline: true } => {
                format!(
                    "sleep to a deadline at most {} away, {} on average, in {syscall}",
                    dur(*r),
                    dur(mean_ns)
                )
            }
            WaitsOn::Sleep { requested_ns: Some(r), syscall, .. } => {
                let late = if mean_ns > r + r / 10 + 50_000 {
                    " (late: timer slack or a busy CPU)"
                } else {
                    ""
                };
                format!(
                    "sleep of {} asked, {} on average{late}, in {syscall}",
                    dur(*r),
                    dur(mean_ns)
                )
            }
            WaitsOn::Sleep { requested_ns: None, syscall, .. } => format!("sleep, in {syscall}"),
            WaitsOn::PageFault { major } => {
                format!("{} page fault", if *major { "major" } else { "minor" })
            }
            WaitsOn::RunQueue { ran_instead: Some(p) } => format!("preempted: {p} ran instead"),
            WaitsOn::RunQueue { ran_instead: None } => "preempted while runnable".to_string(),
            WaitsOn::Child { syscall } => format!("a child's exit, in {syscall}"),
            WaitsOn::Signal { syscall } => format!("a signal, in {syscall}"),
            WaitsOn::File { fd, target: Some(t), syscall } => {
                format!("fd {fd} ({t}), in {syscall}")
            }
            WaitsOn::File { fd, target: None, syscall } => {
                format!("fd {fd} (closed before it could be resolved), in {syscall}")
            }
            WaitsOn::Goroutine { reason } => format!("{reason} (a goroutine's wait)"),
            WaitsOn::Other { what } => what.clone(),
            WaitsOn::Running => "running on a CPU".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_group_waits_on_the_same_thing() {
        let a = WaitsOn::Disk {
            device: Some("vda".into()),
            file: Some("/x".into()),
            syscall: Some("write".into()),
        };
        let b = WaitsOn::Disk {
            device: Some("vda".into()),
            file: Some("/y".into()),
            syscall: Some("fsync".into()),
        };
        assert_eq!(a.short(), b.short());
        assert_eq!(a.describe(0), "disk vda, file /x, in write");
        let s = WaitsOn::Socket {
            fd: 3,
            socket: Some("TCP 127.0.0.1:80 -> 127.0.0.1:5000, established".into()),
            syscall: "read".into(),
        };
        assert_eq!(s.short(), "socket TCP 127.0.0.1:80 -> 127.0.0.1:5000");
        let k = WaitsOn::KernelLock {
            lock: "rwsem".into(),
            mode: Some("read".into()),
            addr: Some(0xffff_1000),
            name: Some("mmap_lock".into()),
        };
        assert_eq!(k.short(), "kernel rwsem mmap_lock (read)");
        assert!(k.is_lock() && WaitsOn::Mutex { addr: 1, pi: false }.is_lock() && !a.is_lock());
        assert_eq!(k.lock().short(), "kernel rwsem mmap_lock");
    }

    /// Labels claim only what is known: an event loop is not idle because its
    /// syscall is epoll_wait; and a kernel thread's label reads as a sentence.
    #[test]
    fn an_event_loop_is_never_called_idle_and_sentences_read() {
        let ep = WaitsOn::Poll { via: "epoll_wait".into(), fds: vec!["5 (socket)".into()] };
        assert_eq!(ep.describe(0), "event loop (epoll_wait on 5 (socket))");
        assert!(!ep.describe(0).contains("idle") && !ep.short().contains("idle"));
        assert_eq!(
            WaitsOn::Other { what: "in worker_thread".into() }.sentence(0),
            "waits in worker_thread"
        );
        assert_eq!(WaitsOn::Mutex { addr: 16, pi: false }.sentence(0), "waits on mutex 0x10");
        assert_eq!(
            WaitsOn::RunQueue { ran_instead: Some("pid 3 (x)".into()) }.sentence(0),
            "was preempted: pid 3 (x) ran instead"
        );
    }

    #[test]
    fn a_sleep_says_when_it_woke_late() {
        let s = WaitsOn::Sleep {
            requested_ns: Some(10_000_000),
            syscall: "clock_nanosleep".into(),
            to_deadline: false,
        };
        assert_eq!(
            s.describe(10_060_000),
            "sleep of 10 ms asked, 10.06 ms on average, in clock_nanosleep"
        );
        assert!(s.describe(14_000_000).contains("late"), "{}", s.describe(14_000_000));
        let d = WaitsOn::Sleep {
            requested_ns: Some(10_000_000),
            syscall: "clock_nanosleep".into(),
            to_deadline: true,
        };
        assert_eq!(
            d.describe(9_000_000),
            "sleep to a deadline at most 10 ms away, 9 ms on average, in clock_nanosleep"
        );
        assert_eq!(serde_json::to_value(&d).unwrap()["to_deadline"], true);
        assert!(
            serde_json::to_value(&s).unwrap().get("to_deadline").is_none(),
            "only where it is one"
        );
    }

    #[test]
    fn json_names_the_kind_and_its_fields() {
        let v = serde_json::to_value(WaitsOn::Mutex { addr: 16, pi: false }).unwrap();
        assert_eq!(v, serde_json::json!({"kind": "mutex", "addr": 16, "pi": false}));
        let back: WaitsOn = serde_json::from_value(v).unwrap();
        assert_eq!(back.kind(), "mutex");
    }
}
