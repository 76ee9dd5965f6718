//! `vramdoc sim ...` in a build without the simulator (`--no-default-features`): refused
//! with one line saying so (exit 3).

use crate::cli::{GlobalArgs, SimCommand};
use anyhow::Result;

pub fn run(_: &GlobalArgs, _: SimCommand) -> Result<i32> {
    Err(crate::backend::sim::NoSimulator.into())
}
