//! Prints what one NVML query costs through the real backend (`NvmlMonitor` over
//! nvml-wrapper) loaded over crates/simgpu, next to the in-process sim backend, on an idle
//! box and with the real-driver latencies injected (memory ~12 µs, process list ~4.5 ms).
//! Numbers only, no assertions. It loads the simulated libraries `scripts/test` installs:
//! `VRAMDOC_SIMGPU_DIR=$(scripts/test --simgpu-dir) cargo bench --bench nvml_monitor`.

/// Where the simulated libraries are (`VRAMDOC_SIMGPU_DIR`), as the tests find them.
#[path = "../tests/it/common/simgpu.rs"]
mod simgpu;

use std::time::{Duration, Instant};
use vramdoc::backend::sim::SimMonitor;
use vramdoc::gpu::nvml::NvmlMonitor;
use vramdoc::gpu::Monitor;
use vramdoc_sim::{Faults, SimBox};

fn time(n: u32, mut f: impl FnMut()) -> Duration {
    f(); // warm-up
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed() / n
}

fn row(label: &str, m: &dyn Monitor, n: u32) {
    let mem = time(n, || {
        m.memory(1).unwrap();
    });
    let procs = time(n, || {
        m.processes(1).unwrap();
    });
    let devs = time(n.min(200), || {
        m.devices().unwrap();
    });
    println!(
        "{label:<28} memory(1) {:>10.1?}   processes(1) {:>10.1?}   devices() {:>10.1?}",
        mem, procs, devs
    );
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    SimBox::create(dir.path(), "4xh100", &vramdoc_sim::InitOptions::default()).expect("box");
    let lib = simgpu::lib_dir().join("libnvidia-ml.so.1");
    // Single-threaded: set before nvmlInit, which reads it.
    std::env::set_var("VRAMDOC_SIM_DIR", dir.path());
    let nvml = NvmlMonitor::open_path(&lib).expect("open simulated NVML");
    let sim = SimMonitor::new(SimBox::open(dir.path()).unwrap());
    let mut holder = std::process::Command::new(env!("CARGO_BIN_EXE_vramdoc"))
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env("VRAMDOC_SIM_DIR", dir.path())
        .args(["sim", "hold", "--device", "1", "--size", "2GiB"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn holder");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();

    println!("box 4xh100, one process holding 2 GiB on device 1; mean per call");
    row("sim   (no injected latency)", &sim, 2000);
    row("nvml  (no injected latency)", &nvml, 2000);
    let b = SimBox::open(dir.path()).unwrap();
    b.set_faults(&Faults {
        nvml_memory_latency_us: 12,
        nvml_process_latency_us: 4500,
        ..Default::default()
    })
    .unwrap();
    row("sim   (12 µs / 4.5 ms)", &sim, 100);
    row("nvml  (12 µs / 4.5 ms)", &nvml, 100);
    let c = nvml.call_counts();
    println!(
        "nvml call counts: inventory {} memory {} processes {}",
        c.inventory, c.memory, c.processes
    );
    let _ = holder.kill();
    let _ = holder.wait();
}
