//! `vramdoc sim status` (the box: devices with their minor numbers, memory, processes with
//! their managed bytes, faults; `--calls`) and `sim libs` (the simulated libraries installed for the box's driver version).

use crate::cli::SimStatusArgs;
use crate::exit::UsageError;
use crate::units::format_bytes;
use anyhow::Result;
use vramdoc_sim::SimBox;

pub fn status(sim: &SimBox, a: &SimStatusArgs) -> Result<i32> {
    if a.calls {
        return super::calls::show(sim, a.json, a.reset_calls);
    }
    let st = sim.state()?;
    let faults = sim.faults()?;
    // A MIG parent's memory is the sum of its instances' (listed after the GPUs, `0/1`).
    let memory = |d: &vramdoc_sim::SimDevice| match sim.mig_instance(d.index) {
        None if sim.is_mig_parent(d.index) => {
            vramdoc_sim::mig::parent_memory(d, sim.mig_instances(), &st)
        }
        _ => vramdoc_sim::memory_of(d, &st),
    };
    let label = |i: u32| match sim.mig_instance(i) {
        Some(m) => format!("{}/{}", m.parent, m.gi),
        None => i.to_string(),
    };
    let all = || {
        sim.devices()
            .iter()
            .chain(sim.mig_instances().iter().map(|m| &m.device))
    };
    if a.json {
        let devices: Vec<_> = all()
            .map(|d| {
                let m = memory(d);
                serde_json::json!({"device": d, "minor": d.minor(), "memory": m, "lost": faults.lost_devices.contains(&d.index)})
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
    let mut t = super::table(vec![
        "gpu", "minor", "name", "used", "reserved", "free", "total", "ctx cost",
    ]);
    for d in all() {
        let m = memory(d);
        let lost = faults.lost_devices.contains(&d.index);
        t.add_row(vec![
            format!("{}{}", label(d.index), if lost { " LOST" } else { "" }),
            // A MIG instance is reached through its parent's file.
            sim.mig_instance(d.index)
                .and_then(|m| sim.device(m.parent).ok())
                .unwrap_or(d)
                .minor()
                .to_string(),
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
        let mut t = super::table(vec![
            "pid",
            "name",
            "kind",
            "alive",
            "gpu",
            "contexts",
            "allocations",
            "mapped",
            "bytes",
            "managed",
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
                    label(*dev),
                    u.contexts.to_string(),
                    u.allocations.to_string(),
                    u.peer_mappings.to_string(),
                    format_bytes(u.total()),
                    format_bytes(u.managed_bytes),
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

pub fn libs(sim: &SimBox, a: &crate::cli::SimLibsArgs) -> Result<i32> {
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
