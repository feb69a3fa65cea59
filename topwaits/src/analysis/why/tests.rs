//! `why` on fabricated streams: each case a workload whose answer is known.

use super::*;

const SLEEP: u64 = 0x51;
const LOCK: u64 = 0x10;
const UNLOCK: u64 = 0x11;
const POOL: u64 = 0x99;

fn wait(
    tid: Tid,
    start: u64,
    woken: Option<u64>,
    end: u64,
    waker: Waker,
    site: u64,
    waker_site: u64,
) -> Wait {
    Wait { tid, start, woken, end, waker, site, waker_site }
}

fn timer() -> Waker {
    Waker::Device("timer".into())
}

/// The causes add up to the waiting they explain: no moment twice, none lost.
fn assert_whole(f: &Findings) {
    let sum: u64 = f.causes.iter().map(|c| c.ns).sum();
    assert_eq!(sum, f.waiting_ns, "{f:#?}");
    let share: f64 = f.causes.iter().map(|c| c.share).sum();
    assert!(f.causes.is_empty() || (share - 1.0).abs() < 1e-9, "{f:#?}");
}

/// Four workers take a mutex in turn; its holder (1) sleeps 20 units while it
/// holds it each cycle, then hands it on. Eight pool threads (10-17) wait all
/// the while, far longer, for work that never comes.
fn holder_sleeping_with_an_idle_pool() -> Vec<Wait> {
    let mut waits = Vec::new();
    for k in 0..10u64 {
        let base = 100 * k;
        waits.push(wait(1, base, Some(base + 20), base + 20, timer(), SLEEP, 0));
        // The holder runs 2 more units, then wakes the first worker; each worker
        // runs 1 unit after a 1-unit run-queue wait and wakes the next.
        let order: Vec<Tid> = (0..4).map(|i| 2 + ((i + k as u32) % 4)).collect();
        let mut waker = 1;
        for (i, &w) in order.iter().enumerate() {
            let woken = base + 22 + 2 * i as u64;
            waits.push(wait(w, base, Some(woken), woken + 1, Waker::Thread(waker), LOCK, UNLOCK));
            waker = w;
        }
    }
    for p in 10..18 {
        waits.push(wait(p, 0, None, 1000, Waker::Unknown, POOL, 0));
    }
    waits
}

#[test]
fn a_holder_sleeping_with_the_lock_ranks_first_over_a_far_longer_idle_pool() {
    let f = Trace::new(holder_sleeping_with_an_idle_pool()).why(&[]);
    assert_whole(&f);
    let first = &f.causes[0];
    assert_eq!(
        first.cause,
        Cause { tid: 1, what: What::Blocked { site: SLEEP, on: timer() } },
        "{f:#?}"
    );
    // The holder's own sleeps (200) and the workers' waits behind them, but for
    // the last worker's each cycle: it wakes nobody after, so that wait is idle.
    assert_eq!(first.ns, 200 + 3 * 200);
    assert_eq!(f.idle_waits_ns, 10 * 29);
    assert!(first.share > 0.6, "{f:#?}");
    assert_eq!(first.waiters, BTreeSet::from([1, 2, 3, 4, 5]));
    // The pool is idle, not a cause, though its waits are eight times longer.
    let idle: Vec<Tid> = f.idle.iter().map(|i| i.tid).collect();
    assert_eq!(idle.len(), 8);
    assert!((10..18).all(|p| idle.contains(&p)));
    assert!(f.idle.iter().all(|i| i.ns == 1000 && i.site == POOL));
    assert!(f.causes.iter().all(|c| c.cause.tid < 10), "{f:#?}");
    assert!(f.knots.is_empty(), "{:?}", f.knots);
}

/// A client (1) asks a server (2), which hands the work to a worker (3); the
/// worker computes, sleeps on a timer, computes again, and answers the server,
/// which answers the client.
fn relay() -> Vec<Wait> {
    vec![
        wait(1, 10, Some(88), 90, Waker::Thread(2), 0xc1, 0x5e),
        wait(2, 0, Some(10), 12, Waker::Thread(1), 0x52, 0xc0),
        wait(2, 30, Some(78), 80, Waker::Thread(3), 0x53, 0x3e),
        wait(2, 88, None, 100, Waker::Unknown, 0x52, 0),
        wait(3, 0, Some(30), 31, Waker::Thread(2), 0x31, 0x5f),
        wait(3, 40, Some(70), 70, timer(), SLEEP, 0),
        wait(3, 78, None, 100, Waker::Unknown, 0x31, 0),
    ]
}

fn segment(path: &[Tid], what: What, ns: u64) -> Segment {
    Segment { path: path.to_vec(), what, ns }
}

#[test]
fn a_relay_through_two_threads_gives_a_critical_path_that_adds_up_to_the_window() {
    let trace = Trace::new(relay());
    let path = critical_path(&trace, 1, 0, 100);
    assert_eq!(path.iter().map(|s| s.ns).sum::<u64>(), 100, "{path:#?}");
    let expected = [
        segment(&[1, 2, 3], What::Blocked { site: SLEEP, on: timer() }, 30),
        segment(&[1, 2], What::Running { site: 0x5e }, 26),
        segment(&[1], What::Running { site: 0 }, 20),
        segment(&[1, 2, 3], What::Running { site: 0x3e }, 17),
        segment(&[1, 2], What::RunQueue, 4),
        segment(&[1], What::RunQueue, 2),
        segment(&[1, 2, 3], What::RunQueue, 1),
    ];
    assert_eq!(path, expected);
}

/// The stretches each thread ran on the path add up to its running segments.
#[test]
fn running_spans_add_up_to_the_running_segments_of_the_path() {
    let trace = Trace::new(relay());
    let path = critical_path(&trace, 1, 0, 100);
    let running: BTreeSet<Tid> = [1, 2, 3].into();
    let spans = running_spans(&trace, 1, 0, 100, &running);
    for s in path.iter().filter(|s| matches!(s.what, What::Running { .. })) {
        let (t, What::Running { site }) = (*s.path.last().unwrap(), &s.what) else {
            unreachable!()
        };
        let spanned: u64 = spans.get(&(t, *site)).map_or(0, |v| v.iter().map(|(a, b)| b - a).sum());
        assert_eq!(spanned, s.ns, "thread {t} at {site:#x}: {spans:?}");
        assert!(
            spans[&(t, *site)].windows(2).all(|w| w[0].1 <= w[1].0),
            "in order, apart: {spans:?}"
        );
    }
    assert_eq!(spans.len(), 3, "{spans:?}");
    assert!(
        running_spans(&trace, 1, 0, 100, &[2].into()).keys().all(|k| k.0 == 2),
        "only the threads asked for"
    );
}

#[test]
fn a_relay_ranks_the_worker_sleep_the_client_waited_behind() {
    let f = Trace::new(relay()).why(&[1]);
    assert_whole(&f);
    assert_eq!(f.waiting_ns, 80);
    assert_eq!(
        f.causes[0].cause,
        Cause { tid: 3, what: What::Blocked { site: SLEEP, on: timer() } }
    );
    assert_eq!(f.causes[0].ns, 30);
    assert_eq!(f.causes[1].cause, Cause { tid: 2, what: What::Running { site: 0x5e } });
    assert_eq!(f.causes[1].ns, 26);
    assert!(f.idle.is_empty());
}

#[test]
fn a_cycle_of_waits_is_cut_and_named_a_knot() {
    // 1 and 2 wait on each other until each is woken by the other at 10.
    let waits = vec![
        wait(1, 0, Some(10), 11, Waker::Thread(2), 0xa, 0xb),
        wait(2, 0, Some(10), 10, Waker::Thread(1), 0xb, 0xa),
        // 3 waits on 1 meanwhile (and wakes nobody: idle): its path goes around
        // the cycle once, not forever.
        wait(3, 2, Some(12), 12, Waker::Thread(1), 0xc, 0xa),
    ];
    let trace = Trace::new(waits);
    let f = trace.why(&[]);
    assert_whole(&f);
    assert_eq!(f.knots, vec![vec![1, 2]]);
    let cycle: u64 = f.causes.iter().filter(|c| c.cause.what == What::Cycle).map(|c| c.ns).sum();
    // 1's and 2's ten blocked units each; 1's last one was in the run queue.
    assert_eq!(cycle, 10 + 10, "{f:#?}");
    assert_eq!(f.waiting_ns, 11 + 10);
    assert_eq!(f.idle.iter().map(|i| i.tid).collect::<Vec<_>>(), vec![3]);
    let path = critical_path(&trace, 3, 0, 12);
    assert_eq!(path.iter().map(|s| s.ns).sum::<u64>(), 12);
    assert!(path.contains(&segment(&[3, 1, 2, 1], What::Cycle, 8)), "{path:#?}");
}

#[test]
fn an_idle_pool_is_listed_apart_longest_first() {
    let waits = vec![
        // Housekeeping: woken by timers, wakes nobody.
        wait(7, 0, Some(50), 50, timer(), 0x70, 0),
        wait(7, 60, Some(90), 90, timer(), 0x70, 0),
        wait(8, 0, None, 100, Waker::Unknown, POOL, 0),
        // A consumer woken by a producer, which it never wakes in turn: idle too.
        wait(1, 0, Some(40), 41, Waker::Thread(2), 0x10, 0x20),
        // The producer's timer wait is followed by its waking the consumer; its
        // wait for more work after is idle.
        wait(2, 0, Some(30), 30, timer(), 0x20, 0),
        wait(2, 50, None, 100, Waker::Unknown, 0x21, 0),
    ];
    let f = Trace::new(waits).why(&[]);
    assert_whole(&f);
    let idle: Vec<(Tid, u64)> = f.idle.iter().map(|i| (i.tid, i.ns)).collect();
    assert_eq!(idle, vec![(8, 100), (7, 80), (1, 41)]);
    // Only the producer's wait before its wakeup is ranked.
    assert_eq!(f.waiting_ns, 30);
    assert_eq!(
        f.causes[0].cause,
        Cause { tid: 2, what: What::Blocked { site: 0x20, on: timer() } }
    );
    assert_eq!(f.idle_waits_ns, 50);
}

#[test]
fn an_interrupt_waker_ends_the_path_at_the_waiting_thread() {
    // A lone thread reading its input from a disk: nobody to be idle for.
    let waits = vec![
        wait(1, 0, Some(50), 52, Waker::Device("disk".into()), 0x1, 0),
        wait(1, 60, Some(80), 80, Waker::Device("disk".into()), 0x1, 0),
    ];
    let f = Trace::new(waits).why(&[1]);
    assert_whole(&f);
    assert!(f.idle.is_empty());
    assert_eq!(
        f.causes[0].cause,
        Cause { tid: 1, what: What::Blocked { site: 0x1, on: Waker::Device("disk".into()) } }
    );
    assert_eq!(f.causes[0].ns, 70);
    assert_eq!(f.causes[1].cause, Cause { tid: 1, what: What::RunQueue });
    assert_eq!(f.causes[1].ns, 2);
}

#[test]
fn run_queue_time_goes_to_the_cpu_not_the_waker() {
    // 1 is woken by 2 at 10 but runs only at 40; 2 was preempted for 5 before.
    let waits = vec![
        wait(1, 0, Some(10), 40, Waker::Thread(2), 0x1, 0x2),
        wait(2, 0, None, 5, Waker::Preempted, 0x2, 0),
        wait(1, 50, Some(60), 60, Waker::Thread(2), 0x1, 0x2),
    ];
    let f = Trace::new(waits).why(&[1]);
    assert_whole(&f);
    let of = |what: What, tid: Tid| {
        f.causes.iter().find(|c| c.cause == Cause { tid, what: what.clone() }).map_or(0, |c| c.ns)
    };
    assert_eq!(of(What::RunQueue, 1), 30);
    // 2 was runnable, not running, for the first 5 of 1's wait.
    assert_eq!(of(What::RunQueue, 2), 5);
    assert_eq!(of(What::Running { site: 0x2 }, 2), 5 + 10);
    let path = critical_path(
        &Trace::new(vec![wait(1, 0, Some(10), 40, Waker::Thread(2), 0x1, 0x2)]),
        1,
        0,
        50,
    );
    assert_eq!(path.iter().map(|s| s.ns).sum::<u64>(), 50);
    assert!(path.contains(&segment(&[1], What::RunQueue, 30)));
    assert!(path.contains(&segment(&[1], What::Running { site: 0 }, 10)));
}

#[test]
fn overlapping_and_empty_waits_never_count_twice() {
    let waits = vec![
        wait(1, 0, Some(30), 30, Waker::Thread(2), 0x1, 0x2),
        // Overlaps the one before: cut at its start.
        wait(1, 20, Some(40), 40, Waker::Thread(2), 0x1, 0x2),
        wait(1, 45, Some(45), 45, Waker::Thread(2), 0x1, 0x2),
        wait(2, 50, None, 60, Waker::Unknown, 0x3, 0),
    ];
    let trace = Trace::new(waits);
    let f = trace.why(&[1]);
    assert_whole(&f);
    assert_eq!(f.waiting_ns, 40);
    let path = critical_path(&trace, 1, 0, 60);
    assert_eq!(path.iter().map(|s| s.ns).sum::<u64>(), 60);
}

#[test]
fn strongly_connected_components_are_found_without_recursion() {
    let mut edges: BTreeMap<Tid, BTreeSet<Tid>> = BTreeMap::new();
    // A long chain 0 -> 1 -> ... -> 9999 -> 0 is one component; 20000 alone.
    for i in 0..10_000u32 {
        edges.entry(i).or_default().insert((i + 1) % 10_000);
    }
    edges.entry(20_000).or_default().insert(0);
    let c = components(&edges);
    assert_eq!(c.len(), 2);
    assert_eq!(c[0].len(), 10_000);
    assert_eq!(c[1], vec![20_000]);
}

/// nginx under a load tool: a master (1) in sigsuspend since before the trace
/// and never woken, two workers (2, 3) woken only by the client (100, not
/// traced) and preempted now and then. The targets never wake each other, so
/// each wait is ranked by what it waited behind: the client and the CPU. The
/// master's wait, which nobody waited behind, is listed apart however long.
#[test]
fn a_wait_nobody_waited_behind_is_listed_apart_not_ranked() {
    let mut waits = vec![wait(1, 0, None, 1000, Waker::Unknown, 0x5e, 0)];
    for k in 0..10u64 {
        for w in [2, 3] {
            let t = 100 * k + w as u64;
            waits.push(wait(w, t, Some(t + 40), t + 50, Waker::Thread(100), 0xe9, 0xc1));
            waits.push(wait(w, t + 60, None, t + 70, Waker::Preempted, 0xe9, 0));
        }
    }
    let f = Trace::new(waits).why(&[]);
    assert_whole(&f);
    assert!(f.lone, "the workers never woke each other");
    assert_eq!(f.unwoken, vec![Unwoken { tid: 1, ns: 1000, site: 0x5e }]);
    assert!(f.causes.iter().all(|c| c.cause.tid != 1), "{f:#?}");
    // The client's part (40 of each 60) and the CPU's (10 + 10).
    let first = &f.causes[0];
    assert_eq!((first.cause.tid, &first.cause.what), (100, &What::Running { site: 0xc1 }));
    assert_eq!(first.ns, 2 * 10 * 40);
    assert_eq!(f.waiting_ns, 2 * 10 * 60);
    assert!(f.idle.is_empty());
}

/// A holder (2) runs 0-40 while 1 waits behind it on a lock, then runs 60-100
/// while nobody waits: its running spans are only the first stretch, once,
/// though two waiters (1 and 3) waited behind it over it at once.
#[test]
fn a_running_cause_ran_only_while_others_waited_behind_it() {
    let waits = vec![
        wait(1, 0, Some(40), 40, Waker::Thread(2), LOCK, UNLOCK),
        wait(3, 10, Some(40), 40, Waker::Thread(2), LOCK, UNLOCK),
        wait(2, 40, None, 60, timer(), SLEEP, 0),
        wait(1, 45, None, 100, timer(), SLEEP, 0),
        wait(3, 45, None, 100, timer(), SLEEP, 0),
    ];
    let f = Trace::new(waits).why(&[1, 3]);
    assert_whole(&f);
    assert_eq!(f.running_spans.get(&2), Some(&vec![(0, 40)]), "{f:#?}");
    assert!(!f.running_spans.contains_key(&1));
}

#[test]
fn intervals_are_joined_where_they_overlap_or_touch() {
    assert_eq!(union(vec![(30, 40), (0, 10), (5, 20), (20, 25)]), vec![(0, 25), (30, 40)]);
    assert!(union(Vec::new()).is_empty());
}
