//! The incidents directory: one `<id>.json` per incident, written atomically through
//! `report::write`, bounded in count and bytes (the oldest removed first), listed newest
//! first, read back with bounded reads (the files are untrusted input: a user may point
//! `vramdoc incidents` at any directory).

use super::{Incident, IncidentError, IncidentSummary};
use std::path::{Path, PathBuf};

/// Largest incident file read back.
pub const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// The incidents directory and its bounds.
#[derive(Debug, Clone)]
pub struct Store {
    pub dir: PathBuf,
    pub max_count: usize,
    pub max_bytes: u64,
}

/// Whether `id` can name an incident file (no path separators, no dots).
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

impl Store {
    /// Create the directory if needed.
    pub fn open(dir: &Path, max_count: usize, max_bytes: u64) -> Result<Store, IncidentError> {
        std::fs::create_dir_all(dir).map_err(|source| IncidentError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(Store {
            dir: dir.to_path_buf(),
            max_count,
            max_bytes,
        })
    }

    fn path_of(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Write (or replace) an incident, then enforce the bounds; returns its size.
    pub fn write(&self, incident: &Incident) -> Result<u64, IncidentError> {
        if !valid_id(&incident.id) {
            return Err(IncidentError::BadId {
                id: incident.id.clone(),
            });
        }
        let mut bytes =
            serde_json::to_vec_pretty(incident).map_err(|e| IncidentError::Write(e.to_string()))?;
        bytes.push(b'\n');
        crate::report::write::write_atomic(&self.path_of(&incident.id), &bytes, true)
            .map_err(|e| IncidentError::Write(e.to_string()))?;
        self.prune();
        Ok(bytes.len() as u64)
    }

    /// `(id, bytes, modified)` of every incident file, oldest first (ids start with the
    /// time, so by name).
    fn files(&self) -> Vec<(String, u64)> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut v: Vec<(String, u64)> = rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.to_string();
                let id = name.strip_suffix(".json")?;
                let m = e.metadata().ok()?;
                (valid_id(id) && m.is_file()).then(|| (id.to_string(), m.len()))
            })
            .collect();
        v.sort();
        v
    }

    /// Remove the oldest incidents beyond the count and byte bounds.
    pub fn prune(&self) {
        let files = self.files();
        let mut count = files.len();
        let mut bytes: u64 = files.iter().map(|(_, b)| b).sum();
        for (id, b) in files {
            if count <= self.max_count && bytes <= self.max_bytes {
                break;
            }
            if std::fs::remove_file(self.path_of(&id)).is_ok() {
                count -= 1;
                bytes = bytes.saturating_sub(b);
            }
        }
    }

    /// Read one incident.
    pub fn read(&self, id: &str) -> Result<Incident, IncidentError> {
        if !valid_id(id) {
            return Err(IncidentError::BadId { id: id.into() });
        }
        let path = self.path_of(id);
        if !path.exists() {
            return Err(IncidentError::NotFound {
                id: id.into(),
                dir: self.dir.display().to_string(),
            });
        }
        let text =
            crate::input::read_text(&path, MAX_FILE_BYTES, "incident files").map_err(|e| {
                IncidentError::Bad {
                    path: path.clone(),
                    message: e.to_string(),
                }
            })?;
        serde_json::from_str(&text).map_err(|e| IncidentError::Bad {
            path,
            message: format!("line {} column {}: {e}", e.line(), e.column()),
        })
    }

    /// Every readable incident, newest first (unreadable files are skipped).
    pub fn list(&self) -> Vec<IncidentSummary> {
        let mut out: Vec<IncidentSummary> = self
            .files()
            .into_iter()
            .filter_map(|(id, bytes)| Some(self.read(&id).ok()?.summary(bytes)))
            .collect();
        out.reverse();
        out
    }
}
