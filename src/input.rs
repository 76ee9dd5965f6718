//! Reading untrusted input files (scenario files, saved reports) with bounds: only regular
//! files (a FIFO, a device or a directory is refused before it is opened for a blocking
//! read), at most a documented number of bytes, and UTF-8 errors that name `line:col`.
//! Limits are documented in docs/security.md.

use std::io::Read;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Largest scenario file read (1 MiB; the built-in ones are under 10 KiB).
pub const MAX_SCENARIO_BYTES: u64 = 1 << 20;
/// Largest report file read (256 MiB; an hour-long replay sampled every 5 ms is ~100 MiB).
pub const MAX_REPORT_BYTES: u64 = 256 << 20;

#[derive(Debug, Error)]
pub enum InputError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: is {what}, not a regular file (pass a file)")]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("{path}: larger than the {limit}-byte limit for {kind} (see docs/security.md)")]
    TooLarge {
        path: PathBuf,
        limit: u64,
        kind: &'static str,
    },
    #[error("{path}:{line}:{col}: not UTF-8 text (byte 0x{byte:02x}); save the file as UTF-8")]
    NotUtf8 {
        path: PathBuf,
        line: usize,
        col: usize,
        byte: u8,
    },
}

fn kind_of(ft: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_file() {
        None
    } else if ft.is_dir() {
        Some("a directory")
    } else if ft.is_fifo() {
        Some("a FIFO")
    } else if ft.is_char_device() || ft.is_block_device() {
        Some("a device")
    } else if ft.is_socket() {
        Some("a socket")
    } else {
        Some("not a file")
    }
}

/// Read `path` as UTF-8 text of at most `limit` bytes; `kind` names it in errors
/// ("scenario files").
pub fn read_text(path: &Path, limit: u64, kind: &'static str) -> Result<String, InputError> {
    let io = |source| InputError::Io {
        path: path.to_path_buf(),
        source,
    };
    let (file, meta) = open_regular(path)?;
    let too_large = || InputError::TooLarge {
        path: path.to_path_buf(),
        limit,
        kind,
    };
    if meta.len() > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    text_of(path, bytes)
}

/// Open `path` for reading if it is a regular file (a FIFO, device or directory is refused
/// before a blocking open), with its metadata as opened.
pub fn open_regular(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), InputError> {
    let io = |source| InputError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Refuse what is not a regular file before opening it: opening a FIFO blocks.
    let meta = std::fs::metadata(path).map_err(io)?;
    if let Some(what) = kind_of(meta.file_type()) {
        return Err(InputError::NotRegular {
            path: path.to_path_buf(),
            what,
        });
    }
    // Non-blocking open, then check the opened file again (the path may have been swapped).
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if let Some(what) = kind_of(meta.file_type()) {
        return Err(InputError::NotRegular {
            path: path.to_path_buf(),
            what,
        });
    }
    Ok((file, meta))
}

/// Bytes as UTF-8, or an error naming the line and column of the first bad byte.
pub fn text_of(path: &Path, bytes: Vec<u8>) -> Result<String, InputError> {
    String::from_utf8(bytes).map_err(|e| {
        let bytes = e.as_bytes();
        let at = e.utf8_error().valid_up_to();
        let before = std::str::from_utf8(&bytes[..at.min(bytes.len())]).unwrap_or("");
        let (line, col) = line_col(before, before.len());
        InputError::NotUtf8 {
            path: path.to_path_buf(),
            line,
            col,
            byte: bytes.get(at).copied().unwrap_or(0),
        }
    })
}

/// 1-based line and column (in characters) of byte offset `offset` in `text` (clamped to
/// its length and back to a character boundary).
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while offset > 0 && !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_positions() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.toml");
        std::fs::write(&p, b"ok = 1\nb = \"\xff\"\n").unwrap();
        let e = read_text(&p, 100, "scenario files").unwrap_err();
        assert!(
            matches!(
                e,
                InputError::NotUtf8 {
                    line: 2,
                    col: 6,
                    byte: 0xff,
                    ..
                }
            ),
            "{e}"
        );
        std::fs::write(&p, vec![b'a'; 101]).unwrap();
        let e = read_text(&p, 100, "scenario files").unwrap_err();
        assert!(matches!(e, InputError::TooLarge { .. }), "{e}");
        let e = read_text(dir.path(), 100, "scenario files").unwrap_err();
        assert!(matches!(e, InputError::NotRegular { .. }), "{e}");
        let e = read_text(Path::new("/dev/zero"), 100, "scenario files").unwrap_err();
        assert!(e.to_string().contains("is a device"), "{e}");
        std::fs::write(&p, "x = 1\n").unwrap();
        assert_eq!(read_text(&p, 100, "scenario files").unwrap(), "x = 1\n");
    }
}
