//! `vramdoc completions SHELL` and `vramdoc man`: shell completion scripts (clap_complete) and
//! the man page (clap_mangen), generated from the clap definitions in `crate::cli`, printed
//! to standard output for packagers and users.

use crate::cli::Cli;
use anyhow::{Context, Result};
use clap::CommandFactory;
use std::io::Write;

/// Print the completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> Result<i32> {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "vramdoc", &mut buf);
    let mut out = std::io::stdout().lock();
    out.write_all(&buf)
        .and_then(|_| out.flush())
        .context("writing to standard output")?;
    Ok(crate::exit::OK)
}

/// Print vramdoc(1) in roff.
pub fn man() -> Result<i32> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut buf)
        .context("rendering the man page")?;
    let mut out = std::io::stdout().lock();
    out.write_all(&buf)
        .and_then(|_| out.flush())
        .context("writing to standard output")?;
    Ok(crate::exit::OK)
}
