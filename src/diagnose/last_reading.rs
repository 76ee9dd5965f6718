//! The last reading of a GPU before it was lost: a long-running reader (`vramdoc serve`)
//! remembers each GPU's last good memory reading and hands it here, which adds it to that
//! GPU's `gpu-lost` finding (a one-shot scan has none). Pure: readings in, evidence out.

use super::evidence::{ev, ev_bytes};
use super::ids;
use crate::model::Finding;
use std::collections::BTreeMap;

/// One GPU's last good memory reading and when it was taken.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LastReading {
    /// Seconds since the Unix epoch.
    pub t_unix: f64,
    pub used: u64,
    pub total: u64,
}

/// Add each lost GPU's last reading (when one is known) to its `gpu-lost` finding.
pub fn add_last_readings(findings: &mut [Finding], last: &BTreeMap<u32, LastReading>) {
    for f in findings.iter_mut().filter(|f| f.id == ids::GPU_LOST) {
        let Some(r) = f.devices.first().and_then(|d| last.get(d)) else {
            continue;
        };
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(r.t_unix.max(0.0) as u64);
        f.evidence.push(ev(
            "last reading at",
            humantime::format_rfc3339_seconds(t).to_string(),
        ));
        f.evidence.push(ev_bytes("last reading: used", r.used));
        f.evidence.push(ev_bytes("of total", r.total));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Severity;
    use crate::units::GIB;

    fn finding(id: &str, device: u32) -> Finding {
        Finding {
            id: id.into(),
            severity: Severity::Error,
            title: String::new(),
            devices: vec![device],
            pid: None,
            evidence: Vec::new(),
            fix: String::new(),
        }
    }

    #[test]
    fn only_a_lost_gpu_with_a_known_reading_gets_it() {
        let mut f = vec![
            finding(ids::GPU_LOST, 1),
            finding(ids::GPU_LOST, 2),
            finding(ids::DEVICE_UNAVAILABLE, 1),
        ];
        let last = BTreeMap::from([(
            1,
            LastReading {
                t_unix: 1_800_000_000.0,
                used: 5 * GIB,
                total: 16 * GIB,
            },
        )]);
        add_last_readings(&mut f, &last);
        let labels: Vec<&str> = f[0].evidence.iter().map(|e| e.label.as_str()).collect();
        assert_eq!(
            labels,
            ["last reading at", "last reading: used", "of total"]
        );
        assert_eq!(f[0].evidence[0].value, "2027-01-15T08:00:00Z");
        assert_eq!(f[0].evidence[1].bytes, Some(5 * GIB));
        assert!(f[1].evidence.is_empty() && f[2].evidence.is_empty());
    }
}
