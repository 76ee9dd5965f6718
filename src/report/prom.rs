//! Prometheus exposition of a scan: a pure function from the report model (and how its
//! collection went) to the classic text format (`text/plain; version=0.0.4`), built with the
//! `prometheus` crate. Used by `vramdoc serve` (scrapes answered from the last collection)
//! and `vramdoc scan --prom FILE` (node_exporter's textfile collector). Metric names and
//! labels are documented in docs/fleet.md; nothing here decides a finding: findings and
//! headroom come from `crate::diagnose` through the report, and the "no live owner" bytes
//! from [`crate::diagnose::unattributed_bytes`], the arithmetic of that rule.

use crate::model::{ScanResult, Severity};
use prometheus::{Encoder, GaugeVec, Opts, Registry, TextEncoder};
use thiserror::Error;

/// `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Longest `comm` label value: the kernel's own limit for a process name (TASK_COMM_LEN-1).
pub const COMM_MAX: usize = 15;

/// Every finding id scan can report, exported with value 0 when absent so alerts can tell
/// "no finding" from "no data".
pub const KNOWN_RULES: &[&str] = &[
    crate::diagnose::ids::STRAY_CONTEXT,
    crate::diagnose::ids::NO_LIVE_OWNER,
    crate::diagnose::ids::INVISIBLE_PROCESSES,
    crate::diagnose::ids::USAGE_UNAVAILABLE,
    crate::diagnose::ids::LOW_HEADROOM,
    crate::diagnose::ids::DUPLICATE_COPY,
    crate::diagnose::ids::GPU_LOST,
    crate::diagnose::ids::DEVICE_UNAVAILABLE,
    crate::diagnose::ids::UNALLOCATED_GPU_USE,
    crate::diagnose::ids::POD_ALLOCATION_UNKNOWN,
    crate::diagnose::ids::ALLOCATED_GPU_IDLE,
];

#[derive(Debug, Error)]
#[error("building the Prometheus exposition: {0}")]
pub struct PromError(String);

impl From<prometheus::Error> for PromError {
    fn from(e: prometheus::Error) -> Self {
        PromError(e.to_string())
    }
}

/// How the collection behind an exposition went.
#[derive(Debug, Clone, PartialEq)]
pub struct Collection {
    /// Whether the collection read every device (false: the driver failed; device metrics
    /// are then absent, findings may still say why).
    pub success: bool,
    /// Wall time of the collection.
    pub duration_seconds: f64,
    /// When the collection finished, seconds since the Unix epoch.
    pub timestamp_seconds: f64,
    /// Backend label for `vramdoc_build_info` (`sim`, `nvml`).
    pub backend: String,
    /// The node's name: a `hostname` label on every series (`vramdoc serve`; `None`: none).
    pub hostname: Option<String>,
}

/// What to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PromOptions {
    /// Export `vramdoc_process_gpu_memory_bytes{gpu, uuid, pid, comm}` (one series per
    /// process and device: opt-in, PIDs are unbounded over time).
    pub per_process: bool,
}

/// A process name made safe and short for a label: at most [`COMM_MAX`] characters of
/// `[A-Za-z0-9._-]`, others replaced by `_`, and the `\xNN` escapes of bytes that are not
/// UTF-8 kept as they are (one character each, [`crate::term::escape_bytes`]: `caf\xe9`);
/// `unknown` when there is none. Never the command line.
pub fn sanitize_comm(name: Option<&str>) -> String {
    let name = name.unwrap_or("");
    let mut s = String::new();
    let mut chars = name.char_indices().peekable();
    let mut taken = 0;
    while let Some((i, c)) = chars.next() {
        if taken == COMM_MAX {
            break;
        }
        taken += 1;
        let escape = name.get(i..i + 4).filter(|e| {
            let b = e.as_bytes();
            b[0] == b'\\' && b[1] == b'x' && b[2..].iter().all(u8::is_ascii_hexdigit)
        });
        if let Some(e) = escape {
            s.push_str(e);
            for _ in 0..3 {
                chars.next();
            }
        } else if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
            s.push(c);
        } else {
            s.push('_');
        }
    }
    if s.is_empty() {
        "unknown".into()
    } else {
        s
    }
}

/// A Kubernetes name as a label value: DNS names (at most 253 characters of `a-z0-9.-`);
/// anything else the kubelet's files held is replaced by `_`.
pub fn sanitize_kube(name: &str) -> String {
    name.chars()
        .take(253)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn gauge(reg: &Registry, name: &str, help: &str, labels: &[&str]) -> Result<GaugeVec, PromError> {
    let g = GaugeVec::new(Opts::new(name, help), labels)?;
    reg.register(Box::new(g.clone()))?;
    Ok(g)
}

/// Register a gauge without labels and set it to `value`.
fn scalar(reg: &Registry, name: &str, help: &str, value: f64) -> Result<(), PromError> {
    gauge(reg, name, help, &[])?
        .with_label_values(&[] as &[&str])
        .set(value);
    Ok(())
}

/// A registry whose every series carries the `hostname` label when one is given.
pub fn registry(hostname: Option<&str>) -> Result<Registry, PromError> {
    Ok(match hostname {
        Some(h) => Registry::new_custom(
            None,
            Some(std::collections::HashMap::from([(
                "hostname".to_string(),
                h.to_string(),
            )])),
        )?,
        None => Registry::new(),
    })
}

/// The exposition for one collection: `scan` is what it read and decided (`None` when it
/// produced nothing).
pub fn render(
    scan: Option<&ScanResult>,
    collection: &Collection,
    opts: PromOptions,
) -> Result<String, PromError> {
    let reg = registry(collection.hostname.as_deref())?;
    let build = gauge(
        &reg,
        "vramdoc_build_info",
        "vramdoc version and GPU backend; always 1",
        &["version", "backend"],
    )?;
    build
        .with_label_values(&[env!("CARGO_PKG_VERSION"), collection.backend.as_str()])
        .set(1.0);
    scalar(
        &reg,
        "vramdoc_collect_success",
        "1 if the last collection read every device, 0 if it failed",
        if collection.success { 1.0 } else { 0.0 },
    )?;
    scalar(
        &reg,
        "vramdoc_collect_duration_seconds",
        "Wall time of the last collection (NVML queries, /proc, diagnosis)",
        collection.duration_seconds,
    )?;
    scalar(
        &reg,
        "vramdoc_collect_timestamp_seconds",
        "When the last collection finished, seconds since the Unix epoch",
        collection.timestamp_seconds,
    )?;

    let findings = gauge(
        &reg,
        "vramdoc_findings",
        "Findings of the last collection by rule and severity (see docs/scan.md)",
        &["rule", "severity"],
    )?;
    let all_findings = scan.map(|s| s.findings.as_slice()).unwrap_or(&[]);
    let mut rules: Vec<&str> = KNOWN_RULES.to_vec();
    for f in all_findings {
        if !rules.contains(&f.id.as_str()) {
            rules.push(f.id.as_str());
        }
    }
    for rule in rules {
        for sev in [Severity::Info, Severity::Warn, Severity::Error] {
            let n = all_findings
                .iter()
                .filter(|f| f.id == rule && f.severity == sev)
                .count();
            findings
                .with_label_values(&[rule, sev.as_str()])
                .set(n as f64);
        }
    }

    // Where the collection stood (issue 25): what its findings could conclude from there.
    if let Some(v) = scan.and_then(|s| s.vantage.as_ref()) {
        let vantage = gauge(
            &reg,
            "vramdoc_vantage_info",
            "Where vramdoc reads the driver from (docs/scan.md, Where vramdoc stands); always 1",
            &["pid_namespace", "driver", "generation"],
        )?;
        let generation = serde_json::to_value(v.generation)
            .ok()
            .and_then(|g| g.as_str().map(str::to_string))
            .unwrap_or_default();
        vantage
            .with_label_values(&[
                v.pid_namespace.label(),
                v.driver_version.as_deref().unwrap_or(""),
                &generation,
            ])
            .set(1.0);
    }

    if let Some(scan) = scan {
        let dev_labels = &["gpu", "uuid"];
        let info = gauge(
            &reg,
            "vramdoc_gpu_info",
            "Static facts of a GPU as NVML numbers it; always 1. `UUID` repeats `uuid` under \
             dcgm-exporter's label name, to join with its series",
            &["gpu", "uuid", "name", "pci_bus_id", "UUID"],
        )?;
        let used = gauge(
            &reg,
            "vramdoc_gpu_memory_used_bytes",
            "Used device memory (NVML v2: without reserved)",
            dev_labels,
        )?;
        let free = gauge(
            &reg,
            "vramdoc_gpu_memory_free_bytes",
            "Free device memory",
            dev_labels,
        )?;
        let total = gauge(
            &reg,
            "vramdoc_gpu_memory_capacity_bytes",
            "Total device memory (reserved + used + free)",
            dev_labels,
        )?;
        let reserved = gauge(
            &reg,
            "vramdoc_gpu_memory_reserved_bytes",
            "Device memory reserved by the driver and firmware",
            dev_labels,
        )?;
        let unattributed = gauge(
            &reg,
            "vramdoc_gpu_memory_unattributed_bytes",
            "Used memory no live listed process accounts for and nothing explains: what \
             the no-live-owner finding calls lost (absent when per-process usage is not \
             available)",
            dev_labels,
        )?;
        let explained = gauge(
            &reg,
            "vramdoc_gpu_memory_explained_unattributed_bytes",
            "Used memory no live listed process accounts for that is explained: reason \
             managed (unified memory a live process has mapped from /dev/nvidia-uvm), coherent \
             (a coherent-memory GPU's unreclaimed pages) or outside-namespace (other tenants' \
             memory, seen from a container on a driver from 535.113 on)",
            &["gpu", "uuid", "reason"],
        )?;
        let ratio = gauge(
            &reg,
            "vramdoc_vllm_max_safe_gpu_memory_utilization_ratio",
            "Largest gpu_memory_utilization a new vLLM engine can claim on this GPU now (0-1)",
            dev_labels,
        )?;
        let host = scan.pid_namespace != "container";
        for d in &scan.devices {
            // A device the driver would not answer for has no numbers to export (its memory
            // is zeroed, not measured); its finding says what is wrong.
            if d.status != crate::gpu::DeviceStatus::Ok {
                continue;
            }
            // A MIG instance as scan names it (`0/1`), a GPU by its index.
            let gpu = d.label();
            let l = [gpu.as_str(), d.uuid.as_str()];
            info.with_label_values(&[&gpu, &d.uuid, &d.name, &d.pci_bus_id, &d.uuid])
                .set(1.0);
            // Memory query not supported (GB10): no memory series rather than zeros. A GPU
            // in MIG mode: its memory is its instances' sum, exported per instance (a sum
            // over the node would count it twice).
            if d.memory_unknown.is_some() || d.is_mig_parent() {
                continue;
            }
            used.with_label_values(&l).set(d.memory.used as f64);
            free.with_label_values(&l).set(d.memory.free as f64);
            total.with_label_values(&l).set(d.memory.total as f64);
            reserved.with_label_values(&l).set(d.memory.reserved as f64);
            // The split the finding used (`diagnose::unattributed`); a report without one
            // (written before it) counts every unattributed byte as lost.
            let split = if scan.unattributed.is_empty() {
                crate::diagnose::unattributed_bytes(d, &scan.processes, host).map(|b| {
                    crate::model::Unattributed {
                        device: d.index,
                        lost: b,
                        ..Default::default()
                    }
                })
            } else {
                scan.unattributed
                    .iter()
                    .find(|u| u.device == d.index)
                    .cloned()
            };
            if let Some(u) = split {
                unattributed.with_label_values(&l).set(u.lost as f64);
                for (reason, b) in [
                    ("managed", u.managed),
                    ("coherent", u.coherent),
                    ("outside-namespace", u.outside_namespace),
                ] {
                    explained
                        .with_label_values(&[&gpu, &d.uuid, reason])
                        .set(b as f64);
                }
            }
            if let Some(h) = scan.headroom.iter().find(|h| h.device == d.index) {
                ratio
                    .with_label_values(&l)
                    .set(h.max_gpu_memory_utilization);
            }
        }
        if opts.per_process {
            // The pod labels only where some process runs in a pod: an empty label is no
            // label to Prometheus, so other nodes' series stay as they were.
            let kube_labels = scan.processes.iter().any(|p| p.pod.is_some());
            let labels: &[&str] = if kube_labels {
                &[
                    "gpu",
                    "uuid",
                    "pid",
                    "comm",
                    "pod",
                    "namespace",
                    "container",
                ]
            } else {
                &["gpu", "uuid", "pid", "comm"]
            };
            let procs = gauge(
                &reg,
                "vramdoc_process_gpu_memory_bytes",
                "GPU memory of one process on one GPU (comm: process name, truncated; pod, \
                 namespace, container: its Kubernetes pod, on nodes running pods)",
                labels,
            )?;
            for p in &scan.processes {
                let comm = sanitize_comm(p.name.as_deref());
                let pid = p.pid.to_string();
                let pod = p.pod.as_ref();
                let kube = |f: fn(&crate::model::PodRef) -> Option<&String>| {
                    pod.and_then(f)
                        .map_or_else(String::new, |v| sanitize_kube(v))
                };
                let (pod_name, namespace, container) = (
                    kube(|r| r.name.as_ref()),
                    kube(|r| r.namespace.as_ref()),
                    kube(|r| r.container.as_ref()),
                );
                for u in &p.devices {
                    let (Some(bytes), Some(d)) =
                        (u.used, scan.devices.iter().find(|d| d.index == u.device))
                    else {
                        continue;
                    };
                    let gpu = d.label();
                    let values: [&str; 7] = [
                        &gpu, &d.uuid, &pid, &comm, &pod_name, &namespace, &container,
                    ];
                    procs
                        .with_label_values(&values[..labels.len()])
                        .set(bytes as f64);
                }
            }
        }
    }

    let mut buf = Vec::new();
    TextEncoder::new().encode(&reg.gather(), &mut buf)?;
    String::from_utf8(buf).map_err(|e| PromError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coll(success: bool) -> Collection {
        Collection {
            success,
            duration_seconds: 0.25,
            timestamp_seconds: 1.7e9,
            backend: "sim".into(),
            hostname: None,
        }
    }

    #[test]
    fn the_node_name_labels_every_series() {
        let c = Collection {
            hostname: Some("gpu-node-7".into()),
            ..coll(true)
        };
        let text = render(None, &c, PromOptions::default()).unwrap();
        let series: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(!series.is_empty());
        for l in series {
            assert!(l.contains("hostname=\"gpu-node-7\""), "{l}");
        }
    }

    #[test]
    fn comm_is_short_and_safe() {
        assert_eq!(sanitize_comm(Some("python3")), "python3");
        assert_eq!(sanitize_comm(Some("a\"b}c\nd e")), "a_b_c_d_e");
        assert_eq!(sanitize_comm(Some(&"x".repeat(100))).len(), COMM_MAX);
        assert_eq!(sanitize_comm(None), "unknown");
        assert_eq!(sanitize_comm(Some("")), "unknown");
        // Issue 19: the escapes of a name that is not UTF-8 stay, one character each.
        assert_eq!(sanitize_comm(Some("caf\\xe9")), "caf\\xe9");
        let all_bad = "\\xff".repeat(20);
        assert_eq!(sanitize_comm(Some(&all_bad)), "\\xff".repeat(COMM_MAX));
        assert_eq!(sanitize_comm(Some("a\\xzz")), "a_xzz");
    }

    #[test]
    fn failed_collection_still_exports_status_and_zero_findings() {
        let text = render(None, &coll(false), PromOptions::default()).unwrap();
        assert!(text.contains("vramdoc_collect_success 0\n"), "{text}");
        assert!(text.contains("vramdoc_collect_duration_seconds 0.25\n"));
        assert!(text.contains("vramdoc_build_info{backend=\"sim\",version="));
        assert!(text.contains("vramdoc_findings{rule=\"no-live-owner\",severity=\"error\"} 0"));
        assert!(!text.contains("vramdoc_gpu_memory_used_bytes"));
    }

    #[test]
    fn the_unattributed_metric_is_the_lost_part_of_the_recorded_split() {
        use crate::units::GIB;
        let inv = crate::scan::sample_inventory();
        let th = crate::diagnose::Thresholds::default();
        let mut scan = crate::scan::build_report(&inv, &th)
            .into_scan()
            .expect("a scan");
        let find = |text: &str, prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<f64>().ok())
        };
        let lost = "vramdoc_gpu_memory_unattributed_bytes{gpu=\"0\"";
        let managed =
            "vramdoc_gpu_memory_explained_unattributed_bytes{gpu=\"0\",reason=\"managed\"";
        // As decided: 70 GiB of an exited PID, all lost.
        let text = render(Some(&scan), &coll(true), PromOptions::default()).unwrap();
        assert_eq!(find(&text, lost), Some((70 * GIB) as f64), "{text}");
        assert_eq!(find(&text, managed), Some(0.0), "{text}");
        // A split saying managed moves the bytes out of the alert's metric.
        scan.unattributed[0].managed = scan.unattributed[0].lost;
        scan.unattributed[0].lost = 0;
        let text = render(Some(&scan), &coll(true), PromOptions::default()).unwrap();
        assert_eq!(find(&text, lost), Some(0.0), "{text}");
        assert_eq!(find(&text, managed), Some((70 * GIB) as f64), "{text}");
        // A report without a split (written before it): every unattributed byte is lost.
        scan.unattributed.clear();
        let text = render(Some(&scan), &coll(true), PromOptions::default()).unwrap();
        assert_eq!(find(&text, lost), Some((70 * GIB) as f64), "{text}");
        assert_eq!(find(&text, managed), Some(0.0), "{text}");
    }
}
