//! Opening NVML for a session, bounded: on a thread of its own, within [`NVML_START_LIMIT`],
//! and never twice at once (an open that did not return keeps the next one from starting).

use crate::backend::{self, Backend};
use crate::exit::EnvironmentError;
use crate::gpu::{GpuError, Monitor};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use thiserror::Error;

/// Longest a command waits for NVML to open and list the GPUs.
pub const NVML_START_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why the monitor could not be opened: each carries the error the command edge maps to an
/// exit code (an environment error, a driver error, a thread that could not start).
#[derive(Debug, Error)]
pub enum OpenError {
    /// NVML still opening from an earlier call, or not answering within the limit.
    #[error(transparent)]
    Environment(EnvironmentError),
    /// The backend's own error (no library, no device, a driver error).
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// The thread that opens NVML could not be started.
    #[error(transparent)]
    Spawn(std::io::Error),
}

/// The monitor of `backend`, from any thread (serve's collector opens NVML again after a
/// loss). `opening` is set while an open runs: an open that did not return within
/// [`NVML_START_LIMIT`] keeps it set until it does, and a new open meanwhile fails at once
/// instead of leaving one more thread stuck in the driver.
pub fn open_monitor(
    backend: &Backend,
    opening: &Arc<AtomicBool>,
) -> Result<Box<dyn Monitor>, OpenError> {
    open_counted(backend, opening).map(|(m, _)| m)
}

/// [`open_monitor`] with the device count it read to see the driver answer (MIG instances
/// included): a caller's first inventory need not ask again.
pub fn open_counted(
    backend: &Backend,
    opening: &Arc<AtomicBool>,
) -> Result<(Box<dyn Monitor>, u32), OpenError> {
    if opening.swap(true, Ordering::SeqCst) {
        return Err(OpenError::Environment(EnvironmentError(
            "NVML is still opening: an earlier nvmlInit has not returned (look for Xid \
             messages in `dmesg` and processes in D state)"
                .into(),
        )));
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
        return Err(OpenError::Spawn(e));
    }
    let Ok(opened) = rx.recv_timeout(NVML_START_LIMIT) else {
        return Err(OpenError::Environment(EnvironmentError(format!(
            "NVML did not answer within {} s: a GPU or its driver is in a bad state (look for \
             Xid messages in `dmesg` and processes in D state; `nvidia-smi` hangs too); \
             drain the node or reset the GPU",
            NVML_START_LIMIT.as_secs()
        ))));
    };
    let (m, count) = opened?;
    if count == 0 {
        return Err(GpuError::NoDevice(
            "the driver reports 0 GPUs (check the container's GPU access, e.g. NVIDIA_VISIBLE_DEVICES)".into(),
        )
        .into());
    }
    Ok((m, count))
}
