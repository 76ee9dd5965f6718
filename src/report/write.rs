//! The one place reports reach the filesystem: format chosen from the extension, atomic
//! write (temp file in the same directory + rename), no overwrite without `--force`; and the
//! one append, to a GitHub Actions job summary ([`append_step_summary`]).

use crate::model::Report;
use std::io::Write;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Markdown,
    Html,
    /// The findings as CSV (`report::csv`).
    Csv,
}

#[derive(Debug, Error)]
pub enum WriteError {
    #[error("{path}: unknown report extension; use .json, .md, .html or .csv")]
    UnknownExtension { path: PathBuf },
    #[error("{path} already exists; pass --force to overwrite it")]
    Exists { path: PathBuf },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Render(String),
    #[error(
        "{first_flag} {} and {second_flag} {} name the same file; give each output its own",
        first.display(),
        second.display()
    )]
    SameFile {
        first_flag: String,
        first: PathBuf,
        second_flag: String,
        second: PathBuf,
    },
}

/// The format for a path, from its extension.
pub fn format_for_path(path: &Path) -> Result<Format, WriteError> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase())
        .as_deref()
    {
        Some("json") => Ok(Format::Json),
        Some("md") | Some("markdown") => Ok(Format::Markdown),
        Some("html") | Some("htm") => Ok(Format::Html),
        Some("csv") => Ok(Format::Csv),
        _ => Err(WriteError::UnknownExtension {
            path: path.to_path_buf(),
        }),
    }
}

/// Render a report in a format.
pub fn render(report: &Report, format: Format) -> Result<Vec<u8>, WriteError> {
    match format {
        Format::Json => Ok(super::json::render(report)),
        Format::Markdown => Ok(super::markdown::render(report).into_bytes()),
        Format::Html => super::html::render(report)
            .map(String::into_bytes)
            .map_err(|e| WriteError::Render(e.to_string())),
        Format::Csv => Ok(super::csv::render(report).into_bytes()),
    }
}

/// Write bytes to `path` atomically; refuse to replace an existing file unless `force`.
pub fn write_atomic(path: &Path, bytes: &[u8], force: bool) -> Result<(), WriteError> {
    let io = |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    };
    if path.exists() && !force {
        return Err(WriteError::Exists {
            path: path.to_path_buf(),
        });
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".vramdoc-")
        .tempfile_in(dir)
        .map_err(io)?;
    tmp.write_all(bytes).map_err(io)?;
    // Temp files are created 0600; a report is meant to be shared, so it gets the mode of the
    // file it replaces, or rw-r--r--.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).map_or(0o644, |m| m.permissions().mode() & 0o7777);
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(io)?;
    }
    tmp.as_file().sync_all().map_err(io)?;
    if force {
        tmp.persist(path).map_err(|e| io(e.error))?;
    } else {
        tmp.persist_noclobber(path).map_err(|e| {
            if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                WriteError::Exists {
                    path: path.to_path_buf(),
                }
            } else {
                io(e.error)
            }
        })?;
    }
    Ok(())
}

/// Check, before any work is done, that every `--out` path names a known format, is given
/// once (`a.json` and `./a.json` are the same file), is not a directory, does not exist
/// (unless `force`), and that its directory exists and can be written (a probe file is
/// created and removed there).
pub fn check_outputs(paths: &[PathBuf], force: bool) -> Result<(), WriteError> {
    let mut seen: Vec<PathBuf> = Vec::new();
    for path in paths {
        format_for_path(path)?;
        let canonical = check_output_file(path, force)?;
        if seen.contains(&canonical) {
            return Err(WriteError::Render(format!(
                "{}: given twice to --out",
                path.display()
            )));
        }
        seen.push(canonical);
    }
    Ok(())
}

/// The checks of [`check_outputs`] for one file of any format (a `--junit` file): its
/// directory exists and can be written, it is not a directory, it does not exist (unless
/// `force`). Returns its canonical path.
pub fn check_output_file(path: &Path, force: bool) -> Result<PathBuf, WriteError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let io = |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(dir).map_err(|e| {
        WriteError::Render(format!(
            "{}: the directory {} {} (create it first)",
            path.display(),
            dir.display(),
            if e.kind() == std::io::ErrorKind::NotFound {
                "does not exist".to_string()
            } else {
                format!("cannot be used: {e}")
            }
        ))
    })?;
    if !meta.is_dir() {
        return Err(WriteError::Render(format!(
            "{}: {} is not a directory",
            path.display(),
            dir.display()
        )));
    }
    let canonical = std::fs::canonicalize(dir)
        .map_err(io)?
        .join(path.file_name().unwrap_or_default());
    if path.is_dir() {
        return Err(WriteError::Render(format!(
            "{}: is a directory; name a report file",
            path.display()
        )));
    }
    if path.exists() && !force {
        return Err(WriteError::Exists {
            path: path.to_path_buf(),
        });
    }
    // Writable? The same kind of temp file the real write makes.
    tempfile::Builder::new()
        .prefix(".vramdoc-")
        .tempfile_in(dir)
        .map_err(io)?;
    Ok(canonical)
}

/// Where `path` really is, for comparing outputs: symbolic links of its last component
/// followed (a dangling one too: the write would create its target), its directory
/// canonicalised (`./`, `..`, linked directories), and the file's device and inode when it
/// exists (hard links).
fn identity(path: &Path) -> (PathBuf, Option<(u64, u64)>) {
    use std::os::unix::fs::MetadataExt;
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(&p) {
                Ok(target) => {
                    p = match p.parent() {
                        Some(dir) if target.is_relative() => dir.join(target),
                        _ => target,
                    }
                }
                Err(_) => break,
            },
            _ => break,
        }
    }
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = p.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    let canonical = std::fs::canonicalize(&dir).unwrap_or(dir).join(name);
    let inode = std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
    (canonical, inode)
}

/// Check, before the command starts, that no two of a command's outputs (`("--out", path)`,
/// `("--samples", path)`, …) are the same file: the same path in another spelling, through a
/// symbolic link, or a hard link. The error names both flags.
pub fn check_distinct(outputs: &[(&str, &Path)]) -> Result<(), WriteError> {
    let ids: Vec<_> = outputs.iter().map(|(_, p)| identity(p)).collect();
    for (i, (a_flag, a)) in outputs.iter().enumerate() {
        for (j, (b_flag, b)) in outputs.iter().enumerate().skip(i + 1) {
            let same_inode = matches!((ids[i].1, ids[j].1), (Some(x), Some(y)) if x == y);
            if ids[i].0 == ids[j].0 || same_inode {
                return Err(WriteError::SameFile {
                    first_flag: a_flag.to_string(),
                    first: a.to_path_buf(),
                    second_flag: b_flag.to_string(),
                    second: b.to_path_buf(),
                });
            }
        }
    }
    Ok(())
}

/// The one output-path preflight of a command, before any work is done: every `--out`
/// report ([`check_outputs`]), every other file it writes (`("--junit", path)`, checked by
/// [`check_output_file`]), and that no two of these or of `also` (outputs opened or checked
/// elsewhere: `--samples`, `--prom`) are one file ([`check_distinct`]).
pub fn check_targets(
    out: &[PathBuf],
    files: &[(&str, &Path)],
    also: &[(&str, &Path)],
    force: bool,
) -> Result<(), WriteError> {
    check_outputs(out, force)?;
    for (_, path) in files {
        check_output_file(path, force)?;
    }
    let mut all: Vec<(&str, &Path)> = out.iter().map(|p| ("--out", p.as_path())).collect();
    all.extend(files.iter().chain(also).copied());
    check_distinct(&all)
}

/// Write `report` to every path, each in the format its extension names.
pub fn write_reports(report: &Report, paths: &[PathBuf], force: bool) -> Result<(), WriteError> {
    for path in paths {
        write_report(report, path, force)?;
    }
    Ok(())
}

/// Render `report` in the format `path`'s extension names and write it there.
pub fn write_report(report: &Report, path: &Path, force: bool) -> Result<(), WriteError> {
    let format = format_for_path(path)?;
    let bytes = render(report, format)?;
    write_atomic(path, &bytes, force)
}

/// Append `markdown` to the GitHub Actions job summary file at `path` (the value of
/// `GITHUB_STEP_SUMMARY`), cut by [`super::step_summary::fit`] so that the file stays within
/// GitHub's 1 MiB limit; `full_report` is where the cut text points. Returns whether anything
/// was appended.
pub fn append_step_summary(
    path: &Path,
    markdown: &str,
    full_report: Option<&str>,
) -> Result<bool, WriteError> {
    let io = |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    };
    let existing = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(io(e)),
    };
    let Some(text) = super::step_summary::fit(markdown, existing, full_report) else {
        return Ok(false);
    };
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_refuses_overwrite_without_force() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        write_atomic(&p, b"one", false).unwrap();
        assert!(matches!(
            write_atomic(&p, b"two", false),
            Err(WriteError::Exists { .. })
        ));
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        write_atomic(&p, b"two", true).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        // No temp files left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&p), 0o644, "reports are readable by others");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
            write_atomic(&p, b"three", true).unwrap();
            assert_eq!(mode(&p), 0o600, "--force keeps the replaced file's mode");
        }
    }

    #[test]
    fn outputs_naming_the_same_file_are_refused_whatever_the_spelling() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let p = |s: &str| d.join(s);
        let ok = [("--out", p("r.json")), ("--junit", p("r.xml"))];
        let pairs: Vec<(&str, &Path)> = ok.iter().map(|(f, p)| (*f, p.as_path())).collect();
        assert!(check_distinct(&pairs).is_ok());
        std::fs::create_dir(p("sub")).unwrap();
        std::os::unix::fs::symlink(d.join("sub"), p("link")).unwrap();
        std::os::unix::fs::symlink("r.json", p("dangling.json")).unwrap();
        std::fs::write(p("a.json"), b"x").unwrap();
        std::fs::hard_link(p("a.json"), p("b.xml")).unwrap();
        let cases = [
            (p("r.json"), p("./r.json")),
            (p("r.json"), p("sub/../r.json")),
            (p("sub/r.json"), p("link/r.json")),
            (p("r.json"), p("dangling.json")),
            (p("a.json"), p("b.xml")),
        ];
        for (a, b) in cases {
            let e = check_distinct(&[("--out", &a), ("--samples", &b)]).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.starts_with("--out ") && msg.contains(" and --samples "),
                "{a:?} {b:?}: {msg}"
            );
        }
    }

    #[test]
    fn format_from_extension() {
        assert_eq!(format_for_path(Path::new("a.JSON")).unwrap(), Format::Json);
        assert_eq!(
            format_for_path(Path::new("a.md")).unwrap(),
            Format::Markdown
        );
        assert_eq!(
            format_for_path(Path::new("x/a.html")).unwrap(),
            Format::Html
        );
        assert!(format_for_path(Path::new("a.txt")).is_err());
    }
}
