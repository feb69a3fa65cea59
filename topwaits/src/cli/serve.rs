//! Options of `topwaits serve`: a trace that runs until stopped and answers
//! Prometheus, pprof scrapers and an OTLP receiver, with the trace's target
//! options and filters.

use std::net::{SocketAddr, ToSocketAddrs as _};
use std::time::Duration;

use clap::Parser as _;

use super::{parse_duration, AttachArgs, CacheArgs, Config, ConfigError, TargetArgs, Unwind};
use crate::settings::*;
use crate::util::http::parse_url;

pub(super) const SERVE_EXAMPLES: &str = "\
Examples:
  topwaits serve                                   every thread; metrics on 127.0.0.1:9494
  topwaits serve --listen 0.0.0.0:9494 -w          on every address, with wakers
  curl -s localhost:9494/metrics | grep offcpu     waiting time by comm, wait kind and cgroup
  go tool pprof 'http://localhost:9494/debug/pprof/offcpu?seconds=10'
  topwaits serve --otlp-endpoint http://localhost:4318   push OTLP profiles every 15 s";

/// The default address: this machine only, a port of its own.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9494";

/// The OTLP/HTTP path of profiles (the signal's v1development API).
pub const OTLP_PATH: &str = "/v1development/profiles";

/// Options of `topwaits serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Serve /metrics and /debug/pprof/* on this address: HOST:PORT, a bare
    /// PORT for 127.0.0.1 only, or :PORT for every address.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    pub listen: String,

    /// Also push OTLP profiles (protobuf over HTTP) to this receiver every
    /// --otlp-interval: http://HOST:PORT, path /v1development/profiles unless given.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    /// Seconds between OTLP pushes (each a delta profile of its interval).
    #[arg(long, value_name = "SECS", default_value = "15", value_parser = parse_duration)]
    pub otlp_interval: Duration,

    /// Profiles held while the OTLP receiver is down; past it the oldest are
    /// dropped, and counted.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub otlp_queue: u32,

    /// Label sets (comm, wait kind, cgroup) exported as series of their own;
    /// further ones are added to one labelled "other".
    #[arg(long, value_name = "N", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_series: u32,

    /// Seconds between drains of the kernel's aggregate: the metrics' freshness.
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = parse_duration)]
    pub step: Duration,

    #[command(flatten)]
    pub target: TargetArgs,

    /// Trace user threads only (no kernel threads).
    #[arg(short = 'u', long, conflicts_with_all = ["kernel_threads_only", "pid", "tid", "cgroup", "unit", "container"])]
    pub user_threads_only: bool,

    /// Trace kernel threads only (no user threads).
    #[arg(short = 'k', long, conflicts_with_all = ["pid", "tid", "cgroup", "unit", "container"])]
    pub kernel_threads_only: bool,

    /// Also capture who woke each wait: /debug/pprof/offwake, and the waker as
    /// an attribute of OTLP samples.
    #[arg(short = 'w', long)]
    pub waker: bool,

    /// Record only waits of at least this many microseconds.
    #[arg(short = 'm', long, value_name = "USECS", default_value_t = 1)]
    pub min_block_time: u64,

    /// Number of unique stack traces the kernel can store (aged out past half).
    #[arg(long, value_name = "N", default_value_t = topwaits_common::limits::DEFAULT_STACK_STORAGE,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub stack_storage_size: u32,

    /// Number of unique (thread, stack) records the kernel aggregate holds
    /// between drains; waits past it are counted as lost.
    #[arg(long, value_name = "N", default_value_t = topwaits_common::limits::DEFAULT_MAX_ENTRIES,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_entries: u32,

    /// How user stacks are walked: cfi (unwind tables, the default) or fp.
    #[arg(long, value_name = "HOW", value_enum)]
    pub unwind: Option<Unwind>,

    #[command(flatten)]
    pub cache: CacheArgs,

    #[command(flatten)]
    pub attach: AttachArgs,
}

/// `9494` is a port on 127.0.0.1 only, `:9494` one on every address (as Go
/// and Prometheus' exporters read it); otherwise HOST:PORT, resolved now.
fn listen_addr(s: &str) -> Result<SocketAddr, ConfigError> {
    let bad = |why: String| ConfigError::Serve(format!("--listen {s}: {why}"));
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    if let Some(Ok(port)) = s.strip_prefix(':').map(str::parse::<u16>) {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    s.to_socket_addrs()
        .map_err(|e| bad(e.to_string()))?
        .next()
        .ok_or_else(|| bad("resolves to no address".into()))
}

impl ServeConfig {
    pub fn from_args(a: ServeArgs) -> Result<Self, ConfigError> {
        // The trace's own options, as `topwaits` takes them, from their defaults.
        let mut t = super::Args::try_parse_from(["topwaits"])
            .map_err(|e| ConfigError::Serve(e.to_string()))?
            .trace;
        t.target = a.target;
        t.user_threads_only = a.user_threads_only;
        t.kernel_threads_only = a.kernel_threads_only;
        t.waker = a.waker;
        t.min_block_time = a.min_block_time;
        t.stack_storage_size = a.stack_storage_size;
        t.max_entries = a.max_entries;
        t.unwind = a.unwind;
        t.cache = a.cache;
        t.attach = a.attach;
        // Drained every step, so that nothing is held per thread.
        t.interval = Some(a.step);
        let mut trace = Config::from_args(t)?;
        trace.print = false;
        let otlp = match a.otlp_endpoint {
            Some(u) => Some(OtlpConfig {
                url: parse_url(&u, OTLP_PATH)
                    .map_err(|e| ConfigError::Serve(format!("--otlp-endpoint {e}")))?,
                interval: a.otlp_interval,
                queue: a.otlp_queue as usize,
            }),
            None => None,
        };
        if a.step > Duration::from_secs(60) {
            return Err(ConfigError::Serve(
                "--step is at most 60 s: waits are counted once a step".into(),
            ));
        }
        if otlp.as_ref().is_some_and(|o| o.interval < a.step) {
            return Err(ConfigError::Serve(format!(
                "--otlp-interval is shorter than --step {:.1} s",
                a.step.as_secs_f64()
            )));
        }
        Ok(ServeConfig {
            trace: Box::new(trace),
            listen: listen_addr(&a.listen)?,
            otlp,
            max_series: a.max_series as usize,
            step: a.step,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Args, Command, Threads};
    use super::*;

    fn serve(argv: &[&str]) -> Result<ServeConfig, String> {
        let a = Args::try_parse_from(["topwaits", "serve"].into_iter().chain(argv.iter().copied()))
            .map_err(|e| e.kind().to_string())?;
        let Some(Command::Serve(s)) = a.command else { panic!("not serve") };
        ServeConfig::from_args(s).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_trace_every_thread_and_listen_on_this_machine() {
        let c = serve(&[]).unwrap();
        assert_eq!(c.listen, "127.0.0.1:9494".parse().unwrap());
        assert_eq!(
            (c.trace.threads.clone(), c.trace.waker, c.trace.print),
            (Threads::All, false, false)
        );
        assert_eq!(
            c.trace.interval,
            Some(Duration::from_secs(1)),
            "drained every step: nothing held per thread"
        );
        assert!(c.trace.open_waits && c.trace.labels && c.otlp.is_none());
        let c = serve(&[
            "-p",
            "7",
            "-w",
            "--listen",
            ":9100",
            "--otlp-endpoint",
            "http://127.0.0.1:4318",
            "--otlp-interval",
            "5",
        ])
        .unwrap();
        assert_eq!((c.trace.threads.clone(), c.trace.waker), (Threads::Pids(vec![7]), true));
        assert_eq!(c.listen, "0.0.0.0:9100".parse().unwrap(), ":PORT is every address");
        assert_eq!(serve(&["--listen", "9100"]).unwrap().listen, "127.0.0.1:9100".parse().unwrap());
        let o = c.otlp.unwrap();
        assert_eq!((o.url.path.as_str(), o.interval), (OTLP_PATH, Duration::from_secs(5)));
    }

    #[test]
    fn bad_addresses_and_urls_are_one_line_errors() {
        for (argv, want) in [
            (&["--listen", "nosuchhost.invalid:1"][..], "--listen"),
            (&["--listen", "1.2.3.4"][..], "--listen"),
            (&["--otlp-endpoint", "https://x:4318"][..], "https"),
            (&["--otlp-endpoint", "x:4318"][..], "not a URL"),
            (
                &["--step", "2", "--otlp-endpoint", "http://x:1", "--otlp-interval", "1"][..],
                "--otlp-interval",
            ),
            (&["--step", "120"][..], "--step"),
        ] {
            let e = serve(argv).unwrap_err();
            assert!(e.contains(want) && !e.contains('\n'), "{argv:?}: {e}");
        }
        assert!(serve(&["--interval", "1"]).is_err(), "a trace's report options are not serve's");
        assert!(serve(&["10"]).is_err(), "serve runs until stopped");
    }
}
