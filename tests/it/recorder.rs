//! The recorder under a misbehaving driver and on long jobs: hung NVML calls, one bad GPU
//! among good ones, processes in two lists, the observer's own cost. `vramdoc run` on shared
//! simulated boxes, through the in-process simulator and through nvml-wrapper over the
//! simulated libnvidia-ml.so.1.

use crate::common;

use common::poll::{eventually, SECS_10};
use common::{fresh_box, on_box, sim_fault, simgpu_lib_dir, KillOnDrop};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

const GIB: u64 = 1 << 30;

/// `vramdoc [--backend B] run --period 20ms --process-period 100ms --samples S --out R -- sleep 30`
/// on the box `dir`, started in the background.
fn run_sleeping(dir: &Path, backend: &str, samples: &Path, report: &Path) -> KillOnDrop {
    let mut c = on_box(dir);
    c.env("LD_LIBRARY_PATH", simgpu_lib_dir())
        .args([
            "--backend",
            backend,
            "run",
            "--period",
            "20ms",
            "--process-period",
            "100ms",
        ])
        .arg("--samples")
        .arg(samples)
        .arg("--out")
        .arg(report)
        .args(["--", "sleep", "30"])
        .stderr(std::process::Stdio::piped());
    KillOnDrop(c.spawn().expect("start vramdoc run"))
}

/// `vramdoc run --period 20ms --process-period 100ms --out REPORT` on the box `dir`; the
/// command to run follows.
fn run_to(dir: &Path, report: &Path) -> std::process::Command {
    let mut c = on_box(dir);
    c.args([
        "run",
        "--period",
        "20ms",
        "--process-period",
        "100ms",
        "--out",
    ])
    .arg(report);
    c
}

/// The report a `vramdoc run` wrote to `report`, after checking it exited 0.
fn report_of(o: &std::process::Output, report: &Path) -> Value {
    common::assert_ok(o, "vramdoc run");
    serde_json::from_slice(&std::fs::read(report).expect("read the report")).expect("report JSON")
}

/// The stream's lines of type `kind`.
fn lines_of(samples: &Path, kind: &str) -> Vec<Value> {
    std::fs::read_to_string(samples)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["type"] == kind)
        .collect()
}

/// Wait for the child to exit (at most `limit`); its exit code.
fn wait_at_most(child: &mut KillOnDrop, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return s.code();
        }
        assert!(
            start.elapsed() < limit,
            "vramdoc did not exit within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An NVML hang of GPU 1 in the middle of a run: SIGTERM is still forwarded, the report is
/// still written, GPU 1 has a gap saying why and a `monitor-hang` finding, GPU 0's readings
/// and the stream go on.
fn an_nvml_hang_gives_a_report_with_a_gap(backend: &str) {
    let boxdir = fresh_box("2x16GiB");
    let tmp = tempfile::tempdir().unwrap();
    let (samples, report) = (tmp.path().join("s.jsonl"), tmp.path().join("r.json"));
    let mut child = run_sleeping(boxdir.path(), backend, &samples, &report);
    eventually(SECS_10, "the job's sleep in the stream", || {
        std::fs::read_to_string(&samples).is_ok_and(|t| t.contains("\"name\":\"sleep\""))
    });
    sim_fault(
        boxdir.path(),
        &["--nvml-hang", "--device", "1", "--hang-limit", "60s"],
    );
    let hung_from = lines_of(&samples, "memory").len();
    // Stream lines keep coming with GPU 0 read and GPU 1 empty.
    eventually(SECS_10, "memory lines with GPU 1 empty", || {
        lines_of(&samples, "memory")[hung_from..]
            .iter()
            .filter(|m| m["used"][1].is_null() && m["used"][0].is_u64())
            .count()
            >= 10
    });
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let code = wait_at_most(&mut child, Duration::from_secs(20));
    sim_fault(boxdir.path(), &["--clear"]);
    assert_eq!(code, Some(128 + libc::SIGTERM), "the job's status");
    let r: Value = serde_json::from_slice(&std::fs::read(&report).expect("report written"))
        .expect("report JSON");
    let gaps = r["run"]["timeline"]["gaps"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let hung: Vec<&Value> = gaps
        .iter()
        .filter(|g| g["reason"].as_str().is_some_and(|s| s.starts_with("hung:")))
        .collect();
    assert!(!hung.is_empty(), "no hung gap: {gaps:?}");
    assert!(hung.iter().all(|g| g["device"] == 1), "{hung:?}");
    let ids: Vec<&str> = r["run"]["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["id"].as_str())
        .collect();
    assert!(ids.contains(&"monitor-hang"), "{ids:?}");
    // GPU 0 kept its readings up to the end.
    let gap_start = hung[0]["start_ms"].as_f64().unwrap();
    let gpu0 = r["run"]["timeline"]["devices"][0]["samples"]
        .as_array()
        .unwrap();
    let after = gpu0
        .iter()
        .filter(|s| s[0].as_f64().unwrap() > gap_start + 500.0)
        .count();
    assert!(after >= 10, "{after} GPU 0 samples after the hang began");
}

#[test]
fn an_nvml_hang_gives_a_report_with_a_gap_in_process() {
    an_nvml_hang_gives_a_report_with_a_gap("sim");
}

#[test]
fn an_nvml_hang_gives_a_report_with_a_gap_over_nvml() {
    an_nvml_hang_gives_a_report_with_a_gap("real");
}

/// A lost GPU or one vramdoc may not read: a gap on that GPU only, the other GPU's readings
/// and the stream intact.
mod one_bad_gpu_leaves_the_others_intact {
    use super::*;

    /// `lost`: the fault is a lost GPU, which is a `gpu-lost` error finding on GPU 1 with
    /// its last reading; any other fault is a gap and no such finding.
    fn case(fault: &[&str], lost: bool) {
        let boxdir = fresh_box("2x16GiB");
        let tmp = tempfile::tempdir().unwrap();
        let (samples, report) = (tmp.path().join("s.jsonl"), tmp.path().join("r.json"));
        let mut child = run_sleeping(boxdir.path(), "sim", &samples, &report);
        eventually(SECS_10, "the job's sleep in the stream", || {
            std::fs::read_to_string(&samples).is_ok_and(|t| t.contains("\"name\":\"sleep\""))
        });
        let holder =
            common::hold::Holder::start(boxdir.path(), &[], &["--device", "0", "--size", "1GiB"]);
        sim_fault(boxdir.path(), fault);
        eventually(SECS_10, "GPU 0 read while GPU 1 is not", || {
            lines_of(&samples, "memory")
                .iter()
                .filter(|m| m["used"][1].is_null() && m["used"][0].as_u64() >= Some(GIB))
                .count()
                >= 5
        });
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        wait_at_most(&mut child, Duration::from_secs(20));
        drop(holder);
        let mut stderr = String::new();
        if let Some(mut e) = child.0.stderr.take() {
            std::io::Read::read_to_string(&mut e, &mut stderr).unwrap();
        }
        let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        // The summary's line for GPU 1 says lost only when it was.
        assert_eq!(stderr.contains("GPU 1: LOST"), lost, "{stderr}");
        assert!(!stderr.contains("GPU 0: LOST"), "{stderr}");
        let gaps = r["run"]["timeline"]["gaps"]
            .as_array()
            .expect("run.timeline.gaps in the report");
        assert!(gaps.iter().any(|g| g["device"] == 1), "{gaps:?}");
        assert!(!gaps.iter().any(|g| g["device"] == 0), "{gaps:?}");
        let peak0 = r["run"]["timeline"]["devices"][0]["samples"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s[1].as_u64())
            .max();
        assert!(peak0 >= Some(GIB), "GPU 0's holder: {peak0:?}");
        // A report without the key fails here, not as "no gpu-lost finding".
        let findings = r["run"]["findings"]
            .as_array()
            .expect("run.findings in the report");
        let gone: Vec<&Value> = findings.iter().filter(|f| f["id"] == "gpu-lost").collect();
        if lost {
            assert_eq!(gone.len(), 1, "{findings:?}");
            assert_eq!(gone[0]["severity"], "error");
            assert_eq!(gone[0]["devices"], serde_json::json!([1]));
            let labels: Vec<&str> = gone[0]["evidence"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|e| e["label"].as_str())
                .collect();
            assert!(labels.contains(&"last reading at"), "{labels:?}");
        } else {
            assert!(gone.is_empty(), "{findings:?}");
        }
    }

    #[test]
    fn lost() {
        case(&["--lose-device", "1"], true);
    }

    #[test]
    fn no_permission() {
        case(&["--no-permission", "1"], false);
    }
}

/// A `C+G` process (in the compute and the graphics list, with the same memory) counts once
/// in the job's totals.
#[test]
fn a_c_plus_g_process_counts_once_in_the_jobs_totals() {
    let boxdir = fresh_box("1x16GiB");
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("r.json");
    let exe = env!("CARGO_BIN_EXE_vramdoc");
    let o = run_to(boxdir.path(), &report)
        .args(["--", exe, "sim", "hold", "--device", "0", "--size", "2GiB"])
        .args(["--also-graphics", "--duration", "1500ms"])
        .output()
        .unwrap();
    let r = report_of(&o, &report);
    let peak = r["run"]["tree_peaks"][0]["peak_used"].as_u64().unwrap();
    assert!(
        (2 * GIB..3 * GIB).contains(&peak),
        "the job's peak on GPU 0 is {peak} bytes for one 2 GiB C+G holder"
    );
}

/// A day-long staircase on GPU 0 (a job ratcheting up 6 GiB every 2 hours, never
/// releasing, with activation noise every 100 ms and an epoch marker every hour, ending in
/// an OOM) beside a steady GPU 1: the findings on the series as the recorder keeps them
/// (envelopes, full resolution around events; identical process lists as first and last)
/// are the findings on every sample.
mod long_staircase {
    use vramdoc::diagnose::{fingerprints, TimelineThresholds};
    use vramdoc::model::{DeviceSeries, Marker, ProcessSample, Timeline};
    use vramdoc::record::bounded::{ListRuns, Resolution, SeriesBuilder};
    use vramdoc::record::Recording;
    use vramdoc::record::{ErrorEvent, ErrorKind, JobExit, RecordedDevice, RecordedProcess};

    const GIB: u64 = 1 << 30;
    const HOUR: f64 = 3_600_000.0;
    const HOURS: f64 = 24.0;
    const TOTAL: u64 = 80 * GIB;

    /// Used bytes of the job on `device` at sample `i` (100 ms apart), without the noise.
    fn level(device: u32, i: u64) -> u64 {
        let t = i as f64 * 100.0;
        match device {
            0 => 8 * GIB + 6 * GIB * (t / (2.0 * HOUR)).floor() as u64,
            _ => 20 * GIB,
        }
    }

    fn noise(i: u64) -> u64 {
        (i % 7) * (GIB / 16)
    }

    fn recording(bounded: bool) -> Recording {
        let end = HOURS * HOUR - 60_000.0;
        let markers: Vec<Marker> = (0..HOURS as u64)
            .map(|h| Marker {
                t_ms: h as f64 * HOUR + 1_000.0,
                kind: "marker".into(),
                label: format!("epoch {h}"),
                device: None,
            })
            .collect();
        let oom = ErrorEvent {
            t_ms: end - 1_000.0,
            kind: ErrorKind::OutOfMemory,
            device: Some(0),
            pid: Some(1000),
            line: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB".into(),
            requested_bytes: Some(8 * GIB),
            facts: None,
        };
        let mut series = Vec::new();
        for d in 0..2u32 {
            let mut b = if bounded {
                SeriesBuilder::new(Resolution::default())
            } else {
                SeriesBuilder::unbounded()
            };
            let mut events = markers.iter().map(|m| m.t_ms).chain([oom.t_ms]).peekable();
            let mut i = 0u64;
            while (i as f64) * 100.0 <= end {
                let t = i as f64 * 100.0;
                while events.peek().is_some_and(|e| *e <= t) {
                    b.event(events.next().unwrap_or(t));
                }
                b.push(t, level(d, i) + noise(i));
                i += 1;
            }
            series.push(DeviceSeries {
                device: d,
                total: TOTAL,
                samples: b.finish(),
            });
        }
        let mut runs = ListRuns::default();
        let mut processes = Vec::new();
        let mut i = 0u64;
        while (i as f64) * 100.0 <= end {
            let t = i as f64 * 100.0;
            for d in 0..2u32 {
                let list = vec![ProcessSample {
                    t_ms: t,
                    device: d,
                    pid: 1000,
                    used: Some(level(d, i)),
                }];
                match bounded {
                    true => processes.extend(runs.keep(d, list)),
                    false => processes.extend(list),
                }
            }
            i += 5;
        }
        processes.extend(runs.finish());
        processes.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
        Recording {
            rules_only: Default::default(),
            devices: (0..2)
                .map(|i| RecordedDevice {
                    index: i,
                    uuid: format!("GPU-0000000{i}-0000-0000-0000-000000000000"),
                    name: "NVIDIA H100 80GB HBM3".into(),
                    total: TOTAL,
                    minor: None,
                    label: None,
                })
                .collect(),
            timeline: Timeline {
                devices: series,
                markers,
                processes,
                gaps: Vec::new(),
            },
            // Through serde: fields added to `RecordedProcess` later keep their defaults.
            processes: vec![
                serde_json::from_value::<RecordedProcess>(serde_json::json!({
                    "pid": 1000,
                    "name": "python",
                    "first_seen_ms": 0.0,
                    "exit_ms": end,
                    "in_tree": true,
                }))
                .expect("a recorded process"),
            ],
            errors: vec![oom],
            end_ms: end,
            exit: Some(JobExit::Code(1)),
            device_file_holders: Vec::new(),
        }
    }

    #[test]
    fn findings_are_the_same_on_the_enveloped_series() {
        let th = TimelineThresholds::default();
        let (full, kept) = (recording(false), recording(true));
        let n = |r: &Recording| r.timeline.devices[0].samples.len();
        assert!(
            n(&kept) * 20 < n(&full),
            "{} of {} samples kept",
            n(&kept),
            n(&full)
        );
        let summary = |r: &Recording| -> Vec<(String, Vec<u32>, String, String)> {
            fingerprints(r, &th)
                .into_iter()
                .map(|f| (f.id, f.devices, format!("{:?}", f.severity), f.title))
                .collect()
        };
        let (want, got) = (summary(&full), summary(&kept));
        assert!(
            want.iter().any(|f| f.0 == "growth-without-release"),
            "the staircase is not found on every sample: {want:?}"
        );
        assert_eq!(got, want);
    }
}

/// An OOM line printed by a worker with its own `CUDA_VISIBLE_DEVICES=1` and vLLM's PID
/// prefix names physical GPU 1 (its CUDA ordinal 0), not vramdoc's GPU 0; the same line
/// without a prefix is read through the command's variables (none: GPU 0).
#[test]
fn an_error_line_is_mapped_through_the_printing_processs_own_variables() {
    let boxdir = fresh_box("2x16GiB");
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("r.json");
    let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 \
               has a total capacity of 15.78 GiB of which 1.00 GiB is free.";
    let worker = format!(
        "sleep 1; echo \"(VllmWorker pid=$$) {oom}\" >&2; sleep 0.5; echo \"{oom}\" >&2; sleep 0.5"
    );
    let o = run_to(boxdir.path(), &report)
        .args([
            "--",
            "sh",
            "-c",
            "env CUDA_VISIBLE_DEVICES=1 sh -c \"$0\"; sleep 0.3",
        ])
        .arg(&worker)
        .output()
        .unwrap();
    let r = report_of(&o, &report);
    let errors = r["run"]["errors"].as_array().cloned().unwrap_or_default();
    let device_of = |prefixed: bool| {
        errors
            .iter()
            .find(|e| {
                e["line"]
                    .as_str()
                    .is_some_and(|l| l.starts_with('(') == prefixed)
            })
            .map(|e| e["device"].clone())
    };
    assert_eq!(device_of(true), Some(Value::from(1)), "{errors:?}");
    // No prefix: the command's variables (none), so GPU 0.
    assert_eq!(device_of(false), Some(Value::from(0)), "{errors:?}");
}

/// NVML hung before the run starts (every call blocks, init included): `vramdoc run` gives
/// up within its start limit with 125 (vramdoc's own failure, as with no GPU) and says what
/// to check; the command never starts.
#[test]
fn an_nvml_hung_before_the_start_is_an_error_not_a_hang() {
    let boxdir = fresh_box("2x16GiB");
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("ran");
    sim_fault(boxdir.path(), &["--nvml-hang", "--hang-limit", "60s"]);
    for backend in ["sim", "real"] {
        let started = Instant::now();
        let o = on_box(boxdir.path())
            .env("LD_LIBRARY_PATH", simgpu_lib_dir())
            .args(["--backend", backend, "run", "--", "touch"])
            .arg(&marker)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(125), "{backend}: {err}");
        assert!(err.contains("NVML did not answer"), "{backend}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{backend}: {:?}",
            started.elapsed()
        );
        assert!(!marker.exists(), "{backend}: the command ran");
    }
    sim_fault(boxdir.path(), &["--clear"]);
}
