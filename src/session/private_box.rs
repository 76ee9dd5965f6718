//! A private simulated box: a fresh temporary directory holding a box built from a checked
//! spec, for one session (`--sim SPEC`) or one what-if row. It is a value: its
//! [`Backend`] is handed to engines and, through their own `Command` environment, to child
//! processes. Removed when dropped and, if a signal ends the process first, by the process's
//! one signal handler (`job::signals`).

use crate::backend::{Backend, BoxSpec};
use std::path::Path;
use thiserror::Error;

/// Why a private box could not be made.
#[derive(Debug, Error)]
pub enum PrivateBoxError {
    /// No temporary directory (an environment problem: exit 3).
    #[error(
        "creating a private simulated box in {dir}: {source} (set TMPDIR to a writable directory)"
    )]
    TempDir {
        dir: String,
        #[source]
        source: std::io::Error,
    },
    /// The simulator could not build the box.
    #[error("{0}")]
    Sim(#[from] crate::backend::sim::SimError),
}

/// A box of its own, removed on drop.
pub struct PrivateBox {
    dir: tempfile::TempDir,
    spec: BoxSpec,
}

impl PrivateBox {
    /// Build a fresh box of `spec` in a new temporary directory.
    pub fn create(spec: &BoxSpec) -> Result<PrivateBox, PrivateBoxError> {
        let dir = tempfile::Builder::new()
            .prefix("vramdoc-sim-")
            .tempdir()
            .map_err(|source| PrivateBoxError::TempDir {
                dir: std::env::temp_dir().display().to_string(),
                source,
            })?;
        crate::backend::sim::create_box(dir.path(), spec.as_str())?;
        crate::job::signals::remove_on_exit(dir.path().to_path_buf());
        Ok(PrivateBox {
            dir,
            spec: spec.clone(),
        })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn spec(&self) -> &BoxSpec {
        &self.spec
    }

    /// The in-process simulator over this box.
    pub fn backend(&self) -> Backend {
        Backend::sim(self.dir.path().to_path_buf())
    }
}

impl Drop for PrivateBox {
    fn drop(&mut self) {
        crate::job::signals::forget_on_exit(self.dir.path());
    }
}
