//! `vramdoc report` (issue 5): re-render a saved JSON report.

use crate::cli::ReportArgs;
use anyhow::Result;

pub fn run(_args: &ReportArgs) -> Result<i32> {
    anyhow::bail!(crate::exit::UsageError("report is not implemented yet".into()))
}
