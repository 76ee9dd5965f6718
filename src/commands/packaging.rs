//! `vramdoc completions SHELL` and `vramdoc man`: shell completion scripts (clap_complete) and
//! the man page (clap_mangen), generated from the clap definitions in `crate::cli`, printed
//! to standard output (through `crate::term::write_stdout`) for packagers and users.

use crate::cli::Cli;
use anyhow::{Context, Result};
use clap::CommandFactory;

/// Print the completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> Result<i32> {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "vramdoc", &mut buf);
    crate::term::write_stdout(&buf)?;
    Ok(crate::exit::OK)
}

/// Print vramdoc(1) in roff.
pub fn man() -> Result<i32> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut buf)
        .context("rendering the man page")?;
    crate::term::write_stdout(&buf)?;
    Ok(crate::exit::OK)
}
