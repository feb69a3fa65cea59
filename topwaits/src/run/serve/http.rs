//! The HTTP side of `serve`: one thread accepts, a thread per request answers
//! (a few at once; more get 503), and the paths: `/metrics`,
//! `/debug/pprof/offcpu` and `/debug/pprof/offwake` (`?seconds=N`), and `/`
//! listing them.

use std::io::{BufReader, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};

use super::Shared;
use crate::report::Format as _;
use crate::util::http::{read_request, respond, Request};

/// Requests answered at once; a pprof request holds its thread for its window.
const MAX_AT_ONCE: usize = 16;
/// A pprof window's default and longest length (Go's handler takes 30 s by default).
const DEFAULT_SECONDS: u64 = 30;
const MAX_SECONDS: u64 = 600;
/// How long a slow client may take to send its request or read the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

const INDEX: &str = "topwaits serve\n\n\
/metrics                               Prometheus counters: off-CPU seconds and waits by comm, wait kind, cgroup\n\
/debug/pprof/offcpu?seconds=N          gzipped pprof of the off-CPU time of the next N seconds (default 30)\n\
/debug/pprof/offwake?seconds=N         the same with each waker's stack above its sleeper's (serve -w)\n";

/// The accepting thread.
pub(super) struct Server {
    addr: SocketAddr,
    thread: Option<std::thread::JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl Server {
    pub fn start(listener: TcpListener, shared: Arc<Shared>) -> Result<Server> {
        let addr = listener.local_addr().context("the listening socket has no address")?;
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("topwaits-http".into())
            .spawn(move || accept(listener, s))
            .context("failed to start the HTTP thread")?;
        Ok(Server { addr, thread: Some(thread), shared })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting (the stop flag is set: a connection of its own wakes
    /// the accepting thread to see it).
    pub fn stop(mut self) {
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        drop(self.shared);
    }
}

fn accept(listener: TcpListener, shared: Arc<Shared>) {
    let busy = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(IO_TIMEOUT));
        let _ = conn.set_write_timeout(Some(IO_TIMEOUT));
        if busy.fetch_add(1, Ordering::AcqRel) >= MAX_AT_ONCE {
            busy.fetch_sub(1, Ordering::AcqRel);
            let _ = respond(
                &mut conn,
                503,
                "text/plain",
                &[("Retry-After", "5")],
                b"too many requests at once\n",
            );
            continue;
        }
        let (s, b) = (shared.clone(), busy.clone());
        let spawned =
            std::thread::Builder::new().name("topwaits-request".into()).spawn(move || {
                answer(conn, &s);
                b.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            busy.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// What a request gets: status, content type, extra headers, body.
type Answer = (u16, &'static str, Vec<(&'static str, &'static str)>, Vec<u8>);

fn text(status: u16, body: impl Into<String>) -> Answer {
    (status, "text/plain; charset=utf-8", Vec::new(), body.into().into_bytes())
}

fn answer(mut conn: TcpStream, shared: &Shared) {
    let req = match read_request(&mut BufReader::new(&mut conn)) {
        Ok(r) => r,
        Err(e) => {
            let _ = respond(&mut conn, 400, "text/plain", &[], format!("{e}\n").as_bytes());
            return;
        }
    };
    let (status, kind, headers, body) = route(&req, shared);
    let _ = respond(&mut conn, status, kind, &headers, &body);
    let _ = conn.flush();
}

/// The answer to one request.
fn route(req: &Request, shared: &Shared) -> Answer {
    if req.method != "GET" {
        return text(405, "only GET is served\n");
    }
    match req.path.as_str() {
        "/" => text(200, INDEX),
        "/metrics" => {
            let own = own_now(shared);
            let body = shared
                .metrics
                .lock()
                .map(|m| crate::report::prometheus::text(&m, &own))
                .unwrap_or_default();
            (200, crate::report::prometheus::CONTENT_TYPE, Vec::new(), body.into_bytes())
        }
        "/debug/pprof/offcpu" | "/debug/pprof/offwake" => {
            let wake = req.path.ends_with("offwake");
            if wake && !shared.waker {
                return text(
                    404,
                    "no wakers are traced: start topwaits serve with -w for /debug/pprof/offwake\n",
                );
            }
            let secs = match req.param("seconds").map(str::parse::<f64>) {
                None => DEFAULT_SECONDS,
                Some(Ok(s)) if s >= 1.0 && s <= MAX_SECONDS as f64 => s.round() as u64,
                Some(_) => {
                    return text(400, format!("seconds must be a number from 1 to {MAX_SECONDS}\n"))
                }
            };
            let Some(report) = shared.next_seconds(secs) else {
                return text(503, "serve is stopping\n");
            };
            let report =
                if wake { crate::report::pprof::joined_with_wakers(report) } else { report };
            let mut body = Vec::new();
            if let Err(e) =
                (crate::report::pprof::Pprof { cgroup: Some(true) }).write(&report, &mut body)
            {
                return text(500, format!("the profile could not be written: {e}\n"));
            }
            let name = if wake {
                "attachment; filename=\"offwake.pb.gz\""
            } else {
                "attachment; filename=\"offcpu.pb.gz\""
            };
            (200, "application/octet-stream", vec![("Content-Disposition", name)], body)
        }
        _ => text(404, format!("no such path: {}\n\n{INDEX}", req.path)),
    }
}

/// The tracer's own use of the machine now, with the counts kept.
fn own_now(shared: &Shared) -> crate::report::prometheus::Own {
    let (cpu, rss) = crate::sys::procfs::own_usage();
    let mut own = shared.own.lock().map(|o| o.clone()).unwrap_or_default();
    own.cpu_seconds = cpu;
    own.resident_bytes = rss;
    own
}
