//! The OTLP pusher of `serve --otlp-endpoint`: a thread that merges the steps'
//! reports over each interval, encodes the interval as one request, and posts
//! it. A receiver that is down is retried with backoff, doubling up to a
//! minute; the queue of requests not yet sent is bounded, the oldest dropped
//! and counted; the tracing loop never waits for it.

use std::collections::VecDeque;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{merged, Shared};
use crate::model::Report;
use crate::report::prometheus::OtlpCounts;
use crate::settings::OtlpConfig;
use crate::util::http::post;

/// The first wait before a retry, and the longest.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long one post may take, each step of it.
const POST_TIMEOUT: Duration = Duration::from_secs(5);
/// The OTLP/HTTP content type of a protobuf body.
const PROTOBUF: &str = "application/x-protobuf";

/// Says at start when the receiver cannot be reached: not an error, as a
/// collector may come up later, but worth a line.
pub(super) fn check_reachable(o: &OtlpConfig) {
    use std::net::ToSocketAddrs as _;
    let reached = (o.url.host.as_str(), o.url.port)
        .to_socket_addrs()
        .map_err(|e| e.to_string())
        .and_then(|mut a| a.next().ok_or_else(|| "no address".to_string()))
        .and_then(|a| {
            std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2))
                .map_err(|e| e.to_string())
        });
    if let Err(e) = reached {
        crate::util::stderr::say!(
            "topwaits: warning: the OTLP endpoint {} cannot be reached now ({e}): up to {} profiles are kept and sent when it can",
            o.url,
            o.queue
        );
    }
}

/// The pusher's thread and the way to it.
pub(super) struct Pusher {
    tx: Option<Sender<Arc<Report>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Pusher {
    pub fn start(config: OtlpConfig, shared: Arc<Shared>) -> Pusher {
        let (tx, rx) = channel();
        if let Ok(mut own) = shared.own.lock() {
            own.otlp = Some(OtlpCounts::default());
        }
        let thread = std::thread::Builder::new()
            .name("topwaits-otlp".into())
            .spawn(move || push(config, rx, &shared))
            .ok();
        Pusher { tx: Some(tx), thread }
    }

    /// Hands one step's report over; never blocks.
    pub fn send(&self, report: Arc<Report>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(report);
        }
    }

    /// Sends what is left once, and ends the thread.
    pub fn finish(mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The requests not sent yet, oldest first, and when to try again.
struct Queue {
    bodies: VecDeque<Vec<u8>>,
    cap: usize,
    next_try: Instant,
    backoff: Duration,
    counts: OtlpCounts,
    /// A failure has been said (once until the next success).
    said: bool,
}

impl Queue {
    fn add(&mut self, body: Vec<u8>) {
        if self.bodies.len() >= self.cap {
            self.bodies.pop_front();
            self.counts.dropped += 1;
        }
        self.bodies.push_back(body);
    }

    /// Posts the queued requests while the receiver takes them.
    fn flush(&mut self, url: &crate::util::http::Url) {
        while let Some(body) = self.bodies.front() {
            if Instant::now() < self.next_try {
                return;
            }
            match post(url, PROTOBUF, body, POST_TIMEOUT) {
                Ok(s) if (200..300).contains(&s) => {
                    self.bodies.pop_front();
                    self.counts.sent += 1;
                    self.backoff = FIRST_BACKOFF;
                    self.said = false;
                }
                // Refused for good (a malformed request, a wrong path): retrying
                // would not help.
                Ok(s) if (400..500).contains(&s) && s != 408 && s != 429 => {
                    self.bodies.pop_front();
                    self.counts.failed += 1;
                    self.counts.dropped += 1;
                    self.say(&format!("HTTP {s}; the profile was dropped"));
                }
                other => {
                    self.counts.failed += 1;
                    let why = match other {
                        Ok(s) => format!("HTTP {s}"),
                        Err(e) => e.to_string(),
                    };
                    self.say(&format!("{why}; retrying in {:.0} s", self.backoff.as_secs_f64()));
                    self.next_try = Instant::now() + self.backoff;
                    self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                    return;
                }
            }
        }
    }

    fn say(&mut self, what: &str) {
        if !self.said {
            crate::util::stderr::say!(
                "topwaits: warning: OTLP push failed: {what} (failures are counted in /metrics)"
            );
            self.said = true;
        }
    }
}

fn push(config: OtlpConfig, rx: Receiver<Arc<Report>>, shared: &Shared) {
    let origin_host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let mut q = Queue {
        bodies: VecDeque::new(),
        cap: config.queue,
        next_try: Instant::now(),
        backoff: FIRST_BACKOFF,
        counts: OtlpCounts::default(),
        said: false,
    };
    let mut acc: Option<Report> = None;
    let mut due = Instant::now() + config.interval;
    let mut open = true;
    while open {
        let wait = due
            .min(q.next_try.max(Instant::now() + Duration::from_millis(100)))
            .saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(r) => {
                // Merged as it comes: one interval's rows at most are held.
                acc = match acc.take() {
                    None => Some((*r).clone()),
                    Some(a) => merged(&[Arc::new(a), r]),
                };
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => open = false,
        }
        if Instant::now() >= due || !open {
            due += config.interval;
            if let Some(report) = acc.take().filter(|r| !r.records.is_empty()) {
                q.add(encode(&report, &origin_host));
            }
        }
        q.flush(&config.url);
        if !open {
            // Once more at the end, without waiting for a backoff.
            q.next_try = Instant::now();
            q.flush(&config.url);
        }
        if let Ok(mut own) = shared.own.lock() {
            own.otlp = Some(q.counts);
        }
    }
}

fn encode(report: &Report, host: &str) -> Vec<u8> {
    let mut origin =
        crate::report::otlp::Origin { host: host.to_string(), executables: Default::default() };
    for r in &report.records {
        origin.executables.entry(r.tgid).or_insert_with(|| {
            std::fs::read_to_string(format!("/proc/{}/comm", r.tgid))
                .map(|c| c.trim_end().to_string())
                .unwrap_or_else(|_| crate::model::comm_text(&r.comm))
        });
    }
    crate::report::otlp::encode(&crate::report::otlp::request(report, &origin, profile_id()))
}

/// 16 random bytes.
fn profile_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    // SAFETY: getrandom fills the buffer it is given, up to its length.
    unsafe { libc::getrandom(id.as_mut_ptr().cast(), id.len(), 0) };
    id
}
