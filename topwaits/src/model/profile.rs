//! Plain data of `topwaits threads`: per-thread scheduling profiles and the wake
//! dependencies between threads. No aya, no I/O.

use crate::model::Counters;

/// One thread's scheduling profile (`topwaits threads`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadProfile {
    pub tid: u32,
    pub tgid: u32,
    pub comm: Vec<u8>,
    /// Wall-clock time on a CPU.
    pub run_ns: u64,
    /// CPU time the scheduler charged (`sum_exec_runtime`), which leaves out time
    /// the hypervisor stole from the vCPU; `None` when the kernel's BTF lacks it.
    pub cpu_ns: Option<u64>,
    /// Runnable but waiting for a CPU: preempted, or woken and not yet running.
    pub preempt_ns: u64,
    /// Interruptible sleep.
    pub sleep_ns: u64,
    /// Uninterruptible sleep (D state), usually I/O.
    pub io_ns: u64,
    pub run_events: u64,
    pub sleep_events: u64,
    pub prio: i32,
    pub static_prio: i32,
    pub policy: u32,
    pub rt_priority: u32,
    pub started: bool,
    pub exited: bool,
}

impl ThreadProfile {
    /// Nice value (meaningful for the fair policies).
    pub fn nice(&self) -> i32 {
        if self.static_prio == 0 {
            0
        } else {
            self.static_prio - 120
        }
    }

    /// The kernel's name of the scheduling policy.
    pub fn policy_name(&self) -> &'static str {
        match self.policy {
            0 => "SCHED_OTHER",
            1 => "SCHED_FIFO",
            2 => "SCHED_RR",
            3 => "SCHED_BATCH",
            5 => "SCHED_IDLE",
            6 => "SCHED_DEADLINE",
            7 => "SCHED_EXT",
            _ => "unknown",
        }
    }

    /// Time observed, in any state.
    pub fn observed_ns(&self) -> u64 {
        self.run_ns + self.preempt_ns + self.sleep_ns + self.io_ns
    }

    /// Time on a CPU lost to the hypervisor (steal), when known.
    pub fn stolen_ns(&self) -> Option<u64> {
        self.cpu_ns.map(|c| self.run_ns.saturating_sub(c))
    }

    /// The CPU work the thread did: the charged CPU time, else the time on a CPU.
    pub fn work_ns(&self) -> u64 {
        self.cpu_ns.unwrap_or(self.run_ns)
    }

    /// Converts the kernel's stats, closing the state still open at `end_mono`.
    /// `cpu_known`: the programs tracked charged CPU time. A run still open at the
    /// end counts fully as CPU time, since its steal is not known yet.
    pub fn from_stats(t: &topwaits_common::ThreadStats, end_mono: u64, cpu_known: bool) -> Self {
        use topwaits_common::{thread_state, THREAD_EXITED, THREAD_STARTED};
        let mut p = ThreadProfile {
            tid: t.tid,
            tgid: t.tgid,
            comm: t.comm[..t.comm.iter().position(|&b| b == 0).unwrap_or(t.comm.len())].to_vec(),
            run_ns: t.state_ns[thread_state::RUNNING as usize],
            cpu_ns: cpu_known.then_some(t.cpu_ns),
            preempt_ns: t.state_ns[thread_state::RUNQ as usize],
            sleep_ns: t.state_ns[thread_state::SLEEP as usize],
            io_ns: t.state_ns[thread_state::IO as usize],
            run_events: t.run_events,
            sleep_events: t.sleep_events,
            prio: t.prio,
            static_prio: t.static_prio,
            policy: t.policy,
            rt_priority: t.rt_priority,
            started: t.flags & THREAD_STARTED != 0,
            exited: t.flags & THREAD_EXITED != 0,
        };
        let open = end_mono.saturating_sub(t.last_ts);
        match t.state {
            thread_state::RUNNING => {
                p.run_ns += open;
                p.cpu_ns = p.cpu_ns.map(|c| c + open);
            }
            thread_state::RUNQ => p.preempt_ns += open,
            thread_state::SLEEP => p.sleep_ns += open,
            thread_state::IO => p.io_ns += open,
            _ => {}
        }
        // The scheduler's clock starts and ends each run a few µs away from the
        // tracepoint's timestamps, so over many runs the charged time can pass the
        // time on a CPU by a fraction of a percent; it never really does.
        p.cpu_ns = p.cpu_ns.map(|c| c.min(p.run_ns));
        p
    }
}

/// A wake dependency: `waker` woke `sleeper` `count` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Edge {
    pub waker: u32,
    pub sleeper: u32,
    pub count: u64,
    /// The waker was inside a futex wake operation.
    pub futex: bool,
}

/// What `topwaits threads` drains.
#[derive(Clone, Debug, Default)]
pub struct ThreadsCapture {
    pub threads: Vec<ThreadProfile>,
    pub edges: Vec<Edge>,
    pub counters: Counters,
    pub lost_threads: u64,
    pub lost_deps: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_stats_close_the_open_state_at_the_end() {
        use topwaits_common::{thread_state, ThreadStats, THREAD_EXITED};
        let mut comm = [0u8; 16];
        comm[..3].copy_from_slice(b"abc");
        let mut state_ns = [0u64; 8];
        state_ns[thread_state::RUNNING as usize] = 100;
        state_ns[thread_state::SLEEP as usize] = 50;
        let stats = ThreadStats {
            tid: 5,
            tgid: 4,
            comm,
            state_ns,
            last_ts: 1_000,
            state: thread_state::SLEEP,
            static_prio: 125,
            policy: 0,
            ..Default::default()
        };
        let p = ThreadProfile::from_stats(&stats, 1_400, false);
        assert_eq!((p.run_ns, p.sleep_ns), (100, 450));
        assert_eq!(
            (p.cpu_ns, p.stolen_ns(), p.work_ns()),
            (None, None, 100),
            "no charged time: the run stands in"
        );
        assert_eq!(p.comm, b"abc");
        assert_eq!(p.nice(), 5);
        assert_eq!(p.policy_name(), "SCHED_OTHER");
        let exited = ThreadStats { state: thread_state::UNKNOWN, flags: THREAD_EXITED, ..stats };
        let p = ThreadProfile::from_stats(&exited, 9_999, false);
        assert!(p.exited && !p.started);
        assert_eq!(p.observed_ns(), 150, "a dead thread accrues nothing more");
    }

    #[test]
    fn charged_cpu_time_leaves_out_steal_and_an_open_run_counts_fully() {
        use topwaits_common::{thread_state, ThreadStats};
        let mut state_ns = [0u64; 8];
        state_ns[thread_state::RUNNING as usize] = 1_000;
        let stats = ThreadStats {
            state_ns,
            cpu_ns: 700,
            last_ts: 5_000,
            state: thread_state::RUNNING,
            ..Default::default()
        };
        let p = ThreadProfile::from_stats(&stats, 5_200, true);
        assert_eq!(p.run_ns, 1_200);
        assert_eq!(p.cpu_ns, Some(900));
        assert_eq!(p.stolen_ns(), Some(300));
        assert_eq!(p.work_ns(), 900);
        let skewed = ThreadStats { cpu_ns: 1_300, ..stats };
        assert_eq!(
            ThreadProfile::from_stats(&skewed, 5_200, true).cpu_ns,
            Some(1_200),
            "charged time capped at time on a CPU"
        );
        let odd = ThreadProfile { run_ns: 10, cpu_ns: Some(12), ..Default::default() };
        assert_eq!(
            odd.stolen_ns(),
            Some(0),
            "clock skew between the two sources never goes negative"
        );
    }
}
