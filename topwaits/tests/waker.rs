//! Kernel tests of `--waker`, `--chain` and `--wakeups`, with pipe workloads whose
//! wakers are known.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

fn pipe() -> (i32, i32) {
    let mut fds = [0i32; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    (fds[0], fds[1])
}

// libc's read and write keep no frame pointer, so a frame-pointer walk from inside
// them skips their direct caller: the named functions call through these helpers.
#[inline(never)]
fn write_byte(fd: i32) {
    let b = [1u8];
    assert_eq!(unsafe { libc::write(fd, b.as_ptr().cast(), 1) }, 1);
    std::hint::black_box(());
}

#[inline(never)]
fn read_byte(fd: i32) -> bool {
    let mut b = [0u8];
    let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) };
    std::hint::black_box(n == 1)
}

/// Writes one byte: the write that wakes the reader.
#[inline(never)]
fn tw_producer_write(fd: i32) {
    write_byte(fd);
    std::hint::black_box(());
}

/// Blocks reading one byte; returns false at end of file.
#[inline(never)]
fn tw_consumer_read(fd: i32) -> bool {
    std::hint::black_box(read_byte(fd))
}

/// Not a tail call, so that its frame stays in a release build too.
#[inline(never)]
fn tw_relay_read(fd: i32) -> bool {
    std::hint::black_box(tw_consumer_read(fd))
}

const ROUNDS: usize = 8;

/// A producer writing ROUNDS bytes 40 ms apart, and a consumer reading them.
fn producer_consumer(args: &[&str]) -> (Value, u32, u32) {
    let (r, w) = pipe();
    let consumer = Workload::spawn("tw-consumer", move || while tw_consumer_read(r) {});
    let producer = Workload::spawn("tw-producer", move || {
        for _ in 0..ROUNDS {
            nanosleep(Duration::from_millis(40));
            tw_producer_write(w);
        }
        unsafe { libc::close(w) };
    });
    let ctid = consumer.tid.to_string();
    let mut all = vec!["--json", "-t", ctid.as_str()];
    all.extend_from_slice(args);
    all.push("1.5");
    let tracer = Tracer::start(&all);
    let (pt, ct) = (producer.tid, consumer.tid);
    consumer.go();
    producer.go();
    producer.join();
    consumer.join();
    let doc = json(&tracer.finish());
    unsafe { libc::close(r) };
    (doc, pt, ct)
}

fn check_producer_woke_consumer(doc: &Value, producer: u32) {
    assert_eq!(doc["waker_mode"], true);
    let reads: Vec<&Value> = records_in(doc, "tw_consumer_read")
        .into_iter()
        .filter(|r| stack_names(&r["kernel_stack"]).iter().any(|f| f.contains("pipe_read")))
        .collect();
    assert!(!reads.is_empty(), "no pipe_read records: {doc:#}");
    let woken: Vec<&&Value> =
        reads.iter().filter(|r| r["waker"]["tid"].as_u64() == Some(producer as u64)).collect();
    let count: u64 = woken.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert!(count >= ROUNDS as u64 - 1, "producer woke the consumer {count} times: {doc:#}");
    for r in &woken {
        let w = &r["waker"];
        assert_eq!(w["comm"], "tw-producer");
        assert_eq!(w["context"], "task");
        let wk = stack_names(&w["kernel_stack"]);
        assert!(wk.iter().any(|f| f.contains("pipe_write")), "waker kernel stack: {wk:?}");
        assert!(
            wk.first().is_some_and(|f| f.contains("wake_up")),
            "waker leaf is the wakeup: {wk:?}"
        );
        let wu = stack_names(&w["user_stack"]);
        assert!(wu.iter().any(|f| f.contains("tw_producer_write")), "waker user stack: {wu:?}");
    }
    for r in doc["records"].as_array().unwrap() {
        let (b, q, t) = (
            r["blocked_us"].as_u64().unwrap(),
            r["runq_us"].as_u64().unwrap(),
            r["total_us"].as_u64().unwrap(),
        );
        assert_eq!(b + q, t, "{r:#}");
        assert!(r["max_blocked_us"].as_u64().unwrap() <= r["max_us"].as_u64().unwrap());
    }
    // The consumer blocked about 40 ms per byte; the run-queue part is small.
    let blocked: u64 = woken.iter().map(|r| r["blocked_us"].as_u64().unwrap()).sum();
    let runq: u64 = woken.iter().map(|r| r["runq_us"].as_u64().unwrap()).sum();
    assert!(blocked > 30_000 * (ROUNDS as u64 - 1), "blocked {blocked} us");
    assert!(runq < blocked, "runq {runq} us vs blocked {blocked} us");
}

#[test]
fn pipe_consumer_is_woken_by_the_producer_write_path() {
    require_bpf!();
    let (doc, producer, _) = producer_consumer(&["-w"]);
    assert_eq!(doc["attach"], expected_attach());
    check_producer_woke_consumer(&doc, producer);
}

#[test]
fn pipe_consumer_waker_on_tp_btf() {
    require_bpf!();
    let (doc, producer, _) = producer_consumer(&["-w", "--attach", "tp_btf"]);
    assert_eq!(doc["attach"], "tp_btf");
    check_producer_woke_consumer(&doc, producer);
}

#[test]
fn waits_without_a_waker_stay_in_the_report() {
    require_bpf!();
    let w = Workload::spawn("tw-timer", || tw_known_long_sleep(Duration::from_millis(200)));
    let tid = w.tid.to_string();
    let tracer = Tracer::start(&["--json", "-w", "-t", &tid, "1"]);
    w.go();
    w.join();
    let doc = json(&tracer.finish());
    let recs = sleeps_in(&doc, "tw_known_long_sleep");
    assert_eq!(recs.len(), 1, "{doc:#}");
    // A nanosleep ends by a timer: an interrupt, not the task it happened to hit.
    let waker = &recs[0]["waker"];
    assert_eq!(waker["context"], "interrupt", "{waker:#}");
    assert_eq!(waker["comm"], "[interrupt]");
    assert!(stack_names(&waker["kernel_stack"]).iter().any(|f| f.contains("hrtimer")), "{waker:#}");
}

/// Regression: an interrupt waker was told apart by whichever task the interrupt
/// hit, so one thread's timer sleeps became many near-identical records. Here 150
/// short sleeps end by timer interrupts that land on an idle CPU or on a busy
/// sibling: every record must differ in something the JSON shows.
#[test]
fn interrupt_wakers_are_one_record_per_handler_path() {
    require_bpf!();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spin = {
        let stop = stop.clone();
        Workload::spawn("tw-spin", move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    let w = Workload::spawn("tw-ticker", || {
        for _ in 0..150 {
            tw_known_long_sleep(Duration::from_millis(2));
        }
    });
    let tid = w.tid.to_string();
    let tracer = Tracer::start(&["--json", "-w", "-t", &tid, "-m", "500", "2"]);
    spin.go();
    w.go();
    w.join();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    spin.join();
    let doc = json(&tracer.finish());
    let recs = calls_in(&doc, "tw_known_long_sleep");
    let irq: Vec<&Value> =
        recs.iter().copied().filter(|r| r["waker"]["context"] == "interrupt").collect();
    let count: u64 = irq.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert!(count >= 100, "timer wakeups seen: {count}: {doc:#}");
    for r in &irq {
        assert_eq!(
            (r["waker"]["tid"].as_u64(), r["waker"]["comm"].as_str()),
            (Some(0), Some("[interrupt]")),
            "{r:#}"
        );
        assert!(r["waker"]["handler"].as_str().is_some_and(|h| h.contains("hrtimer")), "{r:#}");
    }
    // What the JSON shows of a record, less its numbers: no two may be equal.
    let shown = |r: &Value| {
        let mut r = r.clone();
        for k in [
            "count",
            "total_us",
            "max_us",
            "avg_us",
            "total_ns",
            "max_ns",
            "max_start",
            "max_end",
            "blocked_us",
            "runq_us",
            "max_blocked_us",
            "max_runq_us",
        ] {
            r.as_object_mut().unwrap().remove(k);
        }
        r.to_string()
    };
    let mut seen = std::collections::HashSet::new();
    for r in doc["records"].as_array().unwrap() {
        assert!(seen.insert(shown(r)), "two records alike in all but their numbers: {r:#}");
    }
    assert!(irq.len() <= 4, "{} interrupt records for one timer path: {doc:#}", irq.len());
}

/// A loopback TCP send wakes its receiver from the softirq that the sender runs
/// itself when it re-enables bottom halves: the sender is the waker, with its
/// whole stack down to its own write, not an anonymous `[interrupt]`.
#[test]
fn a_loopback_tcp_receiver_is_woken_by_the_sender_not_an_interrupt() {
    use std::os::fd::AsRawFd;
    require_bpf!();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    client.set_nodelay(true).unwrap();
    let (r, w) = (server.as_raw_fd(), client.as_raw_fd());
    let consumer = Workload::spawn("tw-consumer", move || {
        for _ in 0..ROUNDS {
            assert!(tw_consumer_read(r));
        }
    });
    let producer = Workload::spawn("tw-producer", move || {
        for _ in 0..ROUNDS {
            nanosleep(Duration::from_millis(40));
            tw_producer_write(w);
        }
    });
    let ctid = consumer.tid.to_string();
    let tracer = Tracer::start(&["--json", "-w", "-t", &ctid, "1.5"]);
    let producer_tid = producer.tid as u64;
    consumer.go();
    producer.go();
    producer.join();
    consumer.join();
    let doc = json(&tracer.finish());
    let reads: Vec<&Value> = records_in(&doc, "tw_consumer_read")
        .into_iter()
        .filter(|r| stack_names(&r["kernel_stack"]).iter().any(|f| f.contains("tcp_recvmsg")))
        .collect();
    let by_producer: Vec<&&Value> =
        reads.iter().filter(|r| r["waker"]["tid"].as_u64() == Some(producer_tid)).collect();
    let count: u64 = by_producer.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert!(
        count >= ROUNDS as u64 - 1,
        "the sender woke the receiver {count} times of {ROUNDS}: {doc:#}"
    );
    for r in &by_producer {
        let w = &r["waker"];
        assert_eq!(
            (w["context"].as_str(), w["comm"].as_str()),
            (Some("task"), Some("tw-producer")),
            "{w:#}"
        );
        let wk = stack_names(&w["kernel_stack"]);
        assert!(
            wk.iter().any(|f| f == "handle_softirqs" || f == "__do_softirq"),
            "woken from the softirq: {wk:?}"
        );
        assert!(
            wk.iter().any(|f| f.contains("tcp_sendmsg")),
            "down to the sender's own send: {wk:?}"
        );
        let wu = stack_names(&w["user_stack"]);
        assert!(
            wu.iter().any(|f| f.contains("tw_producer_write")),
            "the sender's user stack: {wu:?}"
        );
    }
    drop((server, client));
}

/// Writes one byte to `fd` from one user call site, whichever file it is: only
/// the kernel stack tells a pipe wakeup from a socket wakeup. (Its body differs
/// from `tw_producer_write`'s, so that a release build does not merge the two.)
#[inline(never)]
fn tw_waker_write(fd: i32) {
    write_byte(std::hint::black_box(fd));
    std::hint::black_box(fd);
}

/// Wakes a reader in pairs of writes, pipe then socket, from one call site: the
/// second wakeup of a pair can reuse the first one's kernel stack in place, and the
/// first of the next pair must not. Every waker stack must match the wait it ended.
fn check_waker_stack_reuse(attach: &[&str]) {
    const PAIRS: usize = 16;
    let (pr, pw) = pipe();
    let mut sock = [0i32; 2];
    // SAFETY: a plain syscall filling a local array.
    assert_eq!(
        unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sock.as_mut_ptr()) },
        0
    );
    let order: Vec<bool> = (0..PAIRS * 2).map(|i| (i / 2) % 2 == 0).collect();
    let reads = order.clone();
    let reader = Workload::spawn("tw-woken", move || {
        for on_pipe in reads {
            assert!(read_byte(if on_pipe { pr } else { sock[0] }));
        }
    });
    let tid = reader.tid.to_string();
    let mut args = vec!["--json", "-w", "--state", "1", "-t", &tid];
    args.extend_from_slice(attach);
    args.push("3");
    let tracer = Tracer::start_learned(&args);
    let rt = reader.tid;
    let writer = Workload::spawn("tw-waker", move || {
        for on_pipe in order {
            nanosleep(Duration::from_millis(3));
            // Only a read that blocked is woken: the reader must be asleep in it.
            until_reading(rt);
            tw_waker_write(if on_pipe { pw } else { sock[1] });
        }
    });
    let wtid = writer.tid as u64;
    reader.go();
    writer.go();
    writer.join();
    reader.join();
    let doc = json(&tracer.finish());
    let (mut on_pipe, mut on_sock) = (0, 0);
    for r in doc["records"].as_array().unwrap() {
        let target = stack_names(&r["kernel_stack"]);
        if !target.iter().any(|f| f == "ksys_read") || r["waker"]["tid"].as_u64() != Some(wtid) {
            continue;
        }
        let waker = stack_names(&r["waker"]["kernel_stack"]);
        let pipe_wait = target.iter().any(|f| f.contains("pipe_read"));
        let pipe_waker = waker.iter().any(|f| f.contains("pipe_write"));
        let sock_waker = waker.iter().any(|f| f.contains("unix_stream_sendmsg"));
        assert!(pipe_waker != sock_waker, "one of the two sites: {waker:?}");
        assert_eq!(
            pipe_wait,
            pipe_waker,
            "a {} wait woken by {waker:?}",
            if pipe_wait { "pipe" } else { "socket" }
        );
        let n = r["count"].as_u64().unwrap();
        if pipe_wait {
            on_pipe += n
        } else {
            on_sock += n
        }
    }
    assert_eq!((on_pipe, on_sock), (PAIRS as u64, PAIRS as u64), "{doc:#}");
    assert!(
        doc["counters"]["waker_kernel_stacks_reused"].as_u64().unwrap() > 0,
        "{:#}",
        doc["counters"]
    );
    // SAFETY: closing fds this test opened.
    unsafe {
        for fd in [pr, pw, sock[0], sock[1]] {
            libc::close(fd);
        }
    }
}

#[test]
fn waker_stacks_reused_in_place_stay_exact() {
    require_bpf!();
    check_waker_stack_reuse(&[]);
}

#[test]
fn waker_stacks_reused_in_place_stay_exact_on_tp_btf() {
    require_bpf!();
    check_waker_stack_reuse(&["--attach", "tp_btf"]);
}

/// A relay A -> B -> C over two pipes, A writing `rounds` bytes 40 ms apart, traced
/// with `args` plus `-t C`. Returns the tracer's output and the tids of A and B.
fn relay(prefix: &str, rounds: usize, args: &[&str]) -> (Finished, u32, u32) {
    let (r1, w1) = pipe();
    let (r2, w2) = pipe();
    let c = Workload::spawn(&format!("{prefix}-c"), move || while tw_relay_read(r2) {});
    let b = Workload::spawn(&format!("{prefix}-b"), move || {
        while tw_relay_read(r1) {
            tw_producer_write(w2);
        }
        unsafe { libc::close(w2) };
    });
    let a = Workload::spawn(&format!("{prefix}-a"), move || {
        for _ in 0..rounds {
            nanosleep(Duration::from_millis(40));
            tw_producer_write(w1);
        }
        unsafe { libc::close(w1) };
    });
    let (at, bt, ct) = (a.tid, b.tid, c.tid.to_string());
    let mut all = args.to_vec();
    all.extend_from_slice(&["-t", &ct]);
    let tracer = Tracer::start(&all);
    c.go();
    b.go();
    a.go();
    a.join();
    b.join();
    c.join();
    let out = tracer.finish();
    unsafe {
        libc::close(r1);
        libc::close(r2);
    }
    (out, at, bt)
}

#[test]
fn relay_chain_shows_the_wakers_waker() {
    require_bpf!();
    let (out, at, bt) = relay("tw-relay", ROUNDS, &["--json", "--chain", "2", "1.5"]);
    let (at, bt) = (at as u64, bt as u64);
    let doc = json(&out);
    let chained: u64 = records_in(&doc, "tw_relay_read")
        .iter()
        .filter(|r| {
            r["waker"]["tid"].as_u64() == Some(bt)
                && r["waker"]["waker"]["tid"].as_u64() == Some(at)
        })
        .map(|r| r["count"].as_u64().unwrap())
        .sum();
    assert!(chained >= ROUNDS as u64 - 1, "C woken by B woken by A only {chained} times: {doc:#}");
    // The steady-state record: A's writes woke B, whose writes woke C. (The final
    // close of each pipe adds a one-off record woken through pipe_release.)
    let r = records_in(&doc, "tw_relay_read")
        .into_iter()
        .filter(|r| r["waker"]["waker"]["tid"].as_u64() == Some(at))
        .max_by_key(|r| r["count"].as_u64().unwrap())
        .unwrap();
    assert_eq!(r["waker"]["comm"], "tw-relay-b");
    assert_eq!(r["waker"]["waker"]["comm"], "tw-relay-a");
    assert!(r["waker"]["waker"]["waker"].is_null(), "--chain 2 stops at two hops");
    assert!(stack_names(&r["waker"]["waker"]["kernel_stack"])
        .iter()
        .any(|f| f.contains("pipe_write")));
}

#[test]
fn relay_chain_folded_appends_each_hop_after_a_divider() {
    require_bpf!();
    let (out, _, _) = relay("tw-fold", 4, &["-f", "--chain", "2", "1"]);
    let line = out
        .stdout
        .lines()
        .find(|l| {
            l.ends_with(|c: char| c.is_ascii_digit())
                && l.contains(";tw-fold-b;--;")
                && l.contains("tw-fold-a ")
        })
        .unwrap_or_else(|| panic!("no chained folded line:\n{}", out.stdout));
    let (stack, _) = line.rsplit_once(' ').unwrap();
    let frames: Vec<&str> = stack.split(';').collect();
    assert_eq!(frames[0], "tw-fold-c");
    assert_eq!(frames.iter().filter(|f| **f == "--").count(), 2, "{line}");
    assert_eq!(*frames.last().unwrap(), "tw-fold-a");
    let first_div = frames.iter().position(|f| *f == "--").unwrap();
    assert!(frames[first_div + 1].contains("wake_up"), "waker kernel frames leaf first: {line}");
}

#[test]
fn wakeup_view_attributes_the_consumer_wait_to_the_producer() {
    require_bpf!();
    let (doc, producer, consumer) = producer_consumer(&["--wakeups"]);
    assert_eq!(doc["view"], "wakeups");
    let rows: Vec<&Value> = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["waker"]["comm"] == "tw-producer" && r["target_comm"] == "tw-consumer")
        .collect();
    assert!(!rows.is_empty(), "{doc:#}");
    for r in &rows {
        // Ids and the time of the longest wait, which the view once lacked.
        assert_eq!(
            (r["waker"]["tid"].as_u64(), r["target_tid"].as_u64()),
            (Some(producer as u64), Some(consumer as u64)),
            "{r:#}"
        );
        assert!(r["max_us"].as_u64().unwrap() >= r["max_blocked_us"].as_u64().unwrap(), "{r:#}");
        assert!(r["max_end"].as_str().is_some_and(|t| t.contains('T')), "{r:#}");
    }
    let blocked: u64 = rows.iter().map(|r| r["blocked_us"].as_u64().unwrap()).sum();
    assert!(blocked > 30_000 * (ROUNDS as u64 - 1), "blocked {blocked} us: {doc:#}");
    assert!(rows.iter().any(|r| stack_names(&r["waker"]["kernel_stack"])
        .iter()
        .any(|f| f.contains("pipe_write"))));
}

#[test]
fn a_wait_still_open_at_the_end_is_not_given_the_waker_of_the_wait_before() {
    require_bpf!();
    let ((pr, pw), (qr, qw)) = (pipe(), pipe());
    let first_done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = first_done.clone();
    let reader = Workload::spawn("tw-reopened", move || {
        assert!(read_byte(pr));
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        // Blocks until the trace has ended and the pipe is closed.
        read_byte(qr);
    });
    let rtid = reader.tid;
    let arg = rtid.to_string();
    let tracer = Tracer::start(&["--json", "-w", "-t", &arg, "1"]);
    reader.go();
    until_reading(rtid);
    tw_waker_write(pw);
    while !first_done.load(std::sync::atomic::Ordering::SeqCst) {
        nanosleep(Duration::from_micros(200));
    }
    until_reading(rtid);
    let doc = json(&tracer.finish());
    // SAFETY: closing fds this test opened; the reader's last read then returns.
    unsafe {
        libc::close(qw);
        libc::close(pw);
    }
    reader.join();
    let mine: Vec<&Value> = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["tid"].as_u64() == Some(rtid as u64))
        .collect();
    let me = tid() as u64;
    // (Its wait for the go, in progress as the trace began, was woken by this
    // thread too: the reads are told apart by their stacks.)
    let reads =
        |r: &&&Value| stack_names(&r["user_stack"]).iter().any(|n| n.ends_with("read_byte"));
    let woken: Vec<&&Value> = mine
        .iter()
        .filter(|r| r["open"] == false && r["waker"]["tid"].as_u64() == Some(me))
        .filter(reads)
        .collect();
    assert_eq!(woken.len(), 1, "the first read, woken by this thread's write: {doc:#}");
    let open: Vec<&&Value> = mine.iter().filter(|r| r["open"] == true).collect();
    assert_eq!(open.len(), 1, "the second read, still blocked: {doc:#}");
    assert_eq!(open[0]["waker"]["context"], "not_woken_yet", "{:#}", open[0]);
    // SAFETY: closing the read ends, no longer used.
    unsafe {
        libc::close(pr);
        libc::close(qr);
    }
}

/// A waker outside the traced processes (a client, as pgbench is to the
/// PostgreSQL backends) gets its unwind tables once it wakes a traced thread:
/// Debian's python3 (no frame pointers) writing into `cat`'s pipe has whole
/// stacks, named down to its script's function, for nearly all of the trace,
/// not `[cut:table-loading]` throughout (issue: `send <- [cut:table-loading]`
/// in every segment).
#[test]
fn a_waker_outside_the_targets_gets_its_tables() {
    require_bpf!();
    use std::process::{Command, Stdio};
    let script =
        "import os, time\ndef tw_client_writes():\n    os.write(1, b'x')\nwhile True:\n    tw_client_writes()\n    time.sleep(0.01)\n";
    let mut writer = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 (cargo xtask setup)");
    let mut reader = Command::new("cat")
        .stdin(Stdio::from(writer.stdout.take().unwrap()))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let doc = json(&run(&["--waker", "--json", "-p", &reader.id().to_string(), "2"]));
    let _ = (writer.kill(), reader.kill(), writer.wait(), reader.wait());
    let (mut whole, mut all) = (0u64, 0u64);
    for r in doc["records"].as_array().unwrap().iter().filter(|r| r["waker"]["comm"] == "python3") {
        let ns = r["total_ns"].as_u64().unwrap();
        all += ns;
        if r["waker"]["user_stack_status"] == "ok" {
            whole += ns;
            let names = stack_names(&r["waker"]["user_stack"]);
            assert!(names.iter().any(|n| n.starts_with("tw_client_writes")), "{names:?}");
        }
    }
    assert!(all > 0, "python3 woke cat: {doc:#}");
    assert!(
        whole as f64 >= 0.7 * all as f64,
        "whole waker stacks for {:.0}% of the waiting: {doc:#}",
        100.0 * whole as f64 / all as f64
    );
}
