//! `vramdoc sim fault`: inject (or clear) faults on the session's box.

use crate::cli::SimFaultArgs;
use crate::exit::UsageError;
use anyhow::Result;
use vramdoc_sim::SimBox;

pub fn fault(sim: &SimBox, a: &SimFaultArgs) -> Result<i32> {
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
        // Xid 79: the GPU has fallen off the bus (docs/simulator.md).
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
        let line = vramdoc_sim::kernlog::append_xid(sim, a.device.unwrap_or(0), code)?;
        crate::term::print(&format!("kernel log: {line}"))?;
    }
    crate::term::print(&format!("faults: {}", serde_json::to_string(&f)?))?;
    Ok(0)
}
