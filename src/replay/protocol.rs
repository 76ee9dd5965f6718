//! The wire between the monitor (parent) and a worker process: the plan goes to the worker's
//! stdin as one JSON line; the worker answers with one JSON event per line on stdout. In
//! lockstep mode the worker waits for an empty line on stdin after each step's `end`, so the
//! monitor can read memory exactly at step boundaries.

use crate::scenario::Step;
use serde::{Deserialize, Serialize};

/// What a worker runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerInput {
    pub steps: Vec<Step>,
    /// Wait for an acknowledgement line after each step.
    pub lockstep: bool,
    /// After the last step, print `ready` and hold everything until stdin closes (neighbours).
    pub hold: bool,
}

/// One event from a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum WorkerEvent {
    Hello {
        pid: u32,
        backend: String,
        devices: u32,
        /// The worker's `NSpid` line from /proc/self/status: its PID in each PID namespace
        /// this /proc shows, outermost first. More than one entry: the first is the PID NVML
        /// reports (the driver has no PID-namespace support).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        nspid: Vec<u32>,
    },
    Start {
        step: usize,
    },
    End {
        step: usize,
        /// Bytes the step asked the driver or the cache for.
        #[serde(default)]
        bytes: Option<u64>,
        /// Bytes the worker holds through allocations (live, cached, group-owned), all devices.
        held: u64,
        /// Checksum read back after the fill kernel, when the step ran it.
        #[serde(default)]
        checksum: Option<u64>,
        /// `(CUDA ordinal, GPU UUID)` of every context the worker has created so far, so the
        /// monitor maps them to NVML devices by UUID, never by assuming ordinal = index.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        contexts: Vec<(u32, String)>,
        /// `(CUDA ordinal, bytes)` the worker holds on each device with a context (live,
        /// cached and group-owned allocations): footprints on GPUs of different sizes are
        /// compared as fractions of each device.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        held_on: Vec<(u32, u64)>,
    },
    Failed {
        step: usize,
        /// `out-of-memory`, `device-lost`, `error` (`timeout` is decided by the monitor).
        kind: String,
        message: String,
    },
    Ready,
    Done,
}
