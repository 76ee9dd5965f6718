//! `vramdoc list` (issue 4): the built-in scenarios.

use crate::cli::ListArgs;
use anyhow::Result;

pub fn run(_args: &ListArgs) -> Result<i32> {
    anyhow::bail!(crate::exit::UsageError("list is not implemented yet".into()))
}
