//! The preflight engine behind `vramdoc preflight` (issue 18): before a job starts on the
//! GPUs it was given, are they clean? Pure: a scan report and the GPU selection in, a
//! verdict out. A GPU is refused when another process holds memory on it (foreign process),
//! when a listed process's usage is unknown or its process lists cannot be read (nothing
//! then says it is free),
//! when memory is held with no live owner (a dead process's memory, scan's `no-live-owner`
//! at error), when it is lost or unreadable, or when its free memory is below `--need`.
//! The exit semantics follow Slurm's prolog (non-zero drains the node) and Node Problem
//! Detector's custom-plugin protocol (0 ok, 1 problem, anything else unknown; one line).
//! Without a job context (nothing named the GPUs: a node check) a live process is no
//! problem; with one, it is unless the scheduler shares the GPU ([`job_context`]). A
//! graphics client (NVML's graphics list only: a display server, no CUDA context) is a
//! note, not a problem, unless the site asks for strictness ([`JobContext::strict_graphics`]).

use serde::Serialize;

use crate::diagnose::ids;
use crate::gpu::DeviceInfo;
use crate::model::{Report, ScanResult, Severity};

mod mig;
use crate::units::format_bytes;
pub use mig::Candidate;

/// Where the GPU list came from, in the order it is looked for.
pub const GPU_SOURCES: &[&str] = &[
    "SLURM_STEP_GPUS",
    "SLURM_JOB_GPUS",
    "GPU_DEVICE_ORDINAL",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
];

/// Which GPUs to check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Selection {
    /// Physical (NVML) indices.
    pub devices: Vec<u32>,
    /// `--gpus`, an environment variable's name, or `all GPUs`.
    pub source: String,
}

/// Why a GPU selection could not be resolved (exit 2: unknown).
#[derive(Debug, thiserror::Error)]
#[error("{source_name}={value}: {reason}")]
pub struct SelectionError {
    pub source_name: String,
    pub value: String,
    pub reason: String,
}

/// Resolve a GPU list (physical indices, GPU UUIDs or unique prefixes, `all`) against the
/// machine's GPUs (`uuids` in inventory order: the GPUs, then the MIG instances this caller
/// can open). A MIG device UUID (`MIG-<uuid>`, or a unique prefix) names its instance, which
/// is then checked as a GPU is; an index names a GPU, never an instance.
pub fn resolve(source: &str, value: &str, uuids: &[String]) -> Result<Selection, SelectionError> {
    let err = |reason: String| SelectionError {
        source_name: source.to_string(),
        value: value.to_string(),
        reason,
    };
    let v = value.trim();
    if v == "all" {
        return Ok(Selection {
            devices: (0..uuids.len() as u32).collect(),
            source: source.to_string(),
        });
    }
    if v.is_empty() || v == "none" || v == "void" || v == "NoDevFiles" {
        return Err(err("no GPU given".into()));
    }
    let mut devices = Vec::new();
    for raw in v.split(',') {
        let id = raw.trim();
        let id = id.split("::").next().unwrap_or(id);
        let found = if id.chars().all(|c| c.is_ascii_digit()) && !id.is_empty() {
            id.parse::<u32>()
                .ok()
                .filter(|i| uuids.get(*i as usize).is_some_and(|u| !mig::is_mig_uuid(u)))
        } else if id.to_ascii_lowercase().starts_with("gpu-") {
            match crate::gpu::visible::uuid_matches(id, uuids).as_slice() {
                [one] => Some(*one),
                [] => None,
                _ => return Err(err(format!("{id} matches several GPUs"))),
            }
        } else if mig::is_mig_uuid(id) {
            Some(mig::resolve(id, uuids).map_err(err)?)
        } else {
            None
        };
        match found {
            Some(i) if !devices.contains(&i) => devices.push(i),
            Some(_) => {}
            None => {
                let gpus = uuids.iter().filter(|u| !mig::is_mig_uuid(u)).count();
                return Err(err(format!(
                    "{id} names no GPU of this machine ({gpus} GPUs: indices 0-{}, or UUIDs)",
                    gpus.saturating_sub(1)
                )));
            }
        }
    }
    devices.sort_unstable();
    Ok(Selection {
        devices,
        source: source.to_string(),
    })
}

/// Resolve Slurm's `var` (`SLURM_STEP_GPUS` / `SLURM_JOB_GPUS`) as scan's device sets read it
/// (`diagnose::devset::slurm_sets`), never as NVML indices: its numbers are the device files'
/// minors (older Slurm) or GRES indices in PCI order (later Slurm). Where the two readings
/// name different GPUs, the GPUs of both are checked — either could be the job's — and the
/// source says so. Where the driver gives no minor numbers, the GRES reading alone is used
/// (and said). A value that is not a list of numbers (UUIDs) resolves as [`resolve`] does.
pub fn resolve_slurm(
    var: &str,
    value: &str,
    devices: &[DeviceInfo],
    uuids: &[String],
) -> Result<Selection, SelectionError> {
    let numbers = !value.trim().is_empty()
        && value
            .split(',')
            .all(|t| !t.trim().is_empty() && t.trim().bytes().all(|b| b.is_ascii_digit()));
    if !numbers {
        return resolve(var, value, uuids);
    }
    let gpus: Vec<crate::diagnose::devset::GpuRef> = devices
        .iter()
        .filter(|d| d.mig_instance().is_none())
        .map(crate::diagnose::devset::GpuRef::of)
        .collect();
    if gpus.iter().any(|g| g.minor.is_none()) {
        let mut sel = resolve(var, value, uuids)?;
        sel.source = format!("{var} as GRES indices: the driver gave no minor numbers");
        return Ok(sel);
    }
    let sets = crate::diagnose::devset::slurm_sets(var, value, &gpus).map_err(|reason| {
        SelectionError {
            source_name: var.to_string(),
            value: value.to_string(),
            reason,
        }
    })?;
    let mut devices: Vec<u32> = sets.iter().flatten().copied().collect();
    devices.sort_unstable();
    devices.dedup();
    let source = match sets.as_slice() {
        [_] => var.to_string(),
        _ => {
            let gpus = |s: &[u32]| {
                let v: Vec<String> = s.iter().map(u32::to_string).collect();
                format!("GPU {}", v.join(", "))
            };
            format!(
                "{var}, read both as device minors and as GRES indices ({} / {})",
                gpus(&sets[0]),
                gpus(&sets[1])
            )
        }
    };
    Ok(Selection { devices, source })
}

/// A graphics client on the GPU: a note, or a problem under `--strict-graphics`.
pub const GRAPHICS_CLIENT: &str = "graphics-client";

/// One reason a GPU is refused (or, for a [`GRAPHICS_CLIENT`] in [`Verdict::notes`], a fact
/// that did not refuse it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub device: u32,
    /// `foreign-process`, `unknown-usage`, `process-lists-unreadable`, `dead-process-memory`,
    /// `device-unavailable`, `not-enough-free`, `graphics-client`.
    pub kind: &'static str,
    pub detail: String,
}

/// The verdict on the selected GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub selection: Selection,
    pub need: Option<u64>,
    pub problems: Vec<Problem>,
    /// What was seen but refuses no GPU: graphics clients (a display server: NVML's graphics
    /// list only, no CUDA context), unless `--strict-graphics` made them problems.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<Problem>,
    /// On a GPU in MIG mode: its instances a job could start in (clean, with the free
    /// memory asked for), named as scan names them (`0/1`) and by their `MIG-<uuid>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<Candidate>,
    /// How devices are named in [`Verdict::line`] (`0/1` for a MIG instance); an index not
    /// here is named by itself.
    #[serde(skip)]
    pub labels: std::collections::BTreeMap<u32, String>,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// The one line Slurm logs and Node Problem Detector shows as the condition's message.
    pub fn line(&self) -> String {
        let name = |d: &u32| self.labels.get(d).cloned().unwrap_or_else(|| d.to_string());
        let gpus: Vec<String> = self.selection.devices.iter().map(name).collect();
        let notes: String = self
            .notes
            .iter()
            .map(|n| {
                format!(
                    "; note: GPU {}: {} (passed; --strict-graphics refuses it)",
                    name(&n.device),
                    n.detail
                )
            })
            .collect();
        let line = if self.ok() {
            let need = self
                .need
                .map(|n| format!(", at least {} free each", format_bytes(n)))
                .unwrap_or_default();
            format!(
                "ok: GPU {} ({}) clean{need}{}",
                gpus.join(","),
                self.selection.source,
                mig::candidates_text(&self.candidates)
            )
        } else {
            let parts: Vec<String> = self
                .problems
                .iter()
                .map(|p| format!("GPU {}: {}", name(&p.device), p.detail))
                .collect();
            format!("problem: {}", parts.join("; "))
        };
        line + &notes
    }
}

/// A finding's title without its leading `GPU N: ` (`GPU 0/1: `; the verdict's line names
/// the GPU).
fn without_gpu<'a>(title: &'a str, d: &DeviceInfo) -> &'a str {
    title
        .strip_prefix(&format!("GPU {}: ", d.label()))
        .unwrap_or(title)
}

/// Judge the selected GPUs on a scan report (its devices, processes and findings). A GPU in
/// MIG mode is judged by its instances ([`mig`]): never on its own NO_PERMISSION or its
/// sum; it passes when one of its instances is a candidate, named in the verdict. Graphics
/// clients are [`Verdict::notes`] ([`apply_context`] makes them problems when asked).
pub fn judge(report: &Report, selection: Selection, need: Option<u64>) -> Verdict {
    let mut problems = Vec::new();
    let mut candidates = Vec::new();
    let Some(scan) = report.scan() else {
        return Verdict {
            selection,
            need,
            problems,
            notes: Vec::new(),
            candidates,
            labels: Default::default(),
        };
    };
    for &d in &selection.devices {
        match scan.devices.iter().find(|x| x.index == d) {
            Some(dev) if dev.is_mig_parent() => {
                // A graphics client refuses no instance: it does not decide a candidate
                // (and is not kept as a note: instances are named by their candidacy).
                let (p, c) = mig::judge_parent(scan, dev, |i| {
                    let mut p = judge_device(scan, i, need);
                    p.retain(|p| p.kind != GRAPHICS_CLIENT);
                    p
                });
                problems.extend(p);
                candidates.extend(c);
            }
            Some(dev) => problems.extend(judge_device(scan, dev, need)),
            None => problems.push(Problem {
                device: d,
                kind: "device-unavailable",
                detail: "not reported by the driver".into(),
            }),
        }
    }
    // A MIG instance selected with its GPU is judged once.
    let mut seen = Vec::new();
    problems.retain(|p| {
        !seen.contains(p) && {
            seen.push(p.clone());
            true
        }
    });
    let (notes, problems) = problems
        .into_iter()
        .partition(|p| p.kind == GRAPHICS_CLIENT);
    Verdict {
        selection,
        need,
        problems,
        notes,
        candidates,
        labels: mig::labels(scan),
    }
}

/// One plain sentence for a device the driver does not answer for (issue 39 item 5: it was
/// Rust's debug text of the status).
fn unavailable(status: &crate::gpu::DeviceStatus) -> String {
    use crate::gpu::DeviceStatus;
    match status {
        DeviceStatus::Ok => "the driver answers for it".into(),
        DeviceStatus::Lost => "it has fallen off the bus (NVML_ERROR_GPU_IS_LOST, Xid 79): reboot the node".into(),
        DeviceStatus::NoPermission => {
            "vramdoc may not query it (NVML_ERROR_NO_PERMISSION): run as root, or mount the device into the container".into()
        }
        DeviceStatus::Error { message } => {
            let prefix = crate::gpu::lanes::HUNG_GAP_PREFIX;
            match message.rfind(prefix) {
                // "NVML failed: hung: hung: no answer from NVML within 1000 ms (…)".
                Some(i) => format!(
                    "the driver does not answer for it: {}",
                    message[i + prefix.len()..].trim()
                ),
                None => format!(
                    "the driver answers with an error: {}",
                    crate::term::one_line(message)
                ),
            }
        }
    }
}

/// Why one device (a GPU, or a MIG instance) is refused: empty when it is clean.
fn judge_device(scan: &ScanResult, dev: &DeviceInfo, need: Option<u64>) -> Vec<Problem> {
    let d = dev.index;
    let mut problems = Vec::new();
    if !dev.status.is_ok() {
        problems.push(Problem {
            device: d,
            kind: "device-unavailable",
            detail: unavailable(&dev.status),
        });
        return problems;
    }
    // Without this GPU's process lists nothing says it is free of other processes.
    for f in scan
        .findings
        .iter()
        .filter(|f| f.id == ids::DEVICE_UNAVAILABLE && f.devices.contains(&d))
    {
        let status = f.evidence.iter().rfind(|e| e.label == "status");
        problems.push(Problem {
            device: d,
            kind: "process-lists-unreadable",
            detail: crate::term::clean_text(
                status.map_or("its process lists could not be read", |e| e.value.as_str()),
            ),
        });
    }
    for p in &scan.processes {
        let Some(usage) = p.usage_on(d) else {
            continue;
        };
        let who = match &p.name {
            Some(n) => format!("PID {} ({})", p.pid, crate::term::clean_text(n)),
            None => format!("PID {}", p.pid),
        };
        let state = if p.visible { "" } else { ", not running here" };
        match usage.used {
            // 0-byte entries are peer mappings, not memory (pytorch/pytorch#64130).
            Some(0) => {}
            // In the graphics list only: a display server, no CUDA context on this GPU.
            used if usage.graphics_only() => problems.push(Problem {
                device: d,
                kind: GRAPHICS_CLIENT,
                detail: format!(
                    "{who}, a graphics client (no CUDA context), holds {}{state}",
                    used.map_or("an unknown amount".into(), format_bytes)
                ),
            }),
            Some(used) => problems.push(Problem {
                device: d,
                kind: "foreign-process",
                detail: format!("{who} holds {}{state}", format_bytes(used)),
            }),
            // NVML "not available" (containers, MIG without privileges): it may hold
            // anything, the whole GPU included.
            None => problems.push(Problem {
                device: d,
                kind: "unknown-usage",
                detail: format!("{who} holds an unknown amount (NVML: not available){state}"),
            }),
        }
    }
    for f in scan.findings.iter().filter(|f| {
        f.id == ids::NO_LIVE_OWNER && f.severity == Severity::Error && f.devices.contains(&d)
    }) {
        problems.push(Problem {
            device: d,
            kind: "dead-process-memory",
            detail: crate::term::clean_text(without_gpu(&f.title, dev)),
        });
    }
    // A GPU whose memory query is not supported (GB10) has no free figure to compare.
    if let Some(n) = need.filter(|_| dev.memory_unknown.is_none()) {
        if dev.memory.free < n {
            problems.push(Problem {
                device: d,
                kind: "not-enough-free",
                detail: format!(
                    "{} free, {} needed",
                    format_bytes(dev.memory.free),
                    format_bytes(n)
                ),
            });
        }
    }
    problems
}

/// Whether preflight runs for a job, and whether the scheduler shares its GPUs (issue 28):
/// without a job (a Node Problem Detector check of the whole node) only memory without a live
/// owner and unusable GPUs are problems; for a job, other processes are too, unless the
/// scheduler shares the GPU with them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobContext {
    /// A job's GPUs are checked (`--gpus` or a job's variable named them).
    pub job: bool,
    /// Why other processes are expected on these GPUs (`None`: they are not).
    pub shared: Option<String>,
    /// `--strict-graphics`: a graphics client (a display server) on a job's GPU is a problem,
    /// as any other process is, instead of a note.
    pub strict_graphics: bool,
}

/// The variables that say a scheduler shares the GPUs: Slurm's `gres/shard`
/// (`SLURM_SHARDS_ON_NODE`, slurm `src/plugins/gres/shard/gres_shard.c`), CUDA MPS
/// (`CUDA_MPS_PIPE_DIRECTORY`, `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`: Slurm's `gres/mps` and
/// NVIDIA's MPS documentation).
pub const SHARING_VARIABLES: &[&str] = &[
    "SLURM_SHARDS_ON_NODE",
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
];

/// The job context from where the GPU list came from (`selection.source`, the list's text)
/// and a variable lookup. A Kubernetes time-slicing replica id (`GPU-…::N`) in the list
/// means the device plugin shares the GPU.
pub fn job_context(
    selection: &Selection,
    list: Option<&str>,
    var: impl Fn(&str) -> Option<String>,
) -> JobContext {
    let job = selection.source != ALL_GPUS;
    let shared = SHARING_VARIABLES
        .iter()
        .find(|k| var(k).is_some_and(|v| !v.trim().is_empty()))
        .map(|k| format!("{k} is set"))
        .or_else(|| {
            list.filter(|l| l.contains("::"))
                .map(|_| "time-slicing replicas (`::N` ids)".to_string())
        });
    JobContext {
        job,
        shared,
        strict_graphics: false,
    }
}

/// The selection's source when nothing named the GPUs.
pub const ALL_GPUS: &str = "all GPUs";

/// Drop the problems the context allows: other processes' memory, without a job or on a
/// shared GPU. Where other processes are a problem and the site asked for strictness,
/// graphics clients are too.
pub fn apply_context(mut verdict: Verdict, ctx: &JobContext) -> Verdict {
    if !ctx.job || ctx.shared.is_some() {
        verdict.problems.retain(|p| p.kind != "foreign-process");
    } else if ctx.strict_graphics {
        verdict.problems.append(&mut verdict.notes);
    }
    verdict
}

/// Whether a verdict's problems may be a previous job still tearing down (only other
/// processes' memory): worth waiting the grace for.
pub fn may_clear(verdict: &Verdict) -> bool {
    !verdict.ok() && verdict.problems.iter().all(|p| p.kind == "foreign-process")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two GPUs whose device files' minors are `minors` (by NVML index), or unknown.
    fn with_minors(minors: &[Option<u32>]) -> (Vec<DeviceInfo>, Vec<String>) {
        let devices: Vec<DeviceInfo> = minors
            .iter()
            .enumerate()
            .map(|(i, m)| DeviceInfo {
                minor: *m,
                ..DeviceInfo::unanswered(
                    i as u32,
                    (
                        "NVIDIA H100".into(),
                        format!("GPU-{i}0000000-0000-0000-0000-000000000000"),
                        format!("00000000:{:02X}:00.0", 0x17 + i),
                    ),
                    crate::gpu::DeviceStatus::Ok,
                )
            })
            .collect();
        let uuids = devices.iter().map(|d| d.uuid.clone()).collect();
        (devices, uuids)
    }

    /// Issue 37 item 4: Slurm's list is read as scan's device sets read it, never as NVML
    /// indices: minors that follow NVML order give one reading; permuted minors give two,
    /// and the GPUs of both are checked; no minors: the GRES (PCI-order) reading, said.
    #[test]
    fn slurm_gpus_are_read_as_minors_and_gres_indices() {
        let (d, u) = with_minors(&[Some(0), Some(1)]);
        let one = resolve_slurm("SLURM_JOB_GPUS", "1", &d, &u).unwrap();
        assert_eq!(one.devices, [1]);
        assert_eq!(one.source, "SLURM_JOB_GPUS");
        // NVML index 0 is the device file nvidia1 (kernel probe order differs from PCI order).
        let (d, u) = with_minors(&[Some(1), Some(0)]);
        let both = resolve_slurm("SLURM_STEP_GPUS", "1", &d, &u).unwrap();
        assert_eq!(both.devices, [0, 1]);
        assert!(
            both.source.contains("minors") && both.source.contains("GRES"),
            "{}",
            both.source
        );
        // A minor no GPU has, read as an index, names GPU 1: that reading alone.
        let (d, u) = with_minors(&[Some(4), Some(5)]);
        assert_eq!(
            resolve_slurm("SLURM_JOB_GPUS", "1", &d, &u)
                .unwrap()
                .devices,
            [1]
        );
        assert_eq!(
            resolve_slurm("SLURM_JOB_GPUS", "5", &d, &u)
                .unwrap()
                .devices,
            [1]
        );
        assert!(resolve_slurm("SLURM_JOB_GPUS", "7", &d, &u).is_err());
        let (d, u) = with_minors(&[None, None]);
        let gres = resolve_slurm("SLURM_JOB_GPUS", "0", &d, &u).unwrap();
        assert_eq!(gres.devices, [0]);
        assert!(gres.source.contains("GRES indices"), "{}", gres.source);
        // UUIDs resolve as any list does.
        let (d, u) = with_minors(&[Some(1), Some(0)]);
        let by_uuid = resolve_slurm("SLURM_JOB_GPUS", &u[1].clone(), &d, &u).unwrap();
        assert_eq!(by_uuid.devices, [1]);
    }

    #[test]
    fn the_context_allows_other_processes_only_without_a_job_or_when_shared() {
        let sel = |source: &str| Selection {
            devices: vec![0],
            source: source.into(),
        };
        let foreign = |source: &str| Verdict {
            selection: sel(source),
            need: None,
            problems: vec![Problem {
                device: 0,
                kind: "foreign-process",
                detail: "PID 1 holds 1 GiB".into(),
            }],
            notes: Vec::new(),
            candidates: Vec::new(),
            labels: Default::default(),
        };
        let none = |_: &str| None;
        let node = job_context(&sel(ALL_GPUS), None, none);
        assert!(!node.job);
        assert!(apply_context(foreign(ALL_GPUS), &node).ok());
        let job = job_context(&sel("SLURM_JOB_GPUS"), Some("0"), none);
        assert!(job.job && job.shared.is_none());
        assert!(!apply_context(foreign("SLURM_JOB_GPUS"), &job).ok());
        let shard = job_context(&sel("SLURM_JOB_GPUS"), Some("0"), |k| {
            (k == "SLURM_SHARDS_ON_NODE").then(|| "4".to_string())
        });
        assert!(apply_context(foreign("SLURM_JOB_GPUS"), &shard).ok());
        let replica = job_context(&sel("--gpus"), Some("GPU-0000::2"), none);
        assert!(replica.shared.is_some());
        let dead = Verdict {
            problems: vec![Problem {
                device: 0,
                kind: "dead-process-memory",
                detail: "held with no live owner".into(),
            }],
            ..foreign(ALL_GPUS)
        };
        assert!(!apply_context(dead.clone(), &node).ok());
        assert!(!may_clear(&dead));
        assert!(may_clear(&foreign("--gpus")));
    }

    /// Issue 37 item 4: a process NVML names only in the graphics list (a display server, no
    /// CUDA context) passes a job's GPU with a note; `--strict-graphics` refuses it; a
    /// process in the compute and the graphics list (`C+G`) is refused as any other.
    #[test]
    fn a_graphics_client_is_a_note_unless_the_site_is_strict() {
        use crate::gpu::ProcessKind::{Compute, Graphics};
        use crate::units::MIB;
        let mut inv = crate::scan::sample_inventory();
        inv.processes.truncate(1);
        inv.processes[0].devices.truncate(1);
        let sel = || Selection {
            devices: vec![0],
            source: "--gpus".into(),
        };
        let verdict = |inv: &crate::inventory::Inventory, strict: bool| {
            let report = crate::scan::build_report(inv, &crate::diagnose::Thresholds::default());
            let ctx = JobContext {
                strict_graphics: strict,
                ..job_context(&sel(), Some("0"), |_| None)
            };
            apply_context(judge(&report, sel(), None), &ctx)
        };
        inv.processes[0].devices[0].used = Some(20 * MIB);
        inv.processes[0].devices[0].lists = vec![Graphics];
        // The GPU's used memory is the display server's.
        let m = &mut inv.environment.devices[0].memory;
        m.used = 20 * MIB;
        m.free = m.total - m.reserved - m.used;
        let v = verdict(&inv, false);
        assert!(v.ok(), "{v:?}");
        assert_eq!(v.notes.len(), 1, "{v:?}");
        assert_eq!(v.notes[0].kind, GRAPHICS_CLIENT);
        let line = v.line();
        assert!(line.starts_with("ok: GPU 0"), "{line}");
        assert!(
            line.contains("graphics client") && line.contains("--strict-graphics"),
            "{line}"
        );
        let strict = verdict(&inv, true);
        assert!(!strict.ok(), "{strict:?}");
        assert_eq!(strict.problems[0].kind, GRAPHICS_CLIENT);
        assert!(!may_clear(&strict), "a display server does not go away");
        // Without a job, or on a shared GPU, strictness refuses nothing live.
        let node = JobContext {
            strict_graphics: true,
            ..job_context(
                &Selection {
                    source: ALL_GPUS.into(),
                    ..sel()
                },
                None,
                |_| None,
            )
        };
        let report = crate::scan::build_report(&inv, &crate::diagnose::Thresholds::default());
        assert!(apply_context(judge(&report, sel(), None), &node).ok());
        // C+G: a CUDA context too.
        inv.processes[0].devices[0].lists = vec![Compute, Graphics];
        let cg = verdict(&inv, false);
        assert_eq!(cg.problems.len(), 1, "{cg:?}");
        assert_eq!(cg.problems[0].kind, "foreign-process");
        assert!(cg.notes.is_empty());
        // Lists not known (an older report): never a note.
        inv.processes[0].devices[0].lists = Vec::new();
        assert!(!verdict(&inv, false).ok());
    }

    /// Issue 25: from a container on a translating driver, memory of other tenants is not
    /// a reason to refuse a GPU; from the host, memory with no live owner is.
    #[test]
    fn memory_not_attributable_from_here_is_no_refusal() {
        use crate::units::GIB;
        let mut inv = crate::scan::sample_inventory();
        // The invisible PID 77 is dropped by a translating driver: its 70 GiB are unlisted.
        inv.processes.retain(|p| p.visible);
        let sel = || Selection {
            devices: vec![0],
            source: "--gpus".into(),
        };
        for (host, driver, refused) in [
            (false, "570.86.10", false),
            (false, "550.54.15", false),
            (true, "570.86.10", true),
        ] {
            inv.vantage = crate::model::Vantage::new(
                crate::model::PidNamespace {
                    host,
                    reason: "test".into(),
                },
                Some(driver.into()),
            );
            let report = crate::scan::build_report(&inv, &crate::diagnose::Thresholds::default());
            let v = judge(&report, sel(), Some(GIB));
            let dead = v.problems.iter().any(|p| p.kind == "dead-process-memory");
            assert_eq!(dead, refused, "host={host} {driver}: {v:?}");
        }
    }

    fn uuids(n: u32) -> Vec<String> {
        (0..n)
            .map(|i| format!("GPU-{i:08x}-1111-2222-3333-444444444444"))
            .collect()
    }

    #[test]
    fn every_form_of_a_gpu_list_resolves() {
        let u = uuids(4);
        let r = |v: &str| resolve("--gpus", v, &u).map(|s| s.devices);
        assert_eq!(r("all").unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(r("2,0").unwrap(), vec![0, 2]);
        assert_eq!(r("GPU-00000003").unwrap(), vec![3]);
        assert_eq!(r(&format!("{}::2", u[1])).unwrap(), vec![1]);
        assert!(r("7").unwrap_err().to_string().contains("names no GPU"));
        assert!(r("MIG-abc")
            .unwrap_err()
            .to_string()
            .contains("MIG instance"));
        assert!(r("").is_err());
        assert!(r("GPU-0000000")
            .unwrap_err()
            .to_string()
            .contains("several"));
    }
}
