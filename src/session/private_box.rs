//! A private simulated box: a fresh temporary directory holding a box built from a checked
//! spec, for one session (`--sim SPEC`) or one what-if row. It is a value: its
//! [`Backend`] is handed to engines and, through their own `Command` environment, to child
//! processes. Removed when dropped and, if a signal ends the process first, by the process's
//! one signal handler (`job::signals`). A box whose vramdoc was killed outright (SIGKILL:
//! nothing runs) is reclaimed by the next vramdoc that makes one ([`reclaim_orphans`]): each
//! box names its maker in [`OWNER_FILE`].

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

/// The file in a private box naming the vramdoc that made it: `PID START_TIME PIDNS`
/// (its start time in clock ticks since boot, its PID namespace's `/proc/self/ns/pid` link).
pub const OWNER_FILE: &str = "vramdoc-owner";

/// The prefix of private boxes' directory names.
const PREFIX: &str = "vramdoc-sim-";

/// Remove the private boxes in `tmp` whose vramdoc no longer runs: this user's
/// `vramdoc-sim-*` directories (not links) with an [`OWNER_FILE`] naming a process of this
/// PID namespace that is gone (or whose PID now belongs to another process). Boxes of
/// `vramdoc sim init` (no owner file), of other users and of vramdocs in other PID
/// namespaces (whose PIDs mean something else) are never touched. Best effort.
pub fn reclaim_orphans(tmp: &Path) {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let Some(our_ns) = crate::host::process::own_pidns_link() else {
        return;
    };
    let Ok(rd) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in rd.flatten() {
        if !e
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(PREFIX))
        {
            continue;
        }
        let path = e.path();
        let Ok(m) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !m.is_dir() || m.uid() != uid {
            continue;
        }
        let Ok(text) = crate::input::read_text(&path.join(OWNER_FILE), 4096, "box owner files")
        else {
            continue;
        };
        let mut f = text.split_whitespace();
        let (Some(pid), Some(start), Some(ns)) = (
            f.next().and_then(|p| p.parse::<u32>().ok()),
            f.next().and_then(|s| s.parse::<u64>().ok()),
            f.next(),
        ) else {
            continue;
        };
        if ns != our_ns || start == 0 || pid == std::process::id() {
            continue;
        }
        if !crate::host::process::is_alive(pid, start) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

impl PrivateBox {
    /// Build a fresh box of `spec` in a new temporary directory (first reclaiming the boxes
    /// of killed vramdocs there).
    pub fn create(spec: &BoxSpec) -> Result<PrivateBox, PrivateBoxError> {
        reclaim_orphans(&std::env::temp_dir());
        let dir = tempfile::Builder::new()
            .prefix(PREFIX)
            .tempdir()
            .map_err(|source| PrivateBoxError::TempDir {
                dir: std::env::temp_dir().display().to_string(),
                source,
            })?;
        let pid = std::process::id();
        let owner = format!(
            "{pid} {} {}\n",
            crate::host::process::start_time(pid).unwrap_or(0),
            crate::host::process::own_pidns_link().unwrap_or_default()
        );
        std::fs::write(dir.path().join(OWNER_FILE), owner).map_err(|source| {
            PrivateBoxError::TempDir {
                dir: dir.path().display().to_string(),
                source,
            }
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
