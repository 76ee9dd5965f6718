//! The session: what one command runs against, built once when it starts and handed to its
//! engine. It owns the GPU backend as a value ([`Backend`]: real, or the simulated machine
//! in-process with the session's box directory), the private box `--sim SPEC` makes
//! ([`PrivateBox`], removed when the session ends), and the monitor opened under deadlines:
//! NVML opened on a thread of its own within [`NVML_START_LIMIT`] ([`open_monitor`]), then
//! each call in its own per-GPU lane ([`Session::guarded_monitor`], `gpu::lanes::Deadlined`),
//! so a hung driver is an error or a gap, never a hang of vramdoc. Above `backend` and `job`
//! (whose one signal handler removes a private box), below every engine.

mod open;
mod private_box;

pub use open::{open_counted, open_monitor, OpenError, NVML_START_LIMIT};
pub use private_box::{PrivateBox, PrivateBoxError};

use crate::backend::{Backend, BackendKind, BoxSpec};
use crate::gpu::Monitor;
use thiserror::Error;

/// What a session is built from (the command line's `--sim`, `--backend`, and the
/// environment's `VRAMDOC_SIM_DIR`).
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// `--sim SPEC`: a private box of this spec, in-process.
    pub sim: Option<BoxSpec>,
    /// `--backend`: `None` chooses (the simulator where a box is given, else the real one).
    pub backend: Option<BackendKind>,
}

/// Why a session could not be built.
#[derive(Debug, Error)]
pub enum SessionError {
    /// `--sim` with `--backend real` (a usage error).
    #[error(
        "--sim runs the in-process simulator; for the real backends over a simulated box, set \
         VRAMDOC_SIM_DIR (`vramdoc sim init SPEC`) and LD_LIBRARY_PATH (`vramdoc sim libs DIR`) \
         instead"
    )]
    SimWithReal,
    /// The private box could not be made.
    #[error(transparent)]
    PrivateBox(#[from] PrivateBoxError),
}

/// Where a command gets its GPU from: the backend as a value (with the session's box), and
/// the private box made for `--sim`.
pub struct Session {
    pub backend: Backend,
    /// The private box made for `--sim SPEC`, removed when the session ends.
    pub private_box: Option<PrivateBox>,
}

impl Session {
    /// Resolve `--sim` / `--backend` / `VRAMDOC_SIM_DIR` once. With `--sim`, a fresh box is
    /// created; engines get it in [`Session::backend`], children in their own environment.
    pub fn open(opts: &SessionOptions) -> Result<Session, SessionError> {
        let private_box = match &opts.sim {
            Some(_) if opts.backend == Some(BackendKind::Real) => {
                return Err(SessionError::SimWithReal)
            }
            Some(spec) => Some(PrivateBox::create(spec)?),
            None => None,
        };
        let sim_dir = match &private_box {
            Some(b) => Some(b.path().to_path_buf()),
            None => Backend::sim_dir_from_env(),
        };
        let kind = match opts.backend {
            Some(kind) => kind,
            None if sim_dir.is_some() => BackendKind::Sim,
            None => BackendKind::Real,
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

    /// The monitor, on a machine with at least one GPU (none: an error). Opened and asked for
    /// the GPUs on a thread of its own: a driver that does not answer within
    /// [`NVML_START_LIMIT`] is an error saying what to check, never a hang.
    pub fn monitor(&self) -> Result<Box<dyn Monitor>, OpenError> {
        open_monitor(&self.backend, &Default::default())
    }

    /// [`Session::monitor`] with every later call in its own per-GPU lane under the deadline
    /// `run` uses (`gpu::lanes::Deadlined`): what `scan`, `preflight` and `serve` read.
    pub fn guarded_monitor(&self) -> Result<Box<dyn Monitor>, OpenError> {
        let (monitor, count) = open_counted(&self.backend, &Default::default())?;
        Ok(Box::new(crate::gpu::lanes::Deadlined::counted(
            monitor, count,
        )))
    }
}
