//! The header fields every report producer fills the same way: the vramdoc command line
//! (redacted) and the time the report was made.

/// This process's command line for [`Report::command`](super::Report::command), redacted by
/// [`crate::redact::redact_args`]. Every report producer uses this, never `std::env::args`.
pub fn command_line() -> Vec<String> {
    command_line_from(std::env::args_os())
}

/// [`command_line`] for given arguments (bytes that are not UTF-8 escaped as `\xNN`, by
/// [`crate::term::escape_bytes`]). The program path is
/// shortened to its file name (`/home/me/.cargo/bin/vramdoc` → `vramdoc`).
pub fn command_line_from<I, S>(args: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    use std::os::unix::ffi::OsStrExt;
    let args: Vec<S> = args.into_iter().collect();
    let mut raw = crate::term::escape_args(&args);
    if let Some(first) = args.first() {
        if let Some(name) = std::path::Path::new(first.as_ref()).file_name() {
            raw[0] = crate::term::escape_bytes(name.as_bytes());
        }
    }
    crate::redact::redact_args(&raw)
}

/// Milliseconds since the Unix epoch.
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_is_redacted_and_program_shortened() {
        let c = command_line_from([
            "/home/me/.cargo/bin/vramdoc",
            "replay",
            "--token=hunter2",
            "HF_TOKEN=hf_plantedsecret123",
            "stray-cuda0",
        ]);
        assert_eq!(c[0], "vramdoc");
        let joined = c.join(" ");
        assert!(
            !joined.contains("hunter2") && !joined.contains("plantedsecret"),
            "{joined}"
        );
        assert!(!joined.contains("/home/me"), "{joined}");
        assert!(joined.ends_with("stray-cuda0"));
        // The real process's command line goes through the same function.
        assert!(!command_line().is_empty());
    }
}
