//! A 72-hour, 8-GPU `vramdoc run` recording fed synthetically (not in real time) through the
//! recorder's bounded series and process lists (`record::bounded`), as the sampler and the
//! process thread feed them: memory every 100 ms, process lists every 500 ms (identical most
//! of the time), an epoch marker every hour, a step up every 6 hours, an activation sawtooth
//! of up to 384 MiB every 700 ms. Prints the points kept per GPU-hour against the documented
//! bound, the RAM they take, the process's peak RSS, the size of the timeline as the JSON
//! report holds it, and the size of one GPU's SVG chart; next to what keeping every sample
//! would take. `cargo bench --bench long_recording` (`LONG_HOURS`, default 72).

use std::time::Instant;
use vramdoc::model::{DeviceSeries, Marker, ProcessSample, Timeline};
use vramdoc::record::bounded::{ListRuns, Resolution, SeriesBuilder};
use vramdoc::report::chart::device_chart;
use vramdoc::report::text::timeline_markers;

const GPUS: u32 = 8;
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const HOUR_MS: f64 = 3_600_000.0;

/// Peak resident memory of this process (`VmHWM`; getrusage's maxrss survives exec, so it
/// would show cargo's).
fn max_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn main() {
    let hours: f64 = std::env::var("LONG_HOURS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(72.0);
    let res = Resolution::default();
    let rss0 = max_rss_mib();
    let start = Instant::now();
    let end_ms = hours * HOUR_MS;
    let markers: Vec<Marker> = (0..hours as u64)
        .map(|h| Marker {
            t_ms: h as f64 * HOUR_MS + 1_000.0,
            kind: "marker".into(),
            label: format!("epoch {h}"),
            device: None,
        })
        .collect();
    let mut builders: Vec<SeriesBuilder> = (0..GPUS).map(|_| SeriesBuilder::new(res)).collect();
    let mut runs = ListRuns::default();
    let mut processes: Vec<ProcessSample> = Vec::new();
    let mut next_marker = 0;
    let mut i: u64 = 0;
    loop {
        let t = i as f64 * 100.0;
        if t > end_ms {
            break;
        }
        while markers.get(next_marker).is_some_and(|m| m.t_ms <= t) {
            for b in builders.iter_mut() {
                b.event(markers[next_marker].t_ms);
            }
            next_marker += 1;
        }
        let level = |d: u32| 20 * GIB + (d as u64) * GIB + 2 * GIB * (t / (6.0 * HOUR_MS)) as u64;
        for (d, b) in builders.iter_mut().enumerate() {
            b.push(t, level(d as u32) + (i % 7) * 64 * MIB);
        }
        if i.is_multiple_of(5) {
            for d in 0..GPUS {
                let list = vec![
                    ProcessSample {
                        t_ms: t,
                        device: d,
                        pid: 1000 + d,
                        used: Some(level(d)),
                    },
                    ProcessSample {
                        t_ms: t,
                        device: d,
                        pid: 2000,
                        used: Some(512 * MIB),
                    },
                ];
                processes.extend(runs.keep(d, list));
            }
        }
        i += 1;
    }
    let fed = i * GPUS as u64;
    let held: usize = builders.iter().map(SeriesBuilder::len).sum();
    let devices: Vec<DeviceSeries> = builders
        .into_iter()
        .enumerate()
        .map(|(d, b)| DeviceSeries {
            device: d as u32,
            total: 80 * GIB,
            samples: b.finish(),
        })
        .collect();
    processes.extend(runs.finish());
    let feed_s = start.elapsed().as_secs_f64();
    let kept: usize = devices.iter().map(|d| d.samples.len()).sum();
    let gpu_hours = hours * GPUS as f64;
    let ram = kept * std::mem::size_of::<(f64, u64)>()
        + processes.len() * std::mem::size_of::<ProcessSample>();
    let timeline = Timeline {
        devices,
        markers,
        processes,
        gaps: Vec::new(),
    };
    let json = serde_json::to_vec(&timeline).expect("json").len();
    let chart_markers = timeline_markers(&timeline);
    let svg = device_chart(&timeline.devices[0], end_ms, &chart_markers)
        .expect("chart")
        .len();
    let raw = fed as f64 * 16.0;
    println!("{hours:.0}-hour recording, {GPUS} GPUs, fed synthetically in {feed_s:.1} s ({fed} memory samples)");
    println!(
        "  points kept: {kept} ({:.0} per GPU-hour; bound {} per GPU-hour after the first 6,000 samples)",
        kept as f64 / gpu_hours,
        res.bound_per_hour()
    );
    println!("  held by the builders at the end, before finish: {held} points");
    println!(
        "  RAM of the kept series and process samples: {:.1} MiB ({} process samples); peak RSS of this bench {:.1} MiB (was {:.1} MiB at start)",
        ram as f64 / MIB as f64,
        timeline.processes.len(),
        max_rss_mib(),
        rss0
    );
    println!(
        "  timeline as the JSON report holds it: {:.1} MiB; SVG chart of GPU 0: {:.0} KiB",
        json as f64 / MIB as f64,
        svg as f64 / 1024.0
    );
    println!(
        "  every sample kept instead: {:.0} MiB of series in RAM, ~{:.0} MiB of JSON",
        raw / MIB as f64,
        fed as f64 * 24.0 / MIB as f64
    );
}
