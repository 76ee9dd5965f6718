//! `vramdoc sim …`: create a simulated box, show it, inject faults, stage holder processes.

use crate::cli::{GlobalArgs, SimCommand, SimInitArgs};
use crate::exit::UsageError;
use crate::units::{format_bytes, parse_size};
use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use std::path::Path;
use std::time::Duration;
use vramdoc_sim::{runtime, spec::PRESETS, InitOptions, SimBox};

mod calls;
mod container;
mod down;
mod fault;
mod hold;
mod status;

pub fn run(global: &GlobalArgs, cmd: SimCommand) -> Result<i32> {
    match cmd {
        SimCommand::Init(a) => init(&a),
        SimCommand::Presets => presets(),
        SimCommand::Driverd(a) => {
            vramdoc_sim::broker::serve(&a.dir)
                .with_context(|| format!("serving the box at {}", a.dir.display()))?;
            Ok(0)
        }
        SimCommand::Runtimed(a) => runtimed(&a.dir),
        SimCommand::Down(a) => down::down(&a),
        other => {
            // The session's box (`--sim` or VRAMDOC_SIM_DIR), kept for the command's life.
            let session = super::session::open(global)?;
            let sim = crate::backend::sim::open_box(session.backend.sim_dir.as_deref())?;
            match other {
                SimCommand::Status(a) => status::status(&sim, &a),
                SimCommand::Fault(a) => fault::fault(&sim, &a),
                SimCommand::Hold(a) => hold::hold(sim, &a),
                SimCommand::Run(a) => container::run(&sim, &a),
                SimCommand::Ps(a) => container::ps(&sim, &a),
                SimCommand::Libs(a) => status::libs(&sim, &a),
                SimCommand::Init(_)
                | SimCommand::Down(_)
                | SimCommand::Presets
                | SimCommand::Driverd(_)
                | SimCommand::Runtimed(_) => Ok(0),
            }
        }
    }
}

fn init(a: &SimInitArgs) -> Result<i32> {
    let overhead = parse_size(&a.context_overhead)?;
    let mut opts = InitOptions {
        context_overhead: overhead,
        platform: match a.platform {
            crate::cli::PlatformArg::Linux => vramdoc_sim::Platform::Linux,
            crate::cli::PlatformArg::Wsl => vramdoc_sim::Platform::Wsl,
        },
        ..InitOptions::default()
    };
    if let Some(v) = &a.driver {
        let p = vramdoc_sim::profile::DriverProfile::parse(v)
            .map_err(|e| UsageError(format!("--driver: {e}")))?;
        opts.pid_view = p.pid_view();
        opts.driver_version = p.driver_version;
        opts.cuda_driver_version = p.cuda_driver_version;
    }
    if let Some(m) = &a.mig {
        opts.mig = vramdoc_sim::mig::parse_layout(m).map_err(|e| UsageError(e.to_string()))?;
        vramdoc_sim::mig::check_layout(&a.spec, &opts.mig)
            .map_err(|e| UsageError(e.to_string()))?;
    }
    // The spec first: a bad one leaves nothing behind in TMPDIR.
    crate::backend::BoxSpec::parse(&a.spec)?;
    if let Some(m) = &a.minors {
        let n = vramdoc_sim::parse_spec(&a.spec).map_or(0, |d| d.len());
        vramdoc_sim::check_minors(m, n).map_err(|e| UsageError(format!("--minors: {e}")))?;
        opts.minors = Some(m.clone());
    }
    let (dir, temp) = match &a.dir {
        Some(d) => (d.clone(), None),
        None => {
            let t = tempfile::Builder::new()
                .prefix("vramdoc-sim-")
                .tempdir()
                .map_err(|e| {
                    crate::exit::EnvironmentError(format!(
                        "creating a directory for the box in {}: {e} (set TMPDIR to a writable directory, or pass --dir)",
                        std::env::temp_dir().display()
                    ))
                })?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    if dir.join("box.json").exists() {
        anyhow::bail!(UsageError(format!(
            "{}: a box already exists there; choose another --dir or remove it",
            dir.display()
        )));
    }
    // On failure the temporary directory is removed with `temp`; on success it is kept.
    SimBox::create(&dir, &a.spec, &opts)?;
    if let Some(t) = temp {
        let _ = t.keep();
    }
    start_broker(&dir);
    crate::term::print(&dir.display().to_string())?;
    Ok(0)
}

/// Start the box's daemons in this PID namespace, detached: the driver broker (`sim
/// driverd`) and the container runtime (`sim runtimed`). Failure is not fatal: without the
/// broker processes use their own PIDs; `sim run` starts a runtime when it finds none.
fn start_broker(dir: &std::path::Path) {
    start_daemon("driverd", dir, &vramdoc_sim::broker::socket_path(dir));
    start_daemon("runtimed", dir, &vramdoc_sim::runtime::socket_path(dir));
}

fn presets() -> Result<i32> {
    let mut t = table(vec!["preset", "name", "total", "reserved"]);
    for p in PRESETS {
        t.add_row(vec![
            p.key.to_string(),
            p.name.to_string(),
            format_bytes(p.total),
            format_bytes(p.reserved),
        ]);
    }
    crate::term::print(&t.to_string())?;
    crate::term::print(
        "Any size (e.g. 24GiB) is a generic card; `2x24GiB`, `rtx3090,rtx3090` make several.",
    )?;
    Ok(0)
}

/// A table in the condensed UTF-8 style with the columns `header`.
fn table(header: Vec<&str>) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED);
    t.set_header(header);
    t
}

/// Start one of the box's daemons (`sim driverd`, `sim runtimed`) in its own process group,
/// detached from this command's streams, and wait briefly for its socket. Failure is not
/// fatal here; the caller reports what it then lacks.
fn start_daemon(subcommand: &str, dir: &Path, socket: &Path) {
    use std::os::unix::process::CommandExt;
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let spawned = std::process::Command::new(exe)
        .args(["sim", subcommand, "--dir"])
        .arg(dir)
        .env_remove(vramdoc_sim::SIM_DIR_ENV)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn();
    let Ok(mut child) = spawned else {
        return;
    };
    // Reap it whenever it exits, so it never lingers as a zombie of this process.
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    for _ in 0..200 {
        if socket.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn runtimed(dir: &Path) -> Result<i32> {
    runtime::serve(dir).map_err(|e| {
        anyhow::anyhow!(
            "serving the box's container runtime at {}: {e}",
            dir.display()
        )
    })?;
    Ok(0)
}
