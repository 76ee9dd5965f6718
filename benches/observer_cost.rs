//! The observer's cost of `vramdoc run` on an 8-GPU box in steady state (prints numbers, no
//! assertions): `vramdoc --backend real run -- JOB` over crates/simgpu's libnvidia-ml.so.1,
//! where JOB holds 20 GiB on each of the 8 GPUs and then does nothing; after a warm-up, the
//! NVML calls vramdoc made over a window are read from the box's per-client counters
//! (`vramdoc sim status --calls`). Printed: process-list calls per second and the modelled
//! driver-lock time, calls × 4.5 ms (the median of one list on a real driver, MangoHud PR
//! #2104), as a share of wall time (goal ≤ 1 %), next to what reading every list of every
//! GPU each process period (the recorder before issue 17) costs. The box injects the real
//! latencies (12 µs per memory query, 4.5 ms per list).
//!
//! `VRAMDOC_SIMGPU_DIR=$(scripts/test --simgpu-dir) cargo bench --bench observer_cost`
//! (`OBSERVER_WINDOW_S`, default 60: the measured window in seconds).

#[path = "../tests/it/common/simgpu.rs"]
mod simgpu;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vramdoc_sim::{calls, Faults, InitOptions, SimBox};

const GPUS: u32 = 8;
const LIST_MS: f64 = 4.5;
const PROCESS_PERIOD_S: f64 = 0.5;

/// vramdoc's own client counters: (process-list calls, memory calls, all calls).
fn counts(sim_dir: &std::path::Path, pid: u32) -> (u64, u64, u64) {
    let all = calls::read_all(sim_dir).expect("read the call counters");
    let mut out = (0, 0, 0);
    for c in all.iter().filter(|c| c.pid == pid) {
        for (name, n) in &c.calls {
            if name.contains("RunningProcess") {
                out.0 += n;
            }
            if name.starts_with("nvmlDeviceGetMemoryInfo") {
                out.1 += n;
            }
            out.2 += n;
        }
    }
    out
}

fn main() {
    let window = Duration::from_secs(
        std::env::var("OBSERVER_WINDOW_S")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60),
    );
    let libs = simgpu::lib_dir();
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = SimBox::create(dir.path(), &format!("{GPUS}xh100"), &InitOptions::default())
        .expect("create box");
    sim.set_faults(&Faults {
        nvml_memory_latency_us: 12,
        nvml_process_latency_us: 4500,
        ..Default::default()
    })
    .expect("faults");
    let exe = env!("CARGO_BIN_EXE_vramdoc");
    // The job: a holder of 20 GiB per GPU, killed when the job is.
    let script = format!(
        "pids=; for i in $(seq 0 {}); do {exe} sim hold --device $i --size 20GiB >/dev/null & \
         pids=\"$pids $!\"; done; trap 'kill $pids; exit 0' TERM; wait",
        GPUS - 1
    );
    let mut vramdoc: Child = Command::new(exe)
        .env("VRAMDOC_SIM_DIR", dir.path())
        .env("LD_LIBRARY_PATH", libs)
        .args(["--backend", "real", "run", "--out"])
        .arg(dir.path().join("run.json"))
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start vramdoc run");
    let pid = vramdoc.id();
    std::thread::sleep(Duration::from_secs(5));
    let (l0, m0, a0) = counts(dir.path(), pid);
    let t0 = Instant::now();
    std::thread::sleep(window);
    let (l1, m1, a1) = counts(dir.path(), pid);
    let secs = t0.elapsed().as_secs_f64();
    // SAFETY: a signal to the child we started.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = vramdoc.wait();
    let lists = (l1 - l0) as f64 / secs;
    let lock = lists * LIST_MS / 1000.0 * 100.0;
    let before = 3.0 * GPUS as f64 / PROCESS_PERIOD_S;
    println!("vramdoc run, {GPUS} GPUs, steady state, {secs:.0} s window (default cadence: memory 100 ms, process round 500 ms)");
    println!(
        "  process-list calls/s {lists:>8.2}   modelled driver-lock time {lock:>6.2} %  (calls x {LIST_MS} ms)"
    );
    println!(
        "  memory calls/s       {:>8.2}   all NVML calls/s {:>8.2}",
        (m1 - m0) as f64 / secs,
        (a1 - a0) as f64 / secs
    );
    println!(
        "  every list, every round (before): {before:.0} calls/s, {:.1} % driver-lock time",
        before * LIST_MS / 10.0
    );
}
