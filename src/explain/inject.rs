//! `vramdoc run --torch-memory`: code injected into the job, opt-in, and the join of what it
//! leaves with the run's findings.
//!
//! [`Injection::prepare`] writes a `sitecustomize.py` ([`SITECUSTOMIZE`]) into a private
//! directory (in this user's own, which outlives the run) put first on the job's `PYTHONPATH`. In each Python process of the job it:
//! chains the next `sitecustomize` on `sys.path` (and takes its own directory off
//! `sys.path`); installs a one-shot import hook that acts only after the job itself imports
//! `torch`, and only if `torch.cuda.is_available()`; then calls
//! `torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python",
//! max_entries=N)` (torch/cuda/memory.py; the 2.0 form `(True, trace_alloc_max_entries=N,
//! trace_alloc_record_context=True)` where the keyword form is refused), and attaches an OOM
//! observer (`torch._C._cuda_attach_out_of_memory_observer`, called with `(device, alloc,
//! device_alloc, device_free)` before the allocator raises) that dumps
//! `torch.cuda.memory._dump_snapshot` to `torch-memory-PID.pickle` in the run's directory
//! (written to a temporary name and renamed). Python stacks only: C++ stacks make dumps
//! take minutes (torchtitan PR #3628).
//!
//! [`join`] explains the newest snapshot and adds the explanation to the run's
//! `out-of-memory` finding, with the memory outside PyTorch (the job's NVML peak on the
//! device minus PyTorch's reserve).

use super::{Explanation, Options};
use crate::model::{Evidence, Finding, RunResult, Severity};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use vramdoc_gpu_spec::units::format_bytes;

/// Where the injected code dumps snapshots (set in the job's environment).
pub const DIR_ENV: &str = "VRAMDOC_TORCH_MEMORY_DIR";
/// History entries kept by the allocator (`max_entries`).
pub const MAX_ENTRIES_ENV: &str = "VRAMDOC_TORCH_MEMORY_MAX_ENTRIES";
pub const DEFAULT_MAX_ENTRIES: u64 = 100_000;

/// The injected `sitecustomize.py`.
pub const SITECUSTOMIZE: &str = include_str!("sitecustomize.py");

#[derive(Debug, thiserror::Error)]
#[error("--torch-memory: {what}: {source}")]
pub struct InjectError {
    what: &'static str,
    #[source]
    source: std::io::Error,
}

/// The prepared injection: the run's directory, removed on drop.
pub struct Injection {
    dir: tempfile::TempDir,
    max_entries: u64,
}

impl Injection {
    /// The run's directory is made in `parent`, which must be this user's only and outlive
    /// the run: the job's `PYTHONPATH` and dump directory point into it, and a process of
    /// the job that outlives vramdoc keeps them. Were `parent` a shared temporary directory,
    /// any local user could make the removed directory again and have every later Python
    /// process of the survivor import their `sitecustomize.py` (issue 39 item 3).
    pub fn prepare(max_entries: u64, parent: &Path) -> Result<Injection, InjectError> {
        let err = |what| move |source| InjectError { what, source };
        let dir = tempfile::Builder::new()
            .prefix("torch-")
            .tempdir_in(parent)
            .map_err(err("creating the run's directory"))?;
        let py = dir.path().join("py");
        std::fs::create_dir(&py).map_err(err("creating the sitecustomize directory"))?;
        std::fs::write(py.join("sitecustomize.py"), SITECUSTOMIZE)
            .map_err(err("writing sitecustomize.py"))?;
        Ok(Injection { dir, max_entries })
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The job's extra environment: `PYTHONPATH` with the hook first (then `existing`, the
    /// job's own), the dump directory and the history bound.
    pub fn env(&self, existing: Option<OsString>) -> Vec<(OsString, OsString)> {
        let mut pythonpath = self.dir.path().join("py").into_os_string();
        if let Some(e) = existing.filter(|e| !e.is_empty()) {
            pythonpath.push(":");
            pythonpath.push(e);
        }
        vec![
            ("PYTHONPATH".into(), pythonpath),
            (DIR_ENV.into(), self.dir.path().into()),
            (MAX_ENTRIES_ENV.into(), self.max_entries.to_string().into()),
        ]
    }

    /// The newest snapshot the job dumped, if any.
    pub fn snapshot(&self) -> Option<PathBuf> {
        let entries = std::fs::read_dir(self.dir.path()).ok()?;
        entries
            .flatten()
            .filter(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                n.starts_with("torch-memory-") && n.ends_with(".pickle")
            })
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .max()
            .map(|(_, p)| p)
    }
}

/// PyTorch's device `d` as the run's GPU: the job's only GPU when it used one, else `d`.
fn run_device(run: &RunResult, d: u32) -> u32 {
    let mut used: Vec<u32> = run
        .processes
        .iter()
        .flat_map(|p| p.devices.iter().map(|x| x.device))
        .collect();
    used.sort_unstable();
    used.dedup();
    match used[..] {
        [only] => only,
        _ => d,
    }
}

fn ev(label: &str, value: String, bytes: Option<u64>) -> Evidence {
    Evidence {
        label: label.into(),
        value,
        bytes,
    }
}

/// Where `run --torch-memory` keeps the job's snapshot: next to the first `--out` report
/// (`job.json` → `job.torch-memory.pickle`); without `--out` it is not kept.
pub fn kept_path(out: &[std::path::PathBuf]) -> Option<std::path::PathBuf> {
    let first = out.first()?;
    let stem = first.file_stem()?.to_string_lossy().into_owned();
    Some(first.with_file_name(format!("{stem}.torch-memory.pickle")))
}

/// Explain `snapshot` with the run's NVML view and add it to `run`'s `out-of-memory`
/// finding (a `torch-memory` finding when the run saw no out-of-memory error). An
/// unreadable snapshot becomes evidence saying so, never an error of the run.
pub fn join(run: &mut RunResult, snapshot: &Path, kept_as: Option<&Path>) -> Option<Explanation> {
    let mut opts = Options::default();
    for d in 0..16u32 {
        let r = run_device(run, d);
        if let Some(m) = run.min_free.iter().find(|m| m.device == r) {
            opts.totals.insert(d, m.total);
        }
        if let Some(p) = run.tree_peaks.iter().find(|p| p.device == r) {
            opts.process_used.insert(d, p.peak_used);
        }
    }
    let explained = super::explain_file(snapshot, &opts);
    let mut evidence = Vec::new();
    let mut fix = String::new();
    match &explained {
        Ok(x) => {
            for d in x.devices.iter().filter(|d| d.at == super::Moment::Oom) {
                let n = &d.numbers;
                let tag = |s: &str| format!("PyTorch (cuda:{}) {s}", d.device);
                evidence.push(ev(&tag("cause"), d.because.clone(), None));
                if let Some(r) = n.requested {
                    evidence.push(ev(&tag("requested"), format_bytes(r), Some(r)));
                }
                for (label, v) in [
                    ("reserved", n.reserved),
                    ("allocated", n.allocated),
                    ("cached free", n.cached_free),
                    (
                        "largest free block in the request's pool",
                        n.pool_largest_free,
                    ),
                ] {
                    evidence.push(ev(&tag(label), format_bytes(v), Some(v)));
                }
                if let Some(out) = n.outside_pytorch {
                    evidence.push(ev(
                        &tag("outside PyTorch (the job's NVML usage - reserved)"),
                        format_bytes(out),
                        Some(out),
                    ));
                }
                if let Some(s) = d.top_sites.first() {
                    evidence.push(ev(
                        &tag("top site"),
                        format!("{} holds {}", s.site, format_bytes(s.bytes)),
                        Some(s.bytes),
                    ));
                }
                if let Some(f) = d.fixes.first() {
                    fix = f.text.clone();
                }
            }
            if evidence.is_empty() {
                evidence.push(ev(
                    "PyTorch snapshot",
                    "no out-of-memory recorded in the snapshot".into(),
                    None,
                ));
            }
        }
        Err(e) => evidence.push(ev(
            "PyTorch snapshot",
            format!("not explained: {}", crate::term::one_line(&e.to_string())),
            None,
        )),
    }
    if let Some(k) = kept_as {
        evidence.push(ev(
            "PyTorch snapshot file",
            crate::term::one_line(&k.display().to_string()),
            None,
        ));
    }
    match run.findings.iter_mut().find(|f| f.id == "out-of-memory") {
        Some(f) => {
            f.evidence.extend(evidence);
            if !fix.is_empty() {
                f.fix = if f.fix.is_empty() {
                    fix
                } else {
                    format!("{fix}. {}", f.fix)
                };
            }
        }
        None => run.findings.push(Finding {
            id: "torch-memory".into(),
            severity: Severity::Info,
            title: "PyTorch's allocator snapshot of the job".into(),
            devices: Vec::new(),
            pid: None,
            evidence,
            fix,
        }),
    }
    explained.ok()
}
