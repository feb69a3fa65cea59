//! Which Java monitor each thread of a JVM waits for, and which thread owns
//! it: read from HotSpot's list of Java threads through its vmStructs, as
//! jstack reads them ("waiting to lock <0x...> (a java.lang.Object)").

use std::collections::HashMap;

use anyhow::{Context as _, Result};

use super::{names, Layout};
use crate::sys::memory::Memory;

/// Most Java threads read from the list.
const MAX_THREADS: u64 = 100_000;
/// Most entries of a thread's lock stack (HotSpot keeps 8).
const MAX_LOCK_STACK: u64 = 16;
/// A monitor owned by a thread that has not yet said which (lightweight
/// locking): the owner is the thread whose lock stack holds the object.
const ANONYMOUS_OWNER: u64 = 1;

/// Where HotSpot keeps its Java threads and their monitors (offsets, and the
/// addresses of statics). The owner fields differ between releases: up to
/// JDK 23 a monitor's owner is the `JavaThread*` (or, while stack-locked, a
/// `BasicLock` on the owner's stack); from JDK 24 it is the thread's owner id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadLayout {
    /// `&ThreadsSMRSupport::_java_thread_list`.
    pub list: u64,
    pub list_len: u64,
    pub list_threads: u64,
    pub osthread: u64,
    pub thread_id: u64,
    pub pending: u64,
    pub waiting: u64,
    pub stack_base: u64,
    pub stack_size: u64,
    pub monitor_owner: u64,
    pub monitor_object: u64,
    pub oop_klass: u64,
    /// `JavaThread::_monitor_owner_id` (JDK 24 and later).
    pub owner_id: Option<u64>,
    /// `JavaThread::_lock_stack`, `LockStack::_top` and `_base[0]` (JDK 21+).
    pub lock_stack: Option<(u64, u64, u64)>,
    /// Addresses of the compressed class pointers' base and shift.
    pub narrow_klass: Option<(u64, u64)>,
}

/// What a thread waits on in a monitor, read while it waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonitorWait {
    /// The `ObjectMonitor`, and the waiting thread's `JavaThread`.
    pub monitor: u64,
    pub thread: u64,
    /// The locked object and its class, where they read.
    pub object: Option<u64>,
    pub class: Option<String>,
    /// The owner's tid (entering only; an `Object.wait` waits for a notify).
    pub owner: Option<u32>,
    /// Entering a contended `synchronized`, rather than in `Object.wait`.
    pub entering: bool,
}

impl MonitorWait {
    /// The monitor as jstack names it: `<0x...> (a java.lang.Object)`.
    pub fn name(&self) -> String {
        named(self.object.unwrap_or(self.monitor), self.class.as_deref())
    }
}

/// An object as jstack names it: `<0x...> (a java.lang.Object)`.
pub fn named(object: u64, class: Option<&str>) -> String {
    let at = format!("<{object:#018x}>");
    match class {
        Some(c) => format!("{at} (a {c})"),
        None => at,
    }
}

/// The object `monitor` locks (through its weak handle) and that object's
/// class, where they read.
pub fn object_of(
    mem: &dyn Memory,
    t: &ThreadLayout,
    l: &Layout,
    monitor: u64,
) -> (Option<u64>, Option<String>) {
    let object = mem
        .word(monitor + t.monitor_object)
        .filter(|&h| h != 0)
        .and_then(|h| mem.word(h))
        .filter(|&o| o != 0);
    (object, object.and_then(|o| class_of(mem, t, l, o)))
}

/// The thread layout from the vmStructs table (`vars` as for
/// [`super::layout_of`]).
pub fn thread_layout_of(mem: &dyn Memory, vars: &[u64; 11]) -> Result<ThreadLayout> {
    let types = [
        "ThreadsSMRSupport",
        "ThreadsList",
        "JavaThread",
        "Thread",
        "OSThread",
        "ObjectMonitor",
        "oopDesc",
        "CompressedKlassPointers",
        "LockStack",
    ];
    let found = super::fields_of(mem, vars, &types)?;
    let get = |tys: &[&str], field: &str| {
        found.iter().find(|(t, f, _)| tys.contains(&t.as_str()) && f == field).map(|(_, _, v)| *v)
    };
    let need = |ty: &str, field: &str| {
        get(&[ty], field).with_context(|| format!("HotSpot without {ty}::{field} in its vmStructs"))
    };
    let narrow = get(&["CompressedKlassPointers"], "_narrow_klass._base")
        .zip(get(&["CompressedKlassPointers"], "_narrow_klass._shift"))
        .or_else(|| {
            get(&["CompressedKlassPointers"], "_base")
                .zip(get(&["CompressedKlassPointers"], "_shift"))
        });
    let lock_stack = get(&["JavaThread"], "_lock_stack")
        .zip(get(&["LockStack"], "_top"))
        .zip(get(&["LockStack"], "_base[0]"))
        .map(|((s, t), b)| (s, t, b));
    Ok(ThreadLayout {
        list: need("ThreadsSMRSupport", "_java_thread_list")?,
        list_len: need("ThreadsList", "_length")?,
        list_threads: need("ThreadsList", "_threads")?,
        osthread: get(&["JavaThread", "Thread"], "_osthread")
            .context("HotSpot without Thread::_osthread in its vmStructs")?,
        thread_id: need("OSThread", "_thread_id")?,
        pending: need("JavaThread", "_current_pending_monitor")?,
        waiting: need("JavaThread", "_current_waiting_monitor")?,
        stack_base: need("JavaThread", "_stack_base")?,
        stack_size: need("JavaThread", "_stack_size")?,
        monitor_owner: need("ObjectMonitor", "_owner")?,
        monitor_object: need("ObjectMonitor", "_object")?,
        oop_klass: need("oopDesc", "_metadata._klass")?,
        owner_id: get(&["JavaThread"], "_monitor_owner_id"),
        lock_stack,
        narrow_klass: narrow,
    })
}

/// One Java thread as the monitors' owners are matched against it.
struct JavaThread {
    at: u64,
    tid: u32,
    stack: (u64, u64),
    owner_id: Option<u64>,
    locked: Vec<u64>,
}

fn java_threads(mem: &dyn Memory, t: &ThreadLayout) -> Vec<JavaThread> {
    let Some(list) = mem.word(t.list).filter(|&l| l != 0) else { return Vec::new() };
    let len = mem.u32(list + t.list_len).map_or(0, |n| (n as u64).min(MAX_THREADS));
    let Some(array) = mem.word(list + t.list_threads) else { return Vec::new() };
    let mut out = Vec::new();
    for i in 0..len {
        let Some(at) = mem.word(array + 8 * i).filter(|&p| p != 0) else { continue };
        let Some(tid) = mem.word(at + t.osthread).and_then(|os| mem.u32(os + t.thread_id)) else {
            continue;
        };
        let base = mem.word(at + t.stack_base).unwrap_or(0);
        let size = mem.word(at + t.stack_size).unwrap_or(0);
        let locked = t
            .lock_stack
            .and_then(|(ls, top, first)| {
                let top = mem.u32(at + ls + top)? as u64;
                let start = ls + first;
                let n = (top.checked_sub(start)? / 8).min(MAX_LOCK_STACK);
                Some((0..n).filter_map(|k| mem.word(at + start + 8 * k)).collect())
            })
            .unwrap_or_default();
        let owner_id = t.owner_id.and_then(|o| mem.word(at + o));
        out.push(JavaThread {
            at,
            tid,
            stack: (base.saturating_sub(size), base),
            owner_id,
            locked,
        });
    }
    out
}

/// The class name of the object at `oop`: through its compressed class
/// pointer where the JVM uses them, else its full one; None where neither
/// names a class.
fn class_of(mem: &dyn Memory, t: &ThreadLayout, l: &Layout, oop: u64) -> Option<String> {
    let named = |klass: u64| {
        let sym = mem.word(klass.checked_add(l.klass_name)?)?;
        names::symbol(mem, l, sym).map(|n| names::class_name(&n))
    };
    if let Some((base, shift)) = t.narrow_klass {
        let (base, shift) = (mem.word(base)?, mem.u32(shift)?);
        let narrow = mem.u32(oop + t.oop_klass)? as u64;
        if let Some(n) =
            (narrow != 0 && shift < 64).then(|| base.wrapping_add(narrow << shift)).and_then(named)
        {
            return Some(n);
        }
    }
    named(mem.word(oop + t.oop_klass)?)
}

/// The owner of a monitor whose owner field holds `owner` and that locks
/// `object`, among `threads`.
fn owner_of(
    t: &ThreadLayout,
    threads: &[JavaThread],
    owner: u64,
    object: Option<u64>,
) -> Option<u32> {
    if owner == 0 {
        return None;
    }
    if owner == ANONYMOUS_OWNER {
        let object = object?;
        return threads.iter().find(|j| j.locked.contains(&object)).map(|j| j.tid);
    }
    let found = if t.owner_id.is_some() {
        threads.iter().find(|j| j.owner_id == Some(owner))
    } else {
        threads
            .iter()
            .find(|j| j.at == owner)
            .or_else(|| threads.iter().find(|j| (j.stack.0..j.stack.1).contains(&owner)))
    };
    found.map(|j| j.tid)
}

/// Each Java thread waiting in a monitor now, by tid.
pub fn monitor_waits(mem: &dyn Memory, t: &ThreadLayout, l: &Layout) -> HashMap<u32, MonitorWait> {
    let threads = java_threads(mem, t);
    let mut out = HashMap::new();
    for j in &threads {
        let pending = mem.word(j.at + t.pending).filter(|&m| m != 0);
        let (monitor, entering) = match pending {
            Some(m) => (m, true),
            None => match mem.word(j.at + t.waiting).filter(|&m| m != 0) {
                Some(m) => (m, false),
                None => continue,
            },
        };
        let (object, class) = object_of(mem, t, l, monitor);
        let owner = if entering {
            mem.word(monitor + t.monitor_owner)
                .and_then(|o| owner_of(t, &threads, o, object))
                .filter(|&o| o != j.tid)
        } else {
            None
        };
        out.insert(j.tid, MonitorWait { monitor, thread: j.at, object, class, owner, entering });
    }
    out
}
