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
    /// A scenario file (e.g. made by `vramdoc scenario from`) or a built-in id
    #[arg(value_name = "ID|FILE")]
    pub scenario: String,
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
}
