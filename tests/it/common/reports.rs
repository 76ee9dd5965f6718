//! Deterministic report fixtures (a scan-like and a replay-like report with timelines,
//! markers and an OOM) built from the model, and the JSON Schema check every test of report
//! output uses: `common::reports::assert_valid_report_json(&json)`.

use vramdoc::gpu::{DeviceInfo, MemoryInfo, Versions};
use vramdoc::model::command_line_from;
use vramdoc::model::*;
use vramdoc::units::{GIB, MIB};

/// 2026-11-21 23:58:51 UTC.
pub const CREATED: u64 = 1_795_305_531_000;

fn device(index: u32, used: u64) -> DeviceInfo {
    let total = 24 * GIB;
    let reserved = 329 * MIB;
    DeviceInfo {
        index,
        name: "NVIDIA GeForce RTX 3090".into(),
        uuid: format!("GPU-5d1c0c5e-0000-4000-8000-00000000000{index}"),
        pci_bus_id: format!("00000000:{:02X}:00.0", 0x41 + index),
        memory: MemoryInfo {
            total,
            reserved,
            used,
            free: total - reserved - used,
        },
        utilization_gpu: Some(37 + index * 50),
        temperature_c: Some(54 + index * 9),
        numa_node: None,
        mig: None,
        memory_unknown: None,
        status: Default::default(),
        minor: None,
    }
}

fn environment(devices: Vec<DeviceInfo>) -> Environment {
    Environment {
        hostname: "gpu-box-07".into(),
        kernel: "6.1.0-28-amd64".into(),
        vramdoc_version: "0.1.0".into(),
        backend: "sim".into(),
        sim_spec: Some("2xrtx3090".into()),
        versions: Versions {
            driver: "550.54.15".into(),
            cuda: "12.4".into(),
            nvml: "12.550.54.15".into(),
        },
        devices,
    }
}

fn ev(label: &str, bytes: u64) -> Evidence {
    Evidence {
        label: label.into(),
        value: vramdoc::units::format_bytes(bytes),
        bytes: Some(bytes),
    }
}

/// What `vramdoc scan` reports on a shared box with a stray context and a hidden process.
pub fn scan_report() -> Report {
    let devices = vec![
        device(0, 448 * MIB + 6 * GIB),
        device(1, 448 * MIB + 22 * GIB),
    ];
    Report {
        schema_version: SCHEMA_VERSION,
        environment: environment(devices.clone()),
        command: command_line_from(["/usr/local/bin/vramdoc", "--sim", "2xrtx3090", "scan", "--out", "scan.md"]),
        created_unix_ms: CREATED,
        body: Body::Scan(ScanResult {
            pid_namespace: "host".into(),
            vantage: None,
            pods_note: None,
            unattributed: Vec::new(),
            pod_allocations: vec![vramdoc::model::PodAllocation {
                namespace: "ml".into(),
                pod: "trainer-0".into(),
                container: "main".into(),
                device_ids: vec!["GPU-5d1c0c5e-0000-4000-8000-000000000000".into()],
            }],
            headroom: devices
                .iter()
                .map(|d| vramdoc::diagnose::device_headroom(d, &vramdoc::diagnose::Thresholds::default()))
                .collect(),
            devices,
            processes: vec![
                ProcessInfo {
                    pid: 4242,
                    visible: true,
                    user: Some("alice".into()),
                    name: Some("python3".into()),
                    cmdline: Some("python3 infer.py --device cuda:1 --hf-token «redacted»".into()),
                    cuda_visible_devices: "unset".into(),
                    container: None,
                    pod: None,
                    devices: vec![
                        ProcessDeviceUsage { device: 0, used: Some(448 * MIB), lists: Vec::new() },
                        ProcessDeviceUsage { device: 1, used: Some(448 * MIB + 18 * GIB), lists: Vec::new() },
                    ],
                },
                ProcessInfo {
                    pid: 5151,
                    visible: true,
                    user: Some("bob".into()),
                    name: Some("python".into()),
                    cmdline: Some("python train.py --batch 64 | tee log".into()),
                    cuda_visible_devices: "0".into(),
                    container: Some("kubepods".into()),
                    pod: Some(vramdoc::model::PodRef {
                        uid: "6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f".into(),
                        namespace: Some("ml".into()),
                        name: Some("trainer-0".into()),
                        container: Some("main".into()),
                        container_id: Some("ab".repeat(32)),
                        allocated_gpus: Some(vec!["GPU-5d1c0c5e-0000-4000-8000-000000000000".into()]),
                    }),
                    devices: vec![ProcessDeviceUsage { device: 0, used: Some(6 * GIB), lists: Vec::new() }],
                },
                ProcessInfo {
                    pid: 777,
                    visible: false,
                    user: None,
                    name: None,
                    cmdline: None,
                    cuda_visible_devices: "unknown".into(),
                    container: None,
                    pod: None,
                    devices: vec![ProcessDeviceUsage { device: 1, used: None, lists: Vec::new() }],
                },
            ],
            findings: vec![
                Finding {
                    id: "stray-context".into(),
                    severity: Severity::Warn,
                    title: "PID 4242 holds a CUDA context on GPU 0 but works on GPU 1".into(),
                    devices: vec![0, 1],
                    pid: Some(4242),
                    evidence: vec![ev("used on GPU 0", 448 * MIB), ev("used on GPU 1", 448 * MIB + 18 * GIB)],
                    fix: "Start it with `CUDA_VISIBLE_DEVICES=1` and keep using `cuda:0` in code; \
                          long term, run the warm-up on the model's device."
                        .into(),
                },
                Finding {
                    id: "invisible-processes".into(),
                    severity: Severity::Info,
                    title: "1 process holds GPU memory outside this PID namespace".into(),
                    devices: vec![1],
                    pid: None,
                    evidence: vec![Evidence { label: "PIDs".into(), value: "777".into(), bytes: None }],
                    fix: "Run vramdoc in the host PID namespace (`docker run --pid=host ...`) to see \
                          who they are."
                        .into(),
                },
                Finding {
                    id: "low-headroom".into(),
                    severity: Severity::Error,
                    title: "GPU 1 has 1.23 GiB free (5.1%)".into(),
                    devices: vec![1],
                    pid: None,
                    evidence: vec![ev("free on GPU 1", 1259 * MIB)],
                    fix: "Free memory on GPU 1 before starting more work there.".into(),
                },
            ],
        }),
    }
}

fn step(t_ms: f64, label: &str) -> Marker {
    Marker {
        t_ms,
        kind: "step".into(),
        label: label.into(),
        device: None,
    }
}

/// Samples every 5 ms from 0 to `end_ms` of `f(t)`.
fn sampled(device: u32, end_ms: u32, f: impl Fn(f64) -> u64) -> DeviceSeries {
    DeviceSeries {
        device,
        total: 24 * GIB,
        samples: (0..=end_ms / 5)
            .map(|i| i as f64 * 5.0)
            .map(|t| (t, f(t)))
            .collect(),
    }
}

/// Linear ramp from `a` to `b` over `[t0, t1]`.
fn ramp(t: f64, t0: f64, t1: f64, a: u64, b: u64) -> u64 {
    let x = ((t - t0) / (t1 - t0)).clamp(0.0, 1.0);
    (a as f64 + (b as f64 - a as f64) * x) as u64
}

fn peaks(tl: &Timeline) -> Vec<DevicePeak> {
    tl.devices
        .iter()
        .map(|s| {
            let (t_ms, peak_used) =
                s.samples.iter().fold(
                    (0.0, 0),
                    |acc, &(t, u)| if u > acc.1 { (t, u) } else { acc },
                );
            DevicePeak {
                device: s.device,
                total: s.total,
                peak_used,
                t_ms,
            }
        })
        .collect()
}

fn check(expectation: &str, passed: bool, detail: &str) -> CheckResult {
    CheckResult {
        expectation: expectation.into(),
        passed,
        detail: detail.into(),
    }
}

const CTX: u64 = 448 * MIB;

fn multi_size_bug() -> VariantRun {
    let used = |t: f64| -> u64 {
        match t {
            t if t < 300.0 => CTX + ramp(t, 0.0, 250.0, 0, 5 * GIB + 200 * MIB),
            t if t < 700.0 => CTX + 5 * GIB + 200 * MIB + ramp(t, 300.0, 450.0, 0, 5 * GIB),
            t if t < 1100.0 => CTX + 10 * GIB + 200 * MIB + ramp(t, 700.0, 900.0, 0, 6 * GIB),
            t if t < 1180.0 => CTX + 16 * GIB + 200 * MIB + ramp(t, 1100.0, 1180.0, 0, 7 * GIB),
            _ => 0,
        }
    };
    let timeline = Timeline {
        devices: vec![sampled(0, 1300, used)],
        markers: vec![
            step(0.0, "load pipeline (5.2 GiB weights)"),
            step(300.0, "render 1024x1024"),
            step(700.0, "render 1024x1152"),
            step(1100.0, "render 1360x1536"),
            Marker {
                t_ms: 1180.0,
                kind: "oom".into(),
                label: "render 1360x1536".into(),
                device: Some(0),
            },
        ],
        processes: vec![],
        gaps: vec![],
    };
    VariantRun {
        steps: vec![],
        findings: vec![],
        scenario: "multi-size-oom".into(),
        variant: "bug".into(),
        source: "OneDiff: OOM at the second input size, empty_cache() does not help".into(),
        verdict: Verdict::Reproduced,
        reason: None,
        checks: vec![
            check(
                "usage grows at every new size",
                true,
                "+5.00 GiB, +6.00 GiB, +7.00 GiB",
            ),
            check(
                "ends in out-of-memory",
                true,
                "OOM at step 4 with 23.64 GiB used of 24.00 GiB",
            ),
        ],
        worker_pid: Some(31337),
        error: Some(StepError {
            step: 4,
            step_label: "render 1360x1536".into(),
            kind: "out-of-memory".into(),
            message: "CUDA_ERROR_OUT_OF_MEMORY: out of memory (requested 2.00 GiB)".into(),
            t_ms: 1180.0,
        }),
        peaks: peaks(&timeline),
        timeline,
        duration_ms: 1304,
    }
}

fn multi_size_fix() -> VariantRun {
    let used = |t: f64| -> u64 {
        match t {
            t if t < 300.0 => CTX + ramp(t, 0.0, 250.0, 0, 5 * GIB + 200 * MIB),
            t if t < 1500.0 => CTX + 5 * GIB + 200 * MIB + ramp(t, 300.0, 500.0, 0, 9 * GIB),
            _ => CTX + 5 * GIB + 200 * MIB,
        }
    };
    let timeline = Timeline {
        devices: vec![sampled(0, 1600, used)],
        markers: vec![
            step(0.0, "load pipeline (5.2 GiB weights)"),
            step(300.0, "render 1536x1536"),
            step(700.0, "render 1360x1536"),
            step(1000.0, "render 1024x1152"),
            step(1250.0, "render 1024x1024"),
            Marker {
                t_ms: 1600.0,
                kind: "end".into(),
                label: "done".into(),
                device: None,
            },
        ],
        processes: vec![],
        gaps: vec![],
    };
    VariantRun {
        findings: vec![],
        steps: vec![],
        scenario: "multi-size-oom".into(),
        variant: "fix-largest-first".into(),
        source: "OneDiff: OOM at the second input size, empty_cache() does not help".into(),
        verdict: Verdict::Fixed,
        reason: None,
        checks: vec![
            check("completes every size", true, "4 of 4 sizes rendered"),
            check(
                "peak stays below 90% of the device",
                true,
                "peak 14.63 GiB = 61.0% of 24.00 GiB",
            ),
        ],
        worker_pid: Some(31338),
        error: None,
        peaks: peaks(&timeline),
        timeline,
        duration_ms: 1602,
    }
}

fn stray_bug() -> VariantRun {
    let timeline = Timeline {
        devices: vec![
            sampled(0, 800, |t| if (50.0..760.0).contains(&t) { CTX } else { 0 }),
            sampled(1, 800, |t| match t {
                t if t < 50.0 => 0,
                t if t < 760.0 => CTX + ramp(t, 200.0, 500.0, 0, 10 * GIB),
                _ => 0,
            }),
        ],
        markers: vec![
            step(50.0, "conv warm-up on cuda:0 (hard-coded)"),
            step(200.0, "load model on cuda:1"),
            Marker {
                t_ms: 760.0,
                kind: "end".into(),
                label: "worker exits".into(),
                device: None,
            },
        ],
        processes: vec![],
        gaps: vec![],
    };
    VariantRun {
        findings: vec![],
        steps: vec![],
        scenario: "stray-cuda0".into(),
        variant: "bug".into(),
        source: "OneDiff/OneFlow: model on cuda:1 also holds memory on cuda:0".into(),
        verdict: Verdict::Reproduced,
        reason: None,
        checks: vec![
            check(
                "a context appears on GPU 0",
                true,
                "GPU 0 held 448 MiB by PID 31339",
            ),
            check(
                "the model lives on GPU 1",
                true,
                "10.44 GiB on GPU 1 at 500 ms",
            ),
        ],
        worker_pid: Some(31339),
        error: None,
        peaks: peaks(&timeline),
        timeline,
        duration_ms: 801,
    }
}

fn stray_fix() -> VariantRun {
    let timeline = Timeline {
        devices: vec![
            sampled(0, 700, |t| if (60.0..650.0).contains(&t) { CTX } else { 0 }),
            sampled(1, 700, |t| match t {
                t if t < 60.0 => 0,
                t if t < 650.0 => CTX + ramp(t, 150.0, 400.0, 0, 10 * GIB),
                _ => 0,
            }),
        ],
        markers: vec![
            step(60.0, "CUDA_VISIBLE_DEVICES=1; warm-up on cuda:0 (= GPU 1)"),
            step(150.0, "load model on cuda:0 (= GPU 1)"),
            Marker {
                t_ms: 650.0,
                kind: "end".into(),
                label: "worker exits".into(),
                device: None,
            },
        ],
        processes: vec![],
        gaps: vec![],
    };
    VariantRun {
        findings: vec![],
        steps: vec![],
        scenario: "stray-cuda0".into(),
        variant: "fix-visible-devices".into(),
        source: "OneDiff/OneFlow: model on cuda:1 also holds memory on cuda:0".into(),
        verdict: Verdict::Unexpected,
        reason: Some("1 of 2 checks failed".into()),
        checks: vec![
            check(
                "GPU 0 stays untouched",
                false,
                "GPU 0 held 448 MiB by PID 31340 from 60 ms",
            ),
            check(
                "the model lives on GPU 1",
                true,
                "10.44 GiB on GPU 1 at 400 ms",
            ),
        ],
        worker_pid: Some(31340),
        error: None,
        peaks: peaks(&timeline),
        timeline,
        duration_ms: 702,
    }
}

fn sharded_skipped() -> VariantRun {
    VariantRun {
        findings: vec![],
        steps: vec![],
        scenario: "sharded-release".into(),
        variant: "bug".into(),
        source: "xDiT (USP + FSDP): VRAM stays occupied after del model".into(),
        verdict: Verdict::Skipped,
        reason: Some("needs 4 devices, the box has 2 (pass --require to fail instead)".into()),
        checks: vec![],
        worker_pid: None,
        error: None,
        peaks: vec![],
        timeline: Timeline::default(),
        duration_ms: 0,
    }
}

/// What `vramdoc replay` reports: an OOM bug and its fix, a two-device bug and a fix that did
/// not hold (unexpected), and a skipped run.
pub fn replay_report() -> Report {
    Report {
        schema_version: SCHEMA_VERSION,
        environment: environment(vec![device(0, 0), device(1, 0)]),
        command: command_line_from([
            "vramdoc",
            "--sim",
            "2xrtx3090",
            "replay",
            "multi-size-oom",
            "stray-cuda0",
            "sharded-release",
            "--out",
            "replay.html",
        ]),
        created_unix_ms: CREATED + 60_000,
        body: Body::Replay(ReplayResult {
            period_us: 5000,
            runs: vec![
                multi_size_bug(),
                multi_size_fix(),
                stray_bug(),
                stray_fix(),
                sharded_skipped(),
            ],
        }),
    }
}

/// Number of per-device charts the replay fixture's HTML must contain.
pub const REPLAY_CHARTS: usize = 6;

/// Hostile strings planted everywhere a machine can put text into a report.
pub const HOSTILE: &str =
    "<script>alert(1)</script><img src=x onerror=alert(2)>\"'&`|*_[x](javascript:alert(3))";

/// The fixtures with hostile text in every free-text field that comes from the machine or a
/// scenario file.
pub fn hostile_reports() -> Vec<Report> {
    let mut scan = scan_report();
    scan.environment.hostname = HOSTILE.into();
    scan.environment.devices[0].name = HOSTILE.into();
    let s = scan.scan_mut().unwrap();
    s.devices[0].name = HOSTILE.into();
    let p = &mut s.processes[0];
    p.name = Some(HOSTILE.into());
    p.user = Some(HOSTILE.into());
    p.cmdline = Some(format!("python {HOSTILE}"));
    p.cuda_visible_devices = HOSTILE.into();
    p.container = Some(HOSTILE.into());
    s.findings[0].title = HOSTILE.into();
    s.findings[0].fix = HOSTILE.into();
    s.findings[0].evidence[0].label = HOSTILE.into();
    s.findings[0].evidence[0].value = HOSTILE.into();
    let mut replay = replay_report();
    replay.environment.kernel = HOSTILE.into();
    let r = replay.replay_mut().unwrap();
    let run = &mut r.runs[0];
    run.scenario = HOSTILE.into();
    run.variant = HOSTILE.into();
    run.source = HOSTILE.into();
    run.checks[0].expectation = HOSTILE.into();
    run.checks[0].detail = HOSTILE.into();
    run.timeline.markers[1].label = HOSTILE.into();
    run.timeline.markers[4].label = HOSTILE.into();
    let e = run.error.as_mut().unwrap();
    e.message = HOSTILE.into();
    e.step_label = HOSTILE.into();
    r.runs[4].reason = Some(HOSTILE.into());
    vec![scan, replay]
}

/// Validate report JSON against the checked-in docs/report.schema.json; panics listing every
/// violation. One line per producer: `assert_valid_report_json(&json_text)`.
pub fn assert_valid_report_json(json: &str) {
    let errors = report_schema_errors(json);
    assert!(
        errors.is_empty(),
        "report JSON does not match docs/report.schema.json:\n{}",
        errors.join("\n")
    );
}

/// Every violation of docs/report.schema.json in `json`, one line each.
pub fn report_schema_errors(json: &str) -> Vec<String> {
    let schema_path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/report.schema.json");
    let schema_text = std::fs::read_to_string(&schema_path)
        .unwrap_or_else(|e| panic!("{}: {e}", schema_path.display()));
    let schema: serde_json::Value = serde_json::from_str(&schema_text).expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let instance: serde_json::Value = serde_json::from_str(json).expect("report is JSON");
    validator
        .iter_errors(&instance)
        .map(|e| {
            let msg: String = e.to_string().chars().take(300).collect();
            format!("  at {}: {msg}", e.instance_path())
        })
        .collect()
}
