//! A timeline of the longest waits: one row per thread, each wait a bar from its
//! wall-clock start to its end, labelled with its most telling frame, with the whole
//! stack in a tooltip. It answers "what was blocked at 14:03:12, and for how long".

use std::collections::BTreeMap;
use std::io::{self, Write};

use super::{by_longest, take, Format};
use crate::model::{comm_text, Frame, Record, Report};
use crate::util::clock::{hms_millis, WallNs};

const WIDTH: f64 = 1200.0;
const LABEL_W: f64 = 220.0;
const ROW_H: f64 = 22.0;
const TOP: f64 = 60.0;
const AXIS_H: f64 = 40.0;

/// One bar: a record's longest wait.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    pub row: usize,
    pub start: WallNs,
    pub end: WallNs,
    pub label: String,
    pub tooltip: String,
}

/// Scheduler frames that say nothing about why a thread waited.
fn is_scheduler(name: &str) -> bool {
    name.starts_with("__schedule")
        || name.starts_with("schedule")
        || name.starts_with("io_schedule")
        || name.starts_with("preempt_schedule")
        || name.starts_with("__cond_resched")
        || name.starts_with("finish_task_switch")
}

/// Libraries whose frames are wrappers rather than reasons.
fn is_runtime_lib(f: &Frame) -> bool {
    f.module.as_deref().is_some_and(|m| {
        m.starts_with("libc.so") || m.starts_with("libpthread") || m.starts_with("ld-linux")
    })
}

/// The most telling frame: a goroutine's site past the Go runtime's parking,
/// else the first user frame outside libc, else the first user frame, else the
/// first kernel frame past the scheduler.
pub fn telling_frame(r: &Record) -> String {
    let site = topwaits_common::golang::is_goroutine(r.tid)
        .then(|| crate::analysis::goprofile::site(r))
        .flatten();
    if let Some(site) = site {
        return site;
    }
    let user = r.user.frames();
    if let Some(f) =
        user.iter().find(|f| f.symbol.is_some() && !is_runtime_lib(f)).or_else(|| user.first())
    {
        return f.describe();
    }
    r.kernel
        .frames()
        .iter()
        .find(|f| !f.symbol.as_deref().is_some_and(is_scheduler))
        .map(|f| f.describe())
        .unwrap_or_else(|| "[no stack]".to_string())
}

/// Bars for the `limit` longest waits, and the row names (comm/tid) in row order.
pub fn layout(report: &Report, limit: usize) -> (Vec<Bar>, Vec<String>) {
    let recs = take(by_longest(&report.records), limit);
    let mut rows: BTreeMap<(Vec<u8>, u32), usize> = BTreeMap::new();
    // Rows ordered by the earliest longest-wait start of each thread.
    let mut order: Vec<(&Record, WallNs)> = recs
        .iter()
        .map(|r| (*r, report.info.clock.wall(r.max_end_mono) - r.max_ns as i128))
        .collect();
    order.sort_by_key(|(r, start)| (*start, r.tid));
    let mut names = Vec::new();
    for (r, _) in &order {
        rows.entry((r.comm.clone(), r.tid)).or_insert_with(|| {
            names.push(format!("{}/{}", comm_text(&r.comm), r.tid));
            names.len() - 1
        });
    }
    let off = report.info.utc_offset_s;
    let bars = order
        .iter()
        .map(|(r, start)| {
            let end = report.info.clock.wall(r.max_end_mono);
            let stack: Vec<String> =
                r.kernel.frames().iter().chain(r.user.frames()).map(|f| f.describe()).collect();
            Bar {
                row: rows[&(r.comm.clone(), r.tid)],
                start: *start,
                end,
                label: match r.open {
                    Some(_) => format!("{} (still waiting)", telling_frame(r)),
                    None => telling_frame(r),
                },
                tooltip: format!(
                    "{} pid {} tid {}: {:.3} ms, {} -> {} ({})\n{}",
                    comm_text(&r.comm),
                    r.tgid,
                    r.tid,
                    r.max_ns as f64 / 1e6,
                    hms_millis(*start, off),
                    hms_millis(end, off),
                    match r.open {
                        Some(_) => "still waiting at the end of the trace".to_string(),
                        None => format!("longest of {} waits", r.count),
                    },
                    stack.join("\n")
                ),
            }
        })
        .collect();
    (bars, names)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A "nice" tick step (1, 2 or 5 times a power of ten) giving about 8 ticks.
pub fn tick_step(span_ns: i128) -> i128 {
    let raw = (span_ns / 8).max(1);
    let mut p: i128 = 1;
    while p * 10 <= raw {
        p *= 10;
    }
    [1, 2, 5, 10].into_iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10 * p)
}

/// The timeline for a report: the `limit` longest waits.
pub struct Timeline {
    pub limit: usize,
}

impl Format for Timeline {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        let (bars, names) = layout(report, self.limit);
        let info = &report.info;
        let t0 = info
            .clock
            .wall(info.start_mono)
            .min(bars.iter().map(|b| b.start).min().unwrap_or(i128::MAX));
        let t1 = info
            .clock
            .wall(info.end_mono)
            .max(bars.iter().map(|b| b.end).max().unwrap_or(i128::MIN));
        let span = (t1 - t0).max(1);
        let plot_w = WIDTH - LABEL_W - 20.0;
        let x = |t: WallNs| LABEL_W + (t - t0) as f64 / span as f64 * plot_w;
        let height = TOP + names.len().max(1) as f64 * ROW_H + AXIS_H;
        writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#)?;
        writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="Verdana, sans-serif" font-size="12">"#
        )?;
        writeln!(out, r##"<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#f8f8fb"/>"##)?;
        writeln!(
            out,
            r#"<text x="{}" y="24" font-size="16" text-anchor="middle">{}</text>"#,
            WIDTH / 2.0,
            esc(&format!(
                "Longest waits of {} ({} of {} records), {} to {}",
                info.target,
                bars.len(),
                report.records.len(),
                hms_millis(t0, info.utc_offset_s),
                hms_millis(t1, info.utc_offset_s)
            ))
        )?;
        rows_and_axis(out, &names, (t0, t1), &x, info.utc_offset_s)?;
        bars_svg(out, &bars, names.len(), &x)?;
        writeln!(out, "</svg>")
    }
}

/// The rows (alternating bands with the thread's name) and the time axis
/// with "nice" ticks, from `t0` to `t1`.
fn rows_and_axis(
    out: &mut dyn Write,
    names: &[String],
    (t0, t1): (WallNs, WallNs),
    x: &dyn Fn(WallNs) -> f64,
    utc_offset_s: i32,
) -> io::Result<()> {
    let span = (t1 - t0).max(1);
    // Rows: alternating bands with the thread's name.
    for (i, name) in names.iter().enumerate() {
        let y = TOP + i as f64 * ROW_H;
        let fill = if i % 2 == 0 { "#ffffff" } else { "#eef0f5" };
        writeln!(
            out,
            r#"<rect class="row" x="0" y="{y}" width="{WIDTH}" height="{ROW_H}" fill="{fill}"/>"#
        )?;
        writeln!(out, r#"<text class="thread" x="6" y="{}">{}</text>"#, y + 15.0, esc(name))?;
    }
    // Time axis with "nice" ticks.
    let axis_y = TOP + names.len().max(1) as f64 * ROW_H;
    let step = tick_step(span);
    let mut t = (t0 / step + 1) * step;
    while t < t1 {
        let xt = x(t);
        writeln!(
            out,
            r##"<line x1="{xt:.1}" y1="{TOP}" x2="{xt:.1}" y2="{axis_y}" stroke="#c8c8d0" stroke-width="0.5"/>"##
        )?;
        writeln!(
            out,
            r#"<text class="tick" x="{xt:.1}" y="{}" text-anchor="middle" font-size="10">{}</text>"#,
            axis_y + 14.0,
            hms_millis(t, utc_offset_s)
        )?;
        t += step;
    }
    Ok(())
}

/// The bars, in start order; a label outside its bar is drawn only where it
/// does not run into the row's next bar or label.
fn bars_svg(
    out: &mut dyn Write,
    bars: &[Bar],
    rows: usize,
    x: &dyn Fn(WallNs) -> f64,
) -> io::Result<()> {
    // Bars, in start order; a label outside its bar is drawn only where it does
    // not run into the row's next bar or label.
    let mut free_x = vec![0.0f64; rows];
    let mut next_start = vec![f64::INFINITY; bars.len()];
    for (i, b) in bars.iter().enumerate() {
        next_start[i] =
            bars[i + 1..].iter().find(|n| n.row == b.row).map_or(f64::INFINITY, |n| x(n.start));
    }
    for (i, b) in bars.iter().enumerate() {
        let (x1, x2) = (x(b.start), x(b.end));
        let w = (x2 - x1).max(1.0);
        let y = TOP + b.row as f64 * ROW_H + 3.0;
        writeln!(out, r#"<g class="wait"><title>{}</title>"#, esc(&b.tooltip))?;
        writeln!(
            out,
            r#"<rect x="{x1:.2}" y="{y}" width="{w:.2}" height="{}" rx="2" fill="rgb(70,110,200)" data-start="{}" data-end="{}"/>"#,
            ROW_H - 6.0,
            b.start,
            b.end
        )?;
        // The label inside the bar when it fits, else just after it.
        let chars = (w / 7.0) as usize;
        if chars >= 6 {
            let text = truncate(&b.label, chars);
            writeln!(
                out,
                r#"<text x="{:.2}" y="{}" fill="white" font-size="11">{}</text>"#,
                x1 + 3.0,
                y + 12.0,
                esc(&text)
            )?;
        } else {
            let lx = (x2 + 3.0).max(free_x[b.row]);
            let room = ((next_start[i] - lx) / 6.5).clamp(0.0, 40.0) as usize;
            if room >= 4 {
                let text = truncate(&b.label, room);
                writeln!(
                    out,
                    r##"<text x="{lx:.2}" y="{}" fill="#333" font-size="11">{}</text>"##,
                    y + 12.0,
                    esc(&text)
                )?;
                free_x[b.row] = lx + text.chars().count() as f64 * 6.5 + 4.0;
            }
        }
        writeln!(out, "</g>")?;
    }
    Ok(())
}

fn truncate(s: &str, chars: usize) -> String {
    if s.chars().count() <= chars {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(chars.saturating_sub(2)).collect();
        t.push_str("..");
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::report;

    #[test]
    fn bars_sit_at_the_wall_clock_window_of_each_longest_wait() {
        let r = report();
        let (bars, names) = layout(&r, 0);
        assert_eq!(names, ["kworker/0:1/7", "sleeper/101"]);
        let sleeper = bars.iter().find(|b| names[b.row] == "sleeper/101").unwrap();
        // max_end mono 3.5 s == wall 1_700_000_002.5 s; 250 ms long.
        assert_eq!(sleeper.end, 1_700_000_002_500_000_000);
        assert_eq!(sleeper.start, 1_700_000_002_250_000_000);
        assert_eq!(sleeper.label, "clock_nanosleep");
        assert!(
            sleeper.tooltip.contains("250.000 ms, 22:13:22.250 -> 22:13:22.500"),
            "{}",
            sleeper.tooltip
        );
        assert!(sleeper.tooltip.contains("do_nanosleep\nclock_nanosleep\nwait_here"));
        let kw = bars.iter().find(|b| names[b.row] == "kworker/0:1/7").unwrap();
        assert_eq!(kw.label, "[no stack]");
    }

    #[test]
    fn svg_places_bars_proportionally_and_stays_readable_at_fifty_rows() {
        let mut r = report();
        let base = r.records[0].clone();
        r.records = (0..50)
            .map(|i| {
                let mut x = base.clone();
                x.tid = 1000 + i;
                x.max_ns = 10_000_000 * (i as u64 + 1);
                x.max_end_mono = 1_600_000_000 + 60_000_000 * i as u64;
                x
            })
            .collect();
        let mut out = Vec::new();
        Timeline { limit: 50 }.write(&r, &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        let doc = roxmltree::Document::parse(&svg).expect("well-formed");
        let rects: Vec<_> = doc
            .descendants()
            .filter(|n| n.has_tag_name("rect") && n.attribute("data-start").is_some())
            .collect();
        assert_eq!(rects.len(), 50);
        let threads = doc.descendants().filter(|n| n.attribute("class") == Some("thread")).count();
        assert_eq!(threads, 50, "one row per thread");
        // x is linear in time: compare two bars' offsets and widths with their times.
        let num = |n: &roxmltree::Node, a: &str| n.attribute(a).unwrap().parse::<f64>().unwrap();
        let by_start = |n: &roxmltree::Node| num(n, "data-start");
        let mut sorted = rects.clone();
        sorted.sort_by(|a, b| by_start(a).partial_cmp(&by_start(b)).unwrap());
        let (a, b) = (&sorted[0], &sorted[49]);
        let px_per_ns = (num(b, "x") - num(a, "x")) / (by_start(b) - by_start(a));
        let expect_w = (num(b, "data-end") - by_start(b)) * px_per_ns;
        assert!(
            (num(b, "width") - expect_w).abs() < 0.5,
            "width {} vs {expect_w}",
            num(b, "width")
        );
        let height: f64 = doc.root_element().attribute("height").unwrap().parse().unwrap();
        assert!(height >= 50.0 * 20.0, "rows at least 20 px high: {height}");
        assert!(
            doc.descendants().filter(|n| n.attribute("class") == Some("tick")).count() >= 3,
            "a labelled time axis"
        );
    }

    #[test]
    fn tick_steps_are_round() {
        assert_eq!(tick_step(8_000_000_000), 1_000_000_000);
        assert_eq!(tick_step(5_000_000_000), 1_000_000_000);
        assert_eq!(tick_step(1_200_000_000), 200_000_000);
        assert_eq!(tick_step(30_000_000), 5_000_000);
    }
}
