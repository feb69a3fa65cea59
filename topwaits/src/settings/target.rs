//! Which threads a command looks at (`Threads`), and how the programs' filter
//! is told it.

/// The cgroup the programs recognise for `--cgroup` (its BTF offsets are added
/// when the programs load).
pub fn cgroup_filter(t: &Threads) -> topwaits_common::CgroupFilter {
    let mut f = topwaits_common::CgroupFilter::NONE;
    if let Threads::Cgroup(cg, _) = t {
        (f.id, f.hierarchy, f.level) = (cg.id, cg.hierarchy, cg.level);
    }
    f
}

pub fn filter_kind(t: &Threads) -> u32 {
    use topwaits_common::thread_filter;
    match t {
        Threads::Pids(_) => thread_filter::TGID,
        Threads::Tids(_) => thread_filter::TID,
        Threads::Cgroup(..) => thread_filter::CGROUP,
        _ => thread_filter::ALL,
    }
}

/// Which threads to trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Threads {
    All,
    Pids(Vec<u32>),
    Tids(Vec<u32>),
    /// `--cgroup`, `--unit`, `--container`: the cgroup, and how it was named
    /// (`cgroup`, `unit nginx.service`, `container 3f2a1b9c8d7e`).
    Cgroup(Box<crate::sys::cgroup::Cgroup>, String),
    UserOnly,
    KernelOnly,
}

impl Threads {
    /// What the selection traces, for headers and titles: `all threads`,
    /// `PID 1,2`, `TID 5`, `user threads` or `kernel threads`.
    pub fn describe(&self) -> String {
        let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        match self {
            Threads::All => "all threads".to_string(),
            Threads::Pids(v) => format!("PID {}", list(v)),
            Threads::Tids(v) => format!("TID {}", list(v)),
            Threads::Cgroup(cg, named) if named == "cgroup" => format!("cgroup {}", cg.path),
            Threads::Cgroup(cg, named) => format!("{named} (cgroup {})", cg.path),
            Threads::UserOnly => "user threads".to_string(),
            Threads::KernelOnly => "kernel threads".to_string(),
        }
    }

    /// The pids or tids of `-p`/`-t`.
    pub fn ids(&self) -> &[u32] {
        match self {
            Threads::Pids(v) | Threads::Tids(v) => v,
            _ => &[],
        }
    }
}
