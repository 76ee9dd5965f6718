//! `vramdoc scenario from` and `vramdoc whatif`'s flags (reproductions: docs/repro.md).

use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum ScenarioCommand {
    /// Convert a `vramdoc run` recording into a scenario that reproduces it
    ///
    /// REPORT is the JSON report of `run --out FILE.json`, or its `--samples FILE.jsonl`
    /// stream (a stream cut short by a crash converts as far as it goes). The scenario keeps
    /// sizes, per-GPU alloc/free steps, contexts, neighbours, the failed allocation and the
    /// recorded fingerprint; never a command line, environment, path or host name.
    #[command(
        after_help = "Exit codes: 0 written, 2 the file is not a run report or samples stream (the message names it and what to pass).\n\n\
Examples:\n  vramdoc scenario from job.json --out repro.toml\n  vramdoc scenario from job.jsonl > repro.toml"
    )]
    From(ScenarioFromArgs),
}

#[derive(Debug, Args)]
pub struct ScenarioFromArgs {
    /// The recording: a `run` JSON report or its `--samples` JSONL
    #[arg(value_name = "REPORT")]
    pub input: PathBuf,
    /// Write the scenario here (standard output without it)
    #[arg(long, value_name = "FILE.toml")]
    pub out: Option<PathBuf>,
    /// Overwrite --out if it exists
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct WhatifArgs {
    /// A scenario file (e.g. made by `vramdoc scenario from`) or a built-in id; or none, and
    /// the command to run on each box after `--`
    #[arg(value_name = "ID|FILE", required_unless_present = "command")]
    pub scenario: Option<String>,
    /// Boxes to try, comma-separated specs as `--sim` takes them (`t4`, `2xh100`, `24GiB`);
    /// `recorded` is the box the scenario was recorded on
    #[arg(long, required = true, value_delimiter = ',', value_name = "SPEC,...")]
    pub on: Vec<String>,
    /// Print JSON instead of the table
    #[arg(long)]
    pub json: bool,
    /// Boxes replayed at once (default: the machine's cores, at most the boxes)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub jobs: Option<u16>,
    /// Memory sampling period of each run of a command (1ms to 1s)
    #[arg(
        long,
        default_value = "5ms",
        value_name = "DURATION",
        requires = "command",
        value_parser = crate::cli::duration_within(std::time::Duration::from_millis(1), std::time::Duration::from_secs(1), " (default 5ms)")
    )]
    pub period: std::time::Duration,
    /// Fit by execution: your own command (e.g. `python train.py`), run on a fresh simulated
    /// box of each spec, one box after the other, with PyTorch's real allocator deciding
    /// where it fits (docs/repro.md "Fit by execution")
    #[arg(
        last = true,
        conflicts_with_all = ["scenario", "jobs"],
        value_name = "CMD",
        value_parser = clap::value_parser!(std::ffi::OsString)
    )]
    pub command: Vec<std::ffi::OsString>,
}
