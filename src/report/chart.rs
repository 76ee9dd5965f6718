//! SVG charts of one device's used memory over time, drawn with plotters' SVG backend: the
//! used-memory area and line, the device total as a dashed line, step markers with labels
//! and failure points (OOM) marked in red. Long recordings stay readable: the time axis is in
//! ms, s, min, h or days as the span asks, the series is drawn from at most a few points per
//! pixel column (each column's first, lowest, highest and last sample: a long job's
//! min/max envelopes draw as a band), and at most [`MAX_MARKER_LINES`] ordinary markers are
//! drawn (evenly chosen; failures always). Text becomes SVG `<text>` (escaped by plotters;
//! no font files are read), so the output is self-contained.

use super::text::{self, ChartMarker};
use crate::model::DeviceSeries;
use crate::units::{format_bytes, GIB, MIB};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use thiserror::Error;

/// Chart size in pixels (fits a 1280 px wide window with margins).
pub const WIDTH: u32 = 1160;
pub const HEIGHT: u32 = 420;
/// Rows above the plot for marker labels.
const LABEL_ROWS: i32 = 3;
const ROW_HEIGHT: i32 = 17;
const FONT: &str = "sans-serif";
/// Ordinary (non-failure) markers drawn at most: a week of per-step markers would otherwise
/// be thousands of lines.
pub const MAX_MARKER_LINES: usize = 200;

#[derive(Debug, Error)]
#[error("drawing the chart failed: {0}")]
pub struct ChartError(String);

fn err<E: std::fmt::Debug>(e: E) -> ChartError {
    ChartError(format!("{e:?}"))
}

const BLUE: RGBColor = RGBColor(31, 102, 181);
const FAIL: RGBColor = RGBColor(200, 30, 30);
const TOTAL: RGBColor = RGBColor(90, 90, 90);
const STEP: RGBColor = RGBColor(120, 120, 140);
const GRID: RGBColor = RGBColor(225, 225, 230);

/// Draw `series` over `[0, span]` ms as an SVG document (a string starting with `<svg`).
pub fn device_chart(
    series: &DeviceSeries,
    span: f64,
    markers: &[ChartMarker],
) -> Result<String, ChartError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, series, span, markers)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn draw(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    series: &DeviceSeries,
    span: f64,
    markers: &[ChartMarker],
) -> Result<(), ChartError> {
    root.fill(&WHITE).map_err(err)?;
    let max_used = series.samples.iter().map(|s| s.1).max().unwrap_or(0);
    let top_bytes = series.total.max(max_used).max(1);
    let (unit, unit_name) = if top_bytes >= GIB {
        (GIB as f64, "GiB")
    } else {
        (MIB as f64, "MiB")
    };
    let (tscale, tname) = time_unit(span);
    let y_max = top_bytes as f64 / unit * 1.06;
    let x_max = span / tscale;

    let mut chart = ChartBuilder::on(root)
        .margin(12)
        .margin_top(12 + LABEL_ROWS * ROW_HEIGHT + 8)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(format!("time since start ({tname})"))
        .y_desc(format!("used ({unit_name})"))
        .x_labels(12)
        .y_labels(8)
        .x_label_formatter(&|v| {
            if tscale > 1.0 {
                format!("{v:.1}")
            } else {
                format!("{v:.0}")
            }
        })
        .y_label_formatter(&|v| format!("{v:.1}"))
        .label_style((FONT, 17))
        .axis_desc_style((FONT, 18))
        .bold_line_style(GRID)
        .light_line_style(WHITE)
        .draw()
        .map_err(err)?;

    // Used memory: filled area with a line on top.
    let points = decimate(&series.samples, 4 * WIDTH as usize)
        .into_iter()
        .map(|(t, b)| (t / tscale, b as f64 / unit));
    chart
        .draw_series(
            AreaSeries::new(points, 0.0, BLUE.mix(0.15)).border_style(BLUE.stroke_width(2)),
        )
        .map_err(err)?;

    // Device total.
    let total = series.total as f64 / unit;
    chart
        .draw_series(DashedLineSeries::new(
            vec![(0.0, total), (x_max, total)],
            10,
            6,
            TOTAL.stroke_width(2),
        ))
        .map_err(err)?;
    // Labelled at the left end: failures and peaks tend to be at the right.
    let (tx, ty) = chart.backend_coord(&(0.0, total));
    let total_style = TextStyle::from((FONT, 17).into_font())
        .color(&TOTAL)
        .pos(Pos::new(HPos::Left, VPos::Bottom));
    root.draw(&Text::new(
        format!("device total {}", format_bytes(series.total)),
        (tx + 8, ty - 4),
        &total_style,
    ))
    .map_err(err)?;

    // Markers: vertical lines, failure points, labels in rows above the plot.
    let (plot_left, plot_top) = chart.backend_coord(&(0.0, y_max));
    let (plot_right, _) = chart.backend_coord(&(x_max, 0.0));
    let mine = thin_markers(
        markers
            .iter()
            .filter(|m| m.on_device(series.device))
            .collect(),
    );
    for m in &mine {
        let x = m.t_ms / tscale;
        let color = if m.is_failure() { FAIL } else { STEP };
        // Solid lines: a dashed line is one SVG element per dash, too heavy for many markers.
        let style = if m.is_failure() {
            color.stroke_width(2)
        } else {
            color.mix(0.55).stroke_width(1)
        };
        chart
            .draw_series(LineSeries::new(vec![(x, 0.0), (x, y_max)], style))
            .map_err(err)?;
        if m.is_failure() {
            let used = used_at(&series.samples, m.t_ms) as f64 / unit;
            chart
                .draw_series(std::iter::once(Circle::new((x, used), 7, FAIL.filled())))
                .map_err(err)?;
        }
    }
    let mut rows_end = [i32::MIN; LABEL_ROWS as usize];
    // Failures first, so they always get a row.
    let mut order: Vec<&&ChartMarker> = mine.iter().filter(|m| m.is_failure()).collect();
    order.extend(mine.iter().filter(|m| !m.is_failure()));
    for m in order {
        let (px, _) = chart.backend_coord(&(m.t_ms / tscale, 0.0));
        let full = marker_text(m);
        let short = m.symbol.to_string();
        for candidate in [full, short] {
            let w = text_width(&candidate);
            let x0 = px.min(plot_right - w).max(plot_left);
            let Some(row) = (0..LABEL_ROWS as usize).find(|&r| rows_end[r] + 8 <= x0) else {
                continue;
            };
            rows_end[row] = x0 + w;
            let y = plot_top - 6 - row as i32 * ROW_HEIGHT;
            let style = TextStyle::from((FONT, 17).into_font())
                .color(if m.is_failure() { &FAIL } else { &BLACK })
                .pos(Pos::new(HPos::Left, VPos::Bottom));
            root.draw(&Text::new(candidate, (x0, y), &style))
                .map_err(err)?;
            break;
        }
    }
    Ok(())
}

/// The unit of the time axis for a span (ms): its length in ms and its name.
fn time_unit(span: f64) -> (f64, &'static str) {
    const MIN: f64 = 60_000.0;
    if span >= 2.0 * 24.0 * 60.0 * MIN {
        (24.0 * 60.0 * MIN, "days")
    } else if span >= 2.0 * 60.0 * MIN {
        (60.0 * MIN, "h")
    } else if span >= 10.0 * MIN {
        (MIN, "min")
    } else if span >= 10_000.0 {
        (1000.0, "s")
    } else {
        (1.0, "ms")
    }
}

/// Every failure marker, and at most [`MAX_MARKER_LINES`] others, evenly spread.
fn thin_markers(mine: Vec<&ChartMarker>) -> Vec<&ChartMarker> {
    let ordinary = mine.iter().filter(|m| !m.is_failure()).count();
    if ordinary <= MAX_MARKER_LINES {
        return mine;
    }
    let mut seen = 0usize;
    let mut drawn = 0usize;
    mine.into_iter()
        .filter(|m| {
            if m.is_failure() {
                return true;
            }
            seen += 1;
            // Keep the k-th ordinary marker when it crosses the next evenly spaced slot.
            let slot = seen * MAX_MARKER_LINES / ordinary;
            let keep = slot > drawn;
            if keep {
                drawn = slot;
            }
            keep
        })
        .collect()
}

/// The label drawn for a marker: `3 render 1024x1152` or `OOM: ...` for failures.
pub fn marker_text(m: &ChartMarker) -> String {
    // The one policy for hidden characters (`term::is_hidden`): shown, never applied.
    let label: String = crate::term::reveal_hidden(&m.label)
        .chars()
        .take(48)
        .collect();
    if m.is_failure() {
        format!("{}: {label}", m.kind.to_uppercase())
    } else {
        format!("{} {label}", m.symbol)
    }
}

/// Estimated width of a label in pixels at the label font size.
fn text_width(s: &str) -> i32 {
    (s.chars().count() as i32) * 8 + 4
}

/// Used bytes at time `t`: the last sample at or before it (the first sample if none).
fn used_at(samples: &[(f64, u64)], t: f64) -> u64 {
    let mut best: Option<(f64, u64)> = None;
    for &(st, b) in samples {
        if st <= t && best.is_none_or(|(bt, _)| st >= bt) {
            best = Some((st, b));
        }
    }
    best.map(|x| x.1)
        .or_else(|| samples.first().map(|x| x.1))
        .unwrap_or(0)
}

/// At most about `max_points` points: per time bucket the first, lowest, highest and last
/// sample, in time order, so peaks and the shape survive.
pub fn decimate(samples: &[(f64, u64)], max_points: usize) -> Vec<(f64, u64)> {
    let s: Vec<(f64, u64)> = samples
        .iter()
        .copied()
        .filter(|x| x.0.is_finite())
        .collect();
    if s.len() <= max_points || max_points < 4 {
        return s;
    }
    let buckets = max_points / 4;
    let t0 = s.first().map_or(0.0, |x| x.0);
    let t1 = s.last().map_or(0.0, |x| x.0);
    let span = (t1 - t0).max(f64::MIN_POSITIVE);
    let mut out = Vec::with_capacity(max_points);
    let mut start = 0;
    while start < s.len() {
        let b = text::cell_of(s[start].0 - t0, span, buckets);
        let mut end = start + 1;
        while end < s.len() && text::cell_of(s[end].0 - t0, span, buckets) == b {
            end += 1;
        }
        let chunk = &s[start..end];
        let (mut lo, mut hi) = (0, 0);
        for (i, x) in chunk.iter().enumerate() {
            if x.1 < chunk[lo].1 {
                lo = i;
            }
            if x.1 > chunk[hi].1 {
                hi = i;
            }
        }
        let mut idx = vec![0, lo, hi, chunk.len() - 1];
        idx.sort_unstable();
        idx.dedup();
        out.extend(idx.into_iter().map(|i| chunk[i]));
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimation_keeps_peaks_and_order() {
        let samples: Vec<(f64, u64)> = (0..10_000)
            .map(|i| (i as f64, if i == 5_003 { 999 } else { (i % 7) as u64 }))
            .collect();
        let d = decimate(&samples, 400);
        assert!(d.len() <= 400, "{}", d.len());
        assert!(d.iter().any(|x| x.1 == 999));
        assert!(d.windows(2).all(|w| w[0].0 <= w[1].0));
        assert_eq!(d.first(), samples.first());
        assert_eq!(d.last(), samples.last());
    }

    #[test]
    fn a_week_long_chart_has_day_ticks_and_bounded_markers() {
        let week = 7.0 * 24.0 * 3_600_000.0;
        let series = DeviceSeries {
            device: 0,
            total: 80 * GIB,
            samples: (0..50_000)
                .map(|i| (i as f64 * week / 50_000.0, (20 + (i % 7) as u64) * GIB))
                .collect(),
        };
        let marker = |i: usize, kind: &str| ChartMarker {
            t_ms: i as f64 * 60_000.0,
            kind: kind.into(),
            label: format!("step {i}"),
            device: None,
            symbol: 's',
        };
        let mut markers: Vec<ChartMarker> = (0..10_080).map(|i| marker(i, "step")).collect();
        markers.push(marker(10_000, "oom"));
        let svg = device_chart(&series, week, &markers).unwrap();
        assert!(svg.contains("time since start (days)"), "no day axis");
        assert_eq!(time_unit(3.0 * 3_600_000.0).1, "h");
        let refs: Vec<&ChartMarker> = markers.iter().collect();
        let thin = thin_markers(refs);
        assert_eq!(
            thin.iter().filter(|m| !m.is_failure()).count(),
            MAX_MARKER_LINES
        );
        assert!(thin.iter().any(|m| m.is_failure()));
        assert!(svg.len() < 400_000, "{} bytes", svg.len());
    }

    #[test]
    fn chart_escapes_labels_and_draws_series() {
        let series = DeviceSeries {
            device: 0,
            total: 16 * GIB,
            samples: (0..100)
                .map(|i| (i as f64 * 10.0, i as u64 * 100 * MIB))
                .collect(),
        };
        let markers = vec![ChartMarker {
            t_ms: 500.0,
            kind: "oom".into(),
            label: "<script>alert(1)</script>".into(),
            device: None,
            symbol: 'X',
        }];
        let svg = device_chart(&series, 990.0, &markers).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(!svg.contains("<script"), "{svg}");
        assert!(svg.contains("&lt;script"));
        assert!(svg.contains("<polyline") || svg.contains("<path"));
        assert!(svg.contains("<circle"));
        assert!(svg.contains("device total 16.00 GiB"));
    }
}
