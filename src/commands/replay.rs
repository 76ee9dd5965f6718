//! `vramdoc replay` (issue 4): run scenarios while sampling memory.

use super::Session;
use crate::cli::ReplayArgs;
use anyhow::Result;

pub fn run(_session: &Session, _args: &ReplayArgs) -> Result<i32> {
    anyhow::bail!(crate::exit::UsageError("replay is not implemented yet".into()))
}
