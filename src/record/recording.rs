//! The recording the timeline rules judge: devices, the timeline, processes, errors and the
//! job's end.

use super::recognise::LineFacts;
use crate::model::{Marker, ProcessSample, Timeline};
use serde::{Deserialize, Serialize};

/// One GPU of the recording (NVML physical index).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedDevice {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub total: u64,
    /// Its minor number (`/dev/nvidia<minor>`), when the driver said it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<u32>,
    /// How a MIG instance is named to people (`0/1`: parent / GPU instance, as scan names
    /// it); `None`: a whole GPU, named by its index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl From<&crate::gpu::DeviceInfo> for RecordedDevice {
    fn from(d: &crate::gpu::DeviceInfo) -> Self {
        RecordedDevice {
            index: d.index,
            uuid: d.uuid.clone(),
            name: d.name.clone(),
            total: d.memory.total,
            minor: d.minor,
            label: d.mig_instance().map(|_| d.label()),
        }
    }
}

/// One process seen during the recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedProcess {
    pub pid: u32,
    /// `comm` or a short name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Milliseconds since the recording started.
    pub first_seen_ms: f64,
    /// When it exited (`None`: still running at the end, or unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_ms: Option<f64>,
    /// Its `CUDA_VISIBLE_DEVICES` (`None`: unset or unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_visible_devices: Option<String>,
    /// `CUDA_DEVICE_ORDER`, `NVIDIA_VISIBLE_DEVICES`, Slurm's GPUs, the device list a device
    /// plugin mounted, and the minors of the `nvidia<minor>` files in its view of the driver's
    /// device directory and of its v1 device cgroup, read while it ran: what it can open,
    /// before its environment (`diagnose::devset`). The same fields as scan's, at the top
    /// level of the process's JSON.
    #[serde(flatten)]
    pub gpu_env: crate::model::GpuEnv,
    /// Its `PYTORCH_CUDA_ALLOC_CONF` (`None`: unset or unknown), read before suggesting
    /// `expandable_segments:True`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pytorch_cuda_alloc_conf: Option<String>,
    /// Its `PYTORCH_ALLOC_CONF` (PyTorch 2.8+'s name; `None`: unset or unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pytorch_alloc_conf: Option<String>,
    /// Part of the job (the recorded process tree, or the replay worker); other processes
    /// are neighbours, counted in device totals only.
    pub in_tree: bool,
    /// Its parent, when known (`run`'s job processes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ppid: Option<u32>,
    /// Its command line, redacted, when known (`run`'s job processes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
}

impl RecordedProcess {
    /// Process `pid`, first seen at `first_seen_ms`, of the job's tree or not (`in_tree`),
    /// with nothing else known: no name, exit, environment, parent or command line.
    pub fn seen(pid: u32, first_seen_ms: f64, in_tree: bool) -> RecordedProcess {
        RecordedProcess {
            pid,
            name: None,
            first_seen_ms,
            exit_ms: None,
            cuda_visible_devices: None,
            gpu_env: crate::model::GpuEnv::default(),
            pytorch_cuda_alloc_conf: None,
            pytorch_alloc_conf: None,
            in_tree,
            ppid: None,
            cmdline: None,
        }
    }
}

/// What kind of error the job hit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ErrorKind {
    /// An allocation failed (`CUDA out of memory`, `torch.OutOfMemoryError`, ...).
    OutOfMemory,
    /// Another CUDA / driver error (`CUDA error: unknown error`, device lost, ...).
    DriverError,
    /// A process of the job was killed by a signal (the OOM killer: 9).
    KilledBySignal { signal: i32 },
    /// A collective (NCCL) operation timed out: PyTorch's watchdog then aborts the process.
    CollectiveTimeout,
    /// A CUDA failure that is not an allocation failure (illegal address, device-side
    /// assert, driver too old): not a memory failure.
    CudaFault,
    /// Anything else worth placing on the timeline.
    Other,
}

/// An error the job hit, as parsed from its output or the worker's events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorEvent {
    /// Milliseconds since the recording started.
    pub t_ms: f64,
    #[serde(flatten)]
    pub kind: ErrorKind,
    /// Physical device, when the error names one (`GPU 0`, `cuda:1` mapped already).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// The process that printed it, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The line as printed, already redacted.
    pub line: String,
    /// Bytes the failed allocation asked for (`Tried to allocate 2.00 GiB`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_bytes: Option<u64>,
    /// What the recogniser read in the line when it was recorded ([`ErrorEvent::facts`]).
    /// Not written: an event read back from a report or stream has only its line.
    #[serde(skip)]
    pub facts: Option<LineFacts>,
}

impl ErrorEvent {
    /// What its line says, as the recogniser read it when the line was recorded; for an
    /// event rebuilt from a report or a stream (which keep the line only), read from the
    /// line now, the same way.
    pub fn facts(&self) -> std::borrow::Cow<'_, LineFacts> {
        match &self.facts {
            Some(f) => std::borrow::Cow::Borrowed(f),
            None => std::borrow::Cow::Owned(LineFacts::of(&self.line)),
        }
    }
}

/// How the job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobExit {
    Code(i32),
    Signal(i32),
}

/// A process of the job seen holding the driver's device files open after the command ended
/// (its `/proc/PID/fd`, read through `host::held_nodes`): what keeps a CUDA context's memory
/// alive through an inherited descriptor while NVML lists the exited creator, or nobody.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceFileHolder {
    pub pid: u32,
    /// When it was seen holding them (ms since the recording started).
    pub t_ms: f64,
    /// The files as its descriptors name them (`/dev/nvidia0`, `/dev/nvidiactl`, or a
    /// simulated box's `dev/nvidia0`), sorted.
    pub nodes: Vec<String>,
    /// The minor numbers those files name (`nvidiaN` → `N`; the rule maps them to NVML
    /// indices through [`RecordedDevice::minor`]), sorted; empty when it holds only the
    /// control files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<u32>,
    /// Whether its maps showed a CUDA context then (`host::DeviceMaps::has_context`): only
    /// such a process keeps memory alive through the files; an NVML client (`nvidia-smi -l`
    /// started by the job) holds them too, with no context. `None`: not read (its maps not
    /// readable, a recording made before this was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<bool>,
}

/// Everything a recorded job (or a replayed variant) gives the engine.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Recording {
    pub devices: Vec<RecordedDevice>,
    /// Device series `[t_ms, used]`, markers (`step`, `marker`, `release`, `oom`, `error`,
    /// `end`, ...), per-process samples.
    pub timeline: Timeline,
    pub processes: Vec<RecordedProcess>,
    pub errors: Vec<ErrorEvent>,
    /// When the job ended (ms since the recording started).
    pub end_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<JobExit>,
    /// The job's processes seen holding the driver's device files after the command ended
    /// (`run -- CMD` only), each sighting once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_file_holders: Vec<DeviceFileHolder>,
    /// What was fed for the rules only, never shown in a report (the one timeline is
    /// [`Recording::timeline`]).
    #[serde(default, skip_serializing_if = "RulesOnly::is_empty")]
    pub rules_only: RulesOnly,
}

/// Phase boundaries and readings the timeline rules judge beside the timeline but reports
/// do not show: replay's step ends and release points, and the process usage read at them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RulesOnly {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub markers: Vec<Marker>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessSample>,
}

impl RulesOnly {
    pub fn is_empty(&self) -> bool {
        self.markers.is_empty() && self.processes.is_empty()
    }
}

impl Recording {
    /// Every marker the rules read, in time order: the timeline's and the rules-only
    /// boundaries.
    pub fn judged_markers(&self) -> Vec<&Marker> {
        let mut all: Vec<&Marker> = (self.timeline.markers.iter())
            .chain(&self.rules_only.markers)
            .collect();
        all.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
        all
    }

    /// Every per-process sample the rules read: the timeline's and the rules-only ones.
    pub fn judged_processes(&self) -> impl Iterator<Item = &ProcessSample> {
        (self.timeline.processes.iter()).chain(&self.rules_only.processes)
    }
}
