//! `GET /metrics` of `topwaits serve`: the counters in Prometheus' text
//! exposition format (version 0.0.4): each family once, with its HELP and
//! TYPE, counters named `_total`, label values escaped. Pure: the counters and
//! the tracer's own usage in, text out.

use std::fmt::Write as _;

use crate::analysis::metrics::Metrics;

/// The content type scrapers are answered with.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The tracer's own use of the machine, and its exporters' counts.
#[derive(Clone, Debug, Default)]
pub struct Own {
    /// User and system CPU time of the whole process, in seconds.
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    /// When serving began, in seconds since the epoch.
    pub start_time_seconds: f64,
    /// Stacks and waker chains aged out of the kernel's maps.
    pub stacks_aged: u64,
    pub chains_aged: u64,
    /// OTLP pushes, when an endpoint is set: sent, failed attempts, and
    /// profiles dropped from the full queue.
    pub otlp: Option<OtlpCounts>,
}

/// What the OTLP pusher did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OtlpCounts {
    pub sent: u64,
    pub failed: u64,
    pub dropped: u64,
}

/// A label value as the format writes it: backslash, quote and newline escaped.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A float as Prometheus reads it.
fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// The whole exposition.
pub fn text(m: &Metrics, own: &Own) -> String {
    let mut out = String::new();
    wait_series(&mut out, m);
    tracer_counters(&mut out, m, own);
    process_metrics(&mut out, own);
    out
}

/// The waiting, by comm, wait kind, cgroup and container.
fn wait_series(out: &mut String, m: &Metrics) {
    let series = m.series();
    let labels = |l: &crate::analysis::metrics::Labels| {
        format!(
            "comm=\"{}\",what=\"{}\",cgroup=\"{}\",container=\"{}\"",
            escape(&l.comm),
            escape(&l.what),
            escape(&l.cgroup),
            escape(&l.container)
        )
    };
    family(
        out,
        "topwaits_offcpu_seconds_total",
        "counter",
        "Time threads spent off the CPU, by thread name, what they waited for (the kinds of --by what) and cgroup; a wait in progress counts as it goes.",
    );
    for (l, v) in &series {
        let _ = writeln!(
            out,
            "topwaits_offcpu_seconds_total{{{}}} {}",
            labels(l),
            num(v.offcpu_ns as f64 / 1e9)
        );
    }
    family(out, "topwaits_waits_total", "counter", "Waits that ended, by the same labels.");
    for (l, v) in &series {
        let _ = writeln!(out, "topwaits_waits_total{{{}}} {}", labels(l), v.waits);
    }
}

/// What the tracer kept, lost, aged and pushed.
fn tracer_counters(out: &mut String, m: &Metrics, own: &Own) {
    family(
        out,
        "topwaits_series_folded_total",
        "counter",
        "Label sets added to the series labelled \"other\" because --max-series was reached.",
    );
    let _ = writeln!(out, "topwaits_series_folded_total {}", m.folded);
    let c = &m.counters;
    family(out, "topwaits_switches_total", "counter", "Context switches the tracer saw.");
    let _ = writeln!(out, "topwaits_switches_total {}", c.switches);
    family(
        out,
        "topwaits_lost_total",
        "counter",
        "What the tracer could not keep, by reason: waits (the aggregate or the start map full), stacks, wakers, events.",
    );
    for (reason, n) in [
        ("aggregate_full", c.aggregate_full),
        ("start_map_full", c.start_full),
        ("kernel_stack_full", c.lost_kernel_stacks),
        ("user_stack_full", c.lost_user_stacks),
        ("waker_map_full", c.wake_full),
        ("chain_map_full", c.chains_full),
        ("process_events", c.lost_proc_events),
        ("unended_waits", c.unended),
        ("clock_went_back", c.negative_deltas),
        ("goroutine_thread_map_full", c.goroutine_threads_lost),
    ] {
        let _ = writeln!(out, "topwaits_lost_total{{reason=\"{reason}\"}} {n}");
    }
    family(
        out,
        "topwaits_aged_total",
        "counter",
        "Stacks and waker chains aged out of the kernel's full maps (stored again when met again).",
    );
    let _ = writeln!(out, "topwaits_aged_total{{kind=\"stack\"}} {}", own.stacks_aged);
    let _ = writeln!(out, "topwaits_aged_total{{kind=\"chain\"}} {}", own.chains_aged);
    family(
        out,
        "topwaits_drains_total",
        "counter",
        "Drains of the kernel's aggregate (one per --step).",
    );
    let _ = writeln!(out, "topwaits_drains_total {}", m.intervals);
    if let Some(o) = &own.otlp {
        family(
            out,
            "topwaits_otlp_profiles_total",
            "counter",
            "OTLP profile pushes: sent, failed attempts (retried), dropped from the full queue.",
        );
        for (result, n) in [("sent", o.sent), ("failed", o.failed), ("dropped", o.dropped)] {
            let _ = writeln!(out, "topwaits_otlp_profiles_total{{result=\"{result}\"}} {n}");
        }
    }
}

/// The process's own metrics, as every Prometheus client library exports them.
fn process_metrics(out: &mut String, own: &Own) {
    family(
        out,
        "process_cpu_seconds_total",
        "counter",
        "User and system CPU time topwaits spent, in seconds.",
    );
    let _ = writeln!(out, "process_cpu_seconds_total {}", num(own.cpu_seconds));
    family(out, "process_resident_memory_bytes", "gauge", "topwaits' resident memory, in bytes.");
    let _ = writeln!(out, "process_resident_memory_bytes {}", own.resident_bytes);
    family(
        out,
        "process_start_time_seconds",
        "gauge",
        "When topwaits began serving, in seconds since the epoch.",
    );
    let _ = writeln!(out, "process_start_time_seconds {}", num(own.start_time_seconds));
    family(out, "topwaits_build_info", "gauge", "The topwaits release serving, as a label.");
    let _ =
        writeln!(out, "topwaits_build_info{{version=\"{}\"}} 1", escape(env!("CARGO_PKG_VERSION")));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Counters;

    fn metrics() -> Metrics {
        let mut m = Metrics::new(10);
        let rec = |comm: &str, total: u64| crate::report::fixtures::bare_record(comm, total, 3);
        let report = crate::model::Report {
            records: vec![rec("a\"b\\c\nd", 1_500_000_000), rec("w", 2)],
            ..crate::report::fixtures::report()
        };
        m.add(&report, &Counters { switches: 9, lost_user_stacks: 4, ..Default::default() });
        m
    }

    /// Every sample line names a family declared once before it, with HELP
    /// and TYPE; counters end in `_total`; odd comms are escaped, not broken.
    #[test]
    fn the_exposition_follows_the_format_rules() {
        let t = text(
            &metrics(),
            &Own {
                cpu_seconds: 0.25,
                resident_bytes: 1 << 20,
                otlp: Some(OtlpCounts { sent: 2, failed: 1, dropped: 0 }),
                ..Default::default()
            },
        );
        let mut declared: Vec<(String, String)> = Vec::new();
        for line in t.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(!declared.iter().any(|(n, _)| n == name), "{name} declared twice");
                assert!(kind != "counter" || name.ends_with("_total"), "{name}");
                declared.push((name.into(), kind.into()));
            } else if !line.starts_with("# HELP ") {
                let name = line.split(['{', ' ']).next().unwrap();
                assert_eq!(declared.last().map(|d| d.0.as_str()), Some(name), "{line}");
                let value = line.rsplit(' ').next().unwrap();
                assert!(value.parse::<f64>().is_ok(), "{line}");
            }
        }
        assert!(
            t.contains(
                "topwaits_offcpu_seconds_total{comm=\"a\\\"b\\\\c\\\\x0ad\",what=\"not_labelled\",cgroup=\"\",container=\"\"} 1.5\n"
            ),
            "{t}"
        );
        assert!(t.contains(
            "topwaits_waits_total{comm=\"w\",what=\"not_labelled\",cgroup=\"\",container=\"\"} 3\n"
        ));
        assert!(t.contains("topwaits_lost_total{reason=\"user_stack_full\"} 4\n"));
        assert!(t.contains("topwaits_otlp_profiles_total{result=\"failed\"} 1\n"));
        assert!(
            t.contains("process_cpu_seconds_total 0.25\n")
                && t.contains("process_resident_memory_bytes 1048576\n")
        );
        assert!(
            !text(&metrics(), &Own::default()).contains("otlp"),
            "no OTLP family without an endpoint"
        );
    }
}
