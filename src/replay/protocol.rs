//! The wire between the monitor (parent) and a worker process: the plan goes to the worker's
//! stdin as one JSON line; the worker answers with one JSON event per line on stdout. In
//! lockstep mode the worker waits for an empty line on stdin after each step's `end`, so the
//! monitor can read memory exactly at step boundaries.

use crate::model::StepErrorKind;
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
    /// Bytes of the smallest of the scenario's devices, as the parent read it: what named
    /// sizes given as fractions resolve against (docs/scenarios.md, "Sizes"). 0: unknown,
    /// the step's own device is used.
    #[serde(default)]
    pub smallest_total: u64,
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
        /// `out-of-memory`, `device-lost`, `environment`, `error` (`timeout`, `killed` and
        /// `interrupted` are decided by the monitor).
        kind: StepErrorKind,
        /// For people only: nothing is read back out of it.
        message: String,
        /// The CUDA ordinal (as the worker numbers devices) an allocation failed on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        device: Option<u32>,
        /// Bytes the failed allocation asked for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requested: Option<u64>,
    },
    Ready,
    Done,
}

/// Nanoseconds of `CLOCK_MONOTONIC`: one clock for every process of the machine, so the
/// worker stamps each event with the time it happened and the monitor places it on its own
/// timeline even when it reads the event late (a worker that dies at once after an OOM).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec.max(0) as u64)
}

/// The field of an event line that carries [`mono_ns`] (added next to the event's own
/// fields; readers that do not know it ignore it).
pub const MONO_FIELD: &str = "mono_ns";

/// An event as the monitor receives it: with the worker's clock reading when it was sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Timed {
    pub ev: WorkerEvent,
    pub mono_ns: Option<u64>,
}

/// Parse one line of a worker's output.
pub fn parse_event(line: &str) -> Option<Timed> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let mono_ns = v.get(MONO_FIELD).and_then(|n| n.as_u64());
    let ev = serde_json::from_value(v).ok()?;
    Some(Timed { ev, mono_ns })
}

/// One line of a worker's output for `ev`, stamped with [`mono_ns`].
pub fn event_line(ev: &WorkerEvent) -> Option<String> {
    let mut v = serde_json::to_value(ev).ok()?;
    if let Some(o) = v.as_object_mut() {
        o.insert(MONO_FIELD.into(), mono_ns().into());
    }
    serde_json::to_string(&v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_carry_the_time_they_were_sent() {
        let before = mono_ns();
        let line = event_line(&WorkerEvent::Start { step: 3 }).expect("line");
        let t = parse_event(&line).expect("parsed");
        assert_eq!(t.ev, WorkerEvent::Start { step: 3 });
        let sent = t.mono_ns.expect("stamped");
        assert!(sent >= before && sent <= mono_ns());
        // A line without the stamp (an older worker) still parses.
        let plain = serde_json::to_string(&WorkerEvent::Done).expect("json");
        assert_eq!(parse_event(&plain).map(|t| t.mono_ns), Some(None));
        assert!(parse_event("not json").is_none());
    }
}
