//! HTML for `vramdoc explain`: one self-contained page (inline CSS and SVG, no script, a
//! Content-Security-Policy that forbids any fetch), per device the cause, the numbers, a
//! segment map (every mapped segment a bar of its blocks by state, all at one scale, with
//! the failed request drawn at that scale above them), the live-memory timeline of the
//! device and of its top sites, the sites and the fixes. Every string is escaped.

use super::html::esc;
use crate::explain::{DeviceExplanation, Explanation, Moment};
use crate::units::format_bytes as b;
use std::fmt::Write;

const CSS: &str = r#"
body { margin: 0; background: #f4f5f7; color: #1d2430;
  font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1200px; margin: 0 auto; padding: 20px 20px 40px; background: #fff; }
h2 { border-bottom: 1px solid #dde1e6; padding-bottom: 4px; }
table { border-collapse: collapse; margin: 8px 0 14px; }
th, td { border: 1px solid #dde1e6; padding: 4px 8px; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.cause { font-size: 17px; padding: 10px 14px; background: #fdf0ef; border-left: 4px solid #c81e1e; }
.fix { background: #eef8ee; border-left: 4px solid #2e8b3e; padding: 6px 10px; margin: 6px 0; }
svg { display: block; max-width: 100%; height: auto; border: 1px solid #dde1e6; }
.muted { color: #5b6470; }
"#;

const WIDTH: f64 = 960.0;
const COLORS: [&str; 6] = [
    "#1d2430", "#1f66b5", "#c27c00", "#2e8b3e", "#8a3ffc", "#c81e1e",
];

fn state_color(state: &str) -> &'static str {
    match state {
        "allocated" => "#1f66b5",
        "pending-free" => "#c27c00",
        _ => "#d9dde3",
    }
}

/// Left margin of the segment map (the segment's size is written there).
const LABEL: f64 = 80.0;

/// The segment map of one device: rows of segments, blocks coloured by state, at one scale
/// with the failed request. The scale is the widest segment, or eight times the request when
/// that is smaller (a 6 GiB segment must not hide 20 MiB ones split into 8 MiB holes); a
/// longer segment is cut at the edge and says so.
fn segment_map(o: &mut String, d: &DeviceExplanation) {
    if d.segment_map.is_empty() {
        return;
    }
    let req = d.numbers.requested.unwrap_or(0);
    let widest = d
        .segment_map
        .iter()
        .map(|s| s.total_size)
        .max()
        .unwrap_or(1)
        .max(1);
    let reference = if req > 0 {
        widest.min(req.saturating_mul(8)).max(req)
    } else {
        widest
    } as f64;
    let span = WIDTH - LABEL - 10.0;
    let scale = span / reference;
    let row = 14.0;
    let top = if req > 0 { 34.0 } else { 8.0 };
    let height = top + row * d.segment_map.len() as f64 + 8.0;
    let _ = writeln!(
        o,
        "<h3>Segment map</h3>\n<p class=\"muted\">Each bar is a segment PyTorch reserved \
         (cudaMalloc), all at one scale with the failed request (red): blue allocated, orange \
         freed but pending on a stream, grey cached free; a segment longer than the width is \
         cut (&#8230;). {}</p>",
        if d.segments_not_mapped > 0 {
            format!(
                "The {} smallest segments are left out.",
                d.segments_not_mapped
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        o,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"segment map of cuda:{}\">",
        d.device
    );
    if req > 0 {
        let w = (req as f64 * scale).clamp(1.0, span);
        let _ = writeln!(
            o,
            "<rect x=\"{LABEL}\" y=\"6\" width=\"{w:.1}\" height=\"12\" fill=\"#c81e1e\"><title>failed request {}</title></rect>\
             <text x=\"{LABEL}\" y=\"30\" font-size=\"11\" fill=\"#c81e1e\">failed request: {}</text>",
            esc(&b(req)),
            esc(&b(req))
        );
    }
    for (i, s) in d.segment_map.iter().enumerate() {
        let y = top + row * i as f64;
        let _ = writeln!(
            o,
            "<text x=\"{}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\" fill=\"#5b6470\">{}</text>",
            LABEL - 4.0,
            y + row - 5.0,
            esc(&b(s.total_size))
        );
        let mut x = LABEL;
        let end = LABEL + span;
        for (size, state) in &s.blocks {
            if x >= end {
                break;
            }
            let w = (*size as f64 * scale).min(end - x);
            let _ = writeln!(
                o,
                "<rect x=\"{x:.2}\" y=\"{y:.1}\" width=\"{:.2}\" height=\"{}\" fill=\"{}\" stroke=\"#fff\" stroke-width=\"0.3\"><title>{} {} (segment {:#x}, stream {:#x}{})</title></rect>",
                w.max(0.3),
                row - 3.0,
                state_color(state),
                esc(state),
                esc(&b(*size)),
                s.address,
                s.stream,
                if s.private_pool { ", private pool" } else { "" }
            );
            x += w;
        }
        if s.total_size as f64 > reference {
            let _ = writeln!(
                o,
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" fill=\"#1d2430\">&#8230;</text>",
                end - 12.0,
                y + row - 4.0
            );
        }
    }
    let _ = writeln!(o, "</svg>");
}

/// What the timeline's window covers (issue 39 item 7: "Peak shown: 2 MiB" beside 6 GiB
/// live read as a contradiction). The history is PyTorch's ring buffer of the last entries:
/// only allocations made inside it are drawn, so blocks allocated before it (often the big
/// ones: weights) are live at the moment and absent from the chart.
pub fn window_note(d: &DeviceExplanation, peak: u64) -> String {
    let h = &d.history;
    let span = match h.span_us {
        Some((a, z)) if z > a => format!(
            " spanning {}",
            crate::units::format_duration(std::time::Duration::from_micros((z - a) as u64))
        ),
        _ => String::new(),
    };
    let mut text = format!(
        "{} history entries{span} (the allocator keeps only its most recent ones). The top line \
         is the memory allocated within this window and still live, the others the top sites; \
         it peaks at {}.",
        h.entries,
        b(peak)
    );
    let allocated = d.numbers.allocated;
    if allocated > peak {
        text.push_str(&format!(
            " {} is allocated at the {}: the other {} was allocated before the window began \
             and is not drawn.",
            b(allocated),
            match d.at {
                Moment::Oom => "OOM",
                Moment::Snapshot => "snapshot",
            },
            b(allocated - peak)
        ));
    }
    format!(
        "<h3>Live memory over the recorded history</h3>\n<p class=\"muted\">{}</p>",
        esc(&text)
    )
}

/// Live memory over the recorded history: all, and each top site.
fn timeline(o: &mut String, d: &DeviceExplanation) {
    let h = &d.history;
    if h.x.len() < 2 {
        return;
    }
    let max_y = h
        .series
        .iter()
        .flat_map(|s| s.bytes.iter().copied())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let max_x = h.x.last().copied().unwrap_or(1).max(1) as f64;
    let (height, pad) = (260.0, 30.0);
    let _ = writeln!(o, "{}", window_note(d, max_y as u64));
    let _ = writeln!(
        o,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"live memory timeline of cuda:{}\">",
        d.device
    );
    let _ = writeln!(
        o,
        "<line x1=\"{pad}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#999\"/>",
        height - pad,
        WIDTH - 10.0,
        height - pad
    );
    for (k, s) in h.series.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let mut points = String::new();
        for (x, y) in h.x.iter().zip(&s.bytes) {
            let px = pad + (*x as f64 / max_x) * (WIDTH - pad - 10.0);
            let py = (height - pad) - (*y as f64 / max_y) * (height - 2.0 * pad);
            let _ = write!(points, "{px:.1},{py:.1} ");
        }
        let _ = writeln!(
            o,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"><title>{}</title></polyline>",
            points.trim_end(),
            esc(&s.name)
        );
    }
    let _ = writeln!(o, "</svg>\n<ul>");
    for (k, s) in h.series.iter().enumerate() {
        let _ = writeln!(
            o,
            "<li><span style=\"color:{}\">&#9632;</span> {}</li>",
            COLORS[k % COLORS.len()],
            esc(&s.name)
        );
    }
    let _ = writeln!(o, "</ul>");
}

fn device(o: &mut String, d: &DeviceExplanation) {
    let n = &d.numbers;
    let _ = writeln!(
        o,
        "<h2>GPU cuda:{} {}</h2>\n<p class=\"cause\" data-cause=\"{}\"><b>Cause</b>: {}</p>",
        d.device,
        match d.at {
            Moment::Oom => "at the out-of-memory error",
            Moment::Snapshot => "at the snapshot",
        },
        esc(d.cause.id()),
        esc(&d.because)
    );
    for f in &d.fixes {
        let _ = writeln!(
            o,
            "<p class=\"fix\"><b>Fix</b> ({}): {}</p>",
            esc(f.id),
            esc(&f.text)
        );
    }
    let _ = writeln!(o, "<table>");
    let rows = [
        ("requested", n.requested),
        ("reserved", Some(n.reserved)),
        ("allocated", Some(n.allocated)),
        ("cached free", Some(n.cached_free)),
        ("pending free", Some(n.pending_free)),
        ("free in the request's pool", Some(n.pool_free)),
        ("largest free block in that pool", Some(n.pool_largest_free)),
        ("free on other streams", Some(n.other_streams_free)),
        ("free in private pools", Some(n.private_pools_free)),
        ("free on the device at the OOM", n.device_free),
        ("outside PyTorch", n.outside_pytorch),
    ];
    for (label, v) in rows {
        if let Some(v) = v {
            let _ = writeln!(
                o,
                "<tr><td>{label}</td><td class=\"num\">{}</td></tr>",
                esc(&b(v))
            );
        }
    }
    let _ = writeln!(o, "</table>");
    segment_map(o, d);
    if !d.top_sites.is_empty() {
        let _ = writeln!(o, "<h3>Live memory by site</h3>\n<table><tr><th>site</th><th>bytes</th><th>share</th><th>called from</th></tr>");
        for s in &d.top_sites {
            let _ = writeln!(
                o,
                "<tr><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{:.0}%</td><td>{}</td></tr>",
                esc(&s.site),
                esc(&b(s.bytes)),
                s.share * 100.0,
                s.callers.iter().map(|c| format!("<code>{}</code>", esc(c))).collect::<Vec<_>>().join("<br>")
            );
        }
        let _ = writeln!(o, "</table>");
    }
    timeline(o, d);
    if d.history.growing && !d.growing_sites.is_empty() {
        let _ = writeln!(
            o,
            "<h3>Grew over the history</h3>\n<table><tr><th>site</th><th>from</th><th>to</th></tr>"
        );
        for g in &d.growing_sites {
            let _ = writeln!(
                o,
                "<tr><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                esc(&g.site),
                esc(&b(g.from)),
                esc(&b(g.to))
            );
        }
        let _ = writeln!(o, "</table>");
    }
}

pub fn render(x: &Explanation) -> String {
    let mut o = String::with_capacity(64 * 1024);
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; img-src data:\">\n\
         <title>vramdoc explain: {}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n\
         <h1>vramdoc explain</h1>\n<p>Snapshot <code>{}</code> ({}).</p>\n",
        esc(&x.file),
        esc(&x.file),
        esc(&b(x.file_bytes))
    );
    if x.devices.is_empty() {
        let _ = writeln!(o, "<p>The snapshot holds no segments and no history.</p>");
    }
    for d in &x.devices {
        device(&mut o, d);
    }
    let _ = writeln!(
        o,
        "<footer class=\"muted\">Made by vramdoc {}. <code>vramdoc explain --json</code> is the source of truth.</footer>\n</main>\n</body>\n</html>",
        esc(env!("CARGO_PKG_VERSION"))
    );
    o
}
