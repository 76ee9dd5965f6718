//! The box's shared files (`state.json`, `faults.json`) parsed once per version: a handle
//! keeps the value it last parsed together with the file it came from, held open, and
//! parses again only when the path names another file.
//!
//! Why this is exact: every writer replaces these files whole ([`crate::write_json_atomic`]:
//! a temporary file written in full, then renamed over the path), so the contents of one
//! inode never change once it is at the path, and a new version is always a new inode.
//! Holding the version we parsed open keeps its inode number from being reused by a later
//! version (a freed inode number can be handed to the next file created, and timestamps are
//! only as fine as the kernel's clock tick), so "the path still names the same (device,
//! inode) as the file we hold" means "nothing was written since". Length and modification
//! time are compared too, for a file changed in place by something else. The check is one
//! `stat` of the path per read, so a change another process makes is seen by the very next
//! read, as when every read parsed the file (docs/simulator.md, "What a call costs").

use crate::SimError;
use serde::de::DeserializeOwned;
use std::fs::{self, File};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// What tells one version of a file from another (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl FileId {
    fn of(m: &fs::Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
        }
    }
}

/// One parsed version, with the file it was read from held open.
#[derive(Debug)]
struct Version<T> {
    id: FileId,
    _file: File,
    value: Arc<T>,
}

/// The last version of one file a box handle parsed (shared by the handle's clones).
#[derive(Debug)]
pub(crate) struct Cached<T>(Arc<Mutex<Option<Version<T>>>>);

impl<T> Clone for Cached<T> {
    fn clone(&self) -> Self {
        Cached(self.0.clone())
    }
}

impl<T> Default for Cached<T> {
    fn default() -> Self {
        Cached(Arc::new(Mutex::new(None)))
    }
}

impl<T: DeserializeOwned> Cached<T> {
    /// The value in the file at `path` now (`None`: there is no file), parsed only when it
    /// is another file than the one last parsed. `dir` names the box in errors.
    pub(crate) fn read(&self, dir: &Path, path: &Path) -> Result<Option<Arc<T>>, SimError> {
        let now = match fs::metadata(path) {
            Ok(m) => FileId::of(&m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(crate::io_err(path)(e)),
        };
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = seen.as_ref().filter(|v| v.id == now) {
            return Ok(Some(v.value.clone()));
        }
        // Read through the descriptor we keep: the text is that inode's, whatever has been
        // renamed over the path since the `stat` above.
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(crate::io_err(path)(e)),
        };
        let id = FileId::of(&file.metadata().map_err(crate::io_err(path))?);
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(crate::io_err(path))?;
        let value: Arc<T> =
            Arc::new(serde_json::from_str(&text).map_err(|e| SimError::BadBox {
                dir: dir.to_path_buf(),
                reason: format!("{}: {e}", path.display()),
            })?);
        // Kept only when nothing was written to it while we read (the length and time of
        // the descriptor's file as before the read).
        if file.metadata().is_ok_and(|m| FileId::of(&m) == id) {
            *seen = Some(Version {
                id,
                _file: file,
                value: value.clone(),
            });
        }
        Ok(Some(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write_json_atomic;

    #[test]
    fn every_replacement_is_read_and_an_unchanged_file_is_not_parsed_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.json");
        let c: Cached<u64> = Cached::default();
        assert!(c.read(dir.path(), &path).unwrap().is_none());
        // Versions of one length written back to back (same clock tick, maybe a reused
        // inode number without the held descriptor): each is seen by the next read.
        for v in 10..60u64 {
            write_json_atomic(&path, &v).unwrap();
            let a = c.read(dir.path(), &path).unwrap().unwrap();
            assert_eq!(*a, v);
            let b = c.read(dir.path(), &path).unwrap().unwrap();
            assert!(Arc::ptr_eq(&a, &b), "an unchanged file is not parsed again");
        }
        fs::remove_file(&path).unwrap();
        assert!(c.read(dir.path(), &path).unwrap().is_none());
        // Changed in place (not by the box's writers): seen through its length.
        fs::write(&path, "7").unwrap();
        assert_eq!(*c.read(dir.path(), &path).unwrap().unwrap(), 7);
        fs::write(&path, "123").unwrap();
        assert_eq!(*c.read(dir.path(), &path).unwrap().unwrap(), 123);
        fs::write(&path, "x").unwrap();
        assert!(matches!(
            c.read(dir.path(), &path),
            Err(SimError::BadBox { .. })
        ));
    }
}
