use std::collections::{BTreeSet, HashMap};

use super::*;
use topwaits_common::what as bits;

/// A system where nothing resolves.
pub struct NoSystem;

impl Resolve for NoSystem {
    fn fd(&mut self, _: u32, _: u64) -> Option<Fd> {
        None
    }
    fn socket(&mut self, _: u32, _: u64) -> Option<String> {
        None
    }
    fn pipe_holders(&mut self, _: &BTreeSet<u64>) -> HashMap<u64, Vec<String>> {
        HashMap::new()
    }
    fn epoll_fds(&mut self, _: u32, _: u64) -> Vec<String> {
        Vec::new()
    }
    fn process(&mut self, _: u32) -> Option<String> {
        None
    }
    fn kernel_symbol(&mut self, _: u64) -> Option<String> {
        None
    }
}

/// A fabricated system: descriptors of process 10, its sockets, one static lock.
#[derive(Default)]
struct Fake {
    fds: HashMap<u64, Fd>,
    sockets: HashMap<u64, String>,
    /// How many times pipe holders were asked for.
    holder_asks: usize,
}

impl Resolve for Fake {
    fn fd(&mut self, tgid: u32, fd: u64) -> Option<Fd> {
        (tgid == 10).then(|| self.fds.get(&fd).cloned()).flatten()
    }
    fn socket(&mut self, _: u32, inode: u64) -> Option<String> {
        self.sockets.get(&inode).cloned()
    }
    fn pipe_holders(&mut self, inodes: &BTreeSet<u64>) -> HashMap<u64, Vec<String>> {
        self.holder_asks += 1;
        let holders =
            |&i: &u64| (i, if i == 77 { vec!["pid 11 writer (w)".into()] } else { vec![] });
        inodes.iter().map(holders).collect()
    }
    fn epoll_fds(&mut self, _: u32, epfd: u64) -> Vec<String> {
        if epfd == 4 {
            vec!["5 (TCP 127.0.0.1:80, listening)".into()]
        } else {
            Vec::new()
        }
    }
    fn process(&mut self, tgid: u32) -> Option<String> {
        (tgid == 20).then(|| "pid 20 (hog)".into())
    }
    fn kernel_symbol(&mut self, addr: u64) -> Option<String> {
        (addr == 0xffff_ffff_8200_0000).then(|| "rtnl_mutex".into())
    }
    fn jvm_lock(&mut self, tgid: u32, addr: u64) -> Option<String> {
        (tgid == 10 && addr == 0x7f00_0000_3000).then(|| "VMOperation_lock".into())
    }
    fn java_monitor(&mut self, tgid: u32, monitor: u64) -> Option<String> {
        (tgid == 10 && monitor == 0x7f00_0000_1000)
            .then(|| "<0x000000069ec19408> (a java.lang.Object)".into())
    }
}

fn fake() -> Fake {
    let mut f = Fake::default();
    f.fds.insert(3, Fd { target: "socket:[900]".into(), kind: FdKind::Socket { inode: 900 } });
    f.fds.insert(6, Fd { target: "pipe:[77]".into(), kind: FdKind::Pipe { inode: 77 } });
    f.fds.insert(5, Fd { target: "pipe:[78]".into(), kind: FdKind::Pipe { inode: 78 } });
    f.fds.insert(
        7,
        Fd { target: "/var/lib/db/data".into(), kind: FdKind::File { device: Some("vda".into()) } },
    );
    f.fds.insert(8, Fd { target: "/dev/pts/0".into(), kind: FdKind::Other });
    f.sockets.insert(900, "TCP 127.0.0.1:5000 -> 127.0.0.1:41000, established".into());
    f
}

/// A wait in syscall `name` with first argument `arg0`.
fn call(name: &str, arg0: u64) -> What {
    let nr = crate::sys::syscalls::syscall_info_by_name(name)
        .unwrap_or_else(|| panic!("{name} not in the table"));
    What { nr: nr as u32 + 1, arg0, ..Default::default() }
}

fn futex(op: u32) -> What {
    What { flags: bits::FUTEX_OP | (op << bits::FUTEX_OP_SHIFT), ..call("futex", 0x1000) }
}

#[test]
fn futex_waits_by_their_frames() {
    let mut r = NoSystem;
    let k = ["futex_wait_queue", "futex_wait", "do_futex"];
    let m = classify(
        &futex(128),
        &k,
        &["__lll_lock_wait", "___pthread_mutex_lock", "worker"],
        1,
        &mut r,
    );
    assert_eq!(m, WaitsOn::Mutex { addr: 0x1000, pi: false });
    let c = classify(
        &futex(137),
        &k,
        &["__futex_abstimed_wait_common", "___pthread_cond_wait", "pool"],
        1,
        &mut r,
    );
    assert_eq!(c, WaitsOn::Futex { lock: "condition variable".into(), addr: 0x1000 });
    assert_eq!(c.short(), "condition variable 0x1000");
    let s = classify(
        &futex(128),
        &k,
        &["do_futex_wait", "__new_sem_wait_slow64", "sem_wait"],
        1,
        &mut r,
    );
    assert!(matches!(s, WaitsOn::Futex { ref lock, .. } if lock == "semaphore"), "{s:?}");
    let pi = classify(&futex(6 | 128), &k, &[], 1, &mut r);
    assert_eq!(pi, WaitsOn::Mutex { addr: 0x1000, pi: true });
    let unknown = classify(&futex(128), &k, &["libc.so.6+0x1234"], 1, &mut r);
    assert_eq!(unknown, WaitsOn::Futex { lock: "futex".into(), addr: 0x1000 });
    assert!(unknown.describe(0).contains("no owner"));
    // The time a Java sleep asked for, where the hooks read it; it changes no
    // other label.
    let timed = What { flags: futex(137).flags | bits::ASKED, obj: 50_000_000, ..futex(137) };
    let sleep = ["__futex_abstimed_wait_common", "os::PlatformEvent::park(long)", "JVM_Sleep"];
    assert_eq!(
        classify(&timed, &k, &sleep, 1, &mut r).describe(50_100_000),
        "sleep of 50 ms asked, 50.1 ms on average, in Thread.sleep"
    );
    let cond = ["__futex_abstimed_wait_common", "___pthread_cond_timedwait", "pool"];
    assert_eq!(classify(&timed, &k, &cond, 1, &mut r), c);
}

#[test]
fn a_java_monitor_the_hooks_saw_is_named_by_the_object_it_locks() {
    let k = ["futex_wait", "do_futex"];
    let enter = [
        "__futex_abstimed_wait_common",
        "os::PlatformEvent::park()",
        "ObjectMonitor::EnterI(JavaThread*)",
    ];
    let wait = [
        "__futex_abstimed_wait_common",
        "os::PlatformEvent::park(long)",
        "ObjectMonitor::wait(long, bool, JavaThread*)",
    ];
    let mut r = fake();
    let in_monitor = |monitor: u64| What {
        flags: futex(137).flags | bits::JMONITOR,
        obj: monitor,
        ..futex(137)
    };
    // One label for every waiter of one monitor, whatever its own futex.
    let named = classify(&in_monitor(0x7f00_0000_1000), &k, &enter, 10, &mut r);
    let lock = "Java monitor <0x000000069ec19408> (a java.lang.Object) (synchronized)";
    assert_eq!(named, WaitsOn::Futex { lock: lock.into(), addr: 0 });
    assert!(named.is_lock());
    let notify = classify(&in_monitor(0x7f00_0000_1000), &k, &wait, 10, &mut r);
    assert_eq!(
        notify.describe(0),
        "a notify of <0x000000069ec19408> (a java.lang.Object) (Object.wait)"
    );
    // A monitor that no longer reads keeps its address, still one per monitor.
    let gone = classify(&in_monitor(0x7f00_0000_2000), &k, &enter, 10, &mut r);
    assert_eq!(gone.describe(0), "Java monitor (synchronized) 0x7f0000002000");
    assert!(gone.is_lock());
    // Without the hooks, the frames alone: one label for all monitors.
    let plain = classify(&futex(137), &k, &enter, 10, &mut r);
    assert_eq!(plain, WaitsOn::Futex { lock: "Java monitor (synchronized)".into(), addr: 0 });
    assert!(!plain.is_lock());
    // HotSpot's own monitors, by the global that holds each, where one does.
    let vm = [
        "__futex_abstimed_wait_common",
        "___pthread_cond_timedwait",
        "Monitor::wait_without_safepoint_check(long)",
        "VMThread::wait_for_operation()",
    ];
    let op = What { arg0: 0x7f00_0000_3004, ..futex(137) };
    let named = classify(&op, &k, &vm, 10, &mut r);
    assert_eq!(named.describe(0), "JVM internal monitor VMOperation_lock");
    let other = What { arg0: 0x7f00_0000_5000, ..futex(137) };
    assert_eq!(
        classify(&other, &k, &vm, 10, &mut r).describe(0),
        "JVM internal monitor 0x7f0000005000"
    );
    // A monitor on frames that name no monitor wait changes nothing.
    let cond = ["__futex_abstimed_wait_common", "___pthread_cond_wait", "pool"];
    let c = classify(&in_monitor(0x7f00_0000_1000), &k, &cond, 10, &mut r);
    assert!(matches!(c, WaitsOn::Futex { ref lock, .. } if lock == "condition variable"), "{c:?}");
}

#[test]
fn descriptors_by_what_they_are() {
    let mut r = fake();
    let none: [&str; 0] = [];
    let sock = classify(&call("read", 3), &["sk_wait_data", "tcp_recvmsg"], &none, 10, &mut r);
    assert_eq!(sock.short(), "socket TCP 127.0.0.1:5000 -> 127.0.0.1:41000");
    let pipe = classify(&call("read", 6), &["pipe_read"], &none, 10, &mut r);
    assert_eq!(
        pipe,
        WaitsOn::Pipe {
            fd: 6,
            inode: Some(77),
            holders: vec!["pid 11 writer (w)".into()],
            syscall: "read".into()
        }
    );
    let disk = classify(
        &call("fdatasync", 7),
        &["jbd2_log_wait_commit", "ext4_sync_file"],
        &none,
        10,
        &mut r,
    );
    assert_eq!(
        disk,
        WaitsOn::Disk {
            device: Some("vda".into()),
            file: Some("/var/lib/db/data".into()),
            syscall: Some("fdatasync".into())
        }
    );
    let tty = classify(&call("read", 8), &["n_tty_read"], &none, 10, &mut r);
    assert_eq!(tty.short(), "file /dev/pts/0");
    // Closed before it could be resolved: I/O frames still say disk.
    let gone = classify(&call("write", 9), &["io_schedule", "folio_wait_bit"], &none, 10, &mut r);
    assert_eq!(gone, WaitsOn::Disk { device: None, file: None, syscall: Some("write".into()) });
    let gone = classify(&call("read", 9), &["pipe_read"], &none, 10, &mut r);
    assert_eq!(gone, WaitsOn::File { fd: 9, target: None, syscall: "read".into() });
    assert!(gone.describe(0).contains("closed before it could be resolved"));
}

#[test]
fn event_loops_sleeps_children_and_signals() {
    let mut r = fake();
    let none: [&str; 0] = [];
    let ep = classify(&call("epoll_wait", 4), &["ep_poll"], &none, 10, &mut r);
    assert_eq!(ep.describe(0), "event loop (epoll_wait on 5 (TCP 127.0.0.1:80, listening))");
    assert_eq!(classify(&call("poll", 0x7ffd), &["do_sys_poll"], &none, 10, &mut r).kind(), "poll");
    // select on no descriptors sleeps (PostgreSQL's pg_usleep); on some, it polls.
    let nap = classify(&call("select", 0), &["do_select"], &none, 10, &mut r);
    assert_eq!(
        nap,
        WaitsOn::Sleep { requested_ns: None, syscall: "select".into(), to_deadline: false }
    );
    assert_eq!(classify(&call("pselect6", 7), &["do_select"], &none, 10, &mut r).kind(), "poll");
    assert!(
        crate::sys::syscalls::keeps_arg0_of(23) && crate::sys::syscalls::keeps_arg0_of(270),
        "the programs keep select's nfds"
    );
    let asked = What { flags: bits::SLEEP, obj: 2_000_000, ..call("clock_nanosleep", 0) };
    assert_eq!(
        classify(&asked, &["do_nanosleep"], &none, 10, &mut r),
        WaitsOn::Sleep {
            requested_ns: Some(2_000_000),
            syscall: "clock_nanosleep".into(),
            to_deadline: false
        }
    );
    let deadline = What {
        flags: bits::SLEEP | bits::SLEEP_DEADLINE,
        obj: 10_000_000,
        ..call("clock_nanosleep", 0)
    };
    assert!(matches!(
        classify(&deadline, &["do_nanosleep"], &none, 10, &mut r),
        WaitsOn::Sleep { to_deadline: true, .. }
    ));
    assert_eq!(classify(&call("wait4", 0), &["do_wait"], &none, 10, &mut r).kind(), "child");
    assert_eq!(classify(&call("rt_sigtimedwait", 0), &[], &none, 10, &mut r).kind(), "signal");
    assert_eq!(
        classify(&What { nr: 9999, ..Default::default() }, &[], &none, 10, &mut r).short(),
        "syscall 9998"
    );
}

#[test]
fn kernel_locks_faults_and_preemption() {
    let mut r = fake();
    let none: [&str; 0] = [];
    let read = What {
        flags: bits::KLOCK | bits::LCB_READ,
        obj: 0xffff_8880_0100_0070,
        ..Default::default()
    };
    let fault = [
        "rwsem_down_read_slowpath",
        "down_read",
        "lock_mm_and_find_vma",
        "do_user_addr_fault",
        "exc_page_fault",
        "asm_exc_page_fault",
    ];
    let k = classify(&read, &fault, &none, 10, &mut r);
    assert_eq!(k.short(), "kernel rwsem mmap_lock (read)");
    let write = What {
        flags: bits::KLOCK | bits::LCB_WRITE,
        obj: 0xffff_8880_0100_0070,
        ..call("munmap", 0)
    };
    let k = classify(
        &write,
        &["rwsem_down_write_slowpath", "down_write_killable", "__vm_munmap"],
        &none,
        10,
        &mut r,
    );
    assert_eq!(k.short(), "kernel rwsem mmap_lock (write)");
    let rtnl = What {
        flags: bits::KLOCK | bits::LCB_MUTEX,
        obj: 0xffff_ffff_8200_0000,
        ..Default::default()
    };
    assert_eq!(
        classify(&rtnl, &["__mutex_lock"], &none, 10, &mut r).short(),
        "kernel mutex rtnl_mutex"
    );
    let other = What {
        flags: bits::KLOCK | bits::LCB_MUTEX,
        obj: 0xffff_8880_0200_0000,
        ..Default::default()
    };
    assert_eq!(
        classify(&other, &["__mutex_lock"], &none, 10, &mut r).short(),
        "kernel mutex 0xffff888002000000"
    );
    // A user page fault leaves its error code where a syscall's number would be.
    let pf = What { nr: 5, ..Default::default() };
    assert_eq!(
        classify(
            &pf,
            &[
                "io_schedule",
                "folio_wait_bit",
                "filemap_fault",
                "handle_mm_fault",
                "do_user_addr_fault",
                "exc_page_fault"
            ],
            &none,
            10,
            &mut r
        ),
        WaitsOn::PageFault { major: true }
    );
    let pre = What { flags: bits::PREEMPTED, obj: 20, ..Default::default() };
    assert_eq!(
        classify(&pre, &[], &none, 10, &mut r).describe(0),
        "preempted: pid 20 (hog) ran instead"
    );
    let kthread =
        classify(&What::default(), &["schedule", "worker_thread", "kthread"], &none, 2, &mut r);
    assert_eq!(kthread, WaitsOn::Other { what: "in worker_thread".into() });
}

#[test]
fn a_report_asks_for_all_its_pipes_holders_at_once() {
    let mut r = fake();
    let mut records: Vec<Record> = (0..4)
        .map(|_| Record { tgid: 10, ..crate::model::fixtures::bare_record("w", 5, 1) })
        .collect();
    let whats = [call("read", 6), call("write", 5), call("read", 3), call("read", 6)];
    label(&mut records, &whats, &mut r);
    assert_eq!(r.holder_asks, 1, "one pass over the descriptors finds every pipe");
    let holders: Vec<_> = records
        .iter()
        .map(|rec| match &rec.waits_on {
            Some(WaitsOn::Pipe { inode, holders, .. }) => (*inode, holders.len()),
            other => (None, other.as_ref().map_or(0, |_| 99)),
        })
        .collect();
    assert_eq!(holders, [(Some(77), 1), (Some(78), 0), (None, 99), (Some(77), 1)]);
}
