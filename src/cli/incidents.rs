//! The flight recorder's flags (`serve --incidents DIR ...`, issue 28; docs/fleet.md
//! "Incidents") and `vramdoc incidents [list | show ID]`.

use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Args)]
pub struct IncidentFlags {
    /// Record incidents into DIR: each GPU failure seen on this node (an error line in a GPU
    /// pod's log, an Xid, a host OOM kill, a GPU lost, memory left without an owner) becomes
    /// a JSON file with the memory timeline before it and a replayable scenario
    #[arg(long, value_name = "DIR", value_parser = incidents_dir)]
    pub incidents: Option<PathBuf>,
    /// With --incidents: incident files kept at most (the oldest are removed)
    #[arg(long, value_name = "N", default_value_t = crate::incidents::DEFAULT_MAX_COUNT,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub incidents_max_count: u32,
    /// With --incidents: bytes of incident files kept at most (e.g. 64MiB)
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = max_bytes)]
    pub incidents_max_bytes: u64,
    /// With --incidents: how much memory history each incident carries, 1m to 2h
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10m",
        value_parser = super::duration_within(Duration::from_secs(60), Duration::from_secs(7200), " (default 10m)")
    )]
    pub incidents_history: Duration,
    /// With --incidents: the kernel log read for NVRM Xid and OOM-killer lines: /dev/kmsg (needs
    /// CAP_SYSLOG where dmesg is restricted) or a file such as /var/log/kern.log; `none` to
    /// not read one [default: /dev/kmsg; on a simulated box, the box's kern.log]
    #[arg(long, value_name = "PATH")]
    pub kernel_log: Option<PathBuf>,
}

/// A directory, or a path where one can be made: a file there is the user's to fix (exit
/// 2), not the machine's (issue 39 item 5: it exited 3, "File exists").
fn incidents_dir(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    if std::fs::metadata(&p).is_ok_and(|m| !m.is_dir()) {
        return Err("not a directory (give a directory; it is created when missing)".into());
    }
    Ok(p)
}

fn max_bytes(s: &str) -> Result<u64, String> {
    let n = vramdoc_gpu_spec::units::parse_size(s).map_err(|e| format!("{e} (e.g. 64MiB)"))?;
    if n < 1024 * 1024 {
        return Err("at least 1MiB".into());
    }
    Ok(n)
}

#[derive(Debug, Subcommand)]
pub enum IncidentsCommand {
    /// List the incidents of a directory, newest first
    List(IncidentsListArgs),
    /// Print one incident (JSON by default; --markdown for a ticket)
    Show(IncidentsShowArgs),
}

#[derive(Debug, Args)]
pub struct IncidentsListArgs {
    /// The incidents directory (`serve --incidents DIR`)
    #[arg(long, value_name = "DIR", default_value = "/var/lib/vramdoc/incidents")]
    pub dir: PathBuf,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct IncidentsShowArgs {
    /// The incident's id (as `vramdoc incidents list` prints it)
    pub id: String,
    /// The incidents directory (`serve --incidents DIR`)
    #[arg(long, value_name = "DIR", default_value = "/var/lib/vramdoc/incidents")]
    pub dir: PathBuf,
    /// Print Markdown, ready to paste into a ticket
    #[arg(long)]
    pub markdown: bool,
    /// Print only the replayable scenario (TOML)
    #[arg(long, conflicts_with = "markdown")]
    pub scenario: bool,
}
