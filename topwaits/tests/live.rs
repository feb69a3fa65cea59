//! Kernel tests of the pictures and the live view: flame graphs and a timeline from
//! a real trace (rendered in headless Chromium), interval reports, the status line.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

// Each phase keeps its own frame in a release build: the call is no tail call and
// the bodies differ, so neither tail calls nor identical-code folding merge them.
#[inline(never)]
fn tw_phase_one(n: usize) {
    tw_known_short_sleeps(n, Duration::from_millis(50));
    std::hint::black_box(1u8);
}

#[inline(never)]
fn tw_phase_two(n: usize) {
    tw_known_short_sleeps(n, Duration::from_millis(50));
    std::hint::black_box(2u8);
}

#[inline(never)]
fn tw_phase_three(n: usize) {
    tw_known_short_sleeps(n, Duration::from_millis(50));
    std::hint::black_box(3u8);
}

fn count_in(doc: &Value, func: &str) -> u64 {
    records_in(doc, func).iter().map(|r| r["count"].as_u64().unwrap()).sum()
}

#[test]
fn intervals_print_one_json_document_each_with_its_own_waits() {
    require_bpf!();
    let w = Workload::spawn("tw-phases", || {
        tw_phase_one(18);
        tw_phase_two(18);
        tw_phase_three(18);
    });
    let tid = w.tid.to_string();
    let tracer = Tracer::start(&["-i", "1", "--json", "-t", &tid, "3"]);
    w.go();
    w.join();
    let out = tracer.finish();
    assert!(out.status.success(), "{}", out.stderr);
    let docs: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON document per line"))
        .collect();
    assert_eq!(docs.len(), 3, "{}", out.stdout);
    let phases = ["tw_phase_one", "tw_phase_two", "tw_phase_three"];
    for (i, doc) in docs.iter().enumerate() {
        // Each interval holds mostly its own phase (phases drift a little against
        // the interval grid), and never a phase two steps away: the kernel
        // aggregate was cleared in between.
        assert!(count_in(doc, phases[i]) >= 8, "interval {i}: {doc:#}");
        for (j, p) in phases.iter().enumerate() {
            if i.abs_diff(j) >= 2 {
                assert_eq!(count_in(doc, p), 0, "interval {i} holds {p}");
            }
        }
        assert!(doc["duration_s"].as_f64().unwrap() < 1.5);
    }
    let ends: Vec<i128> =
        docs.iter().map(|d| parse_rfc3339(d["ended_at"].as_str().unwrap())).collect();
    assert!(ends.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(docs[1]["started_at"], docs[0]["ended_at"], "intervals are contiguous");
}

#[test]
fn intervals_frame_top_and_folded_output() {
    require_bpf!();
    let out = run(&["-i", "0.5", "-n", "1", "1"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.matches("=== interval ending ").count(), 2, "{}", out.stdout);
    let out = run(&["-i", "0.5", "-f", "1"]);
    let blocks: Vec<&str> = out.stdout.split("\n\n").filter(|b| !b.trim().is_empty()).collect();
    assert_eq!(blocks.len(), 2, "a blank line between intervals: {}", out.stdout);
}

fn png_ink(path: &std::path::Path) -> f64 {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let px = &buf[..info.buffer_size()];
    let pixels = px.len() / channels;
    let inked = px.chunks(channels).filter(|p| p[..3].iter().any(|&c| c < 200)).count();
    inked as f64 / pixels as f64
}

/// The height the root `<svg>` element declares, in pixels.
fn svg_height(svg: &std::path::Path) -> Option<u32> {
    let text = std::fs::read_to_string(svg).ok()?;
    let root = &text[text.find("<svg")?..];
    let root = &root[..root.find('>')?];
    let h = &root[root.find(" height=\"")? + 9..];
    h[..h.find('"')?].parse::<f64>().ok().map(|v| v.ceil() as u32)
}

/// Takes a screenshot of the whole picture: a flame graph grows up from its bottom,
/// and deep stacks make it taller than a default window.
fn screenshot(svg: &std::path::Path, png: &std::path::Path) {
    let height = svg_height(svg).unwrap_or(900).clamp(200, 8000);
    let profile =
        std::env::temp_dir().join(format!("tw-chromium-{}-{}", std::process::id(), now_wall_ns()));
    let status = std::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--window-size=1200,{height}"))
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", svg.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("chromium is needed (cargo xtask setup installs it)");
    assert!(status.success());
    let _ = std::fs::remove_dir_all(profile);
}

#[test]
fn flame_graphs_and_timeline_render_in_headless_chromium() {
    require_bpf!();
    let dir = std::env::temp_dir().join(format!("tw-svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (offcpu, offwake, timeline) =
        (dir.join("offcpu.svg"), dir.join("offwake.svg"), dir.join("timeline.svg"));
    let w = Workload::spawn("tw-svg", || tw_known_short_sleeps(10, Duration::from_millis(30)));
    let tid = w.tid.to_string();
    let a = Tracer::start(&[
        "--json",
        "--svg",
        offcpu.to_str().unwrap(),
        "--timeline",
        timeline.to_str().unwrap(),
        "1.5",
    ]);
    let b = Tracer::start(&["-f", "-w", "--svg", offwake.to_str().unwrap(), "-t", &tid, "1.5"]);
    w.go();
    w.join();
    // --svg combines with the other outputs.
    let doc = json(&a.finish());
    assert!(doc["records"].as_array().is_some_and(|r| !r.is_empty()));
    let folded = b.finish();
    assert!(folded.stdout.contains("tw_known_short_sleeps"), "{}", folded.stdout);
    let wake_svg = std::fs::read_to_string(&offwake).unwrap();
    assert!(wake_svg.contains("Off-wake time of TID"), "title names what was traced");
    assert!(wake_svg.contains("tw_known_short_sleeps") && wake_svg.contains("--"));
    for svg in [&offcpu, &offwake, &timeline] {
        let png = svg.with_extension("png");
        screenshot(svg, &png);
        let ink = png_ink(&png);
        assert!(ink > 0.02, "{} rendered blank ({:.1}% inked)", svg.display(), ink * 100.0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn status_line_only_on_a_terminal() {
    require_bpf!();
    let piped = run(&["-f", "1.5"]);
    assert!(
        !piped.stderr.contains("waits recorded") && !piped.stderr.contains('\r'),
        "{}",
        piped.stderr
    );
    // `script` gives the command a terminal.
    let cmd = format!(
        "{} -f 2.5 > /dev/null",
        with_attach(&[]).iter().map(|s| format!("{s} ")).collect::<String>()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &format!("{BIN} {cmd}"), "/dev/null"])
        .output()
        .expect("script (util-linux) is needed");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("waits recorded") && text.contains("s left"), "{text}");
    assert!(text.contains('\r'), "updated in place");
}
