//! `vramdoc explain`'s flags (a PyTorch allocator snapshot explained: docs/explain.md).

use super::{size_arg, OutputArgs};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
#[command(
    mut_arg("json", |a| a.help("Print the explanation as JSON on standard output (schema vramdoc-explain/1, docs/explain.md) instead of the text")),
    mut_arg("out", |a| a.help("Also write the explanation; .json, .md or .html by the extension; repeat for several. Checked before the snapshot is read")),
    mut_arg("force", |a| a.help("Overwrite --out files that exist")),
)]
pub struct ExplainArgs {
    /// The snapshot pickle
    #[arg(value_name = "SNAPSHOT")]
    pub snapshot: PathBuf,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Largest snapshot read (default 1GiB; at least 1 byte)
    #[arg(long, value_name = "SIZE", value_parser = positive_size)]
    pub max_size: Option<u64>,
    /// The GPU's total memory (e.g. 24GiB): tells how much was outside PyTorch at the OOM
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub device_total: Option<u64>,
}

/// A size of at least one byte: `--max-size 0` would read nothing (and once meant the
/// default, silently).
fn positive_size(s: &str) -> Result<u64, String> {
    match size_arg(s)? {
        0 => Err(
            "0 reads nothing: give the largest snapshot to read, e.g. 2GiB (default 1GiB)".into(),
        ),
        n => Ok(n),
    }
}
