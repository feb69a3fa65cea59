//! Output formats. Each format is one file implementing [`Format`], writing what
//! it shows (a trace's [`Report`], a `threads` profile, a `blocked` snapshot) into
//! any `Write`.

pub mod blocked;
pub mod folded;
pub mod json;
pub mod locks;
pub mod otlp;
pub mod perfetto;
pub mod pprof;
pub mod prometheus;
pub mod svg;
pub mod threads;
pub mod timeline;
pub mod top;
pub mod wakeups;
pub mod why;

use std::io::{self, Write};

use crate::analysis::reduce::By;
use crate::model::{comm_text, Hop, Record, Report, WakeKind};
use crate::settings::{Output, View};

/// One output format of `D`: a trace's report unless said otherwise.
pub trait Format<D: ?Sized = Report> {
    fn write(&self, data: &D, out: &mut dyn Write) -> io::Result<()>;
}

/// The format an [`Output`] choice names, for a view.
pub fn for_output(view: View, output: &Output) -> Box<dyn Format> {
    match view {
        View::Wakeups => return Box::new(wakeups::Wakeups { output: output.clone() }),
        View::Why { for_tid, by } => {
            return Box::new(why::Why { output: output.clone(), for_tid, by })
        }
        View::Locks { by } => return Box::new(locks::Locks { output: output.clone(), by }),
        View::OffCpu => {}
    }
    match output {
        Output::Top { limit, delimited } => {
            Box::new(top::Top { limit: *limit, delimited: *delimited })
        }
        Output::Folded { delimited, value, what, cgroup } => Box::new(folded::Folded {
            delimited: *delimited,
            value: *value,
            what: *what,
            cgroup: *cgroup,
        }),
        Output::Json { limit } => Box::new(json::Json { limit: *limit }),
    }
}

/// How a waker hop is named in every format: its comm, or `[interrupt]`.
pub fn hop_name(h: &Hop) -> String {
    if h.interrupt {
        "[interrupt]".to_string()
    } else {
        comm_text(&h.comm)
    }
}

/// The function an interrupt woke its target from (`hrtimer_wakeup`,
/// `blk_mq_complete_request`): the first frame past the generic wake-up helpers.
pub fn interrupt_handler(h: &Hop) -> Option<&str> {
    const HELPERS: [&str; 8] = [
        "try_to_wake_up",
        "wake_up",
        "default_wake_function",
        "autoremove_wake_function",
        "woken_wake_function",
        "swake_up",
        "ttwu",
        "complete",
    ];
    if !h.interrupt {
        return None;
    }
    h.kernel.frames().iter().filter_map(|f| f.symbol.as_deref()).find(|n| {
        !HELPERS.iter().any(|p| n.trim_start_matches('_').starts_with(p.trim_start_matches('_')))
    })
}

/// A thread, process or name with the ids `by` keeps: `comm  pid N  tid M`,
/// `comm  pid N` or `comm`.
pub fn named(comm: &str, tgid: u32, tid: u32, by: By) -> String {
    match by {
        By::Thread => format!("{comm}  pid {tgid}  {}", crate::util::text::tid_text(tid)),
        By::Process => format!("{comm}  pid {tgid}"),
        By::Comm | By::What | By::Cgroup => comm.to_string(),
    }
}

/// Most threads a goroutine's heading names.
const RAN_ON_SHOWN: usize = 3;

/// `ran on tid 12, 13 and 2 more`: the threads a goroutine ran on, the one it
/// ran on most first.
fn ran_on(tids: &[u32]) -> String {
    let shown: Vec<String> = tids.iter().take(RAN_ON_SHOWN).map(u32::to_string).collect();
    let more = tids.len().saturating_sub(RAN_ON_SHOWN);
    let more = if more > 0 { format!(" and {more} more") } else { String::new() };
    format!("ran on tid {}{more}", shown.join(", "))
}

/// Who a record stands for, as the top view heads it: a thread, a process's
/// threads (`--by process`) or every thread of a name (`--by comm`).
pub fn who(r: &Record, by: By) -> String {
    let mut name = named(&comm_text(&r.comm), r.tgid, r.tid, by);
    // A container's own ids beside the host's.
    match (r.ns_ids, by) {
        (Some((pid, tid)), By::Thread) => {
            name.push_str(&format!(" (pid {pid}, tid {tid} in its namespace)"))
        }
        (Some((pid, _)), By::Process) => name.push_str(&format!(" ({pid} in its namespace)")),
        _ => {}
    }
    match by {
        By::Thread if !r.ran_on.is_empty() => format!("{name}  {}", ran_on(&r.ran_on)),
        By::Thread => name,
        By::Process | By::Comm => {
            format!("{name}  {}", crate::util::text::plural(r.threads as usize, "thread"))
        }
        By::What => {
            format!(
                "heaviest: {name}, of {}",
                crate::util::text::plural(r.threads as usize, "thread")
            )
        }
        By::Cgroup => {
            let cgroup = r.cgroup.as_deref().unwrap_or(crate::analysis::reduce::UNKNOWN_CGROUP);
            format!(
                "cgroup {cgroup}  {}, heaviest {name}",
                crate::util::text::plural(r.threads as usize, "thread")
            )
        }
    }
}

/// The label of a wait with no waker hop.
pub fn no_waker_label(kind: WakeKind) -> &'static str {
    match kind {
        WakeKind::Preempted => "[preempted]",
        WakeKind::NoWaker | WakeKind::Woken => "[no waker seen]",
        WakeKind::NotYet => "[not woken yet]",
    }
}

/// Records ordered by longest wait, then total, then tid: the "top waits" order.
pub fn by_longest<'a>(records: impl IntoIterator<Item = &'a Record>) -> Vec<&'a Record> {
    let mut v: Vec<&Record> = records.into_iter().collect();
    v.sort_by(|a, b| {
        b.max_ns
            .cmp(&a.max_ns)
            .then(b.total_ns.cmp(&a.total_ns))
            .then(a.tid.cmp(&b.tid))
            .then(a.comm.cmp(&b.comm))
    });
    v
}

/// Nanoseconds as seconds, to the millisecond (`1.234 s`).
pub fn secs(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

/// Keeps the first `limit` items; 0 keeps all.
pub fn take<T>(v: Vec<T>, limit: usize) -> Vec<T> {
    if limit == 0 {
        v
    } else {
        v.into_iter().take(limit).collect()
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Fabricated reports shared by the format tests.
    use crate::model::*;
    use crate::util::clock::ClockPair;

    pub fn frame(name: &str, addr: u64) -> Frame {
        Frame { addr, symbol: Some(name.into()), module: None, offset: Some(0) }
    }

    pub fn frames(names: &[&str]) -> Stack {
        Stack::of(names.iter().enumerate().map(|(i, n)| frame(n, 0x1000 + i as u64)).collect())
    }

    pub fn info() -> TraceInfo {
        TraceInfo {
            // mono 1 s == 2023-11-14T22:13:20Z
            clock: ClockPair { mono_ns: 1_000_000_000, wall_ns: 1_700_000_000_000_000_000 },
            start_mono: 1_000_000_000,
            end_mono: 6_000_000_000,
            attach: AttachKind::TpBtf,
            target: "all threads".into(),
            utc_offset_s: 0,
            waker: false,
            by: crate::analysis::reduce::By::Thread,
            state_filter: None,
            on_cpu_hz: None,
            cgroup_target: false,
            goroutines: None,
        }
    }

    pub use crate::model::fixtures::bare_record;

    pub fn hop(comm: &str, tid: u32, kernel: &[&str], user: &[&str]) -> Hop {
        Hop {
            tgid: 100,
            tid,
            comm: comm.as_bytes().to_vec(),
            kernel: frames(kernel),
            user: frames(user),
            interrupt: false,
        }
    }

    /// The fixture report with `--waker --chain 2`: the sleeper was woken by a
    /// writer, which a timer interrupt had woken; the worker was preempted.
    pub fn offwake_report() -> Report {
        let mut r = report();
        r.info.waker = true;
        let mut irq = hop(
            "",
            0,
            &["try_to_wake_up", "hrtimer_wakeup", "asm_sysvec_apic_timer_interrupt"],
            &[],
        );
        (irq.tgid, irq.comm) = (0, Vec::new());
        irq.interrupt = true;
        irq.user = Stack::None;
        r.records[0].wake = Some(WakeInfo {
            kind: WakeKind::Woken,
            hops: vec![
                hop(
                    "writer",
                    102,
                    &["try_to_wake_up", "pipe_write", "vfs_write"],
                    &["write", "produce", "main"],
                ),
                irq,
            ],
            blocked_ns: 1_000_000_000,
            runq_ns: 500_000,
            max_blocked_ns: 249_900_000,
            max_runq_ns: 100_000,
        });
        r.records[1].wake = Some(WakeInfo {
            kind: WakeKind::Preempted,
            hops: vec![],
            blocked_ns: 0,
            runq_ns: 3_000,
            max_blocked_ns: 0,
            max_runq_ns: 2_000,
        });
        r
    }

    /// The fixture report traced `--on-cpu` at 100 Hz: the sleeper also ran
    /// for 2 s of the 5 s in `compute`, called from the `main` it waits in.
    pub fn on_cpu_report() -> Report {
        let mut r = report();
        r.info.on_cpu_hz = Some(100);
        let mut running = r.records[0].clone();
        running.kernel = Stack::None;
        running.user = frames(&["compute", "main"]);
        (running.count, running.total_ns, running.max_ns) = (200, 2_000_000_000, 10_000_000);
        running.waits_on = Some(crate::model::label::WaitsOn::Running);
        r.records.push(running);
        r
    }

    /// Two records: a sleeper with both stacks, and a kernel worker whose kernel stack was lost.
    pub fn report() -> Report {
        Report {
            info: info(),
            counters: Counters {
                switches: 1000,
                recorded: 12,
                lost_kernel_stacks: 1,
                ..Default::default()
            },
            records: vec![
                Record {
                    tgid: 100,
                    tid: 101,
                    comm: b"sleeper".to_vec(),
                    kernel: frames(&["__schedule", "schedule", "do_nanosleep"]),
                    user: frames(&["clock_nanosleep", "wait_here", "main"]),
                    count: 10,
                    total_ns: 1_000_500_000,
                    max_ns: 250_000_000,
                    max_end_mono: 3_500_000_000,
                    wake: None,
                    open: None,
                    threads: 1,
                    ns_ids: None,
                    ran_on: Vec::new(),
                    cgroup: None,
                    waits_on: None,
                },
                Record {
                    tgid: 7,
                    tid: 7,
                    comm: b"kworker/0:1".to_vec(),
                    kernel: Stack::Missing,
                    user: Stack::None,
                    count: 2,
                    total_ns: 3_000,
                    max_ns: 2_000,
                    max_end_mono: 2_000_000_000,
                    wake: None,
                    open: None,
                    threads: 1,
                    ns_ids: None,
                    ran_on: Vec::new(),
                    cgroup: None,
                    waits_on: None,
                },
            ],
            objects: [(
                100,
                vec![crate::model::ObjectMap {
                    start: 0x1000,
                    end: 0x9000,
                    offset: 0,
                    path: "/usr/bin/sleeper".into(),
                    build_id: Some("abcdef01".into()),
                }],
            )]
            .into(),
            events: Vec::new(),
            samples: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_containers_thread_shows_its_own_ids_beside_the_hosts() {
        let mut r = fixtures::report().records.remove(0);
        assert_eq!(who(&r, By::Thread), "sleeper  pid 100  tid 101");
        r.ns_ids = Some((1, 3));
        assert_eq!(
            who(&r, By::Thread),
            "sleeper  pid 100  tid 101 (pid 1, tid 3 in its namespace)"
        );
        assert_eq!(who(&r, By::Process), "sleeper  pid 100 (1 in its namespace)  1 thread");
        assert_eq!(
            who(&r, By::Comm),
            "sleeper  1 thread",
            "a name stands for threads of any namespace"
        );
        r.cgroup = Some("/system.slice/docker-4f1c.scope".into());
        assert_eq!(
            who(&r, By::Cgroup),
            "cgroup /system.slice/docker-4f1c.scope  1 thread, heaviest sleeper"
        );
        r.cgroup = None;
        assert_eq!(who(&r, By::Cgroup), "cgroup [cgroup unknown]  1 thread, heaviest sleeper");
        let doc =
            crate::report::json::document(&Report { records: vec![r], ..fixtures::report() }, 0);
        assert_eq!(
            (doc["records"][0]["ns_pid"].as_u64(), doc["records"][0]["ns_tid"].as_u64()),
            (Some(1), Some(3))
        );
    }

    #[test]
    fn a_goroutine_is_headed_with_the_threads_it_ran_on() {
        let mut r = fixtures::report().records.remove(0);
        r.tid = topwaits_common::golang::tid_of(18);
        assert_eq!(who(&r, By::Thread), "sleeper  pid 100  goroutine 18");
        r.ran_on = vec![104, 101];
        assert_eq!(who(&r, By::Thread), "sleeper  pid 100  goroutine 18  ran on tid 104, 101");
        r.ran_on = vec![104, 101, 102, 103, 105];
        assert_eq!(
            who(&r, By::Thread),
            "sleeper  pid 100  goroutine 18  ran on tid 104, 101, 102 and 2 more"
        );
        assert_eq!(who(&r, By::Process), "sleeper  pid 100  1 thread");
        let doc = crate::report::json::document(
            &Report { records: vec![r.clone()], ..fixtures::report() },
            0,
        );
        assert_eq!(doc["records"][0]["ran_on_tids"], serde_json::json!([104, 101, 102, 103, 105]));
        // Merged under another record, the threads join its own.
        let mut other = r.clone();
        other.ran_on = vec![101, 107];
        let merged = crate::analysis::reduce::merge(vec![r, other], By::Thread);
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].ran_on, vec![104, 101, 102, 103, 105, 107]);
    }
}
