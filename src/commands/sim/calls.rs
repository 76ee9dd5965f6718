//! `vramdoc sim status --calls`: the NVML and CUDA driver API calls each client made on the
//! box (`vramdoc_sim::calls`), per entry point and client PID; for CUDA also each failing
//! result, and every entry point, export table or table slot a client asked for and the
//! simulated driver does not serve — why a CUDA runtime stopped.

use anyhow::Result;
use vramdoc_sim::calls::{self, ClientCalls};
use vramdoc_sim::SimBox;

/// Calls per second of a client between its first and last call (`None`: under a second
/// of calls, no rate worth printing).
fn rate(c: &ClientCalls, n: u64) -> Option<f64> {
    let span = c.last_call_us.saturating_sub(c.first_call_us) as f64 / 1e6;
    (span >= 1.0).then(|| n as f64 / span)
}

pub fn show(sim: &SimBox, json: bool, reset: bool) -> Result<i32> {
    let clients = calls::read_all(sim.dir())?;
    let cuda = calls::read_all_cuda(sim.dir())?;
    if json {
        let v = serde_json::json!({
            "dir": sim.dir(),
            "clients": clients.iter().map(|c| {
                let mut v = serde_json::to_value(c).unwrap_or_default();
                v["total"] = c.total().into();
                v
            }).collect::<Vec<_>>(),
            "cuda_clients": cuda.iter().map(|c| {
                let mut v = serde_json::to_value(c).unwrap_or_default();
                v["total"] = c.total().into();
                v["failures"] = c.failures().into();
                v
            }).collect::<Vec<_>>(),
        });
        crate::term::print_json(&serde_json::to_string_pretty(&v)?)?;
    } else {
        show_nvml(&clients)?;
        show_cuda(&cuda)?;
    }
    if reset {
        calls::reset(sim.dir())?;
    }
    Ok(0)
}

/// A client's PID, name and whether it runs, on its first row of a table (blank after).
fn client_cells(c: &ClientCalls, first: bool) -> Vec<String> {
    if !first {
        return vec![String::new(); 3];
    }
    let pid = match c.ns_pid {
        Some(ns) => format!("{} ({ns} in ns)", c.pid),
        None => c.pid.to_string(),
    };
    let alive = if c.alive { "yes" } else { "no" };
    vec![pid, crate::term::clean(&c.name), alive.to_string()]
}

/// At most this many names of each missing kind per client in the table (`--json` has all).
const MISSING_SHOWN: usize = 12;

fn show_cuda(clients: &[calls::cuda::CudaCalls]) -> Result<()> {
    if clients.is_empty() {
        crate::term::print("no CUDA driver API calls recorded on this box")?;
        return Ok(());
    }
    let mut t = super::table(vec![
        "pid",
        "name",
        "alive",
        "CUDA entry point",
        "calls",
        "failed",
    ]);
    for c in clients {
        let mut rows: Vec<(&String, &u64)> = c.client.calls.iter().collect();
        rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (i, (name, n)) in rows.iter().enumerate() {
            let first = i == 0;
            let failed = c.failed.get(*name).map(|m| {
                m.iter()
                    .map(|(code, k)| format!("{k} x {code}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            });
            let mut row = client_cells(&c.client, first);
            row.extend([name.to_string(), n.to_string(), failed.unwrap_or_default()]);
            t.add_row(row);
        }
    }
    crate::term::print(&t.to_string())?;
    for c in clients {
        for (what, names) in [
            (
                "entry points asked for and not served",
                &c.missing_entry_points,
            ),
            (
                "export tables asked for and not served",
                &c.missing_export_tables,
            ),
            (
                "export-table slots called without behaviour",
                &c.unknown_slots,
            ),
        ] {
            if names.is_empty() {
                continue;
            }
            let shown: Vec<String> = names
                .iter()
                .take(MISSING_SHOWN)
                .map(|n| crate::term::clean(n))
                .collect();
            let more = names.len().saturating_sub(MISSING_SHOWN);
            let tail = if more > 0 {
                format!(" and {more} more (--json)")
            } else {
                String::new()
            };
            crate::term::print(&format!(
                "PID {}: {} {what}: {}{tail}",
                c.client.pid,
                names.len(),
                shown.join(", ")
            ))?;
        }
    }
    Ok(())
}

fn show_nvml(clients: &[ClientCalls]) -> Result<()> {
    if clients.is_empty() {
        crate::term::print("no NVML calls recorded on this box")?;
    } else {
        let mut t = super::table(vec![
            "pid",
            "name",
            "alive",
            "entry point",
            "calls",
            "per second",
        ]);
        for c in clients {
            let mut rows: Vec<(&String, &u64)> = c.calls.iter().collect();
            rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            for (i, (name, n)) in rows.iter().enumerate() {
                let first = i == 0;
                let mut row = client_cells(c, first);
                row.extend([
                    name.to_string(),
                    n.to_string(),
                    rate(c, **n).map(|r| format!("{r:.1}")).unwrap_or_default(),
                ]);
                t.add_row(row);
            }
        }
        crate::term::print(&t.to_string())?;
        crate::term::print(
            "Real drivers: a process-list call takes ~4.5 ms under the driver's lock, a memory query ~12 us.",
        )?;
    }
    Ok(())
}
