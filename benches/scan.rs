//! Bench: one `vramdoc scan` (inventory + diagnosis) on a simulated box of 8 devices x 32
//! processes, with realistic NVML latencies injected (12 us per memory query, 4.5 ms per
//! process-list query). Prints wall time and the NVML calls made by kind, and asserts the
//! once-per-device rule. Run: `cargo bench --bench scan`.

mod common;

use std::time::{Duration, Instant};
use vramdoc::backend::sim::SimMonitor;
use vramdoc::gpu::Monitor;
use vramdoc::inventory::{self, PidNamespace};
use vramdoc::units::format_bytes;

const DEVICES: u32 = 8;
const PROCESSES: usize = 32;
const ITERATIONS: usize = 10;

fn main() {
    let staged = common::stage_box(DEVICES, PROCESSES);
    let (spec, sim) = (&staged.spec, &staged.sim);

    let pidns = PidNamespace {
        host: true,
        reason: "bench".into(),
    };
    let th = vramdoc::diagnose::Thresholds::default();
    let mut walls = Vec::new();
    let mut last = None;
    for _ in 0..ITERATIONS {
        let monitor = SimMonitor::new(sim.clone());
        let t0 = Instant::now();
        let inv = inventory::collect(&monitor, Some(spec.clone()), pidns.clone()).expect("scan");
        let t_collect = t0.elapsed();
        let (findings, headroom) = vramdoc::diagnose::diagnose(&inv, &th);
        let wall = t0.elapsed();
        let counts = monitor.call_counts();
        // The rule: every query once per device per scan.
        assert_eq!(counts.inventory, 1, "devices() once per scan: {counts:?}");
        assert_eq!(
            counts.processes, DEVICES as u64,
            "processes(i) once per device: {counts:?}"
        );
        assert!(
            counts.memory <= DEVICES as u64,
            "memory(i) at most once per device: {counts:?}"
        );
        assert_eq!(inv.processes.len(), PROCESSES);
        assert!(inv
            .processes
            .iter()
            .all(|p| p.devices.len() == DEVICES as usize));
        assert_eq!(headroom.len(), DEVICES as usize);
        walls.push(wall);
        last = Some((
            counts,
            t_collect,
            wall,
            findings.len(),
            inv.devices()[0].memory.used,
        ));
    }
    walls.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (counts, t_collect, wall, n_findings, used0) = last.expect("ran");
    println!("scan bench: {DEVICES} devices x {PROCESSES} processes ({spec}), {ITERATIONS} scans");
    println!("  injected NVML latency: 12 us per memory query, 4.5 ms per process-list query");
    println!(
        "  wall per scan: min {:.2} ms, median {:.2} ms, max {:.2} ms",
        ms(walls[0]),
        ms(walls[walls.len() / 2]),
        ms(walls[walls.len() - 1])
    );
    println!(
        "  last scan: collect {:.2} ms (NVML + /proc), diagnose {:.3} ms",
        ms(t_collect),
        ms(wall - t_collect)
    );
    println!(
        "  floor from process-list latency alone: {DEVICES} x 4.5 ms = {:.1} ms",
        DEVICES as f64 * 4.5
    );
    println!(
        "  NVML calls per scan: devices() {} (memory of all {DEVICES} devices inside), \
         memory(i) {}, processes(i) {}",
        counts.inventory, counts.memory, counts.processes
    );
    println!(
        "  findings: {n_findings}; GPU 0 used: {}",
        format_bytes(used0)
    );
    println!("  once-per-device rule: ok");
    drop(staged);
}
