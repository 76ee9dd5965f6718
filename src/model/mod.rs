//! The report model: the types every stage produces and every renderer consumes. Scan's
//! inventory and diagnosis, replay's engine and `run`'s job supervisor fill it; `diagnose/`
//! adds [`Finding`]s; `report/` renders and writes it, never the reverse. JSON of this model
//! is the source of truth (`schema_version`); field names are documented in docs/json.md and
//! kept stable. Additive changes keep the version; renames bump it. By part: [`scan`],
//! [`replay`], [`run`], the [`timeline`] they share, the string-valued [`kinds`], and the
//! [`header`] every producer fills the same way, and the [`gpu_env`] of a process that scan
//! and `run` both keep.

pub mod gpu_env;
pub mod header;
pub mod kinds;
pub mod replay;
pub mod run;
pub mod scan;
pub mod timeline;
pub mod vantage;
pub mod whatif;
pub mod wire;

pub use gpu_env::GpuEnv;
pub use header::{command_line, command_line_from, now_unix_ms};
pub use kinds::{
    GapKind, GapReason, MarkerKind, RunErrorKind, StepErrorKind, StepStatus, HUNG_GAP_PREFIX,
    LOST_GAP_MARK,
};
pub use replay::*;
pub use run::*;
pub use scan::*;
pub use timeline::*;
pub use vantage::{PidNamespace, Vantage};
pub use whatif::*;

use crate::gpu::{DeviceInfo, Versions};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Version of the JSON layout below.
pub const SCHEMA_VERSION: u32 = 1;

/// A complete report: the envelope every kind shares, and the body of its kind. Built by
/// [`Report::new`] only; the body is typed, so a report of one kind with another kind's body
/// cannot exist. On the wire it is the versioned layout of [`wire`] (`kind` beside one of
/// `scan`, `replay`, `run`), unchanged since schema version 1.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub schema_version: u32,
    pub environment: Environment,
    /// The vramdoc command line that produced this report (redacted).
    pub command: Vec<String>,
    /// Milliseconds since the Unix epoch when the report was made.
    pub created_unix_ms: u64,
    pub body: Body,
}

/// What a report is about, by kind. One per report, never in a collection: the size of the
/// largest variant costs nothing.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum Body {
    Scan(ScanResult),
    Replay(ReplayResult),
    /// What `vramdoc run -- CMD` recorded.
    Run(RunResult),
}

impl Report {
    /// The one constructor: this version, this process's command line (redacted), now.
    pub fn new(environment: Environment, body: Body) -> Report {
        Report {
            schema_version: SCHEMA_VERSION,
            environment,
            command: command_line(),
            created_unix_ms: now_unix_ms(),
            body,
        }
    }

    pub fn kind(&self) -> ReportKind {
        match self.body {
            Body::Scan(_) => ReportKind::Scan,
            Body::Replay(_) => ReportKind::Replay,
            Body::Run(_) => ReportKind::Run,
        }
    }

    pub fn scan(&self) -> Option<&ScanResult> {
        match &self.body {
            Body::Scan(s) => Some(s),
            _ => None,
        }
    }

    pub fn replay(&self) -> Option<&ReplayResult> {
        match &self.body {
            Body::Replay(r) => Some(r),
            _ => None,
        }
    }

    pub fn run(&self) -> Option<&RunResult> {
        match &self.body {
            Body::Run(r) => Some(r),
            _ => None,
        }
    }

    pub fn scan_mut(&mut self) -> Option<&mut ScanResult> {
        match &mut self.body {
            Body::Scan(s) => Some(s),
            _ => None,
        }
    }

    pub fn replay_mut(&mut self) -> Option<&mut ReplayResult> {
        match &mut self.body {
            Body::Replay(r) => Some(r),
            _ => None,
        }
    }

    pub fn run_mut(&mut self) -> Option<&mut RunResult> {
        match &mut self.body {
            Body::Run(r) => Some(r),
            _ => None,
        }
    }

    /// The scan, taken out of the report.
    pub fn into_scan(self) -> Option<ScanResult> {
        match self.body {
            Body::Scan(s) => Some(s),
            _ => None,
        }
    }

    /// The devices to show: a scan's own inventory, else the environment's.
    pub fn devices(&self) -> &[DeviceInfo] {
        match &self.body {
            Body::Scan(scan) => &scan.devices,
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
