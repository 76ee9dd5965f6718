//! `vramdoc mark TEXT`: one marker line for the recording of the `vramdoc run` this command
//! runs under (or, with `--pid`, the recording attached to that process).

use crate::cli::MarkArgs;
use crate::job;
use anyhow::Result;

/// `vramdoc mark TEXT…`: append one line to `$VRAMDOC_MARKERS`, or with `--pid` to the
/// marker file of the recording attached to that process.
pub fn mark(args: &MarkArgs) -> Result<i32> {
    if let Some(pid) = args.pid {
        job::attach::mark(pid, &args.text.join(" ")).map_err(|e| match e {
            job::attach::AttachError::Io { .. } => anyhow::Error::new(e),
            other => crate::exit::UsageError(other.to_string()).into(),
        })?;
        return Ok(crate::exit::OK);
    }
    job::markers::mark(&args.text.join(" ")).map_err(|e| match e {
        job::markers::MarkError::Write { .. } => anyhow::Error::new(e),
        other => crate::exit::UsageError(other.to_string()).into(),
    })?;
    Ok(crate::exit::OK)
}
