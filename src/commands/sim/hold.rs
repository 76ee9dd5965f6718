//! `vramdoc sim hold`: a neighbour process holding simulated memory (contexts, an
//! allocation, optionally listed as a graphics or MPS client, renamed, or with a forked
//! child keeping the driver files open). The process work is `vramdoc_sim::hold`.

use crate::backend::sim::SimDriver;
use crate::cli::SimHoldArgs;
use crate::exit::UsageError;
use crate::gpu::{Driver, ProcessKind};
use crate::units::{format_bytes, parse_size};
use anyhow::{Context, Result};
use vramdoc_sim::{hold, ProcessEnv, SimBox, SimProcess};

pub fn hold(sim: SimBox, a: &SimHoldArgs) -> Result<i32> {
    let size = parse_size(&a.size)?;
    let managed = a.managed.as_deref().map(parse_size).transpose()?;
    let mut process = SimProcess::with_env(sim.clone(), &ProcessEnv::from_env());
    // Device numbers are the user's to fix (exit 2), checked before anything is held.
    let visible = process.device_count();
    let physical = sim.devices().len();
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
        hold::set_own_name(name).map_err(|e| anyhow::anyhow!("prctl(PR_SET_NAME): {e}"))?;
    }
    let pid = process.pid();
    // Logical (CUDA) ordinals to the physical devices they are, for the line below.
    let phys = |p: &SimProcess, d: u32| p.physical(d).ok();
    let device_physical = phys(&process, a.device);
    let context_on_physical: Vec<Option<u32>> =
        a.context_on.iter().map(|d| phys(&process, *d)).collect();
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
    if let Some(m) = managed.filter(|m| *m > 0) {
        driver.alloc_managed(ctx, m).with_context(|| {
            format!(
                "allocating {} of managed memory on device {}",
                format_bytes(m),
                a.device
            )
        })?;
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
        let mut all = SimDriver::new(SimProcess::new(sim, None));
        for p in &a.physical_context {
            all.create_context(*p)
                .with_context(|| format!("creating a context on physical device {p}"))?;
        }
        physical = Some(all);
    }
    let child = if a.fork_child {
        // Nothing buffered may be written twice by parent and child.
        std::io::Write::flush(&mut std::io::stdout())?;
        Some(hold::fork_sleeping_child().map_err(|e| anyhow::anyhow!("fork failed: {e}"))?)
    } else {
        None
    };
    // The logical and physical device, and every context made, by physical index: the
    // stray one of --physical-context is on a device CUDA_VISIBLE_DEVICES hides (issue 39
    // item 7: `device=0 … contexts_on=[]` said neither).
    let shown = |d: Option<u32>| d.map_or("?".to_string(), |d| d.to_string());
    let mut line = format!(
        "holding pid={pid} device={} physical={} size={size} contexts_on={:?}",
        a.device,
        shown(device_physical),
        a.context_on
    );
    if !a.context_on.is_empty() {
        let p: Vec<String> = context_on_physical.iter().map(|d| shown(*d)).collect();
        line.push_str(&format!(" contexts_on_physical=[{}]", p.join(", ")));
    }
    if !a.physical_context.is_empty() {
        line.push_str(&format!(
            " stray_contexts_on_physical={:?}",
            a.physical_context
        ));
    }
    if let Ok(v) = std::env::var("CUDA_VISIBLE_DEVICES") {
        line.push_str(&format!(
            " CUDA_VISIBLE_DEVICES={}",
            crate::term::one_line(&v)
        ));
    }
    if let Some(c) = child {
        line.push_str(&format!(" child={c}"));
    }
    crate::term::print(&line)?;
    hold::hold_for(a.duration);
    if a.fork_child {
        // Exit like a killed parent: no cleanup, the child keeps the memory alive.
        std::process::exit(0);
    }
    drop(physical);
    drop(driver);
    Ok(0)
}
