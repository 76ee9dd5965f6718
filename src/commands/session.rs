//! The session: which GPU backend a command gets, resolved once from `--sim`, `--backend` and
//! `VRAMDOC_SIM_DIR` into a [`Backend`] value (with the `--sim` private box it owns), and the
//! monitor opened under a deadline.

use crate::backend::{self, Backend, BackendKind, BoxSpec};
use crate::cli::{BackendArg, GlobalArgs};
use crate::exit::EnvironmentError;
use crate::gpu::{self, Monitor};
use crate::replay::PrivateBoxError;
use anyhow::Result;

/// Longest a command waits for NVML to open and list the GPUs.
pub const NVML_START_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Where commands get their GPU from: the backend as a value (with the session's box), and
/// the private box made for `--sim`.
pub struct Session {
    pub backend: Backend,
    /// The private box made for `--sim SPEC`, removed when the session ends.
    pub private_box: Option<crate::replay::PrivateBox>,
}

impl Session {
    /// Resolve `--sim` / `--backend` / `VRAMDOC_SIM_DIR` once. With `--sim`, a fresh box is
    /// created; engines get it in [`Session::backend`], children in their own environment.
    pub fn new(global: &GlobalArgs) -> Result<Session> {
        let private_box = match &global.sim {
            Some(spec) => {
                let spec = BoxSpec::parse(spec)?;
                if global.backend == BackendArg::Real {
                    anyhow::bail!(crate::exit::UsageError(
                        "--sim runs the in-process simulator; for the real backends over a \
                         simulated box, set VRAMDOC_SIM_DIR (`vramdoc sim init SPEC`) and \
                         LD_LIBRARY_PATH (`vramdoc sim libs DIR`) instead"
                            .into()
                    ));
                }
                Some(private_box(&spec)?)
            }
            None => None,
        };
        let sim_dir = match &private_box {
            Some(b) => Some(b.path().to_path_buf()),
            None => Backend::sim_dir_from_env(),
        };
        let kind = match global.backend {
            BackendArg::Sim => BackendKind::Sim,
            BackendArg::Real => BackendKind::Real,
            BackendArg::Auto if sim_dir.is_some() => BackendKind::Sim,
            BackendArg::Auto => BackendKind::Real,
        };
        Ok(Session {
            backend: Backend { kind, sim_dir },
            private_box,
        })
    }

    /// The simulated box's spec, for reports (`None` on the real backends).
    pub fn sim_spec(&self) -> Option<String> {
        self.backend.sim_spec()
    }

    /// The monitor, on a machine with at least one GPU (none: exit 3). Opened and asked for
    /// the GPUs on a thread of its own: a driver that does not answer within
    /// [`NVML_START_LIMIT`] (a GPU in a bad state, a call stuck in D state) is an
    /// environment error saying what to check (exit 3; `run`: 125), never a hang.
    pub fn monitor(&self) -> Result<Box<dyn Monitor>> {
        open_monitor(&self.backend, &Default::default())
    }
}

/// A private box of `spec`, its failures mapped to exit codes (no temporary directory: 3).
pub(crate) fn private_box(spec: &BoxSpec) -> Result<crate::replay::PrivateBox> {
    crate::replay::PrivateBox::create(spec).map_err(|e| match e {
        PrivateBoxError::TempDir { .. } => EnvironmentError(e.to_string()).into(),
        PrivateBoxError::Sim(s) => s.into(),
    })
}

/// [`Session::monitor`] for a backend, from any thread (serve's collector opens NVML
/// again after a loss). `opening` is set while an open runs: an open that did not return
/// within [`NVML_START_LIMIT`] keeps it set until it does, and a new open meanwhile fails at
/// once instead of leaving one more thread stuck in the driver.
pub fn open_monitor(
    backend: &Backend,
    opening: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<Box<dyn Monitor>> {
    use std::sync::atomic::Ordering;
    if opening.swap(true, Ordering::SeqCst) {
        return Err(crate::exit::EnvironmentError(
            "NVML is still opening: an earlier nvmlInit has not returned (look for Xid \
             messages in `dmesg` and processes in D state)"
                .into(),
        )
        .into());
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let done = opening.clone();
    let backend = backend.clone();
    let spawned = std::thread::Builder::new()
        .name("vramdoc-nvml-open".into())
        .spawn(move || {
            // The count only: a GPU that hangs is found (and bounded) by the caller's
            // per-GPU deadline, never here.
            let opened = backend::open_monitor(&backend).and_then(|m| {
                let count = m.device_count()?;
                Ok((m, count))
            });
            done.store(false, Ordering::SeqCst);
            let _ = tx.send(opened);
        });
    if let Err(e) = spawned {
        opening.store(false, Ordering::SeqCst);
        return Err(e.into());
    }
    let Ok(opened) = rx.recv_timeout(NVML_START_LIMIT) else {
        return Err(crate::exit::EnvironmentError(format!(
            "NVML did not answer within {} s: a GPU or its driver is in a bad state (look for \
             Xid messages in `dmesg` and processes in D state; `nvidia-smi` hangs too); \
             drain the node or reset the GPU",
            NVML_START_LIMIT.as_secs()
        ))
        .into());
    };
    let (m, count) = opened?;
    if count == 0 {
        return Err(gpu::GpuError::NoDevice(
            "the driver reports 0 GPUs (check the container's GPU access, e.g. NVIDIA_VISIBLE_DEVICES)".into(),
        )
        .into());
    }
    Ok(m)
}
