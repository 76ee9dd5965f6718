//! Reading a saved JSON report back into the model, with errors that name the file, the
//! line and column, and what to change.

use crate::model::{Report, SCHEMA_VERSION};
use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ReadError {
    #[error("{path}: cannot read the report: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not a regular file, over the size limit, or not UTF-8 ([`crate::input`]).
    #[error(transparent)]
    Input(#[from] crate::input::InputError),
    #[error("{path}:{line}:{column}: invalid JSON: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: not a vramdoc report (no schema_version field at the top level); pass a JSON file written by `scan --out` or `replay --out`")]
    NotReport { path: PathBuf },
    #[error("{path}: report schema_version {found} is not supported; this vramdoc reads version {SCHEMA_VERSION} (re-render with the vramdoc that wrote it)")]
    Version { path: PathBuf, found: String },
    #[error("{path}:{line}:{column}: not a valid vramdoc report: {message} (see docs/json.md)")]
    Shape {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
}

/// Read and parse the report at `path`.
pub fn read_report(path: &Path) -> Result<Report, ReadError> {
    let text =
        crate::input::read_text(path, crate::input::MAX_REPORT_BYTES, "reports").map_err(|e| {
            match e {
                crate::input::InputError::Io { path, source } => ReadError::Io { path, source },
                other => ReadError::Input(other),
            }
        })?;
    parse_report(&text, path)
}

/// Parse report JSON; `path` only names the source in errors.
pub fn parse_report(text: &str, path: &Path) -> Result<Report, ReadError> {
    let p = || path.to_path_buf();
    let typed_err = match serde_json::from_str::<Report>(text) {
        Ok(report) if report.schema_version == SCHEMA_VERSION => return Ok(report),
        Ok(report) => {
            return Err(ReadError::Version {
                path: p(),
                found: report.schema_version.to_string(),
            })
        }
        Err(e) => e,
    };
    // Explain the failure: bad JSON, not a report, another version, or a bad field.
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| ReadError::Syntax {
        path: p(),
        line: e.line(),
        column: e.column(),
        message: message(&e),
    })?;
    match value.get("schema_version") {
        None => Err(ReadError::NotReport { path: p() }),
        Some(v) if v.as_u64() != Some(u64::from(SCHEMA_VERSION)) => Err(ReadError::Version {
            path: p(),
            found: v.to_string(),
        }),
        Some(_) => Err(ReadError::Shape {
            path: p(),
            line: typed_err.line(),
            column: typed_err.column(),
            message: message(&typed_err),
        }),
    }
}

/// serde_json's message without its ` at line L column C` suffix (we print `file:L:C:`).
fn message(e: &serde_json::Error) -> String {
    let s = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    s.strip_suffix(&suffix).unwrap_or(&s).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Report, ReadError> {
        parse_report(s, Path::new("r.json"))
    }

    #[test]
    fn errors_name_file_and_position() {
        let e = parse("{\n  \"schema_version\": 1,\n  oops\n}")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("r.json:3:3: invalid JSON: key must be a string"),
            "{e}"
        );
        let e = parse("[1, 2]").unwrap_err().to_string();
        assert!(e.contains("not a vramdoc report"), "{e}");
        let e = parse("{\"kind\": \"scan\"}").unwrap_err().to_string();
        assert!(e.contains("no schema_version"), "{e}");
        let e = parse("{\"schema_version\": 7}").unwrap_err().to_string();
        assert!(e.contains("schema_version 7 is not supported"), "{e}");
        let e = parse("{\"schema_version\": 1,\n \"kind\": \"nope\"}")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("r.json:2:"), "{e}");
        assert!(e.contains("unknown variant `nope`"), "{e}");
        let e = parse("").unwrap_err().to_string();
        assert!(e.starts_with("r.json:1:0: invalid JSON"), "{e}");
    }
}
