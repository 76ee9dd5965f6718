//! Unit tests of the converter on hand-built recordings.

use super::source::{from_samples, Source, SourceDevice, SourceError};
use super::*;
use crate::model::{DeviceSeries, Marker, MarkerKind, ProcessSample};
use crate::scenario::{Expectation, Op, SizeSpec};
use crate::units::{GIB, MIB};

const JOB: u32 = 4242;
const OTHER: u32 = 777;

fn marker(t: f64, label: &str) -> Marker {
    Marker {
        t_ms: t,
        kind: MarkerKind::Marker,
        label: label.into(),
        device: None,
    }
}

/// A staircase on a 16 GiB GPU: a context, three 4 GiB plateaus, an OOM asking 8 GiB; a
/// neighbour of 1 GiB (+ its context) from the start; markers before each size.
fn staircase() -> Source {
    let total = 16 * GIB;
    let ctx = 448 * MIB;
    let neighbour = GIB + ctx;
    let mut samples = Vec::new();
    let mut procs = Vec::new();
    let mut markers = Vec::new();
    let mut t = 0.0;
    for (k, job) in [0, ctx, ctx + 4 * GIB, ctx + 8 * GIB, ctx + 12 * GIB]
        .into_iter()
        .enumerate()
    {
        if k > 0 {
            markers.push(marker(
                t + 1.0,
                &format!("size {k} /home/alice/planted-path-x1"),
            ));
        }
        for _ in 0..5 {
            t += 100.0;
            samples.push((t, neighbour + job));
            procs.push(ProcessSample {
                t_ms: t,
                device: 0,
                pid: OTHER,
                used: Some(neighbour),
            });
            if job > 0 {
                procs.push(ProcessSample {
                    t_ms: t,
                    device: 0,
                    pid: JOB,
                    used: Some(job),
                });
            }
        }
    }
    let mut one_gpu = job_on_one_gpu(total, samples, procs);
    one_gpu.devices[0].name = "Simulated GPU 16GiB".into();
    Source {
        markers,
        errors: vec![SourceError {
            t_ms: t + 10.0,
            out_of_memory: true,
            device: Some(0),
            requested: Some(8 * GIB),
            free: None,
        }],
        findings: vec!["out-of-memory".into(), "growth-without-release".into()],
        hostname: Some("planted-host-x2".into()),
        truncated: false,
        process_period_ms: 100.0,
        period_ms: 100.0,
        exit_ms: None,
        ..one_gpu
    }
}

/// A recording of one GPU of `total` bytes read as `samples`, its processes' readings
/// `procs`; the job's tree is [`JOB`].
fn job_on_one_gpu(total: u64, samples: Vec<(f64, u64)>, procs: Vec<ProcessSample>) -> Source {
    Source {
        devices: vec![SourceDevice {
            index: 0,
            name: "x".into(),
            total,
        }],
        series: vec![DeviceSeries {
            device: 0,
            total,
            samples,
        }],
        processes: procs,
        tree: [JOB].into_iter().collect(),
        ..Source::default()
    }
}

/// The context overhead of the recorded boxes.
const CTX: u64 = 448 * MIB;

/// The job (a vLLM server) on one GPU of `total` bytes: a context (the job's process holds
/// [`CTX`] at 100 ms), then the GPU at `claimed` bytes from 200 ms on.
fn context_then_claim(total: u64, claimed: u64) -> Source {
    let samples = vec![(0.0, 0), (100.0, CTX), (200.0, claimed), (300.0, claimed)];
    let procs = vec![ProcessSample {
        t_ms: 100.0,
        device: 0,
        pid: JOB,
        used: Some(CTX),
    }];
    Source {
        engine: super::engine_claim::detect(["vllm serve model"]),
        ..job_on_one_gpu(total, samples, procs)
    }
}

#[test]
fn a_plain_job_at_a_round_share_keeps_its_bytes() {
    // Issue 26: 60 % of a 16 GiB card, no engine: 9.6 GiB on any card, not 60 % of it.
    let total = 16 * GIB;
    let src = Source {
        engine: None,
        ..context_then_claim(total, (0.6 * total as f64) as u64 + CTX)
    };
    let c = convert_source(&src, spec_of).unwrap();
    assert!(
        !c.scenario
            .steps
            .iter()
            .any(|s| matches!(s.op, Op::ClaimUtilization { .. })),
        "{}",
        c.toml
    );
    assert!(c.scenario.description.contains("absolute"), "{}", c.toml);
    // Issue 39 item 7: "raised out-of-memory Every size…" had no full stop.
    let d = &c.scenario.description;
    assert!(
        d.contains("raised. Every size") || d.contains(". Every size is absolute"),
        "{d}"
    );
    assert!(d.ends_with('.'), "{d}");
}

fn spec_of(d: &[(String, u64)]) -> Option<String> {
    crate::backend::recorded_box_spec(d)
}

#[test]
fn a_staircase_becomes_context_allocs_and_the_failed_allocation_last() {
    let c = convert_source(&staircase(), spec_of).unwrap();
    let s = &c.scenario;
    assert_eq!(s.devices, 1);
    assert_eq!(s.recorded_on.as_deref(), Some("16GiB"));
    assert_eq!(s.fingerprint.as_deref(), Some("growth-without-release"));
    let ops: Vec<&str> = s.steps.iter().map(|st| st.op.name()).collect();
    assert_eq!(
        ops,
        ["pause", "context", "pause", "alloc", "pause", "alloc", "pause", "alloc", "alloc"],
        "{}",
        c.toml
    );
    let last = s.steps.last().unwrap();
    assert_eq!(last.id, "failed-alloc");
    assert!(
        matches!(last.op, Op::Alloc { size: SizeSpec::Bytes(b), device: 0, .. } if b == 8 * GIB)
    );
    for st in &s.steps[3..8] {
        if let Op::Alloc { size, .. } = &st.op {
            assert_eq!(*size, SizeSpec::Bytes(4 * GIB), "{}", st.label);
        }
    }
    // The neighbour: its bytes beyond the context its replay makes.
    assert_eq!(s.neighbours.len(), 1);
    assert_eq!(s.neighbours[0].size, SizeSpec::Bytes(GIB));
    let expect = &s.variants[0].expect;
    assert!(expect.contains(&Expectation::Oom {
        at_or_after: Some("m4".into()),
        before: None
    }));
    assert!(expect
        .iter()
        .any(|e| matches!(e, Expectation::Peak { device: 0, .. })));
}

#[test]
fn the_file_keeps_no_path_or_host_from_marker_texts() {
    let c = convert_source(&staircase(), spec_of).unwrap();
    for planted in [
        "alice",
        "planted-path-x1",
        "planted-host-x2",
        "/home",
        "4242",
        "777",
    ] {
        assert!(!c.toml.contains(planted), "{planted} in\n{}", c.toml);
    }
    assert!(c.toml.contains("size 4 «path»"), "{}", c.toml);
}

#[test]
fn a_recognised_utilisation_claim_is_kept_as_that_fraction() {
    let total = 80 * GIB;
    let src = context_then_claim(total, (0.9 * total as f64) as u64 + CTX);
    let c = convert_source(&src, spec_of).unwrap();
    assert!(
        c.scenario
            .steps
            .iter()
            .any(|s| matches!(s.op, Op::ClaimUtilization { fraction, .. } if (fraction - 0.9).abs() < 1e-9)),
        "{}",
        c.toml
    );
    assert!(c.scenario.variants[0]
        .expect
        .contains(&Expectation::Completes));
}

#[test]
fn a_vllm_budget_counting_the_context_is_a_claim_where_a_context_is_within_a_step() {
    use super::convert::convert;
    let one = |total: u64| {
        // Context included, as vLLM counts.
        let src = context_then_claim(total, (0.9 * total as f64) as u64);
        let (s, _) = convert(&src, 0.0, None).unwrap();
        s.steps
            .iter()
            .any(|st| matches!(st.op, Op::ClaimUtilization { fraction, .. } if (fraction - 0.9).abs() < 1e-9))
    };
    // 80 GiB: a context (448 MiB) is within one step (1.6 GiB).
    assert!(one(80 * GIB));
    // 16 GiB: it is not (one step: 327 MiB): exact bytes instead.
    assert!(!one(16 * GIB));
}

#[test]
fn a_long_noisy_recording_is_coalesced_under_the_cap_keeping_the_big_steps() {
    let total = 24 * GIB;
    let mut samples = Vec::new();
    let mut procs = Vec::new();
    // 20 000 samples swinging by 100 MiB, and one 10 GiB load in the middle.
    for i in 0..20_000u64 {
        let base = if i >= 10_000 { 10 * GIB } else { 0 };
        let used = 512 * MIB + base + (i % 2) * 100 * MIB;
        samples.push((i as f64 * 10.0, used));
        procs.push(ProcessSample {
            t_ms: i as f64 * 10.0,
            device: 0,
            pid: JOB,
            used: Some(used),
        });
    }
    let src = job_on_one_gpu(total, samples, procs);
    let c = convert_source(&src, spec_of).unwrap();
    assert!(c.summary.steps_before > MAX_STEPS, "{:?}", c.summary);
    assert!(c.scenario.steps.len() <= MAX_STEPS, "{:?}", c.summary);
    assert!(c.toml.contains("Coalesced:"));
    let allocated: u64 = c
        .scenario
        .steps
        .iter()
        .filter_map(|s| match s.op {
            Op::Alloc {
                size: SizeSpec::Bytes(b),
                ..
            } => Some(b),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    assert!(
        allocated >= 9 * GIB,
        "the 10 GiB load survives: {allocated}"
    );
}

const HEADER: &str = r#"{"type":"header","version":1,"created_unix_ms":1,"devices":[{"index":0,"uuid":"GPU-x","name":"NVIDIA L4","total":24152899584}],"command":["python","planted-argv-x3"],"period_us":20000,"process_period_us":100000}"#;

#[test]
fn a_samples_stream_cut_by_a_crash_still_converts() {
    let mut text = String::from(HEADER);
    text.push('\n');
    text.push_str(r#"{"type":"start","t_ms":1.0,"pid":9,"ppid":1,"nspid":[9],"name":"python","cmdline":"python planted-argv-x3 --token=planted-secret-x4"}"#);
    text.push('\n');
    for (i, used) in [0u64, 448, 4544, 8640].iter().enumerate() {
        let t = i as f64 * 100.0;
        text.push_str(&format!(
            "{{\"type\":\"memory\",\"t_ms\":{t},\"used\":[{}]}}\n",
            used * MIB
        ));
        if *used > 0 {
            text.push_str(&format!(
                "{{\"type\":\"process\",\"t_ms\":{t},\"device\":0,\"pid\":9,\"used\":{},\"tree\":true}}\n",
                used * MIB
            ));
        }
    }
    text.push_str(r#"{"type":"memory","t_ms":400.0,"us"#);
    let src = from_samples(&text, "run.jsonl").unwrap();
    assert!(src.truncated);
    let c = convert_source(&src, spec_of).unwrap();
    assert_eq!(c.scenario.recorded_on.as_deref(), Some("l4"));
    assert!(c.toml.contains("cut short"));
    for planted in ["planted-argv-x3", "planted-secret-x4", "python"] {
        assert!(!c.toml.contains(planted), "{planted}:\n{}", c.toml);
    }
}

#[test]
fn bad_streams_name_the_file_and_line() {
    let e = from_samples("{\"type\":\"memory\",\"t_ms\":1,\"used\":[]}\n", "x.jsonl")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("x.jsonl: not a `vramdoc run --samples` stream"),
        "{e}"
    );
    let text = format!("{HEADER}\nnot json\n{{\"type\":\"end\",\"t_ms\":1,\"status\":0}}\n");
    let e = from_samples(&text, "x.jsonl").unwrap_err().to_string();
    assert!(e.starts_with("x.jsonl:2: not a line"), "{e}");
    let e = convert_source(
        &from_samples(&format!("{HEADER}\n"), "x.jsonl").unwrap(),
        spec_of,
    )
    .unwrap_err();
    assert_eq!(e, ReproError::NoSamples);
}

#[test]
fn hostile_marker_text_cannot_add_keys_or_tables_to_the_file() {
    let mut src = staircase();
    src.markers[1].label =
        "x\" \n[env]\nLD_PRELOAD = \"/tmp/evil.so\"\n[[steps]]\nop = \"pause\" \u{1b}[2J".into();
    let c = convert_source(&src, spec_of).unwrap();
    assert!(c.scenario.env.is_empty(), "{}", c.toml);
    assert!(!c.toml.contains("evil.so"), "{}", c.toml);
    assert!(!c.toml.contains('\u{1b}'), "{}", c.toml);
    assert!(!c.toml.lines().any(|l| l.trim() == "[env]"), "{}", c.toml);
    // The same number of steps as with a plain text.
    let plain = convert_source(&staircase(), spec_of).unwrap();
    assert_eq!(c.scenario.steps.len(), plain.scenario.steps.len());
}

#[test]
fn the_recorded_box_is_named_by_presets_or_sizes() {
    let t4 = ("Tesla T4".to_string(), 15 * GIB);
    let generic = ("Simulated GPU 16GiB".to_string(), 16 * GIB);
    assert_eq!(spec_of(&[t4.clone(), t4.clone()]).as_deref(), Some("2xt4"));
    assert_eq!(spec_of(&[t4, generic]).as_deref(), Some("t4,16GiB"));
    assert_eq!(spec_of(&[]), None);
    let resolved = crate::backend::resolve_recorded(&[
        ("a.toml".into(), Some("2xt4".into())),
        ("b.toml".into(), Some("2xt4".into())),
    ]);
    assert_eq!(resolved.as_deref(), Ok("2xt4"));
    assert!(
        crate::backend::resolve_recorded(&[("a.toml".into(), Some("9xnope".into()))])
            .unwrap_err()
            .to_string()
            .contains("a.toml")
    );
}

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    fn line(kind: u8, t: u32, a: u64, b: u64, pid: u8) -> String {
        match kind % 5 {
            0 => format!("{{\"type\":\"memory\",\"t_ms\":{t},\"used\":[{a},{b}]}}"),
            1 => format!(
                "{{\"type\":\"process\",\"t_ms\":{t},\"device\":{},\"pid\":{pid},\"used\":{a},\"tree\":{}}}",
                b % 3,
                pid.is_multiple_of(2)
            ),
            2 => format!("{{\"type\":\"marker\",\"t_ms\":{t},\"kind\":\"release\",\"label\":\"r {a}\"}}"),
            3 => format!(
                "{{\"type\":\"error\",\"t_ms\":{t},\"kind\":\"cuda-oom\",\"device\":{},\"requested\":{b}}}",
                a % 4
            ),
            _ => format!("{{\"type\":\"exit\",\"t_ms\":{t},\"pid\":{pid}}}"),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Any stream of well-formed lines with any numbers (huge sizes, times out of order,
        /// unknown devices) converts or fails with an error, and what converts parses.
        #[test]
        fn any_stream_converts_or_errs(
            lines in proptest::collection::vec(
                (any::<u8>(), 0u32..100_000, prop_oneof![any::<u64>(), 0u64..(64 * GIB)],
                 prop_oneof![any::<u64>(), 0u64..(64 * GIB)], any::<u8>()),
                0..120,
            ),
            cut in any::<bool>(),
        ) {
            let header = r#"{"type":"header","version":1,"devices":[{"index":0,"name":"x","total":17179869184},{"index":1,"name":"y","total":0}],"period_us":1000,"process_period_us":10000}"#;
            let mut text = format!("{header}\n");
            for (k, t, a, b, pid) in &lines {
                text.push_str(&line(*k, *t, *a, *b, *pid));
                text.push('\n');
            }
            if cut {
                text.push_str("{\"type\":\"mem");
            }
            let src = from_samples(&text, "p.jsonl").unwrap();
            if let Ok(c) = convert_source(&src, spec_of) {
                prop_assert!(c.scenario.steps.len() <= MAX_STEPS);
                prop_assert!(c.toml.len() as u64 <= crate::input::MAX_SCENARIO_BYTES);
            }
        }
    }
}

// Issue 29: hostile or unusual recordings (items 1, 2, 3, 6, 7, 8) and issue 24's one
// stream schema.

/// `n` GPUs of 16 GiB, the job holding a context on each from the first reading.
fn many_gpus(n: u32) -> Source {
    let total = 16 * GIB;
    let mut src = Source {
        tree: [JOB].into_iter().collect(),
        ..Source::default()
    };
    for d in 0..n {
        src.devices.push(SourceDevice {
            index: d,
            name: "x".into(),
            total,
        });
        src.series.push(DeviceSeries {
            device: d,
            total,
            samples: vec![(0.0, 0), (100.0, CTX), (200.0, CTX + GIB)],
        });
        for (t, u) in [(100.0, CTX), (200.0, CTX + GIB)] {
            src.processes.push(ProcessSample {
                t_ms: t,
                device: d,
                pid: JOB,
                used: Some(u),
            });
        }
    }
    src
}

/// Item 1: a recording of ~1,000 GPU series is refused before the step loop (which used
/// to double its quantum forever: one context per GPU never shrinks).
#[test]
fn a_thousand_gpu_series_are_refused_before_any_work() {
    let e = convert_source(&many_gpus(1000), spec_of).unwrap_err();
    assert!(e.to_string().contains("at most 64"), "{e}");
    // 64 is a scenario's limit and converts.
    let c = convert_source(&many_gpus(64), spec_of).unwrap();
    assert_eq!(c.scenario.devices, 64);
}

/// Items 2 and 8: 12,000 other PIDs on the job's GPU become at most
/// `MAX_NEIGHBOURS_PER_GPU` neighbours (the largest alone, the rest merged at their
/// combined peak), so the file stays small and device totals are kept.
#[test]
fn many_neighbour_pids_are_merged_into_a_bounded_few() {
    let total = 80 * GIB;
    let n = 12_000u32;
    let mut samples = Vec::new();
    let mut procs = Vec::new();
    for k in 0..n {
        // Each a 1 MiB process in one round of its own; 4 big ones.
        let t = 100.0 + f64::from(k);
        let used = if k < 4 { 2 * GIB } else { MIB };
        procs.push(ProcessSample {
            t_ms: t,
            device: 0,
            pid: 10_000 + k,
            used: Some(used),
        });
    }
    samples.push((0.0, 0));
    for k in 0..20u64 {
        let t = 100.0 + k as f64 * 600.0;
        samples.push((t, 8 * GIB + CTX + k * 256 * MIB));
        procs.push(ProcessSample {
            t_ms: t,
            device: 0,
            pid: JOB,
            used: Some(CTX + k * 256 * MIB),
        });
    }
    let c = convert_source(&job_on_one_gpu(total, samples, procs), spec_of).unwrap();
    let ns = &c.scenario.neighbours;
    assert!(!ns.is_empty() && ns.len() <= 8, "{} neighbours", ns.len());
    assert!(c.toml.len() < 100_000, "{} bytes", c.toml.len());
}

/// Item 7: a job attached to with `run --pid` already holds its memory at the first
/// reading; that memory is the job's, not memory in use before it.
#[test]
fn a_steady_attached_job_converts_to_its_level() {
    let total = 16 * GIB;
    let held = CTX + 6 * GIB;
    let samples: Vec<(f64, u64)> = (0..10).map(|k| (f64::from(k) * 100.0, held)).collect();
    let procs: Vec<ProcessSample> = (0..10)
        .map(|k| ProcessSample {
            t_ms: f64::from(k) * 100.0 + 5.0,
            device: 0,
            pid: JOB,
            used: Some(held),
        })
        .collect();
    let c = convert_source(&job_on_one_gpu(total, samples, procs), spec_of).unwrap();
    let s = &c.scenario;
    assert!(s.neighbours.is_empty(), "{:?}", s.neighbours);
    let allocated: u64 = s
        .steps
        .iter()
        .filter_map(|st| match &st.op {
            Op::Alloc {
                size: SizeSpec::Bytes(b),
                ..
            } => Some(*b),
            _ => None,
        })
        .sum();
    assert_eq!(allocated + CTX, held, "{}", c.toml);
}

/// Issue 24: a `--samples` stream recorded while one GPU was lost (`null` readings of that
/// GPU) converts; the lost GPU's gap is no reading, not an error.
#[test]
fn a_stream_with_a_lost_gpu_converts() {
    let mut text = String::from(
        r#"{"type":"header","version":1,"created_unix_ms":0,"devices":[{"index":0,"uuid":"GPU-a","name":"NVIDIA L4","total":24152899584},{"index":1,"uuid":"GPU-b","name":"NVIDIA L4","total":24152899584}],"command":["python"],"period_us":100000,"process_period_us":100000}"#,
    );
    text.push('\n');
    for (i, used) in [0u64, 448, 4544, 8640].iter().enumerate() {
        let t = i as f64 * 100.0;
        let other = if i >= 2 {
            "null".to_string()
        } else {
            "0".into()
        };
        text.push_str(&format!(
            "{{\"type\":\"memory\",\"t_ms\":{t},\"used\":[{},{other}]}}\n",
            used * MIB
        ));
        if *used > 0 {
            text.push_str(&format!(
                "{{\"type\":\"process\",\"t_ms\":{t},\"device\":0,\"pid\":9,\"used\":{},\"tree\":true}}\n",
                used * MIB
            ));
        }
    }
    text.push_str("{\"type\":\"end\",\"t_ms\":400.0,\"status\":0}\n");
    let src = from_samples(&text, "run.jsonl").unwrap();
    let c = convert_source(&src, spec_of).unwrap();
    assert_eq!(c.scenario.devices, 1);
    assert!(c.scenario.steps.iter().any(|s| s.op.name() == "alloc"));
}

/// Item 6: the host name recorded in a stream's header is scrubbed from marker labels,
/// as it is from a report's.
#[test]
fn a_streams_host_name_is_scrubbed_from_labels() {
    let mut text = String::from(
        r#"{"type":"header","version":1,"devices":[{"index":0,"uuid":"GPU-a","name":"NVIDIA L4","total":24152899584}],"hostname":"gpunode17","period_us":100000,"process_period_us":100000}"#,
    );
    text.push('\n');
    text.push_str(
        "{\"type\":\"marker\",\"t_ms\":150.0,\"kind\":\"marker\",\"label\":\"rank 0 up on gpunode17\"}\n",
    );
    for (i, used) in [0u64, 448, 4544, 8640].iter().enumerate() {
        let t = i as f64 * 100.0;
        text.push_str(&format!(
            "{{\"type\":\"memory\",\"t_ms\":{t},\"used\":[{}]}}\n",
            used * MIB
        ));
        if *used > 0 {
            text.push_str(&format!(
                "{{\"type\":\"process\",\"t_ms\":{t},\"device\":0,\"pid\":9,\"used\":{},\"tree\":true}}\n",
                used * MIB
            ));
        }
    }
    let c = convert_source(&from_samples(&text, "run.jsonl").unwrap(), spec_of).unwrap();
    assert!(!c.toml.contains("gpunode17"), "{}", c.toml);
    assert!(c.toml.contains("rank 0 up on"), "{}", c.toml);
}

/// One process-list round on GPU 0 at `t`: each `(pid, used)` holding memory is listed.
fn list_round(procs: &mut Vec<ProcessSample>, t: f64, listed: &[(u32, u64)]) {
    for &(pid, used) in listed.iter().filter(|(_, used)| *used > 0) {
        procs.push(ProcessSample {
            t_ms: t,
            device: 0,
            pid,
            used: Some(used),
        });
    }
}

/// Item 3: a neighbour that left before the job's big allocation is stopped after the last
/// step before it left; one that came later starts at the first step after it came.
#[test]
fn neighbours_hold_memory_only_while_they_were_listed() {
    let total = 16 * GIB;
    let mut samples = Vec::new();
    let mut procs = Vec::new();
    for k in 0..=30u32 {
        let t = f64::from(k) * 100.0;
        let early = if t <= 1000.0 { 8 * GIB } else { 0 };
        let late = if t >= 2500.0 { GIB } else { 0 };
        let job = match k {
            0..=1 => 0,
            2..=14 => CTX,
            15..=26 => CTX + 10 * GIB,
            _ => CTX + 11 * GIB,
        };
        samples.push((t, early + late + job));
        list_round(
            &mut procs,
            t,
            &[(OTHER, early), (OTHER + 1, late), (JOB, job)],
        );
    }
    let c = convert_source(&job_on_one_gpu(total, samples, procs), spec_of).unwrap();
    let s = &c.scenario;
    assert_eq!(s.neighbours.len(), 2, "{}", c.toml);
    let pos = |id: &Option<String>| {
        id.as_ref()
            .and_then(|id| s.steps.iter().position(|st| &st.id == id))
    };
    let alloc = s
        .steps
        .iter()
        .position(|st| matches!(st.op, Op::Alloc { .. }))
        .expect("the 10 GiB allocation");
    // The early one is there from the start and gone before the allocation.
    assert_eq!(s.neighbours[0].from, None, "{}", c.toml);
    assert!(
        pos(&s.neighbours[0].until).is_some_and(|u| u < alloc),
        "{}",
        c.toml
    );
    // The late one came after it: it is started after the allocation, and never stopped.
    assert!(
        pos(&s.neighbours[1].from).is_some_and(|f| f > alloc),
        "{}",
        c.toml
    );
    assert_eq!(s.neighbours[1].until, None, "{}", c.toml);
}

/// Item 9: bidi overrides and zero-width characters of a marker never reach the file raw.
#[test]
fn hidden_characters_of_labels_never_reach_the_file() {
    let mut src = staircase();
    src.markers[0].label = "size\u{202e}1 \u{200b}x\u{2060}y\u{feff}".into();
    let c = convert_source(&src, spec_of).unwrap();
    for bad in ['\u{202e}', '\u{200b}', '\u{2060}', '\u{feff}'] {
        assert!(!c.toml.contains(bad), "{bad:?} in\n{}", c.toml);
    }
    assert!(c.toml.contains("size1"), "{}", c.toml);
}

/// Item 15: a run report without its run section is not "a run report, not a run report":
/// the typed envelope refuses it when read, saying which section is missing.
#[test]
fn a_run_report_without_its_section_says_so() {
    let e = serde_json::from_str::<crate::model::Report>(
        r#"{"schema_version":1,"kind":"run","environment":{"hostname":"h","kernel":"k",
        "vramdoc_version":"0","backend":"sim","versions":{"driver":"","cuda":"","nvml":""},
        "devices":[]},"command":[],"created_unix_ms":0}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(!e.contains("not a run report"), "{e}");
    assert!(e.contains("without its `run` section"), "{e}");
}

/// A loaded host reads the lists late: a neighbour's 6 GiB is on the device 80 ms before a
/// list shows it, and its exit 70 ms before a list stops showing it (lists every 10 ms
/// asked for). The job's own 2 GiB from 200 ms are its only allocation (its free at the end
/// is the exit's), and the neighbour keeps its size. Placed at the lists' readings, the
/// neighbour's bytes were the job's for 80 ms, and its exit a free and an allocation more.
#[test]
fn a_neighbour_listed_late_is_not_taken_for_the_job() {
    let total = 16 * GIB;
    let mut samples = Vec::new();
    let mut procs = Vec::new();
    // The neighbour: a context from 100 ms, 6 GiB more from 150 ms, gone at 400 ms.
    let theirs = |k: u32| match k {
        10..=14 => CTX,
        15..=39 => CTX + 6 * GIB,
        _ => 0,
    };
    // The lists, late: read at these rounds only.
    let rounds = [0u32, 5, 11, 20, 23, 30, 47, 50, 55];
    let mine = |k: u32| {
        if (20..50).contains(&k) {
            CTX + 2 * GIB
        } else {
            CTX
        }
    };
    for k in 0..=60u32 {
        let t = f64::from(k) * 10.0;
        samples.push((t, mine(k) + theirs(k)));
        if rounds.contains(&k) {
            list_round(&mut procs, t, &[(OTHER, theirs(k)), (JOB, mine(k))]);
        }
    }
    let src = Source {
        process_period_ms: 10.0,
        period_ms: 10.0,
        ..job_on_one_gpu(total, samples, procs)
    };
    let c = convert_source(&src, spec_of).unwrap();
    let s = &c.scenario;
    let ops: Vec<&str> = s.steps.iter().map(|st| st.op.name()).collect();
    assert_eq!(ops, ["context", "alloc"], "{}", c.toml);
    assert!(
        matches!(s.steps[1].op, Op::Alloc { size: SizeSpec::Bytes(b), .. } if b == 2 * GIB),
        "{}",
        c.toml
    );
    assert_eq!(s.neighbours.len(), 1, "{}", c.toml);
    assert_eq!(s.neighbours[0].size, SizeSpec::Bytes(6 * GIB), "{}", c.toml);
}

/// Issue 37 item 7: an OOM line stating the free memory the samples saw adds nothing; one
/// stating 1 GiB less adds one holder of what was missed (less the context its replay
/// makes), started just before the failed allocation, and the description says so.
#[test]
fn the_free_memory_an_oom_line_states_is_reproduced() {
    let src = staircase();
    let total = src.devices[0].total;
    let t = src.errors[0].t_ms;
    let seen = total
        - src.series[0]
            .samples
            .iter()
            .rfind(|p| p.0 <= t)
            .map(|p| p.1)
            .unwrap();
    let with_free = |free: u64| {
        let mut s = src.clone();
        s.errors[0].free = Some(free);
        convert_source(&s, spec_of).unwrap().scenario
    };
    let plain = convert_source(&src, spec_of).unwrap().scenario;
    let same = with_free(seen);
    assert_eq!(same.neighbours, plain.neighbours);
    assert_eq!(same.description, plain.description);
    let less = with_free(seen - GIB);
    assert_eq!(less.neighbours.len(), plain.neighbours.len() + 1);
    let n = less.neighbours.last().unwrap();
    assert_eq!(n.from.as_deref(), Some("failed-alloc"));
    assert_eq!(n.until, None);
    assert_eq!(n.size, SizeSpec::Bytes(GIB - 448 * MIB));
    assert!(n.label.contains("the samples missed"), "{}", n.label);
    assert!(
        less.description
            .contains("the 1.00 GiB the samples missed is modelled"),
        "{}",
        less.description
    );
    // The peak check admits the moment both hold.
    let max = less.variants[0].expect.iter().find_map(|e| match e {
        Expectation::Peak {
            max: Some(SizeSpec::Bytes(b)),
            ..
        } => Some(*b),
        _ => None,
    });
    assert!(max.is_some_and(|m| m >= total - (seen - GIB)), "{max:?}");
}

// Issue 34: `scenario from` reads a stream in bounded memory.
mod stream;
