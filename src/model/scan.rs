//! What `vramdoc scan` found: processes holding memory, headroom.

use super::Finding;
use crate::gpu::DeviceInfo;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One process's memory on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessDeviceUsage {
    pub device: u32,
    /// `None` where NVML reports "not available".
    pub used: Option<u64>,
    /// Which of NVML's process lists named the process on this device (`compute`,
    /// `graphics`, `mps`), in that order; empty where not known (a report written before
    /// they were kept, a recording's peak). A process only in the graphics list is a
    /// graphics client (a display server) with no CUDA context. The graphics and MPS lists
    /// are read where the compute list leaves the device's memory unexplained
    /// (`gpu::device_read::ProcessLists`), so a graphics client holding memory is seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lists: Vec<vramdoc_gpu_spec::ProcessKind>,
}

impl ProcessDeviceUsage {
    /// Whether NVML named the process on this device only in its graphics list: a graphics
    /// client (a display server such as Xorg) with no compute (CUDA) or MPS context there.
    pub fn graphics_only(&self) -> bool {
        self.lists == [vramdoc_gpu_spec::ProcessKind::Graphics]
    }
}

/// A process holding GPU memory, as scan sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessInfo {
    pub pid: u32,
    /// Whether the PID exists in vramdoc's PID namespace.
    pub visible: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Command line, redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
    /// `CUDA_VISIBLE_DEVICES` from /proc/PID/environ: the value, `unset`, or `unknown`
    /// (permission denied or process not visible).
    pub cuda_visible_devices: String,
    /// Container hint from /proc/PID/cgroup (`docker`, `kubepods`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// The Kubernetes pod the process runs in (its cgroup's pod UID, named through the
    /// kubelet), when it runs in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodRef>,
    pub devices: Vec<ProcessDeviceUsage>,
}

/// A process's Kubernetes pod (issue 18; docs/fleet.md "Pod attribution"): the UID from
/// `/proc/PID/cgroup`, the names from the kubelet's log directories, the allocation from the
/// kubelet's pod-resources API. Names are as the kubelet wrote them (untrusted text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PodRef {
    /// The pod's UID (with dashes).
    pub uid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The container's name in the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// The container id (64 hex) from the cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// The GPU device ids the kubelet allocated to the pod's containers (pod-resources
    /// `List`, resources named `nvidia.com/...`): UUIDs, `GPU-…::N` time-slicing replicas,
    /// MIG ids or `nvidiaN`. `None` when the pod-resources API said nothing about this pod
    /// (no socket, or the pod is not listed); empty when the pod was allocated no GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_gpus: Option<Vec<String>>,
}

impl PodRef {
    /// `namespace/name`, or the UID when the kubelet's files did not name the pod.
    pub fn label(&self) -> String {
        match (&self.namespace, &self.name) {
            (Some(ns), Some(n)) => format!("{ns}/{n}"),
            _ => format!("pod {}", self.uid),
        }
    }

    /// `pod ml/llm-0, container vllm` (raw text: clean it where it is shown).
    pub fn describe(&self) -> String {
        let pod = match (&self.namespace, &self.name) {
            (Some(_), Some(_)) => format!("pod {}", self.label()),
            _ => self.label(),
        };
        match &self.container {
            Some(c) => format!("{pod}, container {c}"),
            None => pod,
        }
    }
}

/// GPUs the kubelet allocated to one container (pod-resources `List`), for every pod of the
/// node, whether or not it runs a GPU process now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PodAllocation {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// The device ids, as in [`PodRef::allocated_gpus`].
    pub device_ids: Vec<String>,
}

impl ProcessInfo {
    /// This process's entry on physical device `device`, if NVML lists it there.
    pub fn usage_on(&self, device: u32) -> Option<&ProcessDeviceUsage> {
        self.devices.iter().find(|u| u.device == device)
    }
}

/// What `vramdoc scan` found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScanResult {
    pub devices: Vec<DeviceInfo>,
    pub processes: Vec<ProcessInfo>,
    pub findings: Vec<Finding>,
    /// `host` or `container`: the PID namespace scan ran in (container: NVML PIDs may not map
    /// to local processes).
    #[serde(default)]
    pub pid_namespace: String,
    /// Where scan stood (issue 25): PID namespace, driver generation, device nodes; what the
    /// findings could conclude from there. Absent in reports made before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vantage: Option<super::Vantage>,
    /// Room for a new vLLM-style engine on every device (decided in `diagnose/`).
    #[serde(default)]
    pub headroom: Vec<Headroom>,
    /// Why pod attribution is missing or partial (no pod-resources socket, the kubelet did
    /// not answer), when processes run in pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_note: Option<String>,
    /// GPUs the kubelet allocated to each pod's containers, when its pod-resources API
    /// answered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_allocations: Vec<PodAllocation>,
    /// Per device, used memory no live listed process accounts for, split by what explains
    /// it (decided in `diagnose::unattributed`); absent in reports written before it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unattributed: Vec<Unattributed>,
}

/// Used memory of one device that no live listed process accounts for (`used` minus what
/// live listed processes hold), split by what explains it: `lost` is what `no-live-owner`
/// reports as memory with no owner; `managed` and `coherent` are explained (info at most).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Unattributed {
    pub device: u32,
    /// No explanation: a leaked or orphaned allocation.
    pub lost: u64,
    /// Managed (unified) memory of live listed processes on this device, at most what they
    /// have mapped from `/dev/nvidia-uvm` beyond their contexts: counted in `used`, in no
    /// process's usage.
    #[serde(default)]
    pub managed: u64,
    /// A coherent-memory GPU (a NUMA node of the host) keeping pages of exited processes
    /// counted as used until the kernel reclaims them.
    #[serde(default)]
    pub coherent: u64,
    /// Seen from a container on a driver that lists only its own PID namespace's processes
    /// (535.113 on): other tenants' memory, not attributable from there (issue 25).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub outside_namespace: u64,
    /// The processes whose managed memory explains `managed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_by: Vec<u32>,
}

/// Room for a new vLLM-style engine on one device. vLLM claims
/// `gpu_memory_utilization x (total - reserved)` (CUDA's total) up front; that must fit in
/// `total - used_by_others - reserved - context_reserve`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Headroom {
    pub device: u32,
    pub total: u64,
    pub reserved: u64,
    /// Held by processes already on the device (NVML v2 `used`).
    pub used_by_others: u64,
    /// Kept back for the new process's own CUDA context.
    pub context_reserve: u64,
    /// `total - used_by_others - reserved - context_reserve`, floored at 0.
    pub available: u64,
    /// The largest `u` with `ceil(u x (total - reserved)) <= available`, in hundredths
    /// (`diagnose::vllm_utilization`, docs/plan.md).
    pub max_gpu_memory_utilization: f64,
    /// The arithmetic above with the numbers, for people.
    pub arithmetic: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
