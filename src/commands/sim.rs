//! `vramdoc sim …`: create a simulated box, show it, inject faults, stage holder processes.

use crate::backend::sim::SimDriver;
use crate::cli::{GlobalArgs, SimCommand, SimFaultArgs, SimHoldArgs, SimInitArgs, SimStatusArgs};
use crate::exit::UsageError;
use crate::gpu::{Driver, ProcessKind};
use crate::units::{format_bytes, parse_size};
use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use vramdoc_sim::{spec::PRESETS, InitOptions, SimBox, SimProcess};

mod calls;
mod container;

pub fn run(global: &GlobalArgs, cmd: SimCommand) -> Result<i32> {
    match cmd {
        SimCommand::Init(a) => init(&a),
        SimCommand::Presets => presets(),
        SimCommand::Driverd(a) => {
            vramdoc_sim::broker::serve(&a.dir)
                .with_context(|| format!("serving the box at {}", a.dir.display()))?;
            Ok(0)
        }
        SimCommand::Runtimed(a) => container::runtimed(&a.dir),
        other => {
            let session = super::Session::new(global)?;
            let _keep = &session.private_box;
            match other {
                SimCommand::Status(a) => status(&a),
                SimCommand::Fault(a) => fault(&a),
                SimCommand::Hold(a) => hold(&a),
                SimCommand::Run(a) => container::run(&a),
                SimCommand::Ps(a) => container::ps(&a),
                SimCommand::Libs(a) => libs(&a),
                SimCommand::Init(_)
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
        opts.driver_version = p.driver_version;
        opts.cuda_driver_version = p.cuda_driver_version;
    }
    // The spec first: a bad one leaves nothing behind in TMPDIR.
    vramdoc_sim::parse_spec(&a.spec)?;
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
    container::start_daemon("driverd", dir, &vramdoc_sim::broker::socket_path(dir));
    container::start_daemon("runtimed", dir, &vramdoc_sim::runtime::socket_path(dir));
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

fn status(a: &SimStatusArgs) -> Result<i32> {
    let sim = SimBox::from_env()?;
    if a.calls {
        return calls::show(&sim, a.json, a.reset_calls);
    }
    let st = sim.state()?;
    let faults = sim.faults()?;
    if a.json {
        let devices: Vec<_> = sim
            .devices()
            .iter()
            .map(|d| {
                let m = vramdoc_sim::memory_of(d, &st);
                serde_json::json!({"device": d, "memory": m, "lost": faults.lost_devices.contains(&d.index)})
            })
            .collect();
        let v = serde_json::json!({
            "dir": sim.dir(),
            "config": sim.config(),
            "devices": devices,
            "processes": st.processes,
            "faults": faults,
        });
        crate::term::print_json(&serde_json::to_string_pretty(&v)?)?;
        return Ok(0);
    }
    crate::term::print(&format!(
        "box {} ({})",
        sim.dir().display(),
        sim.config().spec
    ))?;
    let mut t = table(vec![
        "gpu", "name", "used", "reserved", "free", "total", "ctx cost",
    ]);
    for d in sim.devices() {
        let m = vramdoc_sim::memory_of(d, &st);
        let lost = faults.lost_devices.contains(&d.index);
        t.add_row(vec![
            format!("{}{}", d.index, if lost { " LOST" } else { "" }),
            d.name.clone(),
            format_bytes(m.used),
            format_bytes(m.reserved),
            format_bytes(m.free),
            format_bytes(m.total),
            format_bytes(d.context_overhead),
        ]);
    }
    crate::term::print(&t.to_string())?;
    if st.processes.is_empty() {
        crate::term::print("no processes")?;
    } else {
        let mut t = table(vec![
            "pid",
            "name",
            "kind",
            "alive",
            "gpu",
            "contexts",
            "allocations",
            "mapped",
            "bytes",
        ]);
        for (pid, p) in &st.processes {
            let alive = sim.is_alive(*pid, p);
            for (dev, u) in &p.devices {
                t.add_row(vec![
                    match p.ns_pid {
                        Some(ns) => format!("{pid} ({ns} in ns)"),
                        None => pid.to_string(),
                    },
                    crate::term::clean(&p.name),
                    std::iter::once(p.kind)
                        .chain(p.also.iter().copied())
                        .map(|k| format!("{k:?}").to_lowercase())
                        .collect::<Vec<_>>()
                        .join("+"),
                    if alive { "yes" } else { "NO" }.to_string(),
                    dev.to_string(),
                    u.contexts.to_string(),
                    u.allocations.to_string(),
                    u.peer_mappings.to_string(),
                    format_bytes(u.total()),
                ]);
            }
        }
        crate::term::print(&t.to_string())?;
    }
    if !faults.is_clear() {
        crate::term::print(&format!("faults: {}", serde_json::to_string(&faults)?))?;
    }
    Ok(0)
}

fn fault(a: &SimFaultArgs) -> Result<i32> {
    let sim = SimBox::from_env()?;
    // Flag values checked before the box is touched.
    for d in &a.lose_device {
        sim.device(*d).map_err(|_| {
            UsageError(format!(
                "--lose-device {d}: the box has {} devices",
                sim.devices().len()
            ))
        })?;
    }
    let n = sim.devices().len();
    for (flag, list) in [
        ("no-permission", &a.no_permission),
        ("mig-unprivileged", &a.mig_unprivileged),
        ("exclusive-process", &a.exclusive_process),
        ("contained", &a.contained),
        ("illegal-address", &a.illegal_address),
    ] {
        if let Some(bad) = list.iter().find(|d| **d as usize >= n) {
            anyhow::bail!(UsageError(format!(
                "--{flag} {bad}: the box has {n} devices (0..{})",
                n.saturating_sub(1)
            )));
        }
    }
    if a.device.is_some() && !a.nvml_hang && a.xid.is_none() {
        anyhow::bail!(UsageError("--device goes with --nvml-hang or --xid".into()));
    }
    if let Some(d) = a.device {
        if d as usize >= n {
            anyhow::bail!(UsageError(format!(
                "--device {d}: the box has {n} devices (0..{})",
                n.saturating_sub(1)
            )));
        }
    }
    // Bounded by the flags' parser (at most a minute).
    let memory_latency = a.nvml_memory_latency.map(|d| d.as_micros() as u64);
    let process_latency = a.nvml_process_latency.map(|d| d.as_micros() as u64);
    // One read-modify-write under the box lock.
    let f = sim.update_faults(|f, st| {
        if a.clear {
            *f = f.cleared();
        }
        if a.nvml_hang {
            f.nvml_hang = Some(vramdoc_sim::NvmlHang {
                device: a.device,
                limit_ms: a
                    .hang_limit
                    .map_or(vramdoc_sim::NvmlHang::DEFAULT_LIMIT_MS, |d| {
                        d.as_millis() as u64
                    }),
            });
        }
        if a.nvml_session_lost {
            f.nvml_sessions_lost = true;
            f.nvml_epoch = f.nvml_epoch.saturating_add(1);
        }
        for d in &a.lose_device {
            if !f.lost_devices.contains(d) {
                f.lost_devices.push(*d);
            }
        }
        if a.xid == Some(79) {
            let d = a.device.unwrap_or(0);
            if !f.lost_devices.contains(&d) {
                f.lost_devices.push(d);
            }
        }
        if let Some(n) = a.alloc_fail_after {
            // Counted from now: allocations already made on the box do not count.
            f.alloc_fail_after = Some(st.alloc_calls.saturating_add(n));
        }
        if let Some(us) = memory_latency {
            f.nvml_memory_latency_us = us;
        }
        if let Some(us) = process_latency {
            f.nvml_process_latency_us = us;
        }
        if a.keep_dead {
            f.keep_dead_processes = true;
        }
        if a.usage_unavailable {
            f.nvml_used_memory_unavailable = true;
        }
        for (list, field) in [
            (&a.no_permission, &mut f.no_permission_devices),
            (&a.mig_unprivileged, &mut f.mig_unprivileged_devices),
            (&a.exclusive_process, &mut f.exclusive_process_devices),
            (&a.contained, &mut f.contained_devices),
        ] {
            for d in list {
                if !field.contains(d) {
                    field.push(*d);
                }
            }
        }
        f.illegal_address_devices
            .extend(a.illegal_address.iter().copied());
        f.cuda_stub_library |= a.cuda_stub;
        f.no_ptx_jit |= a.no_ptx_jit;
        f.cuda_total_excludes_reserved |= a.cuda_total_excludes_reserved;
        f.driver_version_mismatch |= a.version_mismatch;
        Ok(())
    })?;
    if let Some(code) = a.xid {
        let line = vramdoc_sim::kernlog::append_xid(&sim, a.device.unwrap_or(0), code)?;
        crate::term::print(&format!("kernel log: {line}"))?;
    }
    crate::term::print(&format!("faults: {}", serde_json::to_string(&f)?))?;
    Ok(0)
}

fn hold(a: &SimHoldArgs) -> Result<i32> {
    let size = parse_size(&a.size)?;
    let duration = a.duration;
    let mut process = SimProcess::from_env()?;
    // Device numbers are the user's to fix (exit 2), checked before anything is held.
    let visible = process.device_count();
    let physical = process.sim().devices().len();
    for (flag, d, n) in std::iter::once(("--device", a.device, visible))
        .chain(a.context_on.iter().map(|d| ("--context-on", *d, visible)))
        .chain(
            a.physical_context
                .iter()
                .map(|d| ("--physical-context", *d, physical as u32)),
        )
    {
        if d >= n {
            anyhow::bail!(UsageError(format!(
                "{flag} {d}: this process sees {n} device(s), numbered from 0 (check CUDA_VISIBLE_DEVICES and the box)"
            )));
        }
    }
    if a.graphics {
        process.set_kind(ProcessKind::Graphics);
    } else if a.mps {
        process.set_kind(ProcessKind::Mps);
    } else if a.also_graphics {
        process.set_also(&[ProcessKind::Graphics]);
    }
    if let Some(name) = &a.set_name {
        set_own_name(name)?;
    }
    let pid = process.pid();
    let mut driver = SimDriver::new(process);
    let ctx = driver
        .create_context(a.device)
        .with_context(|| format!("creating a context on device {}", a.device))?;
    if size > 0 {
        let alloc = driver
            .alloc(ctx, size)
            .with_context(|| format!("allocating {} on device {}", format_bytes(size), a.device))?;
        // Touch small allocations so they are real; large ones are uniform in the simulator.
        driver.fill(alloc, 0x5EED)?;
    }
    for o in &a.context_on {
        driver
            .create_context(*o)
            .with_context(|| format!("creating a context on device {o}"))?;
    }
    // Test-only staging: contexts on physical devices, outside CUDA_VISIBLE_DEVICES. A second
    // simulated driver with every device visible, charged to this same PID.
    let mut physical = None;
    if !a.physical_context.is_empty() {
        let mut all = SimDriver::new(SimProcess::new(SimBox::from_env()?, None));
        for p in &a.physical_context {
            all.create_context(*p)
                .with_context(|| format!("creating a context on physical device {p}"))?;
        }
        physical = Some(all);
    }
    let child = if a.fork_child {
        // Nothing buffered may be written twice by parent and child.
        std::io::Write::flush(&mut std::io::stdout())?;
        // SAFETY: fork in a single-threaded process; the child only sleeps (no allocation,
        // no locks) until killed, holding the descriptors it inherited.
        match unsafe { libc::fork() } {
            -1 => anyhow::bail!("fork failed: {}", std::io::Error::last_os_error()),
            0 => loop {
                // SAFETY: pause has no preconditions.
                unsafe { libc::pause() };
            },
            c => Some(c),
        }
    } else {
        None
    };
    let mut line = format!(
        "holding pid={} device={} size={} contexts_on={:?}",
        pid, a.device, size, a.context_on
    );
    if let Some(c) = child {
        line.push_str(&format!(" child={c}"));
    }
    crate::term::print(&line)?;
    match duration {
        Some(d) => std::thread::sleep(d),
        None => loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        },
    }
    if a.fork_child {
        // Exit like a killed parent: no cleanup, the child keeps the memory alive.
        std::process::exit(0);
    }
    drop(physical);
    drop(driver);
    Ok(0)
}

/// `prctl(PR_SET_NAME, name)`: the kernel keeps the first 15 bytes, whatever they are.
fn set_own_name(name: &std::ffi::OsStr) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let mut buf = [0u8; 16];
    let n = name.as_bytes().len().min(15);
    buf[..n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes from `buf`, which
    // lives across the call.
    if unsafe { libc::prctl(libc::PR_SET_NAME, buf.as_ptr()) } != 0 {
        anyhow::bail!("prctl(PR_SET_NAME): {}", std::io::Error::last_os_error());
    }
    Ok(())
}

fn libs(a: &crate::cli::SimLibsArgs) -> Result<i32> {
    let sim = SimBox::from_env()?;
    let from = match &a.from {
        Some(f) => f.clone(),
        None => std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|d| d.join("libsimgpu.so")))
            .filter(|p| p.exists())
            .ok_or_else(|| {
                UsageError(
                    "no libsimgpu.so next to the vramdoc executable: build it with \
                     `cargo build -p vramdoc-simgpu` and pass --from target/debug/libsimgpu.so"
                        .into(),
                )
            })?,
    };
    let hidden = vramdoc_sim::libs::install(&from, &a.dir, &sim.config().driver_version)
        .map_err(|e| UsageError(e.to_string()))?;
    crate::term::print(&format!(
        "installed {} into {} for driver {}{}",
        vramdoc_sim::libs::NAMES.join(", "),
        a.dir.display(),
        sim.config().driver_version,
        if hidden.is_empty() {
            String::new()
        } else {
            format!(" (without {})", hidden.join(", "))
        }
    ))?;
    Ok(0)
}

/// A table in the condensed UTF-8 style with the columns `header`.
fn table(header: Vec<&str>) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED);
    t.set_header(header);
    t
}
