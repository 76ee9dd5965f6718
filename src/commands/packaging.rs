//! `vramdoc completions SHELL` and `vramdoc man`: shell completion scripts (clap_complete) and
//! the man page (clap_mangen), generated from the clap definitions in `crate::cli`, printed
//! to standard output (through `crate::term::write_stdout`) for packagers and users.

use crate::cli::Cli;
use anyhow::{Context, Result};
use clap::CommandFactory;

/// Print the completion script for `shell`: of the visible commands and flags only
/// (clap_complete offers hidden ones too: `__worker`, `sim driverd`).
pub fn completions(shell: clap_complete::Shell) -> Result<i32> {
    let mut cmd = visible(&Cli::command());
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "vramdoc", &mut buf);
    crate::term::write_stdout(&buf)?;
    Ok(crate::exit::OK)
}

/// `cmd` rebuilt without its hidden subcommands and hidden arguments, at every level: what a
/// completion script may offer. Names, aliases, help texts, argument groups and the visible
/// arguments (with their value hints and possible values) are kept.
fn visible(cmd: &clap::Command) -> clap::Command {
    let mut out = clap::Command::new(cmd.get_name().to_string())
        .visible_aliases(
            cmd.get_visible_aliases()
                .map(str::to_string)
                .collect::<Vec<_>>(),
        )
        .args(
            cmd.get_arguments()
                .filter(|a| !a.is_hide_set())
                .cloned()
                .collect::<Vec<_>>(),
        )
        .groups(
            cmd.get_groups()
                .map(|g| visible_group(cmd, g))
                .collect::<Vec<_>>(),
        );
    if let Some(about) = cmd.get_about() {
        out = out.about(about.clone());
    }
    if let Some(v) = cmd.get_version() {
        out = out.version(v.to_string());
    }
    out.subcommands(
        cmd.get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(visible)
            .collect::<Vec<_>>(),
    )
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

/// `g` with only the visible arguments of `cmd` (a derived `Args` struct is a group of all
/// its fields, hidden ones included).
fn visible_group(cmd: &clap::Command, g: &clap::ArgGroup) -> clap::ArgGroup {
    let hidden = |id: &clap::Id| {
        cmd.get_arguments()
            .any(|a| a.get_id() == id && a.is_hide_set())
    };
    // `is_multiple` takes `&mut self`.
    let multiple = g.clone().is_multiple();
    clap::ArgGroup::new(g.get_id().clone())
        .args(
            g.get_args()
                .filter(|id| !hidden(id))
                .cloned()
                .collect::<Vec<_>>(),
        )
        .multiple(multiple)
        .required(g.is_required_set())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 19: hidden subcommands (`__worker`, `sim driverd`, `sim runtimed`) and hidden
    /// flags (`sim hold --set-name`) are left out of every completion script; visible ones
    /// stay.
    #[test]
    fn completions_leave_hidden_commands_out() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
            clap_complete::Shell::Elvish,
            clap_complete::Shell::PowerShell,
        ] {
            let mut cmd = visible(&Cli::command());
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut cmd, "vramdoc", &mut buf);
            let text = String::from_utf8_lossy(&buf);
            for hidden in [
                "__worker",
                "driverd",
                "runtimed",
                "set-name",
                "physical-context",
            ] {
                assert!(!text.contains(hidden), "{shell}: {hidden} offered");
            }
            for shown in ["scan", "replay", "serve", "presets", "interval"] {
                assert!(text.contains(shown), "{shell}: {shown} missing");
            }
        }
    }
}
