//! Benign jobs raise nothing: hand-written families, then proptest-generated ones.

use super::*;

// ----------------------------------------------------------------------------------------
// Benign jobs raise nothing.

/// Steady training: load, a first iteration that the allocator caches, then flat steps.
fn training(total: u64, weights: f64, first_iter: &[f64], steps: usize, with_markers: bool) -> Job {
    let t = total as f64;
    let end = 10_000.0 + steps as f64 * 1000.0 + 5000.0;
    let mut j = Job::new(&[total], end);
    j.proc_(10, None, Some(end - 2000.0));
    j.set(300.0, 10, 0, 448 * MIB);
    let mut level = 448 * MIB + (weights * t) as u64;
    j.ramp(1000.0, 5000.0, 10, 0, 448 * MIB, level);
    let mut at = 7000.0;
    for part in first_iter {
        let next = level + (part * t) as u64;
        j.ramp(at, 400.0, 10, 0, level, next);
        level = next;
        at += 1500.0;
    }
    for k in 0..steps {
        let s = 10_000.0 + k as f64 * 1000.0;
        if with_markers {
            j.marker(s, "step", &format!("step {k}"));
        }
    }
    j
}

#[test]
fn benign_steady_training_raises_nothing() {
    for (weights, iter, markers) in [
        (0.30, vec![0.25], true),
        (0.40, vec![0.20, 0.20, 0.13], false),
        (0.40, vec![0.20, 0.20, 0.13], true),
        // Near full (96.8%) after four ratchets, then flat for two minutes.
        (0.42, vec![0.20, 0.20, 0.13], false),
        (0.10, vec![0.05], true),
    ] {
        let j = training(24 * G, weights, &iter, 120, markers);
        assert!(j.ids().is_empty(), "{weights} {iter:?}: {:?}", j.ids());
    }
}

#[test]
fn benign_load_unload_cycles_raise_nothing() {
    let mut j = Job::new(&[24 * G, 24 * G], 100_000.0);
    j.proc_(10, None, Some(98_000.0));
    j.set(100.0, 10, 0, 448 * MIB);
    for k in 0..6 {
        let at = 1000.0 + k as f64 * 15_000.0;
        j.ramp(at, 3000.0, 10, 0, 448 * MIB, gib(20.0));
        j.set(at + 10_000.0, 10, 0, 448 * MIB);
        j.marker(at + 10_100.0, "release", "unloaded");
    }
    assert!(j.ids().is_empty(), "{:?}", j.ids());
}

#[test]
fn benign_inference_with_fixed_kv_cache_raises_nothing() {
    assert!(engine(0.5, false).ids().is_empty());
    assert!(engine(0.9, false).ids().is_empty());
}

#[test]
fn benign_data_and_tensor_parallel_jobs_raise_nothing() {
    // DDP: one process per GPU, each with CUDA_VISIBLE_DEVICES.
    let mut j = Job::new(&[24 * G, 24 * G], 30_000.0);
    for (pid, dev) in [(10u32, 0u32), (11, 1)] {
        j.proc_(pid, Some(&dev.to_string()), Some(29_000.0));
        j.set(100.0, pid, dev, 448 * MIB);
        j.ramp(1000.0, 3000.0, pid, dev, 448 * MIB, gib(18.0));
    }
    assert!(j.ids().is_empty(), "{:?}", j.ids());
    // One process, weights split over two GPUs, then gradients the same way.
    let mut j = Job::new(&[24 * G, 24 * G], 30_000.0);
    j.proc_(10, None, Some(29_000.0));
    for dev in [0, 1] {
        j.set(100.0, 10, dev, 448 * MIB);
        j.ramp(1000.0, 3000.0, 10, dev, 448 * MIB, gib(6.0));
        j.ramp(6000.0, 3000.0, 10, dev, gib(6.0), gib(11.5));
    }
    assert!(j.ids().is_empty(), "{:?}", j.ids());
}

#[test]
fn empty_and_malformed_recordings_do_not_panic() {
    assert!(fingerprints(&Recording::default(), &TimelineThresholds::default()).is_empty());
    let mut rec = training(16 * G, 0.3, &[0.2], 5, true).build();
    rec.timeline.devices[0].samples.reverse();
    rec.timeline.devices[0].total = 0;
    rec.errors.push(ErrorEvent {
        t_ms: f64::NAN,
        kind: ErrorKind::OutOfMemory,
        device: Some(42),
        pid: None,
        line: String::new(),
        requested_bytes: Some(u64::MAX),
        facts: None,
    });
    let _ = fingerprints(&rec, &TimelineThresholds::default());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Generated benign jobs: training (load, a first iteration cached by the allocator,
    /// flat steps), load-unload cycles, and an engine with a fixed budget that finishes.
    #[test]
    fn generated_benign_jobs_raise_nothing(
        family in 0u8..4,
        total_gib in prop::sample::select(vec![16u64, 24, 40, 80, 141]),
        weights in 0.05f64..0.45,
        iter in prop::collection::vec(0.02f64..0.12, 1..4),
        steps in 5usize..60,
        markers in any::<bool>(),
        cycles in 1usize..5,
        budget in 0.3f64..0.75,
        devices in 1u32..3,
        jitter_mib in 0u64..48,
        neighbour in any::<bool>(),
    ) {
        let total = total_gib * G;
        let j = match family {
            0 => training(total, weights, &iter, steps, markers),
            1 => {
                let mut j = Job::new(&vec![total; devices as usize], 20_000.0 * cycles as f64 + 5000.0);
                j.proc_(10, None, Some(20_000.0 * cycles as f64 + 3000.0));
                for dev in 0..devices {
                    j.set(100.0, 10, dev, 448 * MIB);
                }
                for k in 0..cycles {
                    let at = 1000.0 + k as f64 * 20_000.0;
                    for dev in 0..devices {
                        let to = 448 * MIB + (weights * total as f64) as u64;
                        j.ramp(at, 2000.0, 10, dev, 448 * MIB, to);
                        j.set(at + 12_000.0, 10, dev, 448 * MIB);
                    }
                    if markers {
                        j.marker(at + 12_500.0, "release", "unloaded");
                    }
                }
                j
            }
            2 => {
                // Data parallel: one process per GPU under CUDA_VISIBLE_DEVICES, each
                // loading, warming up and running steps with activations that come and go.
                let n = devices + 1;
                let mut j = Job::new(&vec![total; n as usize], 40_000.0);
                for dev in 0..n {
                    let pid = 100 + dev;
                    j.proc_(pid, Some(&dev.to_string()), Some(38_000.0));
                    j.set(200.0, pid, dev, 448 * MIB);
                    let w = 448 * MIB + (weights * total as f64) as u64;
                    j.ramp(1000.0, 4000.0, pid, dev, 448 * MIB, w);
                    let mut at = 6000.0;
                    while at < 36_000.0 {
                        let act = (iter[0] * total as f64) as u64;
                        j.set(at, pid, dev, w + act);
                        j.set(at + 300.0, pid, dev, w);
                        at += 1000.0;
                    }
                }
                if markers {
                    for k in 0..30 {
                        j.marker(6000.0 + k as f64 * 1000.0, "step", &format!("step {k}"));
                    }
                }
                j
            }
            _ => {
                let t = total as f64;
                let mut j = Job::new(&[total], 60_000.0);
                j.proc_(10, None, Some(55_000.0));
                j.set(500.0, 10, 0, 448 * MIB);
                let w = 448 * MIB + (weights.min(budget - 0.1) * t) as u64;
                j.ramp(1000.0, 5000.0, 10, 0, 448 * MIB, w);
                j.ramp(8000.0, 200.0, 10, 0, w, (budget * t) as u64);
                let mut at = 10_000.0;
                while at < 50_000.0 {
                    j.set(at, 10, 0, (budget * t) as u64 + (0.02 * t) as u64);
                    j.set(at + 400.0, 10, 0, (budget * t) as u64);
                    at += 1500.0;
                }
                j
            }
        };
        let mut j = j;
        j.jitter = jitter_mib * MIB;
        if neighbour {
            // Another user's process starts on GPU 0 during the job and keeps running.
            j.set(j.end / 3.0, 999, 0, total / 10);
        }
        let ids = j.ids();
        prop_assert!(ids.is_empty(), "family {} fired {:?}", family, ids);
    }
}

/// nvml.h, nvmlDeviceGetMemoryInfo: on coherent-memory GPUs (GH200, GB200) pages freed by
/// an exited process stay counted as used until reclaimed. Information, never an error.
#[test]
fn coherent_memory_after_exit_is_information() {
    let mut j = Job::new(&[96 * G], 10_000.0);
    j.proc_(10, None, Some(5000.0));
    j.set(100.0, 10, 0, gib(20.0));
    // The device keeps the pages counted, while NVML no longer lists the exited process.
    j.stuck.push(10);
    let mut rec = j.build();
    rec.devices[0].name = "NVIDIA GH200 480GB".into();
    for p in rec.timeline.processes.iter_mut() {
        if p.t_ms > 5000.0 {
            p.used = None;
        }
    }
    let all = fingerprints(&rec, &TimelineThresholds::default());
    let f = all
        .iter()
        .find(|f| f.id == ids::HELD_AFTER_EXIT)
        .expect("held-after-exit is still said");
    assert_eq!(f.severity, Severity::Info, "{}", f.title);
    assert!(f.title.contains("coherent-memory"), "{}", f.title);
    assert!(all.iter().all(|f| f.severity == Severity::Info), "{all:?}");
}
