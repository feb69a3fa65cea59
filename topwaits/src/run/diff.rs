//! `topwaits diff BEFORE AFTER`: reads both traces (record files or --json
//! outputs), compares them (see [`crate::analysis::diff`]), prints the change and writes
//! its flame graph, then holds it against the gate's thresholds.

use std::io::{self, Read as _, Write};
use std::path::Path;

use anyhow::{anyhow, bail, Context as _, Result};
use serde_json::{json, Value};

use crate::analysis::diff::{self, Change, Diff, Side};
use crate::settings::{DiffConfig, DiffOutput};
use crate::util::error::GateCrossed;
use crate::util::outfile::OutputFile;

/// One trace as the diff compares it: its stacks, its waiting by label, and
/// `why`'s causes where it holds every wait and its waker (`record --why`).
struct Sides {
    stacks: Side,
    labels: Side,
    causes: Option<Side>,
}

impl Sides {
    fn of_json(doc: &Value, path: &Path) -> Result<Sides> {
        let named = |e: String| anyhow!("{}: {e}", path.display());
        Ok(Sides {
            stacks: Side::of_json(doc).map_err(named)?,
            labels: Side::of_json_by_label(doc).map_err(named)?,
            causes: None,
        })
    }
}

/// `why`'s causes of a recording, where it holds every wait and its waker.
fn causes(report: &crate::model::Report, path: &Path) -> Result<Option<Side>> {
    if !report.info.waker || report.events.is_empty() {
        return Ok(None);
    }
    let why = crate::report::why::Why {
        output: crate::settings::Output::Json { limit: 0 },
        for_tid: None,
        by: crate::settings::By::Comm,
    };
    let mut text = Vec::new();
    crate::report::Format::write(&why, report, &mut text)?;
    let doc: Value = serde_json::from_slice(&text)
        .with_context(|| format!("{}: why's causes", path.display()))?;
    Side::of_why_json(&doc).map(Some).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// One side, from a record file (gzip) or a --json output, read within
/// `max_mib` MiB.
fn side(path: &Path, max_mib: u64) -> Result<Sides> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut first = [0u8; 1];
    if file.read(&mut first).with_context(|| format!("cannot read {}", path.display()))? == 1
        && first[0] == 0x1f
    {
        let report = crate::model::recording::read(path, max_mib)?;
        let mut sides = Sides::of_json(&crate::report::json::document(&report, 0), path)?;
        sides.causes = causes(&report, path)?;
        return Ok(sides);
    }
    let max = max_mib.saturating_mul(1 << 20);
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > max {
        bail!("{}: {size} bytes, larger than the {max_mib} MiB a trace may take (raise it with --max-record-size)", path.display());
    }
    let mut text = Vec::new();
    std::fs::File::open(path)?
        .take(max + 1)
        .read_to_end(&mut text)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if text.len() as u64 > max {
        bail!(
            "{}: larger than the {max_mib} MiB a trace may take (raise it with --max-record-size)",
            path.display()
        );
    }
    let doc: Value = serde_json::from_slice(&text).map_err(|_| {
        anyhow!(
            "{}: neither a topwaits record file nor the --json output of a trace",
            path.display()
        )
    })?;
    Sides::of_json(&doc, path)
}

/// The comparisons beside the stacks': by label, and by cause where both
/// sides have causes.
struct Beside {
    labels: Diff,
    causes: Option<Diff>,
}

pub fn run(c: &DiffConfig) -> Result<()> {
    let svg = OutputFile::create_opt(c.svg.as_deref())?;
    let (before, after) = (side(&c.before, c.max_record_mib)?, side(&c.after, c.max_record_mib)?);
    let d = diff::compare(&before.stacks, &after.stacks, c.normalise);
    let beside = Beside {
        labels: diff::compare(&before.labels, &after.labels, c.normalise),
        causes: match (&before.causes, &after.causes) {
            (Some(b), Some(a)) => Some(diff::compare(b, a, c.normalise)),
            _ => None,
        },
    };
    super::write_quietly(|out| match c.output {
        DiffOutput::Top { limit } => {
            top(out, &d, c, limit)?;
            beside_text(out, &beside, limit)
        }
        DiffOutput::Json { limit } => {
            serde_json::to_writer(&mut *out, &document(&d, &beside, c, limit))
                .map_err(io::Error::other)?;
            writeln!(out)
        }
        DiffOutput::Folded => {
            for l in folded_lines(&d) {
                writeln!(out, "{l}")?;
            }
            Ok(())
        }
    })?;
    if let Some(svg) = svg {
        svg.write(|out| flame(out, &d, c))?;
    }
    let crossed = diff::check(&d, &c.gate);
    if crossed.is_empty() {
        return Ok(());
    }
    for x in &crossed {
        crate::util::stderr::say!("topwaits: diff: gate crossed: {}", x.what);
        for ch in &x.changes {
            crate::util::stderr::say!("    {:>10}  {}", diff::delta(ch.delta_ns()), title(ch));
        }
    }
    Err(GateCrossed(crossed.len()).into())
}

/// A change's stack in a line: whose, what kind of wait, and where.
fn title(c: &Change) -> String {
    let kind = if c.key.kind.is_empty() { String::new() } else { format!(" ({})", c.key.kind) };
    format!(
        "{}{kind}  {}",
        if c.key.comm.is_empty() { "[empty]" } else { &c.key.comm },
        diff::one_line(&c.key, 8)
    )
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

fn counts(d: &Diff) -> (usize, usize, usize) {
    let new = d.changes.iter().filter(|c| c.before.is_none()).count();
    let gone = d.changes.iter().filter(|c| c.after.is_none()).count();
    (d.changes.len() - new - gone, new, gone)
}

fn top(out: &mut dyn Write, d: &Diff, c: &DiffConfig, limit: usize) -> io::Result<()> {
    let pct = d.delta_pct().map_or(String::new(), |p| format!(", {p:+.1}%"));
    writeln!(
        out,
        "Waiting in {} against {}: {} against {} ({}{pct}), traces of {:.2} s and {:.2} s{}.",
        c.after.display(),
        c.before.display(),
        diff::secs(d.after_ns as i64),
        diff::secs(d.before_ns as i64),
        diff::delta(d.delta_ns()),
        d.after_s,
        d.before_s,
        if d.normalised { ", the before trace scaled to the after one's length" } else { "" }
    )?;
    let (both, new, gone) = counts(d);
    let shown = if limit == 0 { d.changes.len() } else { limit.min(d.changes.len()) };
    writeln!(
        out,
        "{both} stacks in both, {new} new, {gone} gone; the {shown} largest changes first."
    )?;
    writeln!(out)?;
    for (i, ch) in d.changes.iter().take(shown).enumerate() {
        let (b, a) = (ch.before.unwrap_or_default(), ch.after.unwrap_or_default());
        writeln!(
            out,
            "#{:<3} {:>10}  {:<7}  total {} -> {}   count {} -> {}   max {} -> {}",
            i + 1,
            diff::delta(ch.delta_ns()),
            ch.status(),
            diff::secs(b.total_ns as i64),
            diff::secs(a.total_ns as i64),
            b.count,
            a.count,
            ms(b.max_ns),
            ms(a.max_ns)
        )?;
        writeln!(out, "     {}", title(ch))?;
    }
    if shown < d.changes.len() {
        writeln!(
            out,
            "\n{}; use -n 0 to show all.",
            crate::util::text::plural(d.changes.len() - shown, "more change")
        )?;
    }
    Ok(())
}

/// How many rows of a comparison beside the stacks' the top view shows.
const BESIDE_ROWS: usize = 10;

/// The label and cause comparisons, after the stacks': the largest changes.
fn beside_text(out: &mut dyn Write, b: &Beside, limit: usize) -> io::Result<()> {
    let n = if limit == 0 { usize::MAX } else { limit.min(BESIDE_ROWS) };
    let section = |out: &mut dyn Write,
                   title: &str,
                   d: &Diff,
                   name: &dyn Fn(&Change) -> String|
     -> io::Result<()> {
        let changed: Vec<&Change> = d.changes.iter().filter(|ch| ch.delta_ns() != 0).collect();
        writeln!(out, "\n{title} ({} changed):", changed.len())?;
        for ch in changed.iter().take(n) {
            let (bt, at) =
                (ch.before.map_or(0, |s| s.total_ns), ch.after.map_or(0, |s| s.total_ns));
            writeln!(
                out,
                "  {:>10}  {:<7}  {} -> {}  {}",
                diff::delta(ch.delta_ns()),
                ch.status(),
                diff::secs(bt as i64),
                diff::secs(at as i64),
                name(ch)
            )?;
        }
        if changed.len() > n {
            writeln!(out, "  ... and {} more", changed.len() - n)?;
        }
        Ok(())
    };
    section(out, "By what they waited on", &b.labels, &|ch| ch.key.kind.clone())?;
    match &b.causes {
        Some(d) => section(out, "By why's causes", d, &|ch| format!("{} {}: {}", ch.key.comm, ch.key.kind, diff::one_line(&ch.key, 4)))?,
        None => writeln!(
            out,
            "\nNo causes compared: both traces must be recordings of every wait and its waker (`topwaits record --why -o FILE`)."
        )?,
    }
    Ok(())
}

fn rows(d: &Diff, limit: usize) -> Vec<Value> {
    d.changes
        .iter()
        .take(if limit == 0 { usize::MAX } else { limit })
        .map(|ch| {
            json!({
                "status": ch.status(),
                "comm": ch.key.comm,
                "kind": ch.key.kind,
                "user_stack": ch.key.user,
                "kernel_stack": ch.key.kernel,
                "delta_ns": ch.delta_ns(),
                "delta_count": ch.after.map_or(0, |s| s.count as i64) - ch.before.map_or(0, |s| s.count as i64),
                "delta_max_ns": ch.after.map_or(0, |s| s.max_ns as i64) - ch.before.map_or(0, |s| s.max_ns as i64),
                "before": stat(ch.before),
                "after": stat(ch.after),
            })
        })
        .collect()
}

fn stat(s: Option<diff::Stat>) -> Value {
    s.map_or(Value::Null, |s| json!({"total_ns": s.total_ns, "count": s.count, "max_ns": s.max_ns}))
}

fn document(d: &Diff, b: &Beside, c: &DiffConfig, limit: usize) -> Value {
    let (both, new, gone) = counts(d);
    let label_rows: Vec<Value> = b
        .labels
        .changes
        .iter()
        .take(if limit == 0 { usize::MAX } else { limit })
        .map(|ch| {
            json!({
                "status": ch.status(),
                "label": ch.key.kind,
                "delta_ns": ch.delta_ns(),
                "delta_count": ch.after.map_or(0, |s| s.count as i64) - ch.before.map_or(0, |s| s.count as i64),
                "before": stat(ch.before),
                "after": stat(ch.after),
            })
        })
        .collect();
    let crossed: Vec<Value> = diff::check(d, &c.gate)
        .iter()
        .map(|x| json!({"what": x.what, "stacks": x.changes.len()}))
        .collect();
    json!({
        "before": {"file": c.before.display().to_string(), "duration_s": d.before_s, "total_ns": d.before_ns},
        "after": {"file": c.after.display().to_string(), "duration_s": d.after_s, "total_ns": d.after_ns},
        "normalised": d.normalised,
        "delta_ns": d.delta_ns(),
        "delta_pct": d.delta_pct(),
        "stacks": {"both": both, "new": new, "gone": gone},
        "rows_total": d.changes.len(),
        "rows": rows(d, limit),
        "labels": label_rows,
        "causes": b.causes.as_ref().map(|cd| rows(cd, limit)),
        "gate_crossed": crossed,
    })
}

/// Folded lines with the before and after values (µs), the input of a
/// differential flame graph.
fn folded_lines(d: &Diff) -> Vec<String> {
    let mut merged: std::collections::BTreeMap<String, (u64, u64)> =
        std::collections::BTreeMap::new();
    for ch in &d.changes {
        let slot = merged.entry(diff::folded(&ch.key)).or_default();
        slot.0 += ch.before.map_or(0, |s| s.total_ns / 1000);
        slot.1 += ch.after.map_or(0, |s| s.total_ns / 1000);
    }
    merged.into_iter().map(|(l, (b, a))| format!("{l} {b} {a}")).collect()
}

fn flame(out: &mut dyn Write, d: &Diff, c: &DiffConfig) -> io::Result<()> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = format!("Waiting in {} against {}", c.after.display(), c.before.display());
    opts.subtitle = Some(format!(
        "widths: the after trace; red: waits more than before, blue: less ({}{})",
        diff::delta(d.delta_ns()),
        d.delta_pct().map_or(String::new(), |p| format!(", {p:+.1}%"))
    ));
    opts.count_name = "us".into();
    opts.deterministic = true;
    crate::report::svg::draw(&mut opts, &folded_lines(d), "[no waits in either trace]", out)
}
