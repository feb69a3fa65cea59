//! Each thread's time over a trace with on-CPU samples (`--on-cpu`): running
//! (its samples scaled to time), runnable in a run queue, and blocked, beside
//! the wall time the three should add up to; and where it ran, its hottest
//! sampled stacks. Pure.

use crate::model::label::WaitsOn;
use crate::model::{Record, Report};

/// One thread's time over the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadTime {
    pub tgid: u32,
    pub tid: u32,
    pub comm: Vec<u8>,
    /// On-CPU samples, and their time.
    pub samples: u64,
    pub running_ns: u64,
    /// Preempted, waiting for a CPU.
    pub runnable_ns: u64,
    /// Every other wait.
    pub blocked_ns: u64,
}

impl ThreadTime {
    /// The time accounted for, which the window's wall time should match.
    pub fn accounted_ns(&self) -> u64 {
        self.running_ns + self.runnable_ns + self.blocked_ns
    }
}

/// The part of `r`'s time inside the window from `start` (monotonic ns): a
/// wait still open at the end may have begun before the trace.
fn within(r: &Record, start: u64) -> u64 {
    if r.open.is_none() {
        return r.total_ns;
    }
    let began = r.max_end_mono.saturating_sub(r.max_ns);
    r.total_ns.saturating_sub(start.saturating_sub(began))
}

/// Every thread's time, most running first, when the report holds on-CPU
/// samples (None otherwise). Records merged across threads (`--by`) count
/// under the thread that names them.
pub fn of(report: &Report) -> Option<Vec<ThreadTime>> {
    report.info.on_cpu_hz?;
    let mut by_tid: std::collections::BTreeMap<u32, ThreadTime> = std::collections::BTreeMap::new();
    for r in &report.records {
        let t = by_tid.entry(r.tid).or_insert_with(|| ThreadTime {
            tgid: r.tgid,
            tid: r.tid,
            comm: r.comm.clone(),
            samples: 0,
            running_ns: 0,
            runnable_ns: 0,
            blocked_ns: 0,
        });
        match &r.waits_on {
            Some(WaitsOn::Running) => {
                t.samples += r.count;
                t.running_ns += r.total_ns;
            }
            Some(WaitsOn::RunQueue { .. }) => t.runnable_ns += within(r, report.info.start_mono),
            _ => t.blocked_ns += within(r, report.info.start_mono),
        }
    }
    let mut all: Vec<ThreadTime> = by_tid.into_values().collect();
    all.sort_by(|a, b| b.running_ns.cmp(&a.running_ns).then(a.tid.cmp(&b.tid)));
    Some(all)
}

/// One of a thread's hottest running stacks: its samples and their time, and
/// its frames' names, leaf first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hot {
    pub samples: u64,
    pub running_ns: u64,
    pub user: Vec<String>,
    pub kernel: Vec<String>,
}

/// Each thread's `n` hottest running stacks, most sampled first (ties by their
/// frames), from the report's on-CPU sample records; threads without samples
/// are absent.
pub fn hottest(report: &Report, n: usize) -> std::collections::HashMap<u32, Vec<Hot>> {
    let mut by_tid: std::collections::HashMap<u32, Vec<Hot>> = std::collections::HashMap::new();
    for r in report.records.iter().filter(|r| matches!(r.waits_on, Some(WaitsOn::Running))) {
        let names = |s: &crate::model::Stack| {
            s.frames().iter().map(|f| f.name().into_owned()).collect::<Vec<_>>()
        };
        by_tid.entry(r.tid).or_default().push(Hot {
            samples: r.count,
            running_ns: r.total_ns,
            user: names(&r.user),
            kernel: names(&r.kernel),
        });
    }
    for hot in by_tid.values_mut() {
        hot.sort_by(|a, b| {
            b.samples.cmp(&a.samples).then_with(|| (&a.user, &a.kernel).cmp(&(&b.user, &b.kernel)))
        });
        hot.truncate(n);
    }
    by_tid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{OpenSince, Stack};

    fn rec(tid: u32, on: Option<WaitsOn>, total_ns: u64, count: u64) -> Record {
        Record {
            tgid: 1,
            tid,
            comm: b"w".to_vec(),
            kernel: Stack::None,
            user: Stack::None,
            count,
            total_ns,
            max_ns: total_ns,
            max_end_mono: 10_000_000_000,
            wake: None,
            open: None,
            threads: 1,
            ns_ids: None,
            ran_on: Vec::new(),
            cgroup: None,
            waits_on: on,
        }
    }

    fn report(records: Vec<Record>, hz: Option<u32>) -> Report {
        let mut info = crate::report::fixtures::info();
        (info.on_cpu_hz, info.start_mono) = (hz, 5_000_000_000);
        Report {
            info,
            counters: Default::default(),
            records,
            objects: Default::default(),
            events: Vec::new(),
            samples: Vec::new(),
        }
    }

    #[test]
    fn running_runnable_and_blocked_add_up_per_thread() {
        let sleep = || {
            Some(WaitsOn::Sleep {
                requested_ns: None,
                syscall: "nanosleep".into(),
                to_deadline: false,
            })
        };
        let records = vec![
            rec(7, Some(WaitsOn::Running), 2_000_000_000, 200),
            rec(7, Some(WaitsOn::Running), 500_000_000, 50),
            rec(7, Some(WaitsOn::RunQueue { ran_instead: None }), 100_000_000, 9),
            rec(7, sleep(), 2_400_000_000, 240),
            rec(8, sleep(), 1_000_000_000, 1),
        ];
        let times = of(&report(records, Some(100))).unwrap();
        assert_eq!(
            times.iter().map(|t| t.tid).collect::<Vec<_>>(),
            vec![7, 8],
            "most running first"
        );
        let t = &times[0];
        assert_eq!(
            (t.samples, t.running_ns, t.runnable_ns, t.blocked_ns),
            (250, 2_500_000_000, 100_000_000, 2_400_000_000)
        );
        assert_eq!(t.accounted_ns(), 5_000_000_000);
    }

    #[test]
    fn an_open_wait_counts_only_inside_the_window() {
        let mut open = rec(3, None, 8_000_000_000, 1);
        open.open = Some(OpenSince::BeforeTrace);
        let times = of(&report(vec![open], Some(99))).unwrap();
        assert_eq!(times[0].blocked_ns, 5_000_000_000, "began 3 s before the 5 s window");
    }

    #[test]
    fn hottest_stacks_are_per_thread_most_sampled_first() {
        use crate::model::Frame;
        let at = |name: &str| {
            Stack::Frames(
                vec![std::sync::Arc::new(Frame {
                    addr: 1,
                    symbol: Some(name.into()),
                    module: None,
                    offset: Some(0),
                })]
                .into(),
            )
        };
        let mut spin = rec(7, Some(WaitsOn::Running), 300_000_000, 30);
        spin.user = at("spin");
        let mut hash = rec(7, Some(WaitsOn::Running), 500_000_000, 50);
        hash.user = at("hash");
        let mut idle = rec(7, Some(WaitsOn::Running), 10_000_000, 1);
        idle.kernel = at("do_idle");
        let mut other = rec(8, Some(WaitsOn::Running), 20_000_000, 2);
        other.user = at("main");
        let sleep = rec(7, None, 900_000_000, 3);
        let hot = hottest(&report(vec![spin, sleep, idle, hash, other], Some(100)), 2);
        let seven: Vec<(&str, u64)> = hot[&7]
            .iter()
            .map(|h| (h.user.first().map_or("", |s| s.as_str()), h.samples))
            .collect();
        assert_eq!(
            seven,
            [("hash", 50), ("spin", 30)],
            "two of three, most first; waits are not running stacks"
        );
        assert_eq!(hot[&7][0].running_ns, 500_000_000);
        assert_eq!(hot[&8].len(), 1);
        assert!(!hot.contains_key(&9));
    }

    #[test]
    fn without_samples_there_is_no_account() {
        assert_eq!(of(&report(vec![rec(1, None, 5, 1)], None)), None);
    }
}
