//! What `why`'s views read: the trace's waits as the analysis takes them,
//! each wait's and wakeup's site (stacks told apart by their names), and the
//! names of threads, sites and groups.

use super::*;
use crate::util::text::{thread_family, tid_text};

/// A site as a process's waits repeat it: the process, its stacks' addresses
/// and its label.
pub(super) type AddrKey = (u32, Vec<u64>, Vec<u64>, Option<String>);

/// What threads that did alike share, as `--by` groups them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Who {
    Comm(String),
    Process(u32, String),
    Thread(Tid),
    /// `--by cgroup`: the cgroup path of the thread's process.
    Cgroup(String),
}

/// Where a wait or a wakeup happened: its kernel and user stacks.
pub(super) struct Site {
    pub(super) kernel: Stack,
    pub(super) user: Stack,
}

/// The trace's waits as the analysis takes them, and what names their ids.
pub(super) struct Input {
    pub(super) trace: Trace,
    /// Site `i + 1` (0: none).
    pub(super) sites: Vec<Site>,
    pub(super) threads: HashMap<Tid, (u32, String)>,
    pub(super) waits: usize,
    /// What the waits at a site were for (the first labelled one's label).
    pub(super) labels: HashMap<u64, String>,
    /// The lock each thread waited on longest, where it waited on one.
    pub(super) locks: HashMap<Tid, String>,
    /// Threads with a wait still open at the end.
    pub(super) open: HashSet<Tid>,
    /// With on-CPU samples: each thread's sampled time by site.
    pub(super) running: HashMap<Tid, Vec<(u64, u64)>>,
    /// With on-CPU samples sent one by one (as `why` traces): each thread's
    /// samples in time order, as (time, ns, site).
    pub(super) timed: HashMap<Tid, Vec<(u64, u64, u64)>>,
    pub(super) by: By,
    /// Each process's cgroup, where its records carry one (`--by cgroup`).
    pub(super) cgroups: HashMap<u32, String>,
}

/// Sites are told apart by what every view prints of them: the user stack's
/// names and what the wait was for, where the thread has a user stack (how the
/// kernel went about the wait, or about a wakeup, is no part of a cause: one
/// fdatasync from the same caller on the same disk is one cause), else the
/// kernel stack's names. The same code in two processes is one site; the
/// stacks kept are the first wait's.
#[derive(Default)]
pub(super) struct Sites {
    sites: Vec<Site>,
    index: HashMap<(Option<StackKey>, StackKey, Option<String>), u64>,
    /// Names are fingerprinted once per process, addresses and label, which
    /// most waits repeat: a recording's frames are not shared, and hashing
    /// every name of every wait took seconds.
    seen: FastMap<AddrKey, u64>,
    fp: Fingerprints,
}

impl Sites {
    /// The id of a wait's (or a wakeup's) site: `i + 1` for `sites[i]`.
    pub(super) fn id(
        &mut self,
        tgid: u32,
        kernel: &Stack,
        user: &Stack,
        label: Option<String>,
    ) -> u64 {
        let addrs = |s: &Stack| s.frames().iter().map(|f| f.addr).collect::<Vec<u64>>();
        let Sites { sites, index, seen, fp } = self;
        *seen.entry((tgid, addrs(kernel), addrs(user), label.clone())).or_insert_with(|| {
            let kernel_key = user.frames().is_empty().then(|| fp.of(kernel));
            *index.entry((kernel_key, fp.of(user), label)).or_insert_with(|| {
                sites.push(Site { kernel: kernel.clone(), user: user.clone() });
                sites.len() as u64
            })
        })
    }
}

/// Each thread's site-to-time tally.
pub(super) type BySite = HashMap<Tid, Vec<(u64, u64)>>;
/// Each thread's samples in time order, as (time, ns, site).
pub(super) type Timed = HashMap<Tid, Vec<(u64, u64, u64)>>;

/// On-CPU samples: what each thread ran, by site, and (sent one by one) when.
pub(super) fn sampled_sites(report: &Report, sites: &mut Sites) -> (BySite, Timed) {
    let mut running: HashMap<Tid, HashMap<u64, u64>> = HashMap::new();
    for r in report.records.iter().filter(|r| r.on_cpu()) {
        let s = sites.id(r.tgid, &r.kernel, &r.user, None);
        *running.entry(r.tid).or_default().entry(s).or_default() += r.total_ns;
    }
    let running = running
        .into_iter()
        .map(|(t, m)| (t, m.into_iter().map(|(s, ns)| (ns, s)).collect()))
        .collect();
    let mut timed: Timed = HashMap::new();
    for r in &report.samples {
        let s = sites.id(r.tgid, &r.kernel, &r.user, None);
        timed.entry(r.tid).or_default().push((r.max_end_mono, r.total_ns, s));
    }
    for v in timed.values_mut() {
        v.sort_unstable();
    }
    (running, timed)
}

impl Input {
    pub(super) fn of(report: &Report, by: By) -> Input {
        let mut sites = Sites::default();
        let mut site = |tgid: u32, kernel: &Stack, user: &Stack, label: Option<String>| {
            sites.id(tgid, kernel, user, label)
        };
        let mut threads = HashMap::new();
        let mut waits = Vec::new();
        let mut labels = HashMap::new();
        let mut locked: HashMap<Tid, HashMap<String, u64>> = HashMap::new();
        for e in &report.events {
            let r = &e.record;
            threads.insert(r.tid, (r.tgid, comm_text(&r.comm)));
            let (start, end) = (e.start_mono(), e.end_mono());
            let (waker, woken, waker_site) = match &r.wake {
                Some(w) if w.kind == WakeKind::Preempted => (Waker::Preempted, None, 0),
                Some(w) if w.kind == WakeKind::Woken && !w.hops.is_empty() => {
                    let h = &w.hops[0];
                    let runtime = crate::analysis::goroutines::runtime_waker(r.tid, h);
                    let by = match runtime {
                        _ if h.interrupt => Waker::Device(device(h)),
                        Some(what) => Waker::Device(what.to_string()),
                        None => Waker::Thread(h.tid),
                    };
                    if !h.interrupt && runtime.is_none() {
                        threads.entry(h.tid).or_insert_with(|| (h.tgid, comm_text(&h.comm)));
                    }
                    (by, Some(start + w.blocked_ns), site(h.tgid, &h.kernel, &h.user, None))
                }
                _ => match crate::analysis::goroutines::unseen_waker(r) {
                    Some(what) => (Waker::Device(what.to_string()), None, 0),
                    None => (Waker::Unknown, None, 0),
                },
            };
            let own = site(r.tgid, &r.kernel, &r.user, r.waits_on.as_ref().map(WaitsOn::short));
            if let Some(w) = &r.waits_on {
                labels.entry(own).or_insert_with(|| w.short());
            }
            let released = r
                .wake
                .as_ref()
                .and_then(|w| w.hops.first())
                .filter(|h| !h.interrupt && waker != Waker::Preempted);
            if let Some(lock) = crate::analysis::locks::lock_of(r, released) {
                *locked.entry(r.tid).or_default().entry(lock.short()).or_default() += r.max_ns;
            }
            waits.push(Wait { tid: r.tid, start, woken, end, waker, site: own, waker_site });
        }
        // Waits still open at the end: a pool thread that waited all along.
        let mut open = HashSet::new();
        for r in report.records.iter().filter(|r| r.open.is_some()) {
            let start = r.max_end_mono.saturating_sub(r.max_ns).max(report.info.start_mono);
            threads.entry(r.tid).or_insert_with(|| (r.tgid, comm_text(&r.comm)));
            open.insert(r.tid);
            let s = site(r.tgid, &r.kernel, &r.user, r.waits_on.as_ref().map(WaitsOn::short));
            waits.push(Wait {
                tid: r.tid,
                start,
                woken: None,
                end: report.info.end_mono,
                waker: Waker::Unknown,
                site: s,
                waker_site: 0,
            });
        }
        let (running, timed) = sampled_sites(report, &mut sites);
        let n = waits.len();
        let locks = locked
            .into_iter()
            .filter_map(|(t, m)| Some((t, m.into_iter().max_by_key(|(l, ns)| (*ns, l.clone()))?.0)))
            .collect();
        let cgroups = report
            .records
            .iter()
            .filter_map(|r| Some((r.tgid, r.cgroup.as_deref()?.to_string())))
            .collect();
        Input {
            trace: Trace::new(waits),
            sites: sites.sites,
            threads,
            waits: n,
            labels,
            locks,
            open,
            running,
            timed,
            by,
            cgroups,
        }
    }

    /// The key a thread's doings are grouped under.
    pub(super) fn who(&self, tid: Tid) -> Who {
        match (self.by, self.threads.get(&tid)) {
            (By::Cgroup, Some((tgid, _))) => Who::Cgroup(
                self.cgroups
                    .get(tgid)
                    .cloned()
                    .unwrap_or_else(|| crate::analysis::reduce::UNKNOWN_CGROUP.to_string()),
            ),
            (By::Comm | By::What, Some((_, comm))) => Who::Comm(thread_family(comm)),
            (By::Process, Some((tgid, comm))) => Who::Process(*tgid, comm.clone()),
            _ => Who::Thread(tid),
        }
    }

    /// A group's key as a path shows it: `comm`, `comm (pid N)`, `comm (tid N)`.
    pub(super) fn who_name(&self, who: &Who) -> String {
        match who {
            Who::Comm(c) => c.clone(),
            Who::Process(p, c) => format!("{c} (pid {p})"),
            Who::Thread(t) => self.thread(*t),
            Who::Cgroup(c) => format!("cgroup {c}"),
        }
    }

    /// Threads that share a key, in words: `postgres (tid 5)`, `8 threads like
    /// postgres (tid 5)`, `3 threads of nginx (pid 9)`.
    pub(super) fn members(&self, who: &Who, tids: &BTreeSet<Tid>) -> String {
        let first = tids.iter().next().copied().unwrap_or(0);
        let count = crate::util::text::count_of(tids.len(), tids);
        match (who, tids.len()) {
            (Who::Process(p, c), 1) => format!("{c} (pid {p}, {})", tid_text(first)),
            (Who::Process(p, c), _) => format!("{count} of {c} (pid {p})"),
            (Who::Cgroup(c), 1) => format!("{} in cgroup {c}", self.thread(first)),
            (_, 1) | (Who::Thread(_), _) => self.thread(first),
            (Who::Comm(_), _) => format!("{count} like {}", self.thread(first)),
            (Who::Cgroup(c), _) => {
                format!("{count} of cgroup {c} like {}", self.thread(first))
            }
        }
    }

    /// Threads as groups of their keys: `postgres (8 threads), pgbench (tid 9)`,
    /// at most `n` groups, most threads first.
    pub(super) fn groups_of(&self, tids: impl IntoIterator<Item = Tid>, n: usize) -> String {
        let mut by: HashMap<Who, BTreeSet<Tid>> = HashMap::new();
        for t in tids {
            by.entry(self.who(t)).or_default().insert(t);
        }
        let mut groups: Vec<(Who, BTreeSet<Tid>)> = by.into_iter().collect();
        groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
        let shown: Vec<String> = groups
            .iter()
            .take(n)
            .map(|(who, tids)| match (who, tids.len()) {
                (Who::Thread(_), _) | (_, 1) => self.members(who, tids),
                (_, k) => {
                    format!("{} ({})", self.who_name(who), crate::util::text::count_of(k, tids))
                }
            })
            .collect();
        let more = if groups.len() > n {
            format!(" and {} more", groups.len() - n)
        } else {
            String::new()
        };
        format!("{}{more}", shown.join(", "))
    }

    /// What `tids` ran, from their on-CPU samples: (time, site), most first.
    pub(super) fn sampled(&self, tids: &BTreeSet<Tid>) -> Vec<(u64, u64)> {
        let mut by_site: HashMap<u64, u64> = HashMap::new();
        for (ns, site) in tids.iter().filter_map(|t| self.running.get(t)).flatten() {
            *by_site.entry(*site).or_default() += ns;
        }
        let mut v: Vec<(u64, u64)> = by_site.into_iter().map(|(s, ns)| (ns, s)).collect();
        v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        v
    }

    /// What a running cause's threads ran while others waited behind them:
    /// the samples taken in those stretches (`spans`), where samples were taken
    /// one by one; else their whole profile, said so. (time, site), most first.
    pub(super) fn sampled_holding(
        &self,
        tids: &BTreeSet<Tid>,
        spans: &HashMap<Tid, Vec<(u64, u64)>>,
    ) -> (Vec<(u64, u64)>, bool) {
        if self.timed.is_empty() {
            return (self.sampled(tids), false);
        }
        let mut by_site: HashMap<u64, u64> = HashMap::new();
        for t in tids {
            let (Some(samples), Some(spans)) = (self.timed.get(t), spans.get(t)) else { continue };
            for &(start, end) in spans {
                let first = samples.partition_point(|s| s.0 < start);
                for &(_, ns, site) in samples[first..].iter().take_while(|s| s.0 < end) {
                    *by_site.entry(site).or_default() += ns;
                }
            }
        }
        let mut v: Vec<(u64, u64)> = by_site.into_iter().map(|(s, ns)| (ns, s)).collect();
        v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        (v, true)
    }

    /// What `tids` ran in `spans` (when each ran on a critical path), from the
    /// samples taken then: (time, site), most first.
    pub(super) fn sampled_in(
        &self,
        tids: &BTreeSet<Tid>,
        site: u64,
        spans: &BTreeMap<(Tid, u64), Vec<(u64, u64)>>,
    ) -> Vec<(u64, u64)> {
        let mut by_site: HashMap<u64, u64> = HashMap::new();
        for t in tids {
            let (Some(samples), Some(spans)) = (self.timed.get(t), spans.get(&(*t, site))) else {
                continue;
            };
            for &(start, end) in spans {
                let first = samples.partition_point(|s| s.0 < start);
                for &(_, ns, site) in samples[first..].iter().take_while(|s| s.0 < end) {
                    *by_site.entry(site).or_default() += ns;
                }
            }
        }
        let mut v: Vec<(u64, u64)> = by_site.into_iter().map(|(s, ns)| (ns, s)).collect();
        v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        v
    }

    /// For each running segment of `tid`'s path (by index), what its threads
    /// ran in it, from the samples taken in its stretches.
    pub(super) fn path_samples(
        &self,
        report: &Report,
        tid: Tid,
        path: &[PathGroup<Who>],
    ) -> Vec<Vec<(u64, u64)>> {
        let running: BTreeSet<Tid> = path
            .iter()
            .filter(|s| matches!(s.what, What::Running { .. }))
            .filter_map(|s| s.tids.last())
            .flatten()
            .copied()
            .collect();
        if running.is_empty() || self.timed.is_empty() {
            return vec![Vec::new(); path.len()];
        }
        let spans =
            running_spans(&self.trace, tid, report.info.start_mono, report.info.end_mono, &running);
        path.iter()
            .map(|s| match (&s.what, s.tids.last()) {
                // The stretches in which these threads ran from this place.
                (What::Running { site }, Some(tids)) => self.sampled_in(tids, *site, &spans),
                _ => Vec::new(),
            })
            .collect()
    }

    pub(super) fn site(&self, id: u64) -> Option<&Site> {
        id.checked_sub(1).and_then(|i| self.sites.get(i as usize))
    }

    /// `comm (tid N)`.
    pub(super) fn thread(&self, tid: Tid) -> String {
        match self.threads.get(&tid) {
            Some((_, comm)) => format!("{comm} ({})", tid_text(tid)),
            None => tid_text(tid),
        }
    }

    /// A site's innermost functions, user side first: `f <- g <- h`.
    pub(super) fn place(&self, id: u64) -> String {
        let Some(s) = self.site(id) else { return "[no stack]".into() };
        let user: Vec<_> = s.user.frames().iter().take(4).map(|f| f.name()).collect();
        let kernel: Vec<_> = s.kernel.frames().iter().take(3).map(|f| f.name()).collect();
        match (user.is_empty(), kernel.is_empty()) {
            (false, _) => user.join(" <- "),
            (true, false) => kernel.join(" <- "),
            (true, true) => "[no stack]".into(),
        }
    }

    pub(super) fn json_site(&self, id: u64) -> (Value, Value) {
        match self.site(id) {
            Some(s) => (json_stack(&s.kernel).0, json_stack(&s.user).0),
            None => (json!([]), json!([])),
        }
    }

    pub(super) fn json_thread(&self, tid: Tid) -> Value {
        let (tgid, comm) = self.threads.get(&tid).cloned().unwrap_or((0, String::new()));
        json!({"tid": tid, "tgid": tgid, "comm": comm})
    }
}
