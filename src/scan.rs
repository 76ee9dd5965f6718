//! The scan engine, below the commands: read the machine once ([`crate::inventory`]) and
//! decide its findings ([`crate::diagnose`]) into the scan report model. `vramdoc scan`
//! (terminal, files, `--prom`) and `vramdoc serve`'s collector ([`crate::serve`]) both take
//! their reports from here, so a scrape and a scan always agree.

use crate::diagnose::{self, Thresholds};
use crate::gpu::{GpuError, Monitor};
use crate::inventory::{self, Inventory};
use crate::model::Vantage;
use crate::model::{Body, Report, ScanResult};

/// What one scan needs besides the monitor.
#[derive(Debug, Clone)]
pub struct ScanConfig {
    /// The simulated box's spec, for the report header (`None` on the real backends).
    pub sim_spec: Option<String>,
    /// Where vramdoc stands, established once per command
    /// ([`inventory::establish_vantage`]); each scan adds the driver's facts.
    pub vantage: Vantage,
    pub thresholds: Thresholds,
    /// Where the kubelet's files are, for pod attribution ([`crate::pods`]).
    pub pods: crate::pods::PodConfig,
    /// Which NVML process lists to read ([`inventory::ProcessLists`]; `scan --all-lists`).
    pub lists: inventory::ProcessLists,
}

impl ScanConfig {
    /// A scan with the default thresholds, pod configuration and process lists
    /// (`preflight`, `plan`: they read the inventory, not scan's flags).
    pub fn with_defaults(sim_spec: Option<String>, vantage: Vantage) -> ScanConfig {
        ScanConfig {
            sim_spec,
            vantage,
            thresholds: Thresholds::default(),
            pods: Default::default(),
            lists: Default::default(),
        }
    }
}

/// Read the machine once through `monitor` and diagnose it. One bad GPU does not fail a
/// scan: the monitor reports it with a status (lost, no permission), which the diagnosis
/// turns into a finding. An error of the whole read (no driver, box gone) is returned.
pub fn scan(monitor: &dyn Monitor, cfg: &ScanConfig) -> Result<Report, GpuError> {
    let mut inv = inventory::collect(
        monitor,
        cfg.sim_spec.clone(),
        cfg.vantage.clone(),
        cfg.lists,
    )?;
    let pods = crate::pods::attribute(&mut inv.processes, &inv.environment.devices, &cfg.pods);
    inv.details.pods_note = pods.note;
    inv.details.pod_allocations = pods.allocations;
    inv.details.idle_allocations = pods.idle;
    inv.details.dra_registration = pods.dra_registration;
    inv.details.dynamic_resources_listed = pods.dynamic_resources_listed;
    let report = build_report(&inv, &cfg.thresholds);
    // The open-file walk (every process's /proc/PID/fd, what `fuser -v` does) is evidence
    // for `no-live-owner` only: done when that finding is raised, then decided again with it.
    // Maps (context evidence, managed bytes) are read only of the holders that concern the
    // GPUs it was raised on (`diagnose::holders::maps_wanted`).
    let flagged: Vec<u32> = report
        .scan()
        .map(|s| {
            s.findings
                .iter()
                .filter(|f| f.id == crate::diagnose::ids::NO_LIVE_OWNER)
                .flat_map(|f| f.devices.iter().copied())
                .collect()
        })
        .unwrap_or_default();
    if flagged.is_empty() {
        return Ok(report);
    }
    let devices = inv.devices().to_vec();
    let flagged: Vec<&crate::gpu::DeviceInfo> = devices
        .iter()
        .filter(|d| flagged.contains(&d.index))
        .collect();
    inv.details.node_holders = inventory::node_holders(&monitor.device_nodes(), &|name, files| {
        crate::diagnose::holders::maps_wanted(name, files, &flagged, &devices)
    });
    Ok(build_report(&inv, &cfg.thresholds))
}

/// The report model for one scan (pure: inventory in, report out).
pub fn build_report(inv: &Inventory, th: &Thresholds) -> Report {
    let (findings, headroom) = diagnose::diagnose(inv, th);
    Report::new(
        inv.environment.clone(),
        Body::Scan(ScanResult {
            devices: inv.devices().to_vec(),
            processes: inv.processes.clone(),
            findings,
            pid_namespace: inv.vantage.pid_namespace.label().to_string(),
            vantage: Some(inv.vantage.clone()),
            headroom,
            pods_note: inv.details.pods_note.clone(),
            pod_allocations: inv.details.pod_allocations.clone(),
            unattributed: diagnose::unattributed::split_all(inv),
        }),
    )
}

/// A deterministic inventory for renderer tests: two 80 GiB devices with very long names, a
/// visible process with a long command line on both, and an invisible one holding 70 GiB.
#[cfg(test)]
pub(crate) fn sample_inventory() -> Inventory {
    use crate::gpu::{DeviceInfo, MemoryInfo, Versions};
    use crate::model::{Environment, ProcessDeviceUsage, ProcessInfo};
    use crate::units::{GIB, MIB};
    let total = 80 * GIB;
    let dev = |i: u32, used: u64| DeviceInfo {
        index: i,
        name: "NVIDIA H100 80GB HBM3 with a very long product name for wrapping".into(),
        uuid: format!("GPU-{i:08x}-0000-0000-0000-000000000000"),
        pci_bus_id: format!("00000000:{:02X}:00.0", 0x17 + i),
        memory: MemoryInfo {
            total,
            reserved: 522 * MIB,
            used,
            free: total - 522 * MIB - used,
        },
        utilization_gpu: Some(97),
        temperature_c: Some(71),
        numa_node: None,
        mig: None,
        memory_unknown: None,
        status: Default::default(),
        minor: Some(i),
    };
    let devices = vec![dev(0, 448 * MIB + 70 * GIB), dev(1, 30 * GIB)];
    let versions = Versions {
        driver: "550.54.15".into(),
        cuda: "12.4".into(),
        nvml: "12.550.54.15".into(),
    };
    let long = "x".repeat(300);
    Inventory {
        environment: Environment {
            hostname: "a-very-long-hostname-".repeat(6),
            kernel: "6.1".into(),
            vramdoc_version: "0.1.0".into(),
            backend: "sim".into(),
            sim_spec: None,
            versions,
            devices,
        },
        processes: vec![
            ProcessInfo {
                pid: 4242,
                visible: true,
                user: Some("a-user-with-a-long-name".into()),
                name: Some("python3".into()),
                cmdline: Some(format!(
                    "python3 -m vllm.entrypoints.openai.api_server {long}"
                )),
                cuda_visible_devices: "GPU-00000001-0000-0000-0000-000000000000".into(),
                container: Some("kubepods".into()),
                pod: None,
                devices: vec![
                    ProcessDeviceUsage {
                        device: 0,
                        used: Some(448 * MIB),
                        lists: Vec::new(),
                    },
                    ProcessDeviceUsage {
                        device: 1,
                        used: Some(30 * GIB),
                        lists: Vec::new(),
                    },
                ],
            },
            ProcessInfo {
                pid: 77,
                visible: false,
                user: None,
                name: None,
                cmdline: None,
                cuda_visible_devices: "unknown".into(),
                container: None,
                pod: None,
                devices: vec![ProcessDeviceUsage {
                    device: 0,
                    used: Some(70 * GIB),
                    lists: Vec::new(),
                }],
            },
        ],
        vantage: Vantage::new(
            crate::model::PidNamespace {
                host: true,
                reason: "test".into(),
            },
            Some("550.54.15".into()),
        ),
        details: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{GIB, MIB};

    /// A successful collection over the simulated backend, without a hostname.
    fn sim_collection() -> crate::report::prom::Collection {
        crate::report::prom::Collection {
            success: true,
            duration_seconds: 0.01,
            timestamp_seconds: 1.0,
            backend: "sim".into(),
            hostname: None,
        }
    }

    #[test]
    fn prometheus_exposition_of_a_scan() {
        use crate::report::prom::{render, PromOptions};
        let report = build_report(&sample_inventory(), &Thresholds::default());
        let c = sim_collection();
        let text = render(report.scan(), &c, PromOptions { per_process: true }).unwrap();
        let u0 = "uuid=\"GPU-00000000-0000-0000-0000-000000000000\"";
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("{prefix} missing in {text}"))
                .to_string()
        };
        let used = (448 * MIB + 70 * GIB) as f64;
        assert_eq!(
            line("vramdoc_gpu_memory_used_bytes{gpu=\"0\""),
            format!("vramdoc_gpu_memory_used_bytes{{gpu=\"0\",{u0}}} {used}")
        );
        // PID 77 does not exist in the (host) namespace: its 70 GiB have no live owner.
        assert_eq!(
            line("vramdoc_gpu_memory_unattributed_bytes{gpu=\"0\""),
            format!(
                "vramdoc_gpu_memory_unattributed_bytes{{gpu=\"0\",{u0}}} {}",
                (70 * GIB) as f64
            )
        );
        assert!(text.contains("vramdoc_findings{rule=\"no-live-owner\",severity=\"error\"} 1"));
        assert!(
            text.contains(
                "vramdoc_vantage_info{driver=\"550.54.15\",generation=\"translated-zero-usage\",pid_namespace=\"host\"} 1"
            ),
            "{text}"
        );
        assert!(text
            .lines()
            .any(|l| l.starts_with("vramdoc_gpu_info{UUID=\"GPU-")
                && l.contains("gpu=\"1\",name=\"NVIDIA H100 80GB HBM3 with")));
        // No process runs in a pod: no pod labels.
        assert!(
            text.contains("comm=\"python3\",gpu=\"1\",pid=\"4242\""),
            "{text}"
        );
        assert!(
            text.contains("comm=\"unknown\",gpu=\"0\",pid=\"77\""),
            "{text}"
        );
        assert!(!text.contains("vllm.entrypoints"), "never the command line");
        let h = &report.scan().unwrap().headroom[1];
        assert!(text.contains(&format!(
            "vramdoc_vllm_max_safe_gpu_memory_utilization_ratio{{gpu=\"1\",uuid=\"GPU-00000001-0000-0000-0000-000000000000\"}} {}",
            h.max_gpu_memory_utilization
        )));
        let without = render(report.scan(), &c, PromOptions::default()).unwrap();
        assert!(!without.contains("vramdoc_process_gpu_memory_bytes"));
    }

    #[test]
    fn per_process_series_carry_the_pod_on_nodes_running_pods() {
        use crate::report::prom::{render, PromOptions};
        let mut inv = sample_inventory();
        inv.processes[0].pod = Some(crate::model::PodRef {
            uid: "6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f".into(),
            namespace: Some("ml".into()),
            name: Some("llm-0\"} 1\nevil{x=\"".into()),
            container: Some("vllm".into()),
            container_id: None,
            allocated_gpus: None,
        });
        let report = build_report(&inv, &Thresholds::default());
        let c = sim_collection();
        let text = render(report.scan(), &c, PromOptions { per_process: true }).unwrap();
        assert!(
            text.contains(
                "comm=\"python3\",container=\"vllm\",gpu=\"1\",namespace=\"ml\",pid=\"4242\",pod=\"llm-0___1_evil_x__\""
            ),
            "{text}"
        );
        // Outside a pod on the same node: empty values (no label, to Prometheus).
        assert!(
            text.contains(
                "comm=\"unknown\",container=\"\",gpu=\"0\",namespace=\"\",pid=\"77\",pod=\"\""
            ),
            "{text}"
        );
        assert!(!text.contains("\nevil"), "{text}");
    }
}
