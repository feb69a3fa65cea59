//! The counters `topwaits serve` exposes: off-CPU time and waits, summed from
//! each interval's increments (see [`super::increments`]) by thread name,
//! what the waits were for (the kinds `--by what` ranks) and cgroup. A label
//! set, once seen, stays a series of its own, so that every counter only
//! grows; past `max_series` of them, new label sets are added to one series
//! labelled `other`, and how many were so folded is counted. Pure.

use std::collections::HashMap;

use crate::model::label::WaitsOn;
use crate::model::{comm_text, Counters, Report};

/// The labels of one series.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Labels {
    pub comm: String,
    /// A wait label's kind (`mutex`, `disk`, `run_queue`, ...), or
    /// `not_labelled`.
    pub what: String,
    /// The cgroup, `/` for the root, or empty where it is not known.
    pub cgroup: String,
    /// The container ID the cgroup names (see
    /// [`crate::sys::cgroup::container_id_of`]), or empty.
    pub container: String,
}

impl Labels {
    /// The series that label sets past the bound are added to.
    pub fn other() -> Labels {
        Labels {
            comm: "other".into(),
            what: "other".into(),
            cgroup: "other".into(),
            container: String::new(),
        }
    }
}

/// One series' counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Values {
    pub offcpu_ns: u64,
    pub waits: u64,
}

/// The counters since `serve` began.
#[derive(Clone, Debug)]
pub struct Metrics {
    max_series: usize,
    series: HashMap<Labels, Values>,
    /// Label sets added to `other` since the bound was reached (each once).
    pub folded: u64,
    folded_seen: std::collections::HashSet<Labels>,
    /// The kernel side's counters since the trace began (losses among them).
    pub counters: Counters,
    /// Intervals taken.
    pub intervals: u64,
}

/// How many distinct folded label sets are remembered (beyond it, each new
/// one counts as folded again: the count is a bound, not exact).
const FOLDED_REMEMBERED: usize = 10_000;

impl Metrics {
    pub fn new(max_series: usize) -> Metrics {
        Metrics {
            max_series,
            series: HashMap::new(),
            folded: 0,
            folded_seen: Default::default(),
            counters: Counters::default(),
            intervals: 0,
        }
    }

    /// Adds one interval's report, whose records are increments; `total`: the
    /// kernel side's counters at its end.
    pub fn add(&mut self, report: &Report, total: &Counters) {
        self.intervals += 1;
        self.counters = *total;
        for r in report.records.iter().filter(|r| !r.on_cpu()) {
            let cgroup = r.cgroup.as_deref().unwrap_or("");
            let container =
                cgroup.rsplit('/').find_map(crate::sys::cgroup::container_id_of).unwrap_or("");
            let labels = Labels {
                comm: comm_text(&r.comm),
                what: r.waits_on.as_ref().map_or("not_labelled", WaitsOn::kind).to_string(),
                cgroup: cgroup.to_string(),
                container: container.to_string(),
            };
            let labels = if self.series.contains_key(&labels) || self.series.len() < self.max_series
            {
                labels
            } else {
                let new = if self.folded_seen.len() < FOLDED_REMEMBERED {
                    self.folded_seen.insert(labels)
                } else {
                    !self.folded_seen.contains(&labels)
                };
                self.folded += u64::from(new);
                Labels::other()
            };
            let v = self.series.entry(labels).or_default();
            v.offcpu_ns += r.total_ns;
            v.waits += r.count;
        }
    }

    /// Every series, by labels.
    pub fn series(&self) -> Vec<(&Labels, &Values)> {
        let mut v: Vec<_> = self.series.iter().collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Record;

    fn rec(comm: &str, on: Option<WaitsOn>, total: u64, count: u64) -> Record {
        Record {
            waits_on: on,
            cgroup: Some("/system.slice/a.service".into()),
            ..crate::report::fixtures::bare_record(comm, total, count)
        }
    }

    fn report(records: Vec<Record>) -> Report {
        Report { records, ..crate::report::fixtures::report() }
    }

    fn total(switches: u64) -> Counters {
        Counters { switches, lost_user_stacks: 2, ..Default::default() }
    }

    #[test]
    fn intervals_add_up_by_name_what_and_cgroup() {
        let mut m = Metrics::new(10);
        let sleep = || {
            Some(WaitsOn::Sleep {
                requested_ns: None,
                syscall: "nanosleep".into(),
                to_deadline: false,
            })
        };
        m.add(&report(vec![rec("a", sleep(), 100, 1), rec("a", None, 5, 1)]), &total(10));
        m.add(&report(vec![rec("a", sleep(), 50, 2)]), &total(30));
        let s = m.series();
        assert_eq!(s.len(), 2);
        let (labels, v) = s.iter().find(|(l, _)| l.what == "sleep").unwrap();
        assert_eq!(
            (labels.comm.as_str(), labels.cgroup.as_str(), v.offcpu_ns, v.waits),
            ("a", "/system.slice/a.service", 150, 3)
        );
        assert!(s.iter().any(|(l, _)| l.what == "not_labelled"));
        assert_eq!((m.counters.switches, m.counters.lost_user_stacks, m.intervals), (30, 2, 2));
        let id = "4f1c".repeat(16);
        let mut r = rec("c", None, 1, 1);
        r.cgroup = Some(format!("/kubepods/pod1/cri-containerd-{id}.scope").into());
        m.add(&report(vec![r]), &total(0));
        assert!(
            m.series().iter().any(|(l, _)| l.comm == "c" && l.container == id),
            "the container its cgroup names"
        );
    }

    /// Past the bound, new label sets go to `other`; those seen before keep
    /// their own series, so that no counter ever falls.
    #[test]
    fn label_sets_past_the_bound_are_other() {
        let mut m = Metrics::new(2);
        m.add(&report(vec![rec("a", None, 1, 1), rec("b", None, 1, 1)]), &total(0));
        m.add(
            &report(vec![
                rec("c", None, 7, 1),
                rec("d", None, 3, 1),
                rec("a", None, 1, 1),
                rec("c", None, 1, 1),
            ]),
            &total(0),
        );
        let s = m.series();
        assert_eq!(s.len(), 3, "{s:?}");
        let other = s.iter().find(|(l, _)| **l == Labels::other()).unwrap().1;
        assert_eq!((other.offcpu_ns, other.waits), (11, 3));
        assert_eq!(m.folded, 2, "c and d, each once");
        assert_eq!(s.iter().find(|(l, _)| l.comm == "a").unwrap().1.offcpu_ns, 2);
    }
}
