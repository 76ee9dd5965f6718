//! Rendering reports: Markdown snapshots of deterministic scan and replay reports, JSON round
//! trips, hostile text staying text in Markdown and HTML, planted secrets never reaching any
//! format, and the HTML opened in headless Chromium (screenshot not blank, charts in the DOM).

use crate::common;

use common::poll::eventually;
use common::reports::{hostile_reports, replay_report, scan_report, REPLAY_CHARTS};
use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use vramdoc::model::Report;
use vramdoc::report::read::parse_report;
use vramdoc::report::write::{render, Format};
use vramdoc::report::{html, json, markdown};

fn md(r: &Report) -> String {
    String::from_utf8(render(r, Format::Markdown).unwrap()).unwrap()
}

fn html_of(r: &Report) -> String {
    String::from_utf8(render(r, Format::Html).unwrap()).unwrap()
}

#[test]
fn markdown_of_scan_report() {
    insta::assert_snapshot!("scan_markdown", md(&scan_report()));
}

#[test]
fn markdown_of_replay_report() {
    insta::assert_snapshot!("replay_markdown", md(&replay_report()));
}

#[test]
fn render_dispatches_to_the_renderers() {
    let r = replay_report();
    assert_eq!(md(&r), markdown::render(&r));
    assert_eq!(html_of(&r), html::render(&r).unwrap());
    assert_eq!(render(&r, Format::Json).unwrap(), json::render(&r));
}

#[test]
fn json_round_trip_gives_the_same_report_and_markdown() {
    for (name, r) in [("scan", scan_report()), ("replay", replay_report())] {
        let text = String::from_utf8(json::render(&r)).unwrap();
        let back = parse_report(&text, Path::new("fixture.json"))
            .unwrap_or_else(|e| panic!("{name} report: {e}"));
        assert_eq!(back, r, "{name} report");
        assert_eq!(md(&back), md(&r), "{name} report: Markdown");
        assert_eq!(html_of(&back), html_of(&r), "{name} report: HTML");
        assert_eq!(json::render(&back), json::render(&r), "{name} report: JSON");
    }
}

#[test]
fn sparklines_follow_the_timeline() {
    let text = md(&replay_report());
    // The OOM run climbs to 96.6% of the card then drops to zero after the OOM.
    let bug = text.split("#### `multi-size-oom` / `bug`").nth(1).unwrap();
    let line = bug.lines().find(|l| l.starts_with("  │")).unwrap();
    let cells: Vec<char> = line.trim().trim_matches('│').chars().collect();
    assert_eq!(cells.len(), markdown::SPARK_CELLS);
    assert!(cells.contains(&'█'), "{line}");
    assert_eq!(
        *cells.last().unwrap(),
        '▁',
        "memory returns after the OOM: {line}"
    );
    let first_full = cells.iter().position(|&c| c == '█').unwrap();
    assert!(first_full > 45, "the peak is at the end: {line}");
    // Its marker row has the OOM `X` at the cell of 1180 ms of 1300 ms.
    let markers = bug
        .lines()
        .skip_while(|l| !l.starts_with("  │"))
        .nth(1)
        .unwrap();
    assert_eq!(
        markers.find('X'),
        Some(3 + (1180.0_f64 / 1300.0 * 60.0) as usize)
    );
    assert!(
        bug.contains("X    1.18 s  oom: render 1360x1536 (GPU 0)"),
        "{bug}"
    );
    // The stray context (448 MiB of 24 GiB) is visible: the scale runs from min to max.
    let stray = text.split("#### `stray-cuda0` / `bug`").nth(1).unwrap();
    let gpu0 = stray
        .lines()
        .skip_while(|l| !l.starts_with("GPU 0"))
        .nth(1)
        .unwrap();
    assert!(gpu0.starts_with("  │▁") && gpu0.contains('█'), "{gpu0}");
}

/// Markdown structure as a CommonMark+GFM parser sees it.
struct MdShape {
    raw_html: Vec<String>,
    links: usize,
    table_rows: Vec<usize>,
    table_heads: Vec<usize>,
}

fn md_shape(text: &str) -> MdShape {
    let mut shape = MdShape {
        raw_html: vec![],
        links: 0,
        table_rows: vec![],
        table_heads: vec![],
    };
    let mut cells = 0;
    for ev in Parser::new_ext(text, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH) {
        match ev {
            Event::Html(h) | Event::InlineHtml(h) => shape.raw_html.push(h.to_string()),
            Event::Start(Tag::Link { .. }) | Event::Start(Tag::Image { .. }) => shape.links += 1,
            Event::Start(Tag::TableHead) | Event::Start(Tag::TableRow) => cells = 0,
            Event::Start(Tag::TableCell) => cells += 1,
            Event::End(TagEnd::TableHead) => shape.table_heads.push(cells),
            Event::End(TagEnd::TableRow) => shape.table_rows.push(cells),
            _ => {}
        }
    }
    shape
}

#[test]
fn hostile_text_stays_text_in_markdown() {
    for ((name, clean), hostile) in [("scan", scan_report()), ("replay", replay_report())]
        .into_iter()
        .zip(hostile_reports())
    {
        let text = md(&hostile);
        let shape = md_shape(&text);
        // The only raw HTML is our own footer, and no link or image appeared.
        assert!(
            shape.raw_html.iter().all(|h| h == "<sub>" || h == "</sub>"),
            "hostile {name} report: raw HTML leaked: {:?}",
            shape.raw_html
        );
        assert_eq!(shape.links, 0, "hostile {name} report: {text}");
        // Pipes in the data did not split table cells: same shape as the clean report.
        let clean_shape = md_shape(&md(&clean));
        assert_eq!(
            shape.table_rows, clean_shape.table_rows,
            "hostile {name} report: {text}"
        );
        assert_eq!(
            shape.table_heads, clean_shape.table_heads,
            "hostile {name} report"
        );
        assert!(
            text.contains("alert(1)"),
            "hostile {name} report: the text itself is still shown"
        );
    }
}

#[test]
fn hostile_text_stays_text_in_html() {
    for (i, r) in hostile_reports().iter().enumerate() {
        let page = html_of(r);
        let lower = page.to_ascii_lowercase();
        for tag in ["<script", "<img", "<iframe", "javascript:alert(3)\""] {
            assert!(!lower.contains(tag), "hostile report {i}: {tag} in HTML");
        }
        assert!(
            page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "hostile report {i}"
        );
        assert!(!page.contains("href=\"javascript"), "hostile report {i}");
    }
}

#[test]
fn html_is_self_contained() {
    for (name, r) in [("scan", scan_report()), ("replay", replay_report())] {
        let page = html_of(&r);
        let lower = page.to_ascii_lowercase();
        for bad in ["<link", "<script", " src=", "@import", "url("] {
            assert!(!lower.contains(bad), "{name} report: {bad} in HTML");
        }
        // The only absolute URL is the SVG namespace name, which is never fetched.
        let urls = lower.matches("http://").count() + lower.matches("https://").count();
        let ns = lower
            .matches("xmlns=\"http://www.w3.org/2000/svg\"")
            .count();
        assert_eq!(urls, ns, "{name} report: network URL in HTML");
        assert!(page.contains("Content-Security-Policy"), "{name} report");
    }
    let page = html_of(&replay_report());
    assert_eq!(page.matches("<svg").count(), REPLAY_CHARTS);
}

#[test]
fn planted_secrets_never_reach_any_format() {
    let planted = ["hunter2-planted", "hf_plantedsecret0001", "s3cr3t-pw"];
    // Through the function every producer uses for Report::command.
    let mut r = scan_report();
    r.command = vramdoc::model::command_line_from([
        "/opt/bin/vramdoc",
        "scan",
        "--token=hunter2-planted",
        "HF_TOKEN=hf_plantedsecret0001",
        "--password",
        "s3cr3t-pw",
    ]);
    // And a report whose producer forgot to redact (hand-edited JSON): renderers redact again.
    let mut raw = replay_report();
    raw.command = [
        "vramdoc",
        "replay",
        "--api-key",
        "s3cr3t-pw",
        "--token=hunter2-planted",
    ]
    .map(String::from)
    .to_vec();
    let p = &mut r.scan_mut().unwrap().processes[1];
    p.cmdline = Some("python serve.py --hf-token hf_plantedsecret0001 --model qwen".into());
    for (name, report) in [("redacted by its producer", r), ("not redacted", raw)] {
        for format in [Format::Json, Format::Markdown, Format::Html] {
            let out = String::from_utf8(render(&report, format).unwrap()).unwrap();
            for s in planted {
                assert!(!out.contains(s), "{name}: {s} leaked into {format:?}");
            }
            assert!(
                out.contains("redacted"),
                "{name}: {format:?} shows that something was redacted"
            );
        }
    }
}

// ---- headless Chromium ----

/// Chromium's executable (Debian names it `chromium`, others `chromium-browser`).
fn chromium() -> Result<PathBuf, String> {
    common::skip::tool("chromium", "chromium")
        .or_else(|e| common::skip::tool("chromium-browser", "chromium").map_err(|_| e))
        .map_err(|e| format!("{e}: this test opens the HTML report in headless Chromium"))
}

/// Run headless Chromium `exe` with `extra` args on `page`; returns stdout. Fails after 120 s.
fn run_chromium(exe: &Path, page: &Path, extra: &[String]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut child = common::KillOnDrop(
        Command::new(exe)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--window-size=1280,1600",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(format!("file://{}", page.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start chromium"),
    );
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(out).unwrap_or_default());
    let err_reader = std::thread::spawn(move || std::io::read_to_string(err).unwrap_or_default());
    let status = eventually(
        Duration::from_secs(120),
        "headless Chromium to finish",
        || child.try_wait().unwrap(),
    );
    let stdout = reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    assert!(status.success(), "chromium failed ({status}): {stderr}");
    stdout
}

#[test]
fn html_renders_in_headless_chromium() {
    let chromium = common::skip::require!("chromium", chromium());
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("replay.html");
    vramdoc::report::write::write_report(&replay_report(), &page, false).unwrap();

    // The DOM Chromium built: one <svg> per device chart with the series, total line, OOM
    // point and marker labels; no script or image elements.
    let dom = run_chromium(&chromium, &page, &["--dump-dom".into()]);
    assert!(dom.contains("<main>"), "no page in DOM: {dom:.300}");
    let figures: Vec<&str> = dom.split("<figure class=\"chart\"").skip(1).collect();
    assert_eq!(figures.len(), REPLAY_CHARTS);
    for f in &figures {
        let svg = &f[..f.find("</figure>").unwrap()];
        assert_eq!(svg.matches("<svg").count(), 1);
        assert!(
            svg.contains("<polyline") || svg.contains("<path"),
            "no series: {svg:.400}"
        );
        assert!(svg.contains("<polygon"), "no filled area");
        assert!(svg.contains("device total 24.00 GiB"));
        assert!(svg.contains("<text"));
    }
    let oom_chart = figures[0];
    assert!(oom_chart.contains("<circle"), "OOM point not marked");
    assert!(oom_chart.contains("OOM: render 1360x1536"));
    for label in [
        "2 render 1024x1024",
        "3 render 1024x1152",
        "4 render 1360x1536",
    ] {
        assert!(oom_chart.contains(label), "marker label {label} missing");
    }
    assert!(figures[3].contains("2 load model on cuda:1"));
    let lower = dom.to_ascii_lowercase();
    assert!(!lower.contains("<script") && !lower.contains("<img"));

    // The screenshot: not blank, many colours, the chart's blue series drawn.
    let png_path = dir.path().join("shot.png");
    run_chromium(
        &chromium,
        &page,
        &[format!("--screenshot={}", png_path.display())],
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&png_path).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let channels = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => panic!("unexpected PNG colour type {other:?}"),
    };
    assert!(
        info.width >= 1200,
        "screenshot {}x{}",
        info.width,
        info.height
    );
    let mut colours = std::collections::HashSet::new();
    let (mut non_white, mut blue, mut total) = (0usize, 0usize, 0usize);
    for px in buf[..info.buffer_size()].chunks_exact(channels) {
        let (r, g, b) = (px[0], px[1], px[2]);
        total += 1;
        colours.insert((r, g, b));
        if (r, g, b) != (255, 255, 255) {
            non_white += 1;
        }
        // The series line colour rgb(31, 102, 181), allowing for anti-aliasing.
        if r.abs_diff(31) < 40 && g.abs_diff(102) < 40 && b.abs_diff(181) < 40 {
            blue += 1;
        }
    }
    assert!(
        colours.len() >= 64,
        "only {} colours: blank page?",
        colours.len()
    );
    assert!(
        non_white * 10 > total,
        "{non_white} of {total} pixels not white"
    );
    assert!(blue >= 500, "series line not visible: {blue} blue pixels");
}

mod robustness {
    use super::*;
    use proptest::prelude::*;
    use vramdoc::model::{DeviceSeries, Marker};

    fn time() -> impl Strategy<Value = f64> {
        prop_oneof![
            0.0..5_000.0f64,
            Just(0.0),
            Just(-3.0),
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(1e15),
            Just(f64::MAX),
        ]
    }

    fn bytes() -> impl Strategy<Value = u64> {
        prop_oneof![0..64u64 << 30, Just(0), Just(u64::MAX), Just(1)]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        /// Whatever numbers a JSON file holds, rendering never panics, and every device with
        /// samples gets exactly one chart.
        #[test]
        fn any_timeline_renders(
            samples in proptest::collection::vec((time(), bytes()), 0..300),
            total in bytes(),
            markers in proptest::collection::vec((time(), 0..4usize, "[a-z<>&|` ]{0,60}"), 0..40),
            devices in 1..3usize,
        ) {
            let mut r = replay_report();
            let run = &mut r.replay_mut().unwrap().runs[0];
            run.timeline.devices = (0..devices as u32)
                .map(|d| DeviceSeries { device: d, total, samples: samples.clone() })
                .collect();
            run.timeline.markers = markers
                .into_iter()
                .map(|(t_ms, k, label)| Marker {
                    t_ms,
                    kind: ["step", "oom", "end", "killed"][k].into(),
                    label,
                    device: if k == 1 { Some(0) } else { None },
                })
                .collect();
            run.error.as_mut().unwrap().t_ms = samples.first().map_or(0.0, |s| s.0);
            let _ = md(&r);
            let page = html_of(&r);
            let charts_before = REPLAY_CHARTS - 1; // run 0 had one device
            let expect = charts_before + if samples.is_empty() { 0 } else { devices };
            prop_assert_eq!(page.matches("<svg").count(), expect);
        }
    }
}

#[test]
fn sampling_gaps_are_shown_in_markdown_and_html() {
    use vramdoc::model::SamplingGap;
    let mut r = replay_report();
    assert!(!md(&r).contains("Sampling gaps"), "no gap, no section");
    let runs = &mut r.replay_mut().unwrap().runs;
    let gap = |device: Option<u32>, reason: &str| SamplingGap {
        kind: if device.is_some() {
            "memory"
        } else {
            "processes"
        }
        .into(),
        device,
        start_ms: 120.0,
        end_ms: 480.0,
        count: 3,
        reason: reason.into(),
    };
    runs[0].timeline.gaps = vec![
        gap(
            Some(1),
            "device 1 is lost (fallen off the bus); reboot the node",
        ),
        gap(None, "late"),
    ];
    for _ in 0..10 {
        runs[0].timeline.gaps.push(gap(None, "late"));
    }
    let text = md(&r);
    assert!(text.contains("**Sampling gaps**"), "{text}");
    assert!(
        text.contains("- memory of GPU 1: no data from 120 ms to 480 ms, 3 failed"),
        "{text}"
    );
    assert!(text.contains("3 round(s) missed (sampler late)"), "{text}");
    assert!(text.contains("… and 4 more gap(s)"), "{text}");
    let page = html_of(&r);
    assert!(page.contains("<ul class=\"gaps\">"));
    assert!(page.contains("device 1 is lost"), "gap reason in HTML");
}
