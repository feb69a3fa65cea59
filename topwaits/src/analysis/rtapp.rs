//! The rt-app reproducer: turns thread profiles and producer/consumer groups into an
//! rt-app JSON file. rt-app runs a task's events in the order of their keys and
//! allows repeated keys, so the file is written by a small ordered-JSON writer.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use crate::analysis::deps::Group;
use crate::model::profile::{Edge, ThreadProfile};
use crate::settings::Calibration;

/// An ordered JSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum J {
    Int(i64),
    Str(String),
    Bool(bool),
    /// Keys in order; a key may repeat.
    Obj(Vec<(String, J)>),
}

fn obj(pairs: Vec<(&str, J)>) -> J {
    J::Obj(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

fn s(v: impl Into<String>) -> J {
    J::Str(v.into())
}

impl J {
    /// Pretty JSON text, keys in order.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, 0);
        out.push('\n');
        out
    }

    fn write(&self, out: &mut String, depth: usize) {
        match self {
            J::Int(i) => {
                let _ = write!(out, "{i}");
            }
            J::Bool(b) => {
                let _ = write!(out, "{b}");
            }
            // serde_json escapes strings exactly as JSON requires.
            J::Str(v) => out.push_str(&serde_json::to_string(v).unwrap_or_else(|_| "\"\"".into())),
            J::Obj(pairs) => {
                if pairs.is_empty() {
                    out.push_str("{}");
                    return;
                }
                out.push_str("{\n");
                for (i, (k, v)) in pairs.iter().enumerate() {
                    out.push_str(&"\t".repeat(depth + 1));
                    out.push_str(&serde_json::to_string(k).unwrap_or_default());
                    out.push_str(" : ");
                    v.write(out, depth + 1);
                    if i + 1 < pairs.len() {
                        out.push(',');
                    }
                    out.push('\n');
                }
                out.push_str(&"\t".repeat(depth));
                out.push('}');
            }
        }
    }

    /// The keys of an object, in order (for tests).
    pub fn keys(&self) -> Vec<&str> {
        match self {
            J::Obj(p) => p.iter().map(|(k, _)| k.as_str()).collect(),
            _ => Vec::new(),
        }
    }

    /// The first value of a key (for tests).
    pub fn get(&self, key: &str) -> Option<&J> {
        match self {
            J::Obj(p) => p.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// Length of the duty-cycle loop of independent threads.
pub const LOOP_US: u64 = 1_000_000;

/// How a thread's CPU demand is taken from its profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Demand {
    /// CPU time: the replay asks for the work the threads did (the CPU time the
    /// scheduler charged them, which leaves out hypervisor steal), and waits on the
    /// run queue arise from contention in the replay itself (the default).
    OnCpu,
    /// Time on the CPU plus time runnable on the run queue, as the sched-time seed
    /// did: preempted time counts as time the thread wanted to run.
    Wanted,
}

/// How the replay is set up, beyond the traced threads themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replay {
    /// The global `duration` in seconds.
    pub duration_s: u32,
    pub demand: Demand,
    pub calibration: Calibration,
}

/// The replay's whole seconds for a traced window: the nearest (a 1.01 s window
/// once became a 2 s replay), at least 1.
pub fn replay_seconds(window_s: f64) -> u32 {
    window_s.round().clamp(1.0, u32::MAX as f64) as u32
}

/// A thread's CPU demand in µs.
fn demand_us(t: &ThreadProfile, d: Demand) -> u64 {
    match d {
        Demand::OnCpu => t.work_ns() / 1000,
        Demand::Wanted => (t.run_ns + t.preempt_ns) / 1000,
    }
}

/// Time a thread slept, interruptibly or in I/O.
fn slept_us(t: &ThreadProfile) -> u64 {
    (t.sleep_ns + t.io_ns) / 1000
}

/// `policy` and `priority` keys: nice for the fair policies, the RT priority for
/// FIFO/RR. Nothing when the defaults (SCHED_OTHER, nice 0) apply.
fn sched_keys(t: &ThreadProfile) -> Vec<(&'static str, J)> {
    match t.policy {
        1 | 2 => {
            vec![
                ("policy", s(if t.policy == 1 { "SCHED_FIFO" } else { "SCHED_RR" })),
                ("priority", J::Int(t.rt_priority.max(1) as i64)),
            ]
        }
        _ if t.nice() != 0 => {
            vec![("policy", s("SCHED_OTHER")), ("priority", J::Int(t.nice() as i64))]
        }
        _ => Vec::new(),
    }
}

fn task(instance: usize, sched: Vec<(&'static str, J)>, events: Vec<(&'static str, J)>) -> J {
    looped(instance, -1, sched, events)
}

/// A task running its events `loops` times (-1: until the end).
fn looped(
    instance: usize,
    loops: i64,
    sched: Vec<(&'static str, J)>,
    events: Vec<(&'static str, J)>,
) -> J {
    let mut pairs = vec![("instance", J::Int(instance as i64)), ("loop", J::Int(loops))];
    pairs.extend(sched);
    pairs.extend(events);
    obj(pairs)
}

/// Builds the rt-app document.
///
/// * A producer runs, then locks its mutex, broadcasts its condvar and unlocks,
///   then sleeps; one cycle per broadcast, where the number of broadcasts is
///   estimated as the smaller of its sleeps and the largest number of futex
///   wakeups it sent to any one consumer.
/// * Each producer's consumers with the same scheduling parameters form one task
///   with `instance` equal to their number: lock, wait on the condvar, unlock, run.
///   Their run is their average CPU demand per wakeup received from the producer
///   (a consumer's cycle).
/// * Every other thread runs and sleeps in its observed proportion over a
///   one-second loop, its duty cycle taken over the time it was alive in the
///   window. A thread that exited during the trace runs its demand once
///   (`loop: 1`) and ends, as it did: looping it would turn a thread that ran
///   0.5 ms and exited into a CPU hog.
pub fn document(threads: &[ThreadProfile], groups: &[Group], edges: &[Edge], replay: Replay) -> J {
    let wanted_us = |t: &ThreadProfile| demand_us(t, replay.demand);
    let by_tid: HashMap<u32, &ThreadProfile> = threads.iter().map(|t| (t.tid, t)).collect();
    let futex_wakes = |w: u32, sl: u32| -> u64 {
        edges.iter().filter(|e| e.futex && e.waker == w && e.sleeper == sl).map(|e| e.count).sum()
    };
    let mut tasks: Vec<(String, J)> = Vec::new();
    let mut grouped: Vec<u32> = Vec::new();
    for g in groups {
        let Some(p) = by_tid.get(&g.producer) else { continue };
        let (mutex, cond) = (format!("mutex{}", g.producer), format!("cond{}", g.producer));
        // Each count is at least the number of broadcasts (mutex hand-offs add to
        // both), so the smaller is the better estimate of the cycles.
        let most_wakes = g.consumers.iter().map(|&c| futex_wakes(g.producer, c)).max().unwrap_or(0);
        let cycles = most_wakes.min(p.sleep_events).max(1);
        let run = (wanted_us(p) / cycles).max(1);
        let sleep = slept_us(p) / cycles;
        let mut events = vec![
            ("run", J::Int(run as i64)),
            ("lock", s(&mutex)),
            ("broad", s(&cond)),
            ("unlock", s(&mutex)),
        ];
        if sleep > 0 {
            events.push(("sleep", J::Int(sleep as i64)));
        }
        tasks.push((format!("p{}", g.producer), task(1, sched_keys(p), events)));
        grouped.push(g.producer);
        // Consumers split by scheduling parameters, so each keeps its priority.
        let mut by_sched: BTreeMap<(u32, i32, u32), Vec<&ThreadProfile>> = BTreeMap::new();
        for c in &g.consumers {
            if let Some(t) = by_tid.get(c) {
                by_sched.entry((t.policy, t.nice(), t.rt_priority)).or_default().push(t);
                grouped.push(*c);
            }
        }
        for (i, members) in by_sched.values().enumerate() {
            let per_wake: Vec<u64> = members
                .iter()
                .map(|t| wanted_us(t) / futex_wakes(g.producer, t.tid).max(1))
                .collect();
            let run = (per_wake.iter().sum::<u64>() / per_wake.len() as u64).max(1);
            let name =
                if i == 0 { format!("c{}", g.producer) } else { format!("c{}_{i}", g.producer) };
            let events = vec![
                ("lock", s(&mutex)),
                ("wait", obj(vec![("ref", s(&cond)), ("mutex", s(&mutex))])),
                ("unlock", s(&mutex)),
                ("run", J::Int(run as i64)),
            ];
            tasks.push((name, task(members.len(), sched_keys(members[0]), events)));
        }
    }
    let mut rest: Vec<&ThreadProfile> =
        threads.iter().filter(|t| !grouped.contains(&t.tid) && t.observed_ns() > 0).collect();
    rest.sort_by_key(|t| t.tid);
    for t in rest {
        if t.exited {
            let events = vec![("run", J::Int(wanted_us(t).max(1) as i64))];
            tasks.push((format!("t{}", t.tid), looped(1, 1, sched_keys(t), events)));
            continue;
        }
        // With on-CPU demand, run-queue time belongs to neither side of the cycle.
        let (want, slept) = (wanted_us(t), slept_us(t));
        let run = (want * LOOP_US / (want + slept).max(1)).clamp(1, LOOP_US);
        let mut events = vec![("run", J::Int(run as i64))];
        if run < LOOP_US {
            events.push(("sleep", J::Int((LOOP_US - run) as i64)));
        }
        tasks.push((format!("t{}", t.tid), task(1, sched_keys(t), events)));
    }
    // No log_size: rt-app 1.0 parses its string values backwards.
    let global = obj(vec![
        ("duration", J::Int(replay.duration_s as i64)),
        (
            "calibration",
            match replay.calibration {
                Calibration::Cpu(n) => s(format!("CPU{n}")),
                Calibration::NsPerLoop(ns) => J::Int(ns as i64),
            },
        ),
        ("default_policy", s("SCHED_OTHER")),
        ("pi_enabled", J::Bool(false)),
        ("lock_pages", J::Bool(false)),
        ("logdir", s("./")),
        ("log_basename", s("topwaits-rtapp")),
        ("ftrace", J::Bool(false)),
        ("gnuplot", J::Bool(false)),
    ]);
    J::Obj(vec![("tasks".to_string(), J::Obj(tasks)), ("global".to_string(), global)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(tid: u32, run_ms: u64, sleep_ms: u64) -> ThreadProfile {
        ThreadProfile {
            tid,
            tgid: 1,
            comm: format!("t{tid}").into_bytes(),
            run_ns: run_ms * 1_000_000,
            sleep_ns: sleep_ms * 1_000_000,
            run_events: 60,
            sleep_events: 60,
            static_prio: 120,
            ..Default::default()
        }
    }

    /// Regression: a thread that ran 0.5 ms and exited became `{"run": 1000000}`
    /// with no sleep, a CPU hog in the replay.
    #[test]
    fn a_thread_that_exited_runs_its_demand_once() {
        let mut t = thread(7, 0, 0);
        t.run_ns = 500_000;
        t.exited = true;
        let doc = document(&[t], &[], &[], replay(1, Demand::OnCpu));
        let task = doc.get("tasks").and_then(|t| t.get("t7")).unwrap();
        assert_eq!(task.get("loop"), Some(&J::Int(1)));
        assert_eq!(task.get("run"), Some(&J::Int(500)));
    }

    /// Regression: a 1.01 s window gave `duration: 2`.
    #[test]
    fn replay_seconds_round_to_the_nearest_second() {
        assert_eq!(replay_seconds(1.01), 1);
        assert_eq!(replay_seconds(2.0), 2);
        assert_eq!(replay_seconds(2.6), 3);
        assert_eq!(replay_seconds(0.2), 1, "at least one second");
    }

    fn replay(duration_s: u32, demand: Demand) -> Replay {
        Replay { duration_s, demand, calibration: Calibration::Cpu(0) }
    }

    fn futex(waker: u32, sleeper: u32, count: u64) -> Edge {
        Edge { waker, sleeper, count, futex: true }
    }

    fn producer_consumers() -> J {
        let mut threads = vec![
            thread(1, 100, 900),
            thread(2, 200, 800),
            thread(3, 220, 780),
            thread(4, 180, 820),
        ];
        threads[3].static_prio = 125;
        let groups = vec![Group { producer: 1, consumers: vec![2, 3, 4] }];
        let edges = vec![futex(1, 2, 50), futex(1, 3, 50), futex(1, 4, 40), futex(2, 1, 3)];
        let mut with_idle = threads.clone();
        with_idle.push(thread(9, 250, 750));
        document(&with_idle, &groups, &edges, replay(7, Demand::OnCpu))
    }

    #[test]
    fn producer_locks_broadcasts_unlocks_in_order() {
        let doc = producer_consumers();
        assert_eq!(doc.keys(), ["tasks", "global"]);
        let tasks = doc.get("tasks").unwrap();
        assert_eq!(tasks.keys(), ["p1", "c1", "c1_1", "t9"]);
        let p = tasks.get("p1").unwrap();
        assert_eq!(p.keys(), ["instance", "loop", "run", "lock", "broad", "unlock", "sleep"]);
        // 50 broadcasts over 100 ms of run and 900 ms of sleep.
        assert_eq!(p.get("run"), Some(&J::Int(2000)));
        assert_eq!(p.get("sleep"), Some(&J::Int(18000)));
        assert_eq!(p.get("broad"), Some(&s("cond1")));
        assert_eq!(p.get("lock"), Some(&s("mutex1")));
    }

    #[test]
    fn producer_cycles_are_the_fewer_of_its_sleeps_and_its_wakes_to_one_consumer() {
        let mut p = thread(1, 100, 900);
        p.sleep_events = 25;
        let threads = vec![p, thread(2, 100, 900)];
        let groups = vec![Group { producer: 1, consumers: vec![2] }];
        let doc = document(&threads, &groups, &[futex(1, 2, 50)], replay(1, Demand::OnCpu));
        let p = doc.get("tasks").unwrap().get("p1").unwrap();
        assert_eq!(p.get("run"), Some(&J::Int(4000)), "100 ms over 25 cycles");
    }

    #[test]
    fn consumers_wait_with_instance_equal_to_group_size_and_keep_nice() {
        let doc = producer_consumers();
        let tasks = doc.get("tasks").unwrap();
        let c = tasks.get("c1").unwrap();
        assert_eq!(c.keys(), ["instance", "loop", "lock", "wait", "unlock", "run"]);
        assert_eq!(c.get("instance"), Some(&J::Int(2)));
        // (200 ms / 50 + 220 ms / 50) / 2
        assert_eq!(c.get("run"), Some(&J::Int(4200)));
        assert_eq!(c.get("wait").unwrap().keys(), ["ref", "mutex"]);
        let nice = tasks.get("c1_1").unwrap();
        assert_eq!(
            nice.keys(),
            ["instance", "loop", "policy", "priority", "lock", "wait", "unlock", "run"]
        );
        assert_eq!(nice.get("priority"), Some(&J::Int(5)));
        assert_eq!(nice.get("instance"), Some(&J::Int(1)));
    }

    #[test]
    fn independent_threads_get_a_one_second_duty_cycle() {
        let doc = producer_consumers();
        let t = doc.get("tasks").unwrap().get("t9").unwrap();
        assert_eq!(t.keys(), ["instance", "loop", "run", "sleep"]);
        assert_eq!(t.get("run"), Some(&J::Int(250_000)));
        assert_eq!(t.get("sleep"), Some(&J::Int(750_000)));
        let busy = document(&[thread(5, 1000, 0)], &[], &[], replay(1, Demand::OnCpu));
        let t = busy.get("tasks").unwrap().get("t5").unwrap();
        assert_eq!(t.keys(), ["instance", "loop", "run"], "no zero sleep");
    }

    #[test]
    fn demand_is_on_cpu_time_unless_run_queue_time_is_asked_for() {
        let mut t = thread(3, 100, 900);
        t.preempt_ns = 100_000_000;
        let on_cpu = document(&[t.clone()], &[], &[], replay(1, Demand::OnCpu));
        let wanted = document(&[t], &[], &[], replay(1, Demand::Wanted));
        let run = |d: &J| d.get("tasks").unwrap().get("t3").unwrap().get("run").cloned();
        // 100 of 1000 ms slept-or-ran on the CPU, vs 200 of 1100 ms wanted.
        assert_eq!(run(&on_cpu), Some(J::Int(100_000)));
        assert_eq!(run(&wanted), Some(J::Int(181_818)));
    }

    #[test]
    fn on_cpu_demand_is_the_charged_cpu_time_without_steal() {
        let mut t = thread(3, 100, 900);
        t.cpu_ns = Some(50_000_000);
        let doc = document(&[t], &[], &[], replay(1, Demand::OnCpu));
        let run = doc.get("tasks").unwrap().get("t3").unwrap().get("run").cloned();
        // 50 ms of work in 950 ms of work and sleep; the 50 ms stolen is neither.
        assert_eq!(run, Some(J::Int(52_631)));
    }

    #[test]
    fn global_has_duration_and_no_log_size() {
        let doc = producer_consumers();
        let g = doc.get("global").unwrap();
        assert_eq!(g.get("duration"), Some(&J::Int(7)));
        assert!(!g.keys().contains(&"log_size"));
        assert_eq!(g.get("calibration"), Some(&J::Str("CPU0".into())));
    }

    #[test]
    fn calibration_is_a_cpu_name_or_ns_per_loop() {
        let t = [thread(5, 100, 900)];
        let on = |calibration| {
            let r = Replay { duration_s: 1, demand: Demand::OnCpu, calibration };
            document(&t, &[], &[], r).get("global").unwrap().get("calibration").cloned()
        };
        assert_eq!(on(Calibration::Cpu(1)), Some(J::Str("CPU1".into())));
        assert_eq!(on(Calibration::NsPerLoop(27)), Some(J::Int(27)));
    }

    #[test]
    fn rendered_text_is_valid_json_with_keys_in_order() {
        let text = producer_consumers().render();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["tasks"]["c1"]["wait"]["ref"], "cond1");
        let p = text.find("\"p1\"").unwrap();
        let c = text.find("\"c1\"").unwrap();
        assert!(p < c);
        let lock = text.find("\"lock\" : \"mutex1\"").unwrap();
        let broad = text.find("\"broad\"").unwrap();
        let unlock = text.find("\"unlock\"").unwrap();
        assert!(lock < broad && broad < unlock, "{text}");
        let dup = J::Obj(vec![("run".into(), J::Int(1)), ("run".into(), J::Int(2))]).render();
        assert_eq!(dup, "{\n\t\"run\" : 1,\n\t\"run\" : 2\n}\n", "repeated keys stay");
    }
}
