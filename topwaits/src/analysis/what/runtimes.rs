//! What a language runtime's thread waited for, as its users name it, by the
//! runtime's frames above a futex wait. A HotSpot JVM's waits all end in the
//! same parking primitive (`PlatformEvent::park`, a condition variable of the
//! thread's own), so its address says nothing; the JVM's frames above it tell
//! a `Thread.sleep` from a contended `synchronized`, an `Object.wait`, a
//! `LockSupport.park`, or the JVM's own GC and JIT threads waiting for work.
//! node's libuv thread pool waits for work on one condition variable.

use crate::model::label::WaitsOn;

/// How many frames from the leaf are looked at: the JVM's function that
/// decides sits a few frames above the futex wait.
const LOOK: usize = 8;

/// A thread entering a contended `synchronized`.
pub const JAVA_MONITOR: &str = "Java monitor (synchronized)";
/// A thread in `Object.wait`, waiting for a notify.
pub const OBJECT_WAIT: &str = "Object.wait";
/// One of the JVM's own threads (the VM thread, the service, notification
/// and sweeper threads, the reference handler) waiting on one of HotSpot's
/// internal monitors, whose condition variable is the monitor's own.
pub const JVM_INTERNAL_MONITOR: &str = "JVM internal monitor";

/// Parts of HotSpot's function names, and the wait each says (the first found
/// from the leaf decides).
const JVM_WAITS: &[(&str, Runtime)] = &[
    ("JavaThread::sleep", Runtime::Sleep),
    ("JVM_Sleep", Runtime::Sleep),
    ("ObjectMonitor::EnterI", Runtime::Named(JAVA_MONITOR)),
    ("ObjectMonitor::enter", Runtime::Named(JAVA_MONITOR)),
    ("ObjectMonitor::wait", Runtime::Named(OBJECT_WAIT)),
    ("Unsafe_Park", Runtime::Named("LockSupport.park")),
    ("CompileQueue::get", Runtime::Named("JVM JIT compiler, waiting for work")),
    ("CompileBroker::compiler_thread_loop", Runtime::Named("JVM JIT compiler, waiting for work")),
    ("GangWorker::loop", Runtime::Named("JVM GC worker, waiting for work")),
    ("WorkerThread::run", Runtime::Named("JVM GC worker, waiting for work")),
    ("ConcurrentRefineThread", Runtime::Named("JVM GC worker, waiting for work")),
    ("ConcurrentGCThread", Runtime::Named("JVM GC worker, waiting for work")),
    ("G1ServiceThread", Runtime::Named("JVM GC worker, waiting for work")),
];

/// HotSpot's internal monitors, which many of its threads wait on for work of
/// their own kind: said only where no frame of [`JVM_WAITS`] says what the
/// work is (the JIT's queue, the GC's), and never for an `ObjectMonitor`.
fn jvm_internal(name: &str) -> bool {
    name.starts_with("Monitor::wait")
}

/// What a runtime's futex wait is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// `Thread.sleep`.
    Sleep,
    /// A wait of this kind, one label for all its waiters.
    Named(&'static str),
    /// A wait of this kind on a futex word of the object waited on: one
    /// label per object, by its address.
    Own(&'static str),
}

/// What a runtime's frames (leaf first) say a futex wait is: a sleep, or a
/// wait named for all its waiters (the futex is the waiting thread's own, not
/// the object's, so its address says nothing). HotSpot's, or libuv's thread
/// pool (`uv_cond_wait` called from its `worker`).
pub fn kind_by_frames(user: &[&str]) -> Option<Runtime> {
    let near = &user[..user.len().min(LOOK)];
    if near.windows(2).any(|w| w == ["uv_cond_wait", "worker"]) {
        return Some(Runtime::Named("libuv thread pool, waiting for work"));
    }
    near.iter()
        .find_map(|name| JVM_WAITS.iter().find(|(part, _)| name.contains(part)).map(|(_, w)| *w))
        .or_else(|| {
            near.iter().any(|n| jvm_internal(n)).then_some(Runtime::Own(JVM_INTERNAL_MONITOR))
        })
}

/// The wait a runtime's frames (leaf first) name, as a label; `asked`, the
/// time the runtime's sleep call asked for, where the hooks read it, and
/// `addr` the futex word.
pub fn by_frames(user: &[&str], asked: Option<u64>, addr: u64) -> Option<WaitsOn> {
    Some(match kind_by_frames(user)? {
        Runtime::Sleep => WaitsOn::Sleep {
            requested_ns: asked,
            syscall: "Thread.sleep".into(),
            to_deadline: false,
        },
        Runtime::Named(what) => WaitsOn::Futex { lock: what.into(), addr: 0 },
        // glibc's condition variable waits on either of two words side by
        // side (8-aligned): one object, one label.
        Runtime::Own(what) => WaitsOn::Futex { lock: what.into(), addr: addr & !7 },
    })
}

/// A JVM monitor wait labelled by its frames (`label`), told apart by the
/// monitor its thread was in (`monitor`, read by the hooks), named by the
/// object it locks where that reads: one label per monitor, the same for all
/// its waiters, as jstack names it.
pub fn in_monitor(label: WaitsOn, monitor: u64, object: Option<String>) -> WaitsOn {
    let WaitsOn::Futex { lock, .. } = &label else { return label };
    let lock = match (lock.as_str(), object) {
        (JAVA_MONITOR, Some(o)) => format!("Java monitor {o} (synchronized)"),
        (OBJECT_WAIT, Some(o)) => format!("a notify of {o} (Object.wait)"),
        (JAVA_MONITOR | OBJECT_WAIT, None) => {
            return WaitsOn::Futex { lock: lock.clone(), addr: monitor };
        }
        _ => return label,
    };
    WaitsOn::Futex { lock, addr: 0 }
}

/// A wait on one of HotSpot's internal monitors (`label`), named by the
/// global that holds it where `name` finds one for its address:
/// `JVM internal monitor VMOperation_lock`.
pub fn internal_named(label: WaitsOn, name: impl FnOnce(u64) -> Option<String>) -> WaitsOn {
    match &label {
        WaitsOn::Futex { lock, addr } if lock == JVM_INTERNAL_MONITOR => match name(*addr) {
            Some(n) => WaitsOn::Futex { lock: format!("{JVM_INTERNAL_MONITOR} {n}"), addr: 0 },
            None => label,
        },
        _ => label,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARK: [&str; 3] =
        ["__futex_abstimed_wait_common", "pthread_cond_wait", "os::PlatformEvent::park()"];

    fn with(above: &[&'static str]) -> Vec<&'static str> {
        PARK.iter().chain(above).copied().collect()
    }

    #[test]
    fn a_java_sleep_is_a_sleep_whatever_thread_sleeps() {
        let sleep = with(&["JavaThread::sleep(long)", "JVM_Sleep"]);
        let w = by_frames(&sleep, None, 0x10).unwrap();
        assert!(matches!(&w, WaitsOn::Sleep { syscall, .. } if syscall == "Thread.sleep"));
        assert_eq!(w.short(), "sleep");
        // With the time its call asked for, where the hooks read it.
        let w = by_frames(&sleep, Some(250_000_000), 0x10).unwrap();
        assert_eq!(
            w.describe(250_400_000),
            "sleep of 250 ms asked, 250.4 ms on average, in Thread.sleep"
        );
    }

    #[test]
    fn monitor_entry_wait_and_park_each_get_one_label_for_all_their_waiters() {
        let enter =
            with(&["ObjectMonitor::EnterI(JavaThread*)", "ObjectMonitor::enter(JavaThread*)"]);
        assert_eq!(
            by_frames(&enter, None, 0x10),
            Some(WaitsOn::Futex { lock: "Java monitor (synchronized)".into(), addr: 0 })
        );
        let wait = with(&["ObjectMonitor::wait(long, bool, JavaThread*)", "JVM_MonitorWait"]);
        assert_eq!(
            by_frames(&wait, None, 0x10),
            Some(WaitsOn::Futex { lock: "Object.wait".into(), addr: 0 })
        );
        let park = with(&["Parker::park(bool, long)", "Unsafe_Park"]);
        assert_eq!(by_frames(&park, None, 0x10).unwrap().short(), "LockSupport.park");
        // HotSpot's own monitors: one label per monitor where no frame says
        // more (the JIT's queue), and Object.wait is not one.
        let vm = with(&[
            "Monitor::wait_without_safepoint_check(long)",
            "VMThread::wait_for_operation()",
        ]);
        assert_eq!(by_frames(&vm, None, 0x10).unwrap().describe(0), "JVM internal monitor 0x10");
        let reference = with(&["Monitor::wait(long)", "JVM_WaitForReferencePendingList"]);
        assert_eq!(by_frames(&reference, None, 0x1c).unwrap().short(), "JVM internal monitor 0x18");
        let jit = with(&["Monitor::wait(long)", "CompileQueue::get(CompilerThread*)"]);
        assert_eq!(
            by_frames(&jit, None, 0x10).unwrap().short(),
            "JVM JIT compiler, waiting for work"
        );
        let gc = ["__futex_abstimed_wait_common", "PosixSemaphore::wait()", "GangWorker::loop()"];
        assert_eq!(by_frames(&gc, None, 0x10).unwrap().short(), "JVM GC worker, waiting for work");
    }

    #[test]
    fn node_s_thread_pool_waits_for_work_under_one_label() {
        let pool = ["__futex_abstimed_wait_common", "pthread_cond_wait", "uv_cond_wait", "worker"];
        assert_eq!(
            by_frames(&pool, None, 0x10).unwrap().short(),
            "libuv thread pool, waiting for work"
        );
        assert_eq!(by_frames(&pool[..3], None, 0x10), None);
    }

    #[test]
    fn frames_far_from_the_leaf_or_of_other_programs_decide_nothing() {
        assert_eq!(
            by_frames(&["__futex_abstimed_wait_common", "pthread_cond_wait", "main"], None, 0x10),
            None
        );
        let far: Vec<&str> = std::iter::repeat_n("f", LOOK).chain(["JVM_Sleep"]).collect();
        assert_eq!(by_frames(&far, None, 0x10), None);
    }
}
