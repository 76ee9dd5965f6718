//! Shared bench setup: a simulated box of N devices x M live processes with real-driver NVML
//! latencies injected (12 us per memory query, 4.5 ms per process-list query). Used by the
//! `scan` and `serve` benches through `mod common;`.

use std::process::{Child, Command};
use vramdoc::units::MIB;
use vramdoc_sim::{procinfo, DeviceUsage, Faults, InitOptions, ProcessEntry, SimBox};

/// `sleep` children that hold PIDs for the staged processes; killed and reaped on drop.
pub struct Sleepers(Vec<Child>);

impl Drop for Sleepers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A staged box: keep it alive for as long as the bench reads `sim`.
pub struct Staged {
    /// The box's directory (removed on drop).
    pub _dir: tempfile::TempDir,
    /// The box spec, e.g. `8xh100`.
    pub spec: String,
    pub sim: SimBox,
    pub _sleepers: Sleepers,
}

/// Create a box of `devices` H100s with the injected latencies and `processes` live PIDs
/// (this process and `processes - 1` `sleep`s), each with a context on every device and an
/// allocation of a different size.
pub fn stage_box(devices: u32, processes: usize) -> Staged {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = format!("{devices}xh100");
    let sim = SimBox::create(dir.path(), &spec, &InitOptions::default()).expect("create box");
    sim.set_faults(&Faults {
        nvml_memory_latency_us: 12,
        nvml_process_latency_us: 4500,
        ..Faults::default()
    })
    .expect("set faults");
    let sleepers = Sleepers(
        (1..processes)
            .map(|_| {
                Command::new("sleep")
                    .arg("600")
                    .spawn()
                    .expect("spawn sleep")
            })
            .collect(),
    );
    let mut pids = vec![std::process::id()];
    pids.extend(sleepers.0.iter().map(|c| c.id()));
    let overhead = sim.devices()[0].context_overhead;
    sim.update(|st, _| {
        for (i, pid) in pids.iter().enumerate() {
            let entry = ProcessEntry {
                start_time: procinfo::start_time(*pid).unwrap_or(0),
                name: format!("bench-{i}"),
                devices: (0..devices)
                    .map(|d| {
                        let usage = DeviceUsage {
                            contexts: 1,
                            context_bytes: overhead,
                            allocations: 1,
                            alloc_bytes: (2 + ((i as u64 + d as u64) % 5) * 2) * 64 * MIB,
                            ..DeviceUsage::default()
                        };
                        (d, usage)
                    })
                    .collect(),
                ..Default::default()
            };
            st.processes.insert(*pid, entry);
        }
        Ok(())
    })
    .expect("stage processes");
    Staged {
        _dir: dir,
        spec,
        sim,
        _sleepers: sleepers,
    }
}
