//! `vramdoc sim down`: remove a box made by `sim init` and wait for its daemons (the driver
//! broker and the runtime, which exit once the box is gone) to stop.

use crate::cli::SimDownArgs;
use crate::exit::UsageError;
use anyhow::Result;
use std::path::Path;
use std::time::{Duration, Instant};

/// Longest wait for the daemons to notice (they look every half second).
const WAIT: Duration = Duration::from_secs(5);

/// The PID a daemon wrote into the box, if it runs.
fn daemon(dir: &Path, file: &str) -> Option<u32> {
    let text = crate::input::read_text(&dir.join(file), 64, "daemon PID files").ok()?;
    let pid: u32 = text.trim().parse().ok()?;
    crate::host::process::start_time(pid).map(|_| pid)
}

pub fn down(a: &SimDownArgs) -> Result<i32> {
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => std::env::var_os(vramdoc_sim::SIM_DIR_ENV)
            .filter(|v| !v.is_empty())
            .map(Into::into)
            .ok_or_else(|| {
                UsageError(format!(
                    "which box? give --dir DIR or set {}",
                    vramdoc_sim::SIM_DIR_ENV
                ))
            })?,
    };
    let shown = crate::term::one_line(&dir.display().to_string());
    if !dir.join("box.json").is_file() {
        anyhow::bail!(UsageError(format!(
            "{shown}: not a simulated box (no box.json); nothing removed"
        )));
    }
    let daemons: Vec<(&str, u32)> = [
        ("driverd", vramdoc_sim::broker::PID_FILE),
        ("runtimed", vramdoc_sim::runtime::PID_FILE),
    ]
    .into_iter()
    .filter_map(|(name, file)| Some((name, daemon(&dir, file)?)))
    .collect();
    std::fs::remove_dir_all(&dir)
        .map_err(|e| crate::exit::EnvironmentError(format!("removing {shown}: {e}")))?;
    let t0 = Instant::now();
    let mut left: Vec<(&str, u32)> = daemons.clone();
    while !left.is_empty() && t0.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(50));
        left.retain(|(_, pid)| crate::host::process::start_time(*pid).is_some());
    }
    let names = |v: &[(&str, u32)]| {
        v.iter()
            .map(|(n, p)| format!("{n} PID {p}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut line = format!("removed the box at {shown}");
    if !daemons.is_empty() && left.is_empty() {
        line.push_str(&format!("; its daemons stopped ({})", names(&daemons)));
    }
    crate::term::print(&line)?;
    if !left.is_empty() {
        crate::term::eprint_line(&format!(
            "vramdoc sim down: still running after {} s: {} (kill them)",
            WAIT.as_secs(),
            names(&left)
        ));
        return Ok(crate::exit::ENVIRONMENT);
    }
    if std::env::var_os(vramdoc_sim::SIM_DIR_ENV).is_some_and(|v| Path::new(&v) == dir) {
        crate::term::eprint_line(&format!(
            "note: {} still names it: unset {}",
            vramdoc_sim::SIM_DIR_ENV,
            vramdoc_sim::SIM_DIR_ENV
        ));
    }
    Ok(crate::exit::OK)
}
