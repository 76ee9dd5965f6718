//! `vramdoc sim status --calls`: the NVML calls each client made on the box
//! (`vramdoc_sim::calls`), per entry point and client PID.

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
    if json {
        let v = serde_json::json!({
            "dir": sim.dir(),
            "clients": clients.iter().map(|c| {
                let mut v = serde_json::to_value(c).unwrap_or_default();
                v["total"] = c.total().into();
                v
            }).collect::<Vec<_>>(),
        });
        crate::term::print_json(&serde_json::to_string_pretty(&v)?)?;
    } else if clients.is_empty() {
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
        for c in &clients {
            let mut rows: Vec<(&String, &u64)> = c.calls.iter().collect();
            rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            for (i, (name, n)) in rows.iter().enumerate() {
                let first = i == 0;
                t.add_row(vec![
                    if first {
                        match c.ns_pid {
                            Some(ns) => format!("{} ({ns} in ns)", c.pid),
                            None => c.pid.to_string(),
                        }
                    } else {
                        String::new()
                    },
                    if first {
                        crate::term::clean(&c.name)
                    } else {
                        String::new()
                    },
                    if first {
                        if c.alive { "yes" } else { "no" }.to_string()
                    } else {
                        String::new()
                    },
                    name.to_string(),
                    n.to_string(),
                    rate(c, **n).map(|r| format!("{r:.1}")).unwrap_or_default(),
                ]);
            }
        }
        crate::term::print(&t.to_string())?;
        crate::term::print(
            "Real drivers: a process-list call takes ~4.5 ms under the driver's lock, a memory query ~12 us.",
        )?;
    }
    if reset {
        calls::reset(sim.dir())?;
    }
    Ok(0)
}
