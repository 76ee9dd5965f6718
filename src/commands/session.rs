//! The session at the command edge: `--sim`, `--backend` and `VRAMDOC_SIM_DIR` into
//! [`crate::session::SessionOptions`], and the session's typed errors into the errors whose
//! exit codes they have always had (`exit::code_for`).

use crate::backend::{BackendKind, BoxSpec};
use crate::cli::{BackendArg, GlobalArgs};
use crate::exit::{EnvironmentError, UsageError};
use crate::gpu::Monitor;
use crate::session::{OpenError, PrivateBoxError, SessionError, SessionOptions};
use anyhow::Result;

pub use crate::session::{Session, NVML_START_LIMIT};

/// The session of a command, built once from its global flags.
pub fn open(global: &GlobalArgs) -> Result<Session> {
    let sim = global.sim.as_deref().map(BoxSpec::parse).transpose()?;
    let backend = match global.backend {
        BackendArg::Auto => None,
        BackendArg::Sim => Some(BackendKind::Sim),
        BackendArg::Real => Some(BackendKind::Real),
    };
    Session::open(&SessionOptions { sim, backend }).map_err(|e| match e {
        SessionError::SimWithReal => UsageError(e.to_string()).into(),
        SessionError::PrivateBox(b) => private_box_error(b),
    })
}

/// The session's monitor ([`Session::monitor`]), its failures as exit codes.
pub fn monitor(session: &Session) -> Result<Box<dyn Monitor>> {
    session.monitor().map_err(open_error)
}

/// The session's hang-guarded monitor ([`Session::guarded_monitor`]).
pub fn guarded_monitor(session: &Session) -> Result<Box<dyn Monitor>> {
    session.guarded_monitor().map_err(open_error)
}

/// [`crate::session::open_monitor`] at the edge (serve's collector opens NVML again).
pub fn open_monitor(
    backend: &crate::backend::Backend,
    opening: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<Box<dyn Monitor>> {
    crate::session::open_monitor(backend, opening).map_err(open_error)
}

fn private_box_error(e: PrivateBoxError) -> anyhow::Error {
    match e {
        PrivateBoxError::TempDir { .. } => EnvironmentError(e.to_string()).into(),
        PrivateBoxError::Sim(s) => s.into(),
    }
}

/// The inner error itself, so its exit code is the one it always had.
fn open_error(e: OpenError) -> anyhow::Error {
    match e {
        OpenError::Environment(e) => e.into(),
        OpenError::Gpu(e) => e.into(),
        OpenError::Spawn(e) => e.into(),
    }
}
