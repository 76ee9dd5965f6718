//! The incidents directory: one `<id>.json` per incident, written atomically through
//! `report::write`, bounded in count and bytes (the oldest of the files it wrote removed first, by the
//! time each records; files it did not write are never touched), listed newest
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

/// How far in the future an incident's time may be before it counts as a clock that ran
/// ahead (two NTP steps' worth).
const FUTURE_SLACK_S: f64 = 120.0;

/// Whether `id` has the form vramdoc gives its incidents: `YYYYMMDDTHHMMSSZ-RULE-N`
/// (the UTC time of the incident, the rule, a sequence number).
pub fn written_id(id: &str) -> bool {
    let b = id.as_bytes();
    let stamp = b.len() > 17
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'T'
        && b[9..15].iter().all(u8::is_ascii_digit)
        && b[15] == b'Z'
        && b[16] == b'-';
    let Some(rest) = id.get(17..) else {
        return false;
    };
    let Some((rule, seq)) = rest.rsplit_once('-') else {
        return false;
    };
    stamp
        && !rule.is_empty()
        && rule.bytes().all(|c| c.is_ascii_lowercase() || c == b'-')
        && !seq.is_empty()
        && seq.bytes().all(|c| c.is_ascii_digit())
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
        self.prune(&incident.id);
        Ok(bytes.len() as u64)
    }

    /// `(id, bytes)` of every file that can name an incident, by name.
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

    /// The incidents vramdoc wrote here, recognisably: a name of the form it gives
    /// ([`written_id`]), and a file that reads as an incident of this schema with that id.
    /// `(id, bytes, created_unix)`.
    fn written(&self) -> Vec<(String, u64, f64)> {
        #[derive(serde::Deserialize)]
        struct Head {
            schema: u32,
            id: String,
            created_unix: f64,
        }
        self.files()
            .into_iter()
            .filter(|(id, _)| written_id(id))
            .filter_map(|(id, bytes)| {
                let text =
                    crate::input::read_text(&self.path_of(&id), MAX_FILE_BYTES, "incident files")
                        .ok()?;
                let head: Head = serde_json::from_str(&text).ok()?;
                (head.schema == super::INCIDENT_SCHEMA
                    && head.id == id
                    && head.created_unix.is_finite())
                .then_some((id, bytes, head.created_unix))
            })
            .collect()
    }

    /// Remove the oldest incidents vramdoc wrote beyond the count and byte bounds, never
    /// `keep` (the one just written) and never a file it did not write. Oldest by the time
    /// each records, except that a time in the future (a clock that once ran ahead) counts
    /// as older than any other: such files go first instead of outliving every new one.
    pub fn prune(&self, keep: &str) {
        let now = super::now_unix();
        let mut files = self.written();
        let mut count = files.len();
        let mut bytes: u64 = files.iter().map(|(_, b, _)| b).sum();
        files.sort_by(|a, b| {
            let key = |t: f64| (t <= now + FUTURE_SLACK_S, t);
            key(a.2)
                .partial_cmp(&key(b.2))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.0.cmp(&b.0))
        });
        for (id, b, _) in files {
            if count <= self.max_count && bytes <= self.max_bytes {
                break;
            }
            if id == keep {
                continue;
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

    /// Every readable incident, newest first by the time each records (unreadable files
    /// are skipped).
    pub fn list(&self) -> Vec<IncidentSummary> {
        let mut out: Vec<(f64, IncidentSummary)> = self
            .files()
            .into_iter()
            .filter_map(|(id, bytes)| {
                let inc = self.read(&id).ok()?;
                Some((inc.created_unix, inc.summary(bytes)))
            })
            .collect();
        out.sort_by(|a, b| {
            b.0.partial_cmp(&a.0)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| b.1.id.cmp(&a.1.id))
        });
        out.into_iter().map(|(_, s)| s).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incident(id: &str, created_unix: f64) -> Incident {
        serde_json::from_value(serde_json::json!({
            "schema": super::super::INCIDENT_SCHEMA, "id": id, "rule": "out-of-memory",
            "title": "t", "created_unix": created_unix, "created": "", "events": [],
            "timeline": {"devices": [], "markers": []}, "timeline_start_unix": 0.0,
        }))
        .unwrap()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// Issue 39 item 4: `prune()` took every `<letters-digits-dashes>.json` and removed in
    /// name order: `0-backup.json`, `Zeta.json` and the incident just written went; a
    /// future-named file outlived every new one.
    #[test]
    fn retention_removes_only_its_own_files_oldest_by_their_time_and_never_the_new_one() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let store = Store::open(dir, 2, 1 << 30).unwrap();
        std::fs::write(dir.join("0-backup.json"), b"{}").unwrap();
        std::fs::write(dir.join("Zeta.json"), b"{\"keep\": true}").unwrap();
        // Named as vramdoc names them, but not an incident it wrote.
        std::fs::write(dir.join("20200101T000000Z-out-of-memory-1.json"), b"[]").unwrap();
        let now = super::super::now_unix();
        // A clock that once ran ahead by a year.
        store
            .write(&incident("20991231T000000Z-out-of-memory-1", now + 3e7))
            .unwrap();
        store
            .write(&incident("20261201T000000Z-out-of-memory-9", now - 100.0))
            .unwrap();
        // Sequence 10 sorts before 9 by name; by time it is the newest.
        store
            .write(&incident("20261201T000000Z-out-of-memory-10", now - 50.0))
            .unwrap();
        assert_eq!(
            names(dir),
            [
                "0-backup.json",
                "20200101T000000Z-out-of-memory-1.json",
                "20261201T000000Z-out-of-memory-10.json",
                "20261201T000000Z-out-of-memory-9.json",
                "Zeta.json"
            ]
        );
        // The next one written stays, and the oldest by time goes.
        store
            .write(&incident("20261201T000001Z-gpu-lost-11", now - 10.0))
            .unwrap();
        let list: Vec<String> = store
            .list()
            .into_iter()
            .map(|s| s.id)
            .filter(|id| written_id(id))
            .collect();
        assert_eq!(
            list,
            [
                "20261201T000001Z-gpu-lost-11",
                "20261201T000000Z-out-of-memory-10"
            ]
        );
        assert!(dir.join("Zeta.json").exists() && dir.join("0-backup.json").exists());
    }

    #[test]
    fn written_ids_have_vramdocs_form() {
        assert!(written_id("20261201T000000Z-out-of-memory-10"));
        assert!(written_id("20261201T000000Z-host-oom-kill-1"));
        for id in [
            "0-backup",
            "Zeta",
            "20261201T000000Z-x",
            "20261201T000000Z--1",
            "2026-x-1",
        ] {
            assert!(!written_id(id), "{id}");
        }
    }
}
