//! The VRAM flight recorder of `vramdoc serve --incidents DIR` (issue 28; docs/fleet.md
//! "Incidents"): a bounded history of every GPU's memory and process lists ([`history`]),
//! watchers for failure events — recognised error lines in the container logs of pods that hold
//! or held GPU memory ([`tail`], [`podlogs`]), the kernel log's NVRM Xid and OOM-killer lines
//! ([`kernel`]), a GPU lost, memory left without a live owner — and the incident each event
//! becomes ([`engine`]): a JSON file with the pod, the recognised line (redacted), the
//! findings, the memory timeline of the minutes before and a replayable scenario, written
//! atomically through `report::write`, deduplicated, rate-limited and bounded in count and
//! bytes ([`store`]). `vramdoc incidents` reads the directory; Markdown on request
//! ([`markdown`]).

pub mod engine;
pub mod history;
pub mod kernel;
pub mod markdown;
pub mod podlogs;
pub mod store;
pub mod tail;

use crate::model::{Finding, Timeline};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use thiserror::Error;

pub use engine::Incidents;
pub use store::Store;

/// Version of the incident file's layout.
pub const INCIDENT_SCHEMA: u32 = 1;

/// How the recorder is set up (`serve --incidents DIR` and its flags).
#[derive(Debug, Clone)]
pub struct IncidentsConfig {
    pub dir: PathBuf,
    /// Incident files kept (the oldest are removed beyond it).
    pub max_count: usize,
    /// Bytes of incident files kept (the oldest are removed beyond it).
    pub max_bytes: u64,
    /// How far back the memory history goes (the timeline of an incident).
    pub history: Duration,
    /// The kubelet's pod log directory (`/var/log/pods`).
    pub pod_log_dir: PathBuf,
    /// The kernel log: `/dev/kmsg` (a character device, read record by record) or a file
    /// such as `/var/log/kern.log` (tailed); `None`: not watched.
    pub kernel_log: Option<PathBuf>,
    /// The collection period (the timeline's resolution).
    pub period: Duration,
    /// The node's name, written into each incident.
    pub node: Option<String>,
    /// Incidents written per minute at most (more are counted, not written).
    pub per_minute: u32,
}

/// Defaults of the retention flags (docs/fleet.md "Incidents").
pub const DEFAULT_MAX_COUNT: u32 = 200;
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;
pub const DEFAULT_HISTORY: Duration = Duration::from_secs(600);
pub const DEFAULT_PER_MINUTE: u32 = 6;
/// The kernel log read by default.
pub const DEFAULT_KERNEL_LOG: &str = "/dev/kmsg";

/// What went wrong reading or writing incidents.
#[derive(Debug, Error)]
pub enum IncidentError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Write(String),
    #[error("incident {id:?} not found in {dir} (list them: vramdoc incidents list --dir {dir})")]
    NotFound { id: String, dir: String },
    #[error("{id:?}: not an incident id (letters, digits and dashes, as `vramdoc incidents list` prints them)")]
    BadId { id: String },
    #[error("{path}: not an incident file: {message}")]
    Bad { path: PathBuf, message: String },
}

/// The pod an incident is about (names as the kubelet wrote them: untrusted text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct IncidentPod {
    pub uid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
}

/// One failure event (several events of one failure make one incident).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncidentEvent {
    /// Seconds since the epoch when vramdoc saw it.
    pub t_unix: f64,
    /// `pod-log`, `kernel`, `nvml` or `scan`.
    pub source: String,
    /// `out-of-memory`, `xid`, `host-oom-kill`, `gpu-lost`, `no-live-owner`, or the
    /// recogniser's kind.
    pub kind: String,
    /// The line as read (redacted, cut; escape it where it is shown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<u32>,
    /// What NVIDIA's Xid catalogue says the Xid means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meaning: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Bytes the failed allocation asked for, when the line says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<u64>,
}

/// One incident file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    pub schema: u32,
    pub id: String,
    /// The rule that opened it: `out-of-memory`, `gpu-error`, `xid`, `host-oom-kill`,
    /// `gpu-lost`, `no-live-owner`.
    pub rule: String,
    /// One line for people.
    pub title: String,
    pub created_unix: f64,
    /// RFC 3339 (UTC).
    pub created: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<IncidentPod>,
    /// Physical GPU indices concerned.
    #[serde(default)]
    pub devices: Vec<u32>,
    pub events: Vec<IncidentEvent>,
    /// Events of the same failure seen after the first (counted, the first few kept).
    #[serde(default)]
    pub repeats: u64,
    /// The scan's findings at the time.
    #[serde(default)]
    pub findings: Vec<Finding>,
    /// The memory timeline of the minutes before (`t_ms` since `timeline_start_unix`).
    pub timeline: Timeline,
    pub timeline_start_unix: f64,
    /// A scenario reproducing the memory picture (`vramdoc replay FILE --sim recorded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// Why there is no scenario.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario_note: Option<String>,
}

/// One line of `GET /incidents` and `vramdoc incidents list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncidentSummary {
    pub id: String,
    pub rule: String,
    pub title: String,
    pub created: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default)]
    pub devices: Vec<u32>,
    pub bytes: u64,
}

impl Incident {
    pub fn summary(&self, bytes: u64) -> IncidentSummary {
        IncidentSummary {
            id: self.id.clone(),
            rule: self.rule.clone(),
            title: self.title.clone(),
            created: self.created.clone(),
            namespace: self.pod.as_ref().and_then(|p| p.namespace.clone()),
            pod: self.pod.as_ref().and_then(|p| p.name.clone()),
            devices: self.devices.clone(),
            bytes,
        }
    }
}

/// RFC 3339 UTC text of a Unix time (whole seconds).
pub fn rfc3339(t_unix: f64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_secs(t_unix.max(0.0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Seconds since the epoch now.
pub fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_matches_known_dates() {
        assert_eq!(super::rfc3339(0.0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(1_700_000_000.0), "2023-11-14T22:13:20Z");
        assert_eq!(super::rfc3339(951_782_400.0), "2000-02-29T00:00:00Z");
    }
}
