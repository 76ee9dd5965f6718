//! The report model: what scan and replay produce and every renderer consumes. JSON of this
//! model is the source of truth (`schema_version`); field names are documented in
//! docs/json.md and kept stable. Additive changes keep the version; renames bump it.

use super::events::{MarkerKind, RunErrorKind, StepErrorKind};
use crate::gpu::{DeviceInfo, Versions};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Version of the JSON layout below.
pub const SCHEMA_VERSION: u32 = 1;

/// A complete report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Report {
    pub schema_version: u32,
    /// `scan`, `replay` or `run`.
    pub kind: ReportKind,
    pub environment: Environment,
    /// The vramdoc command line that produced this report (redacted).
    pub command: Vec<String>,
    /// Milliseconds since the Unix epoch when the report was made.
    pub created_unix_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<ScanResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayResult>,
    /// What `vramdoc run -- CMD` recorded (kind `run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunResult>,
}

impl Report {
    /// The devices to show: a scan's own inventory, else the environment's.
    pub fn devices(&self) -> &[DeviceInfo] {
        match (&self.kind, &self.scan) {
            (ReportKind::Scan, Some(scan)) => &scan.devices,
            _ => &self.environment.devices,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReportKind {
    Scan,
    Replay,
    Run,
}

/// Where the report was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Environment {
    pub hostname: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    pub vramdoc_version: String,
    /// `sim` (in-process simulator) or `nvml`/`cuda` (real libraries, possibly the simulated libraries of crates/simgpu).
    pub backend: String,
    /// The simulated box spec, when the backend is the simulator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim_spec: Option<String>,
    pub versions: Versions,
    pub devices: Vec<DeviceInfo>,
}

/// Severity of a finding. Ordered: info < warn < error.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warn,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Error => "error",
        }
    }
}

/// One number that proves a finding (`used on GPU 0` = `512 MiB`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Evidence {
    pub label: String,
    /// Human-readable value.
    pub value: String,
    /// Raw bytes when the value is a quantity of memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// Something wrong (or worth knowing), decided in `diagnose/`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Finding {
    /// Stable identifier: `stray-context`, `no-live-owner`, `invisible-processes`,
    /// `low-headroom`, `duplicate-copy`, ...
    pub id: String,
    pub severity: Severity,
    /// One line.
    pub title: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    pub evidence: Vec<Evidence>,
    /// What to do about it.
    pub fix: String,
}

/// One process's memory on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessDeviceUsage {
    pub device: u32,
    /// `None` where NVML reports "not available".
    pub used: Option<u64>,
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
    pub devices: Vec<ProcessDeviceUsage>,
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
    /// Room for a new vLLM-style engine on every device (decided in `diagnose/`).
    #[serde(default)]
    pub headroom: Vec<Headroom>,
}

/// Room for a new vLLM-style engine on one device. vLLM claims
/// `gpu_memory_utilization x total` up front; that must fit in
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
    /// `available / total`, rounded down to 0.01.
    pub max_gpu_memory_utilization: f64,
    /// The arithmetic above with the numbers, for people.
    pub arithmetic: String,
}

/// What `vramdoc replay` did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReplayResult {
    /// Memory sampling period, microseconds.
    pub period_us: u64,
    pub runs: Vec<VariantRun>,
}

/// Outcome of one variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// A bug variant showed the failure it documents.
    Reproduced,
    /// A fix variant completed within its expectations.
    Fixed,
    /// The variant did not behave as its expectations say.
    Unexpected,
    /// Not run (e.g. the box has too few devices).
    Skipped,
}

/// One expectation checked on the timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CheckResult {
    /// What was expected, in words.
    pub expectation: String,
    pub passed: bool,
    /// The numbers behind it.
    pub detail: String,
}

/// One variant of one scenario, run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VariantRun {
    pub scenario: String,
    pub variant: String,
    /// Upstream source of the failure (project and symptom).
    pub source: String,
    pub verdict: Verdict,
    /// Why skipped / what went wrong, one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub checks: Vec<CheckResult>,
    /// Worker process id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_pid: Option<u32>,
    /// Out-of-memory or other error the worker hit, with the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<StepError>,
    /// Peak used bytes per device over the run.
    pub peaks: Vec<DevicePeak>,
    pub timeline: Timeline,
    /// Wall time of the variant, milliseconds.
    pub duration_ms: u64,
    /// Each step the worker started, with memory at its end (added for replay; optional).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepRecord>,
}

/// One step of a variant as the monitor saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepRecord {
    pub index: usize,
    pub id: String,
    pub label: String,
    /// The scenario op (`alloc`, `free`, `context`, ...).
    pub op: String,
    /// Milliseconds since the variant started.
    pub start_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<f64>,
    /// `ok`, `out-of-memory`, `device-lost`, `error`, `killed`, `interrupted`.
    pub status: String,
    /// Bytes the step asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Used bytes of every device (index = physical device) when the step ended.
    #[serde(default)]
    pub used_after: Vec<u64>,
    /// The worker's own usage on every device when the step ended (process list).
    #[serde(default)]
    pub worker_after: Vec<u64>,
    /// Bytes the worker held through allocations (live, cached, group-owned), all devices.
    #[serde(default)]
    pub held_after: u64,
    /// Peak used bytes of every device while the step ran.
    #[serde(default)]
    pub peak_used: Vec<u64>,
}

/// One entry of a per-process list, sampled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessSample {
    pub t_ms: f64,
    pub device: u32,
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepError {
    pub step: usize,
    pub step_label: String,
    /// `out-of-memory`, `killed`, `device-lost`, `error`.
    pub kind: StepErrorKind,
    pub message: String,
    /// Milliseconds since the variant started.
    pub t_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DevicePeak {
    pub device: u32,
    pub total: u64,
    pub peak_used: u64,
    /// Milliseconds since the variant started.
    pub t_ms: f64,
}

/// Memory over time with step markers.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Timeline {
    pub devices: Vec<DeviceSeries>,
    pub markers: Vec<Marker>,
    /// Per-process lists, sampled on a slower cadence (added for replay; optional).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessSample>,
    /// Where the sampler has no data: rounds later than twice the period, failed queries
    /// (added for issue 8; optional).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<SamplingGap>,
}

/// A stretch of time the timeline has no samples for, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SamplingGap {
    /// `memory` (the fast loop) or `processes` (the per-process lists).
    pub kind: String,
    /// Physical device whose query failed; absent for a late round (every device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// Milliseconds since the run started: the last good sample before the gap.
    pub start_ms: f64,
    /// Milliseconds since the run started: the first good sample after it (or the end).
    pub end_ms: f64,
    /// Rounds missed or failed queries merged into this gap.
    pub count: u64,
    /// `late` (a round later than twice the period) or the query's error, one line.
    pub reason: String,
}

/// Samples of one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceSeries {
    pub device: u32,
    pub total: u64,
    /// `[t_ms, used_bytes]` pairs, in time order.
    pub samples: Vec<(f64, u64)>,
}

/// A labelled point in time (step start, OOM, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Marker {
    pub t_ms: f64,
    /// `step`, `oom`, `error`, `killed`, `end`.
    pub kind: MarkerKind,
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
}

/// What `vramdoc run -- CMD` recorded: the user's own job, its whole process tree, memory
/// over time, the errors its stderr showed and the findings decided on that timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunResult {
    /// The wrapped command line (redacted).
    pub command: Vec<String>,
    /// Memory sampling period, microseconds.
    pub period_us: u64,
    /// Process-list and process-tree period, microseconds.
    pub process_period_us: u64,
    /// Wall time from the command's start to its end, milliseconds.
    pub duration_ms: u64,
    pub exit: RunExit,
    /// Peak used bytes per device (all processes, as NVML reports the device).
    pub peaks: Vec<DevicePeak>,
    /// Peak of the sum of the job's own processes' usage, per device.
    pub tree_peaks: Vec<DevicePeak>,
    /// Lowest free memory per device before the command ended.
    pub min_free: Vec<DeviceMinFree>,
    /// Every process of the job's tree ever seen, with its peak per device.
    pub processes: Vec<RunProcess>,
    /// Out-of-memory and related errors recognised in the command's stderr.
    pub errors: Vec<RunError>,
    /// Findings decided on the recorded timeline (`diagnose/`).
    pub findings: Vec<Finding>,
    /// Memory over time, markers (`mark`, `release`, `oom`, `exit`, ...), per-process lists.
    pub timeline: Timeline,
    /// The last lines of the command's stderr (redacted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stderr_tail: Vec<String>,
    /// The JSONL file the samples were streamed to, when one was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_file: Option<String>,
}

/// How the wrapped command ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunExit {
    /// The status vramdoc passes on: the command's exit code, or 128 + N for signal N.
    pub status: i32,
    /// The exit code, when the command exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// The signal number, when the command was killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// `SIGKILL`, `SIGTERM`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal_name: Option<String>,
}

/// The lowest free memory of one device while the command ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceMinFree {
    pub device: u32,
    pub uuid: String,
    pub total: u64,
    pub min_free: u64,
    /// Milliseconds since the command started.
    pub t_ms: f64,
}

/// One process of the job's tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunProcess {
    /// PID in vramdoc's PID namespace.
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ppid: Option<u32>,
    /// The PID in every namespace the process is in, outermost first (`NSpid`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nspid: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Command line, redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
    /// When it was first seen, milliseconds since the command started.
    pub start_ms: f64,
    /// When it was seen gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<f64>,
    /// Peak usage per device (only devices it appeared on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<ProcessPeak>,
}

/// A process's peak on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessPeak {
    pub device: u32,
    pub uuid: String,
    /// `None` where NVML reports "not available".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak: Option<u64>,
    /// Milliseconds since the command started.
    pub t_ms: f64,
}

/// An error line recognised in the command's stderr.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunError {
    /// Milliseconds since the command started, when the line was read.
    pub t_ms: f64,
    /// `cuda-oom` (PyTorch), `cuda-error-oom` (driver), `vllm-free-memory`, `vllm-kv-cache`,
    /// `vllm-no-cache-blocks`, `child-failed` (torchrun), `killed` (death by signal).
    pub kind: RunErrorKind,
    /// CUDA ordinal the line names (`GPU 0`, `cuda:1`), as the process numbered it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// Bytes the failed allocation asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<u64>,
    /// The line itself (redacted, at most 500 characters).
    pub line: String,
}
