//! Interactive flame graphs drawn by inferno: off-CPU in the io (blue) palette, and
//! off-wake with a grey divider, the waker's stacks in aqua on top and each further
//! `--chain` hop in its own colour family. With `--on-cpu`, the sampled running
//! stacks beside them in warm colours, and a legend in the subtitle.

use std::io::{self, Write};

use inferno::flamegraph::{
    self,
    color::{BasicPalette, Color, PaletteMap},
    Palette,
};

use super::folded::line_frames;
use super::Format;
use crate::model::Report;
use crate::settings::ValueKind;

/// Annotation suffixes for the frames of hop 1..=4 (inferno strips them from labels).
const HOP_SUFFIX: [&str; 4] = ["_[w]", "_[i]", "_[j]", "_[k]"];

/// The divider frame between the target and each hop.
pub const DIVIDER: &str = "--";

/// Divider colour.
pub const GREY: Color = Color { r: 160, g: 160, b: 160 };

/// Appended to the frames of on-CPU stacks: it draws nothing, but keeps their
/// colours (warm) apart from the same functions' off-CPU frames (blue).
const ON_CPU_MARK: &str = "\u{200b}";

/// The warm colour of an on-CPU frame.
fn warm(name: &str) -> Color {
    let v = shade(name);
    Color { r: 205 + (50.0 * v) as u8, g: (230.0 * v) as u8, b: (55.0 * v) as u8 }
}

/// A small deterministic hash of a frame name, for shade variation.
fn shade(name: &str) -> f64 {
    let mut h: u32 = 2166136261;
    for b in name.bytes() {
        h = (h ^ b as u32).wrapping_mul(16777619);
    }
    (h % 1000) as f64 / 1000.0
}

/// The colour of a frame of hop `hop` (1-based): aqua for the waker, then orange,
/// purple and yellow for further hops.
pub fn hop_color(hop: usize, name: &str) -> Color {
    let v = shade(name);
    let c = |r: f64, g: f64, b: f64| Color { r: r as u8, g: g as u8, b: b as u8 };
    match hop {
        1 => c(50.0 + 60.0 * v, 165.0 + 55.0 * v, 165.0 + 55.0 * v),
        2 => c(225.0 + 30.0 * v, 130.0 + 60.0 * v, 30.0 + 40.0 * v),
        3 => c(170.0 + 50.0 * v, 90.0 + 40.0 * v, 210.0 + 40.0 * v),
        _ => c(200.0 + 50.0 * v, 200.0 + 50.0 * v, 40.0 + 50.0 * v),
    }
}

/// One flame-graph picture of a report.
pub struct FlameSvg {
    pub value: ValueKind,
    /// `--what`: what each wait was for as the root frame.
    pub what: bool,
    /// Each record's cgroup as the root frame (see [`super::folded::cgroup_on`]).
    pub cgroup: Option<bool>,
}

impl FlameSvg {
    /// The title: what was traced, for how long, with which filters.
    fn title(&self, report: &Report) -> String {
        let kind = match (report.info.waker, report.info.on_cpu_hz.is_some()) {
            (true, true) => "Off-wake and on-CPU time",
            (true, false) => "Off-wake time",
            (false, true) => "Off-CPU and on-CPU time",
            (false, false) => "Off-CPU time",
        };
        let width = match self.value {
            ValueKind::Total => "",
            ValueKind::Max => ", widths by longest wait",
            ValueKind::Count => ", widths by number of waits",
        };
        format!("{kind} of {} for {:.1} s{width}", report.info.target, report.info.duration_s())
    }

    /// Folded lines with each hop's frames annotated, and the colours of those frames.
    fn lines(&self, report: &Report) -> (Vec<String>, PaletteMap) {
        let mut map = PaletteMap::default();
        map.insert(DIVIDER, GREY);
        let mut lines = Vec::new();
        let cgroup = super::folded::cgroup_on(self.cgroup, report);
        for r in &report.records {
            if r.on_cpu() {
                let frames: Vec<String> = line_frames(r, false, self.what, cgroup)
                    .into_iter()
                    .map(|f| {
                        let name = format!("{f}{ON_CPU_MARK}");
                        map.insert(&name, warm(&f));
                        name
                    })
                    .collect();
                let v = super::folded::value(r, self.value);
                if v > 0 {
                    lines.push(format!("{} {v}", frames.join(";")));
                }
                continue;
            }
            let mut hop = 0usize;
            let frames: Vec<String> = line_frames(r, false, self.what, cgroup)
                .into_iter()
                .enumerate()
                .map(|(i, f)| {
                    // The first frame is the comm, whatever it is called.
                    if i > 0 && f == DIVIDER {
                        hop += 1;
                        return f;
                    }
                    if hop == 0 {
                        return f;
                    }
                    let name = format!("{f}{}", HOP_SUFFIX[(hop - 1).min(3)]);
                    map.insert(&name, hop_color(hop, &f));
                    name
                })
                .collect();
            let v = super::folded::value(r, self.value);
            if v > 0 {
                lines.push(format!("{} {v}", frames.join(";")));
            }
        }
        (lines, map)
    }
}

impl Format for FlameSvg {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        let (lines, mut map) = self.lines(report);
        let mut opts = flamegraph::Options::default();
        opts.title = self.title(report);
        let mut subtitle = format!(
            "{}; attach {}",
            crate::util::text::plural(report.records.len(), "record"),
            report.info.attach.name()
        );
        if let Some(hz) = report.info.on_cpu_hz {
            let wakers = if report.info.waker { ", aqua: wakers" } else { "" };
            subtitle.push_str(&format!(
                " | blue: off-CPU waits{wakers}, red to yellow: running (sampled at {hz} Hz)"
            ));
        }
        opts.subtitle = Some(subtitle);
        opts.colors = Palette::Basic(BasicPalette::Io);
        opts.count_name = match self.value {
            ValueKind::Count => "waits".into(),
            _ => "us".into(),
        };
        opts.deterministic = true;
        opts.palette_map = Some(&mut map);
        draw(&mut opts, &lines, "[no waits recorded]", out)
    }
}

/// Draws folded `lines` with `opts`; with no lines, one frame named `empty`
/// (inferno refuses empty input).
pub fn draw(
    opts: &mut flamegraph::Options,
    lines: &[String],
    empty: &str,
    out: &mut dyn Write,
) -> io::Result<()> {
    let placeholder = [format!("{empty} 1")];
    let lines = if lines.is_empty() { &placeholder[..] } else { lines };
    flamegraph::from_lines(opts, lines.iter().map(String::as_str), out)
        .map_err(|e| io::Error::other(e.to_string()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::report::fixtures::{offwake_report, report};

    /// (label, fill) of every frame rectangle.
    pub(crate) fn frames(svg: &str) -> Vec<(String, (u8, u8, u8))> {
        let opts = roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() };
        let doc = roxmltree::Document::parse_with_options(svg, opts).expect("well-formed XML");
        let mut out = Vec::new();
        for g in doc.descendants().filter(|n| n.has_tag_name("g")) {
            let title = g
                .children()
                .find(|c| c.has_tag_name("title"))
                .and_then(|t| t.text())
                .map(String::from);
            let fill = g
                .children()
                .find(|c| c.has_tag_name("rect"))
                .and_then(|r| r.attribute("fill"))
                .map(String::from);
            if let (Some(t), Some(f)) = (title, fill) {
                let nums: Vec<u8> = f
                    .trim_start_matches("rgb(")
                    .trim_end_matches(')')
                    .split(',')
                    .filter_map(|x| x.trim().parse().ok())
                    .collect();
                if nums.len() == 3 {
                    out.push((t, (nums[0], nums[1], nums[2])));
                }
            }
        }
        out
    }

    fn render(r: &Report, value: ValueKind) -> String {
        let mut out = Vec::new();
        FlameSvg { value, what: false, cgroup: None }.write(r, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn blue((r, g, b): (u8, u8, u8)) -> bool {
        b > r && b > g
    }

    fn aqua((r, g, b): (u8, u8, u8)) -> bool {
        let (r, g, b) = (r as u16, g as u16, b as u16);
        g > r + 40 && b > r + 40
    }

    #[test]
    fn on_cpu_frames_are_warm_beside_the_same_functions_blue_off_cpu_frames() {
        let svg = render(&crate::report::fixtures::on_cpu_report(), ValueKind::Total);
        assert!(svg.contains("Off-CPU and on-CPU time of all threads"), "titled");
        assert!(svg.contains("red to yellow: running (sampled at 100 Hz)"), "a legend");
        let f = frames(&svg);
        let compute: Vec<_> =
            f.iter().filter(|(t, _)| t.starts_with("compute")).map(|(_, c)| *c).collect();
        assert!(
            !compute.is_empty() && compute.iter().all(|&(r, g, b)| r > 200 && r > g && r > b),
            "on-CPU frames warm: {compute:?}"
        );
        let mains: Vec<_> =
            f.iter().filter(|(t, _)| t.starts_with("main")).map(|(_, c)| *c).collect();
        assert_eq!(mains.len(), 2, "main on and off the CPU: {mains:?}");
        assert_eq!(mains.iter().filter(|c| blue(**c)).count(), 1, "one blue main: {mains:?}");
    }

    #[test]
    fn off_cpu_graph_is_well_formed_blue_and_titled() {
        let svg = render(&report(), ValueKind::Total);
        let f = frames(&svg);
        let names: Vec<&str> = f.iter().map(|(t, _)| t.as_str()).collect();
        assert!(names.iter().any(|t| t.starts_with("wait_here")), "{names:?}");
        assert!(names.iter().any(|t| t.starts_with("do_nanosleep")), "{names:?}");
        for (t, c) in &f {
            if t.starts_with("all ") {
                continue;
            }
            assert!(blue(*c), "{t} is {c:?}, not blue");
        }
        assert!(svg.contains("Off-CPU time of all threads for 5.0 s"), "title");
        assert!(svg.contains("search"), "interactive: the search control is there");
    }

    #[test]
    fn off_wake_graph_has_a_grey_divider_and_aqua_wakers_and_a_distinct_second_hop() {
        let svg = render(&offwake_report(), ValueKind::Total);
        let f = frames(&svg);
        let find = |p: &str| {
            f.iter().filter(|(t, _)| t.starts_with(p)).map(|(_, c)| *c).collect::<Vec<_>>()
        };
        assert!(
            find("--").iter().all(|c| *c == (160, 160, 160)) && !find("--").is_empty(),
            "grey divider"
        );
        assert!(find("do_nanosleep").iter().all(|c| blue(*c)), "target frames stay blue");
        let waker = find("pipe_write");
        assert!(
            !waker.is_empty() && waker.iter().all(|c| aqua(*c)),
            "waker frames aqua: {waker:?}"
        );
        assert!(find("writer").iter().all(|c| aqua(*c)), "the waker's comm tops its stack in aqua");
        let hop2 = find("hrtimer_wakeup");
        assert!(
            !hop2.is_empty() && hop2.iter().all(|c| !aqua(*c) && !blue(*c)),
            "second hop differs: {hop2:?}"
        );
        assert!(svg.contains("Off-wake time of"));
    }

    #[test]
    fn value_max_and_count_are_named_in_the_title() {
        assert!(render(&report(), ValueKind::Max).contains("widths by longest wait"));
        let svg = render(&report(), ValueKind::Count);
        assert!(svg.contains("widths by number of waits"));
        assert!(svg.contains("waits"));
    }

    #[test]
    fn an_empty_report_still_draws() {
        let mut r = report();
        r.records.clear();
        let svg = render(&r, ValueKind::Total);
        assert!(frames(&svg).iter().any(|(t, _)| t.starts_with("[no waits recorded]")));
    }
}
