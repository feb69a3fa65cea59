//! Plain data of `topwaits threads`: per-thread scheduling profiles and the wake
//! dependencies between threads. No aya, no I/O.

use crate::model::Counters;

/// One thread's scheduling profile (`topwaits threads`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadProfile {
    pub tid: u32,
    pub tgid: u32,
    pub comm: Vec<u8>,
    pub run_ns: u64,
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

    /// Converts the kernel's stats, closing the state still open at `end_mono`.
    pub fn from_stats(t: &topwaits_common::ThreadStats, end_mono: u64) -> Self {
        use topwaits_common::{thread_state, THREAD_EXITED, THREAD_STARTED};
        let mut p = ThreadProfile {
            tid: t.tid,
            tgid: t.tgid,
            comm: t.comm[..t.comm.iter().position(|&b| b == 0).unwrap_or(t.comm.len())].to_vec(),
            run_ns: t.state_ns[thread_state::RUNNING as usize],
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
            thread_state::RUNNING => p.run_ns += open,
            thread_state::RUNQ => p.preempt_ns += open,
            thread_state::SLEEP => p.sleep_ns += open,
            thread_state::IO => p.io_ns += open,
            _ => {}
        }
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
        let p = ThreadProfile::from_stats(&stats, 1_400);
        assert_eq!((p.run_ns, p.sleep_ns), (100, 450));
        assert_eq!(p.comm, b"abc");
        assert_eq!(p.nice(), 5);
        assert_eq!(p.policy_name(), "SCHED_OTHER");
        let exited = ThreadStats { state: thread_state::UNKNOWN, flags: THREAD_EXITED, ..stats };
        let p = ThreadProfile::from_stats(&exited, 9_999);
        assert!(p.exited && !p.started);
        assert_eq!(p.observed_ns(), 150, "a dead thread accrues nothing more");
    }

}
