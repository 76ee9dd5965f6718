//! What `vramdoc run -- CMD` recorded.

use super::{DevicePeak, Finding, RunErrorKind, Severity, Timeline};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// Recorded by attaching (`run --pid`/`--cgroup`/`--container`) to what this names
    /// (`pid 4242 (python3)`, `container ID`): vramdoc did not start it, so `exit` is not
    /// its exit, and `duration_ms` is the recording's length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attached: Option<String>,
    /// Where the recorder stood (issue 25): PID namespace, driver generation, device nodes.
    /// Absent in reports made before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vantage: Option<super::Vantage>,
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
    /// Why it is the job's when it does not descend from the command (docs/run.md):
    /// `cgroup /docker/<id>` (a container the command started), `environment
    /// VRAMDOC_MARKERS`, `Slurm step 12.0`, `attached`, `cgroup PATH`, `container ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// Its Kubernetes pod, when it runs in one (named through the kubelet's log directory;
    /// no allocation: docs/fleet.md "Pod attribution").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<super::PodRef>,
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

/// The command's status, with `--fail-on` turning a 0 into 1.
pub fn status_with_fail_on(status: i32, findings: &[Finding], fail_on: Option<Severity>) -> i32 {
    let worst = findings.iter().map(|f| f.severity).max();
    match (status, fail_on, worst) {
        (0, Some(level), Some(w)) if w >= level => crate::exit::FINDINGS,
        _ => status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_on_turns_a_clean_exit_into_1() {
        let f = Finding {
            id: "x".into(),
            severity: Severity::Warn,
            title: "t".into(),
            devices: vec![],
            pid: None,
            evidence: vec![],
            fix: String::new(),
        };
        assert_eq!(
            status_with_fail_on(0, std::slice::from_ref(&f), Some(Severity::Warn)),
            1
        );
        assert_eq!(
            status_with_fail_on(0, std::slice::from_ref(&f), Some(Severity::Error)),
            0
        );
        assert_eq!(
            status_with_fail_on(3, std::slice::from_ref(&f), Some(Severity::Info)),
            3
        );
        assert_eq!(status_with_fail_on(0, &[], Some(Severity::Info)), 0);
    }
}
