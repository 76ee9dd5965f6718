//! `monitor-hang`: an NVML call of the recorder did not return in time (a GPU in a bad
//! state, a driver call stuck in D state: leptonai/gpud PR #117); the recording has a gap on
//! that GPU while the others went on.

use super::prelude::*;

/// The finding's id.
pub(super) const MONITOR_HANG: &str = "monitor-hang";

/// What to do about it.
pub(super) const FIX: &str = "An NVML query of this GPU did not return: the GPU or its driver \
     is in a bad state (look for Xid messages in `dmesg`, processes in D state with \
     `ps -eo pid,stat,cmd | awk '$2 ~ /D/'`, and `nvidia-smi -q -i N` hanging too). vramdoc \
     kept recording the other GPUs and left a gap on this one; drain the node and reset the \
     GPU (`nvidia-smi -r -i N`) or reboot before trusting its numbers again.";

/// One finding per GPU whose NVML calls hung, with the gaps they left.
pub(super) fn monitor_hang(cx: &Prepared) -> Vec<Finding> {
    let mut by_device: BTreeMap<Option<u32>, Vec<&crate::model::SamplingGap>> = BTreeMap::new();
    for g in cx.rec.timeline.gaps.iter().filter(|g| g.reason.is_hung()) {
        by_device.entry(g.device).or_default().push(g);
    }
    by_device
        .into_iter()
        .map(|(device, gaps)| {
            let start = gaps
                .iter()
                .map(|g| g.start_ms)
                .fold(f64::INFINITY, f64::min);
            let end = gaps.iter().map(|g| g.end_ms).fold(0.0, f64::max);
            let which = device.map_or("every GPU".to_string(), |d| format!("GPU {d}"));
            let mut evidence = vec![
                ev("no reading from", fmt_t(start)),
                ev("until", fmt_t(end)),
                ev(
                    "calls that hung or were skipped",
                    gaps.iter().map(|g| g.count).sum::<u64>().to_string(),
                ),
            ];
            if let Some(d) = device.and_then(|d| cx.rec.devices.iter().find(|x| x.index == d)) {
                evidence.insert(0, ev(format!("GPU {} UUID", d.index), &d.uuid));
            }
            evidence.push(ev("reason", gaps[0].reason.as_str()));
            Finding {
                id: MONITOR_HANG.into(),
                severity: Severity::Warn,
                title: format!(
                    "{which}: NVML stopped answering for {} (recorded as a gap)",
                    fmt_t(end - start)
                ),
                devices: device.into_iter().collect(),
                pid: None,
                evidence,
                fix: FIX.into(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{fingerprints, TimelineThresholds};
    use super::*;
    use crate::model::{DeviceSeries, GapKind, GapReason, SamplingGap, Timeline};
    use crate::record::{RecordedDevice, Recording};

    fn recording(reason: &str) -> Recording {
        let series = |d: u32| DeviceSeries {
            device: d,
            total: 16 << 30,
            samples: (0..100).map(|i| (i as f64 * 100.0, 1 << 30)).collect(),
        };
        Recording {
            devices: (0..2)
                .map(|i| RecordedDevice {
                    index: i,
                    uuid: format!("GPU-{i}"),
                    name: "test".into(),
                    total: 16 << 30,
                    minor: None,
                    label: None,
                })
                .collect(),
            timeline: Timeline {
                devices: vec![series(0), series(1)],
                markers: Vec::new(),
                processes: Vec::new(),
                gaps: vec![SamplingGap {
                    kind: GapKind::Memory,
                    device: Some(1),
                    start_ms: 2_000.0,
                    end_ms: 9_000.0,
                    count: 7,
                    reason: GapReason::from(reason),
                }],
            },
            end_ms: 10_000.0,
            ..Recording::default()
        }
    }

    #[test]
    fn a_hung_call_is_a_finding_on_its_gpu_and_a_lost_gpu_is_not() {
        let th = TimelineThresholds::default();
        let hung = fingerprints(&recording("hung: no answer from NVML within 1000 ms"), &th);
        let f: Vec<_> = hung.iter().filter(|f| f.id == MONITOR_HANG).collect();
        assert_eq!(f.len(), 1, "{hung:?}");
        assert_eq!(f[0].devices, vec![1]);
        assert!(f[0].title.contains("7.00 s"), "{}", f[0].title);
        let lost = fingerprints(&recording("device 1 is lost (fallen off the bus)"), &th);
        assert!(lost.iter().all(|f| f.id != MONITOR_HANG), "{lost:?}");
    }
}
