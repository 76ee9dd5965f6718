//! `vramdoc scan` (issue 3): inventory, findings, output.

use super::Session;
use crate::cli::ScanArgs;
use anyhow::Result;

pub fn run(_session: &Session, _args: &ScanArgs) -> Result<i32> {
    anyhow::bail!(crate::exit::UsageError("scan is not implemented yet".into()))
}
