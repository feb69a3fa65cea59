//! Maps the scheduler's per-CPU task clock (`se.exec_start` in `/proc/TID/sched`)
//! onto CLOCK_MONOTONIC, so that a thread blocked since before anything watched it
//! gets an estimated start. The two clocks differ per CPU by the time that CPU lost
//! to interrupts and to the hypervisor (seconds on a busy VM), so each CPU is
//! measured: this thread moves onto it, yields (which stamps its own `exec_start`
//! with that CPU's clock), and brackets that with two monotonic reads.

use std::collections::HashMap;

/// `mono - task clock` per CPU, in ns, as measured.
#[derive(Clone, Debug, Default)]
pub struct SchedClock {
    offsets: HashMap<u32, Option<i64>>,
}

/// Largest monotonic bracket around a yield that gives a usable offset.
const MAX_BRACKET_NS: i64 = 200_000;

impl SchedClock {
    /// A clock with known offsets (for tests).
    pub fn with_offsets(offsets: &[(u32, i64)]) -> Self {
        SchedClock { offsets: offsets.iter().map(|&(c, o)| (c, Some(o))).collect() }
    }

    /// The CLOCK_MONOTONIC time of `exec_start` on `cpu`, measuring that CPU first
    /// if needed. `None` when the CPU cannot be measured (not in this process's
    /// cpuset) or the result would lie in the future.
    pub fn to_mono(&mut self, exec_start: u64, cpu: u32) -> Option<u64> {
        let off = (*self.offsets.entry(cpu).or_insert_with(|| measure(cpu)))?;
        let mono = exec_start as i64 + off;
        (mono > 0 && mono as u64 <= crate::util::clock::monotonic_now()).then_some(mono as u64)
    }
}

/// How much time each CPU's task clock has left out so far (interrupts, soft
/// interrupts and time stolen by the hypervisor, from `/proc/stat`), in ns, by
/// CPU. An `exec_start` mapped with an offset measured later comes out late by
/// what its CPU lost in between; this bounds that error.
pub fn lost_ns() -> HashMap<u32, u64> {
    std::fs::read_to_string("/proc/stat").map(|t| parse_lost(&t)).unwrap_or_default()
}

/// Parses the `cpuN` lines of `/proc/stat` text (USER_HZ ticks of 10 ms) into
/// the ns each CPU lost to irq, softirq and steal.
pub fn parse_lost(text: &str) -> HashMap<u32, u64> {
    const TICK_NS: u64 = 10_000_000;
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_ascii_whitespace();
            let cpu: u32 = f.next()?.strip_prefix("cpu")?.parse().ok()?;
            let v: Vec<u64> = f.take(8).map(|x| x.parse().unwrap_or(0)).collect();
            // user nice system idle iowait irq softirq steal
            Some((cpu, v.get(5..8)?.iter().sum::<u64>() * TICK_NS))
        })
        .collect()
}

/// Measures one CPU's offset on a helper thread, so that this thread's CPU
/// affinity stays as it was.
fn measure(cpu: u32) -> Option<i64> {
    std::thread::spawn(move || measure_here(cpu)).join().ok().flatten()
}

fn measure_here(cpu: u32) -> Option<i64> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET and sched_setaffinity
    // work on this local value and this thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu as usize >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
            return None;
        }
        libc::CPU_SET(cpu as usize, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return None;
        }
    }
    let mut best: Option<(i64, i64)> = None;
    for _ in 0..8 {
        let a = crate::util::clock::monotonic_now() as i64;
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
        let b = crate::util::clock::monotonic_now() as i64;
        let text = std::fs::read_to_string("/proc/thread-self/sched").ok()?;
        let start = super::thread::parse_exec_start(&text)? as i64;
        // SAFETY: sched_getcpu has no preconditions.
        if unsafe { libc::sched_getcpu() } != cpu as i32 {
            continue;
        }
        let bracket = b - a;
        if bracket <= MAX_BRACKET_NS && best.is_none_or(|(w, _)| bracket < w) {
            best = Some((bracket, (a + b) / 2 - start));
        }
    }
    best.map(|(_, off)| off)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_time_is_irq_softirq_and_steal_per_cpu() {
        let text = "cpu  10 0 10 100 1 2 3 4 0 0\ncpu0 5 0 5 50 1 1 1 2 0 0\ncpu1 5 0 5 50 0 1 2 2 0 0\nintr 1 2\n";
        let lost = parse_lost(text);
        assert_eq!(lost.len(), 2, "the all-CPU line and other lines are not CPUs: {lost:?}");
        assert_eq!(lost[&0], 4 * 10_000_000);
        assert_eq!(lost[&1], 5 * 10_000_000);
        assert!(parse_lost("cpu0 1 2\n").is_empty(), "a short line is skipped");
    }

    #[test]
    fn known_offsets_map_and_future_times_are_refused() {
        let mut c = SchedClock::with_offsets(&[(0, 1_000), (1, 5_000_000)]);
        assert_eq!(c.to_mono(10_000, 0), Some(11_000));
        assert_eq!(c.to_mono(10_000, 1), Some(5_010_000));
        assert_eq!(c.to_mono(u64::MAX / 4, 0), None, "a start in the future is no estimate");
    }

    #[test]
    fn a_sleeping_thread_maps_to_when_it_fell_asleep() {
        let (tx, rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            tx.send((tid, crate::util::clock::monotonic_now())).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(400));
        });
        // All CPUs' interrupt and steal time, from /proc/stat (USER_HZ ticks of
        // 10 ms): the task clock leaves it out, so an estimate comes out late by
        // what the sleeper's CPU accrued while it slept.
        let clock_gap = || -> i64 {
            let stat = std::fs::read_to_string("/proc/stat").unwrap();
            let cpu: Vec<i64> = stat
                .lines()
                .next()
                .unwrap()
                .split_whitespace()
                .skip(1)
                .map(|v| v.parse().unwrap())
                .collect();
            (cpu[5] + cpu[6] + cpu[7]) * 10_000_000
        };
        let gap_before = clock_gap();
        let (tid, before) = rx.recv().unwrap();
        let me = std::process::id();
        // The sleep began between the thread's last clock reading and the moment it
        // is first seen sleeping; the tests run in parallel, so that gap can be
        // tens of ms.
        let seen_asleep = loop {
            let now = crate::util::clock::monotonic_now();
            if crate::sys::thread::stat(me, tid).is_some_and(|s| s.state == 'S') {
                break now;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        };
        std::thread::sleep(std::time::Duration::from_millis(150));
        let start = crate::sys::thread::exec_start(me, tid).unwrap();
        let cpu = crate::sys::thread::stat(me, tid).unwrap().cpu;
        let mapped = SchedClock::default().to_mono(start, cpu).expect("this CPU can be measured");
        let gap = clock_gap() - gap_before;
        sleeper.join().unwrap();
        // 20 ms for the mapping and the clocks' granularity, plus the steal and
        // interrupt time of the window (seen: 21 ms late while CI compiled).
        let slack = 20_000_000;
        assert!(
            before - slack <= mapped && mapped <= seen_asleep + slack + gap as u64,
            "estimated sleep start {mapped} outside [{before}, {seen_asleep}] - 20 ms .. + 20 ms + {gap} ns of steal and interrupts"
        );
    }
}
