//! `gpu-lost`: a GPU the driver reported lost during the recording (fallen off the bus,
//! `NVML_ERROR_GPU_IS_LOST`; Xid 79 in the kernel log, NVIDIA's Xid catalogue,
//! docs.nvidia.com/deploy/xid-errors). The sampler leaves a gap on that GPU whose reason is the
//! lost error; this rule turns it into an error finding with the time and the last reading
//! before it, instead of a silent gap and the GPU's last reading shown as if current.

use super::prelude::*;
use crate::model::GapKind;

/// One error finding per GPU with a lost gap: when, the last reading, how many queries failed.
pub(super) fn gpu_lost(cx: &Prepared) -> Vec<Finding> {
    let mut first: BTreeMap<u32, &crate::model::SamplingGap> = BTreeMap::new();
    let mut failed: BTreeMap<u32, u64> = BTreeMap::new();
    for g in cx.rec.timeline.gaps.iter().filter(|g| g.reason.is_lost()) {
        let Some(d) = g.device else { continue };
        *failed.entry(d).or_default() += g.count;
        // The memory loop's gap opens at the last memory reading; the process lists are
        // read less often, so their gap opens earlier: prefer the memory gap, then the
        // earliest.
        let e = first.entry(d).or_insert(g);
        let key = |g: &crate::model::SamplingGap| (g.kind != GapKind::Memory, g.start_ms);
        if key(g) < key(e) {
            *e = g;
        }
    }
    first
        .into_iter()
        .map(|(d, gap)| {
            let rec_dev = cx.rec.devices.iter().find(|x| x.index == d);
            let series = cx.rec.timeline.devices.iter().find(|s| s.device == d);
            // The gap starts at the last good reading; the series keeps only changes of
            // level (envelopes), so its value then is the last stored sample at or before it.
            let last = series.and_then(|s| {
                s.samples
                    .iter()
                    .take_while(|(t, _)| *t <= gap.start_ms)
                    .last()
                    .map(|&(_, used)| (gap.start_ms, used, s.total))
            });
            let mut evidence = Vec::new();
            if let Some(r) = rec_dev.filter(|r| !r.uuid.is_empty()) {
                evidence.push(ev(format!("GPU {d} UUID"), &r.uuid));
            }
            let when = match last {
                Some((t, used, total)) => {
                    evidence.push(ev("last reading at", fmt_t(t)));
                    evidence.push(ev_bytes("last reading: used", used));
                    evidence.push(ev_bytes("of total", total));
                    format!(
                        "after {}; last reading {} of {}",
                        fmt_t(t),
                        format_bytes(used),
                        format_bytes(total)
                    )
                }
                None => {
                    evidence.push(ev("last reading", "none in this recording"));
                    format!("at {}", fmt_t(gap.start_ms))
                }
            };
            evidence.push(ev(
                "failed queries",
                failed.get(&d).copied().unwrap_or(0).to_string(),
            ));
            evidence.push(ev("driver said", gap.reason.as_str()));
            let name = rec_dev
                .filter(|r| !r.name.is_empty())
                .map_or(String::new(), |r| format!(" ({})", r.name));
            Finding {
                id: ids::GPU_LOST.into(),
                severity: Severity::Error,
                title: format!("GPU {d}{name} was lost (fallen off the bus, Xid 79) {when}"),
                devices: vec![d],
                pid: None,
                evidence,
                fix: fixes::GPU_LOST.into(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{fingerprints, TimelineThresholds};
    use crate::diagnose::ids;
    use crate::gpu::GpuError;
    use crate::model::{DeviceSeries, GapKind, GapReason, SamplingGap, Severity, Timeline};
    use crate::record::{RecordedDevice, Recording};
    use crate::units::GIB;

    /// Two GPUs sampled every 100 ms; GPU 1 answers until `lost_at` then fails with `reason`.
    fn recording(lost_at: f64, reason: &str) -> Recording {
        let series = |d: u32, until: f64| DeviceSeries {
            device: d,
            total: 16 * GIB,
            samples: (0..100)
                .map(|i| (i as f64 * 100.0, (2 + u64::from(d)) * GIB))
                .filter(|(t, _)| *t <= until)
                .collect(),
        };
        Recording {
            devices: (0..2)
                .map(|i| RecordedDevice {
                    index: i,
                    uuid: format!("GPU-{i}"),
                    name: "test".into(),
                    total: 16 * GIB,
                    minor: None,
                    label: None,
                })
                .collect(),
            timeline: Timeline {
                devices: vec![series(0, f64::MAX), series(1, lost_at)],
                markers: Vec::new(),
                processes: Vec::new(),
                gaps: vec![SamplingGap {
                    kind: GapKind::Memory,
                    device: Some(1),
                    start_ms: lost_at,
                    end_ms: 10_000.0,
                    count: 60,
                    reason: GapReason::from(reason),
                }],
            },
            end_ms: 10_000.0,
            ..Recording::default()
        }
    }

    #[test]
    fn a_gpu_lost_mid_run_is_an_error_with_its_last_reading() {
        let lost = GpuError::DeviceLost(1).to_string();
        let f = fingerprints(&recording(4_000.0, &lost), &TimelineThresholds::default());
        let g: Vec<_> = f.iter().filter(|f| f.id == ids::GPU_LOST).collect();
        assert_eq!(g.len(), 1, "{f:?}");
        assert_eq!(g[0].severity, Severity::Error);
        assert_eq!(g[0].devices, vec![1]);
        assert!(g[0].title.contains("after 4.00 s"), "{}", g[0].title);
        assert!(g[0].title.contains("3.00 GiB"), "{}", g[0].title);
        let ev = |k: &str| {
            g[0].evidence
                .iter()
                .find(|e| e.label == k)
                .map(|e| e.value.clone())
        };
        assert_eq!(ev("last reading at").as_deref(), Some("4.00 s"));
        assert_eq!(ev("failed queries").as_deref(), Some("60"));
        // Xid 79's immediate action in NVIDIA's catalogue is RESTART_BM, not RESET_GPU.
        assert!(g[0].fix.contains("drain") && g[0].fix.contains("reboot the node"));
        assert!(!g[0].fix.contains("--gpu-reset"), "{}", g[0].fix);
        // It is the first finding (errors first) and nothing blames GPU 0.
        assert_eq!(f[0].id, ids::GPU_LOST);
        assert!(f.iter().all(|f| !f.devices.contains(&0)), "{f:?}");
    }

    #[test]
    fn the_last_reading_is_when_the_gap_opened_even_on_a_sparse_series() {
        let mut rec = recording(4_000.0, &GpuError::DeviceLost(1).to_string());
        // Only changes of level are stored: one sample at 0 ms for GPU 1.
        rec.timeline.devices[1].samples.truncate(1);
        let f = fingerprints(&rec, &TimelineThresholds::default());
        let g = f.iter().find(|f| f.id == ids::GPU_LOST).expect("gpu-lost");
        assert!(g.title.contains("after 4.00 s"), "{}", g.title);
        assert!(g.title.contains("3.00 GiB"), "{}", g.title);
    }

    #[test]
    fn the_memory_gap_dates_the_loss_not_the_slower_process_lists() {
        let lost = GpuError::DeviceLost(1).to_string();
        let mut rec = recording(4_000.0, &lost);
        rec.timeline.gaps.insert(
            0,
            SamplingGap {
                kind: GapKind::Processes,
                device: Some(1),
                start_ms: 1_000.0,
                end_ms: 10_000.0,
                count: 9,
                reason: GapReason::from(lost.as_str()),
            },
        );
        let f = fingerprints(&rec, &TimelineThresholds::default());
        let g = f.iter().find(|f| f.id == ids::GPU_LOST).expect("gpu-lost");
        assert!(g.title.contains("after 4.00 s"), "{}", g.title);
        let failed = g.evidence.iter().find(|e| e.label == "failed queries");
        assert_eq!(failed.map(|e| e.value.as_str()), Some("69"));
    }

    #[test]
    fn other_query_failures_and_hangs_are_not_a_lost_gpu() {
        let th = TimelineThresholds::default();
        for reason in [
            "nvmlDeviceGetMemoryInfo failed: NVML_ERROR_UNKNOWN: unknown error",
            "hung: no answer from NVML within 1000 ms",
        ] {
            let f = fingerprints(&recording(4_000.0, reason), &th);
            assert!(f.iter().all(|f| f.id != ids::GPU_LOST), "{reason}: {f:?}");
        }
    }
}
