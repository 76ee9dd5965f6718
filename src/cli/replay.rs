//! `vramdoc replay`'s flags: scenarios by id or file, or a user's own command after `--`
//! with the fingerprints it shows and its fixes (docs/replay.md).

use super::{duration_within, OutputArgs};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).multiple(true).args(["scenarios", "all", "command"])))]
// Each command's help speaks of that command (issue 39 item 7).
#[command(
    mut_arg("json", |a| a.help("Print the replay report as JSON on standard output (versioned; fields in docs/json.md) instead of the summary")),
    mut_arg("out", |a| a.help("Also write the replay report; the format follows the extension (.json, .md, .html with memory charts; .csv: the findings); repeat for several formats. Checked before any variant runs")),
    mut_arg("force", |a| a.help("Overwrite output files that exist (--out, --junit); also replay on GPUs other processes are using (refused without it, exit 3: it would disturb their work and their memory would distort the replay's numbers)")),
)]
pub struct ReplayArgs {
    /// Scenario ids (see `vramdoc list`), `all` for every built-in one, or paths to scenario
    /// TOML files
    #[arg(value_name = "ID|FILE")]
    pub scenarios: Vec<String>,
    /// Run only this variant of each scenario (e.g. `bug`, `fix-visible-devices`); without
    /// it every variant runs
    #[arg(long, value_name = "V")]
    pub variant: Option<String>,
    /// Every built-in scenario, as `vramdoc replay all` (with any ID or FILE also named)
    #[arg(long)]
    pub all: bool,
    /// Memory sampling period (e.g. 1ms, 5ms; 100us to 1s)
    #[arg(
        long,
        default_value = "5ms",
        value_name = "DURATION",
        value_parser = duration_within(Duration::from_micros(100), Duration::from_secs(1), " (default 5ms)")
    )]
    pub period: Duration,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Fail (exit 1) instead of skipping a scenario that needs more devices than the box has
    #[arg(long)]
    pub require: bool,
    /// Kill a worker that reports nothing for this long (a hung step or driver call); its
    /// step ends with status `timeout` and the variant is unexpected. At least 10ms
    #[arg(
        long,
        default_value = "120s",
        value_name = "DURATION",
        value_parser = duration_within(Duration::from_millis(10), Duration::MAX, " (default 120s)")
    )]
    pub step_timeout: Duration,
    /// Also write JUnit XML for CI (one test case per variant; unexpected = failure)
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// With a command after `--`: the fingerprint its bug shows (repeatable; e.g.
    /// `stray-context`, `not-released`, `double-load`, `out-of-memory`; docs/findings.md)
    #[arg(long, value_name = "FINGERPRINT", requires = "command")]
    pub expect: Vec<String>,
    /// With a command after `--`: a fix variant, the same command with these words (split as
    /// a shell would; leading NAME=VALUE words set its environment, the rest are appended to
    /// its arguments), which must exit 0 with none of the --expect fingerprints (repeatable)
    #[arg(
        long,
        value_name = "ARGS",
        allow_hyphen_values = true,
        requires = "command"
    )]
    pub fix: Vec<String>,
    /// Your own reproduction as a scenario: the command (e.g. `python repro.py`) is the bug
    /// variant, each --fix a fix variant, watched as `vramdoc run` watches a job
    #[arg(
        last = true,
        conflicts_with_all = ["scenarios", "all", "variant"],
        value_name = "CMD",
        value_parser = clap::value_parser!(std::ffi::OsString)
    )]
    pub command: Vec<std::ffi::OsString>,
}
