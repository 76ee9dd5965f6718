//! Prints how long rendering and reading a large replay report takes: 8 GPUs, a 10-minute run
//! sampled every 5 ms (120,001 samples per GPU), 300 step markers and an OOM. Run with
//! `cargo bench --bench report_render`.

use std::hint::black_box;
use std::time::Instant;
use vramdoc::gpu::{DeviceInfo, MemoryInfo, Versions};
use vramdoc::model::*;
use vramdoc::report::write::{render, Format};
use vramdoc::units::GIB;

const DEVICES: u32 = 8;
const SAMPLES: usize = 120_001;

fn big_report() -> Report {
    let total = 80 * GIB;
    let device = |index| DeviceInfo {
        index,
        name: "NVIDIA H100 80GB HBM3".into(),
        uuid: format!("GPU-{index}"),
        pci_bus_id: format!("00000000:{index:02X}:00.0"),
        memory: MemoryInfo {
            total,
            reserved: 0,
            used: 0,
            free: total,
        },
        utilization_gpu: None,
        temperature_c: None,
        numa_node: None,
        memory_unknown: None,
        status: Default::default(),
        minor: None,
    };
    let series = |d: u32| DeviceSeries {
        device: d,
        total,
        samples: (0..SAMPLES)
            .map(|i| {
                let t = i as f64 * 5.0;
                let used = (i as u64 * 7919 + d as u64 * 104_729) % total;
                (t, used)
            })
            .collect(),
    };
    let mut markers: Vec<Marker> = (0..300)
        .map(|i| Marker {
            t_ms: i as f64 * 2000.0,
            kind: "step".into(),
            label: format!("step {i}: allocate activations for batch {i}"),
            device: None,
        })
        .collect();
    markers.push(Marker {
        t_ms: 599_000.0,
        kind: "oom".into(),
        label: "step 299".into(),
        device: Some(3),
    });
    let timeline = Timeline {
        devices: (0..DEVICES).map(series).collect(),
        markers,
        processes: vec![],
        gaps: vec![],
    };
    Report {
        schema_version: SCHEMA_VERSION,
        environment: Environment {
            hostname: "bench".into(),
            kernel: "6.1".into(),
            vramdoc_version: "0.1.0".into(),
            backend: "sim".into(),
            sim_spec: Some("8xh100".into()),
            versions: Versions {
                driver: "550".into(),
                cuda: "12.4".into(),
                nvml: "12.550".into(),
            },
            devices: (0..DEVICES).map(device).collect(),
        },
        command: vec!["vramdoc".into(), "replay".into(), "big".into()],
        created_unix_ms: 0,
        body: Body::Replay(ReplayResult {
            period_us: 5000,
            runs: vec![VariantRun {
                steps: vec![],
                findings: vec![],
                scenario: "big".into(),
                variant: "bug".into(),
                source: "bench".into(),
                verdict: Verdict::Reproduced,
                reason: None,
                checks: vec![],
                worker_pid: Some(1),
                error: None,
                peaks: vec![],
                timeline,
                duration_ms: 600_000,
            }],
        }),
    }
}

fn time<T>(what: &str, reps: u32, mut f: impl FnMut() -> T) -> T {
    let mut out = None;
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t0 = Instant::now();
        out = Some(black_box(f()));
        best = best.min(t0.elapsed().as_secs_f64());
    }
    println!("{what:<40} {:>9.1} ms (best of {reps})", best * 1e3);
    out.unwrap()
}

fn main() {
    let report = big_report();
    println!(
        "report: {DEVICES} GPUs x {SAMPLES} samples, {} markers",
        report.replay().unwrap().runs[0].timeline.markers.len()
    );
    let json = time("render JSON", 5, || render(&report, Format::Json).unwrap());
    let md = time("render Markdown", 5, || {
        render(&report, Format::Markdown).unwrap()
    });
    let html = time("render HTML (8 SVG charts)", 5, || {
        render(&report, Format::Html).unwrap()
    });
    let text = String::from_utf8(json.clone()).unwrap();
    time("read JSON back (parse + validate version)", 5, || {
        vramdoc::report::read::parse_report(&text, std::path::Path::new("big.json")).unwrap()
    });
    println!(
        "sizes: JSON {:.1} MiB, Markdown {:.1} KiB, HTML {:.1} KiB",
        json.len() as f64 / 1048576.0,
        md.len() as f64 / 1024.0,
        html.len() as f64 / 1024.0
    );
}
