//! What decides which physical GPUs a process may use besides `CUDA_VISIBLE_DEVICES`, kept
//! the same way by scan's inventory (each visible process) and `run`'s recording (each
//! process of the job's tree), so `diagnose::devset` and `diagnose::visibility` decide a
//! process's device set from one shape whichever command saw it. Filled from the process's
//! environment ([`GpuEnv::from_vars`]) and what `host` reads of its view (the device files
//! it can open, its device cgroup, the device list a device plugin mounted).

use serde::{Deserialize, Serialize};

/// The variables Slurm names a job's (or step's) GPUs with, the step's first.
pub const SLURM_GPU_VARS: [&str; 2] = ["SLURM_STEP_GPUS", "SLURM_JOB_GPUS"];

/// What decides which physical GPUs a process may use, besides `CUDA_VISIBLE_DEVICES`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuEnv {
    /// `CUDA_DEVICE_ORDER` (`FASTEST_FIRST` when unset, or `PCI_BUS_ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_device_order: Option<String>,
    /// `NVIDIA_VISIBLE_DEVICES`, set by the NVIDIA container runtime: the GPUs mounted into
    /// the process's container (NVML indices or UUIDs, `all`, `none`, `void`, `MIG-…` ids,
    /// or a directory: the device plugin's volume-mounts strategy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvidia_visible_devices: Option<String>,
    /// When `NVIDIA_VISIBLE_DEVICES` names a directory (volume-mounts strategy): the device
    /// IDs mounted there, as the container sees them; `None` when it could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mounted_device_ids: Option<Vec<String>>,
    /// `SLURM_STEP_GPUS`, else `SLURM_JOB_GPUS` (name, value): the GPUs Slurm gave the job
    /// (`diagnose::devset`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_gpus: Option<(String, String)>,
    /// Minors of the `nvidia<N>` files in its own view of the device directory
    /// (`host::devices::node_minors`); `None`: not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_minors: Option<Vec<u32>>,
    /// Minors of the GPU files its v1 device cgroup allows; `None`: all, or not known
    /// (cgroup v2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_minors: Option<Vec<u32>>,
}

impl GpuEnv {
    /// The variables' part, from `get` (a variable's value as read, `None`: unset): each value
    /// trimmed, Slurm's the first of [`SLURM_GPU_VARS`] that is set and not empty, redacted
    /// (`crate::redact::redact_env`). What only the host can say (the mounted list, the
    /// device files, the cgroup) is left `None`.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> GpuEnv {
        let get = |k: &str| get(k).map(|v| v.trim().to_string());
        GpuEnv {
            cuda_device_order: get("CUDA_DEVICE_ORDER"),
            nvidia_visible_devices: get("NVIDIA_VISIBLE_DEVICES"),
            mounted_device_ids: None,
            slurm_gpus: SLURM_GPU_VARS.into_iter().find_map(|k| {
                let v = get(k).filter(|v| !v.is_empty())?;
                Some((k.to_string(), crate::redact::redact_env(k, &v)?))
            }),
            node_minors: None,
            cgroup_minors: None,
        }
    }

    /// The directory `NVIDIA_VISIBLE_DEVICES` names (the device plugin's volume-mounts
    /// strategy: the device list is its entries), if it names one.
    pub fn mount_dir(&self) -> Option<&str> {
        self.nvidia_visible_devices
            .as_deref()
            .filter(|v| v.starts_with('/'))
    }
}
