//! Node shapes for `vramdoc scan` (and serve, which shares its rules): healthy nodes that
//! must raise nothing at warn/error, and broken ones that must raise the right finding.
//!
//! Every case runs on a box made by `vramdoc sim init`, with real processes: the workloads
//! of tests/corpus/node_workloads.py (ctypes over the simulated libcuda.so.1, as the
//! programs they stand for call the driver), `vramdoc sim hold`, and containers of the
//! box's runtime (`vramdoc sim run`, as the NVIDIA device plugin and container runtime set
//! them up). vramdoc reads them through its real NVML backend over the simulated
//! libnvidia-ml.so.1. The source of each shape is cited beside it.

use super::{assert_clean, findings_of, Outcome};
use crate::common::clients::{python, vramdoc_scan, CliBox, Live};
use crate::common::hold::Holder;

use crate::common::{self};
use std::path::{Path, PathBuf};
use std::process::Command;

const GIB: u64 = 1 << 30;

fn workloads() -> &'static str {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/corpus/node_workloads.py"
    )
}

/// A workload of node_workloads.py on `b`, returned once it printed `ready`.
fn workload(b: &CliBox, libs: &Path, args: &[&str], env: &[(&str, &str)]) -> Live {
    let mut c = Command::new(python());
    c.arg(workloads())
        .args(args)
        .env("VRAMDOC_SIM_DIR", &b.dir)
        .env("LD_LIBRARY_PATH", libs)
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("NVIDIA_VISIBLE_DEVICES");
    for (k, v) in env {
        c.env(k, v);
    }
    let mut live = Live::start(c);
    let _what = live.line();
    live
}

/// What `vramdoc scan` finds through the real NVML backend over `libs`.
fn scan(b: &CliBox, libs: &Path) -> Vec<(String, String)> {
    findings_of(&vramdoc_scan(b, libs))
}

fn libs() -> PathBuf {
    common::simgpu_lib_dir().to_path_buf()
}

fn hold(b: &CliBox, env: &[(&str, &str)], args: &[&str]) -> Holder {
    Holder::start(&b.dir, env, args)
}

fn case(name: &str, source: &str, expected: &[&str], found: Vec<(String, String)>) -> Outcome {
    Outcome::new(name, source, expected, found)
}

// ---- benign: healthy nodes ------------------------------------------------------------

/// pytorch/pytorch#64130: NVML lists every DDP rank on every GPU with 0 bytes once NCCL maps
/// peer memory (CUDA IPC).
fn ddp(n: u32, per_rank: u64) -> Outcome {
    let b = CliBox::new(&format!("{n}x16GiB"), &[]);
    let libs = libs();
    let _job = workload(
        &b,
        &libs,
        &["ddp", &n.to_string(), &per_rank.to_string()],
        &[],
    );
    case(
        &format!("ddp-{n}-ranks-with-peer-listings"),
        "pytorch/pytorch#64130",
        &[],
        scan(&b, &libs),
    )
}

/// vLLM claims gpu_memory_utilization x total at start (docs.vllm.ai, "gpu_memory_utilization",
/// default 0.9); many deployments run at 0.95.
fn engine(spec: &str, fraction: &str) -> Outcome {
    let b = CliBox::new(spec, &[]);
    let libs = libs();
    let _e = workload(&b, &libs, &["engine", "0", fraction], &[]);
    case(
        &format!("vllm-engine-at-{fraction}-on-{spec}"),
        "vLLM docs: gpu_memory_utilization (the engine pre-allocates that fraction of total)",
        &[],
        scan(&b, &libs),
    )
}

/// PyTorch's caching allocator keeps freed blocks reserved: a training job's footprint grows
/// to most of the GPU and stays (PyTorch docs, "CUDA memory management").
fn caching_allocator_full() -> Outcome {
    let b = CliBox::new("16GiB", &[]);
    let _h = hold(&b, &[], &["--size", &(15 * GIB - GIB / 2).to_string()]);
    case(
        "pytorch-cache-grown-to-95-percent",
        "PyTorch docs: CUDA semantics, memory management (caching allocator)",
        &[],
        scan(&b, &libs()),
    )
}

/// NVIDIA/k8s-device-plugin `getAllocateResponse`: a pod given host GPU 1 in each form.
fn device_plugin(strategy: &str, extra: &[&str], env: &[(&str, &str)]) -> Outcome {
    let b = CliBox::new("4x16GiB", &[]);
    let mut args = vec!["--gpus", "1", "--strategy", strategy];
    args.extend_from_slice(extra);
    b.detached_holder(&args, env, "6GiB");
    let label = format!("device-plugin-{strategy}{}", extra.join(""));
    case(
        &label,
        "NVIDIA/k8s-device-plugin internal/plugin/server.go getAllocateResponse; nvidia-container-toolkit docs",
        &[],
        scan(&b, &libs()),
    )
}

/// nvml.h, nvmlDeviceGetMemoryInfo: on coherent-memory platforms pages freed by an exited
/// process stay counted as used until reclaimed.
fn coherent_after_exit() -> Outcome {
    let b = CliBox::new("gh200", &[]);
    let h = hold(&b, &[], &["--size", &(20 * GIB).to_string()]);
    h.kill();
    case(
        "gh200-memory-counted-after-exit",
        "nvml.h nvmlDeviceGetMemoryInfo note (coherent memory); nvmlDeviceGetNumaNodeId",
        &[],
        scan(&b, &libs()),
    )
}

/// nvidia-persistenced, DCGM's host engine and the device plugin keep every device file open
/// (NVIDIA driver docs "Driver Persistence"; DCGM docs) beside a healthy engine.
fn monitors_beside_a_job() -> Outcome {
    let b = CliBox::new("2x16GiB", &[]);
    let libs = libs();
    let _m1 = workload(&b, &libs, &["monitor", "nvidia-persistenced"], &[]);
    let _m2 = workload(&b, &libs, &["monitor", "nv-hostengine"], &[]);
    let _e = workload(&b, &libs, &["engine", "0", "0.9"], &[]);
    case(
        "persistenced-and-dcgm-beside-an-engine",
        "NVIDIA driver docs: Driver Persistence (nvidia-persistenced); DCGM nv-hostengine",
        &[],
        scan(&b, &libs),
    )
}

/// nvidia-smi's `C+G` type: one process in the compute and the graphics list (NVML docs,
/// nvmlDeviceGetGraphicsRunningProcesses).
fn compute_and_graphics() -> Outcome {
    let b = CliBox::new("16GiB", &[]);
    let _h = hold(
        &b,
        &[],
        &["--size", &(6 * GIB).to_string(), "--also-graphics"],
    );
    case(
        "c-plus-g-process-counted-once",
        "nvml.h nvmlDeviceGetComputeRunningProcesses / GetGraphicsRunningProcesses (nvidia-smi type C+G)",
        &[],
        scan(&b, &libs()),
    )
}

/// Drivers before R510 have no nvmlDeviceGetMemoryInfo_v2: `used` includes the driver's
/// reservation (nvml.h, nvmlMemory_v2_t).
fn pre_r510_driver() -> Outcome {
    let b = CliBox::new("a100", &["--driver", "470"]);
    let libs = b.libs();
    let _e = workload(&b, &libs, &["engine", "0", "0.5"], &[]);
    case(
        "r470-driver-nvml-v1-healthy-job",
        "nvml.h nvmlMemory_v2_t (reserved is counted in v1's used)",
        &[],
        scan(&b, &libs),
    )
}

/// RAPIDS/RMM on managed memory (rmm `managed_memory_resource`, cudaMallocManaged): resident
/// pages count in the GPU's used memory but in no process's usedGpuMemory
/// (rapidsai/rmm#2259, Syllo/nvtop#213, gpuopenanalytics/pynvml#63). The job holds
/// /dev/nvidia-uvm: no-live-owner at info at most.
fn rmm_managed() -> Outcome {
    let b = CliBox::new("16GiB", &[]);
    let libs = libs();
    let _job = workload(&b, &libs, &["managed", "0", &(2 * GIB).to_string()], &[]);
    case(
        "rapids-rmm-managed-memory",
        "rapidsai/rmm#2259; Syllo/nvtop#213; gpuopenanalytics/pynvml#63 (managed memory in used, not per process)",
        &[],
        scan(&b, &libs),
    )
}

/// Two vLLM engines at gpu_memory_utilization 0.45 on one GPU, a documented way to share it
/// (vLLM docs, "gpu_memory_utilization": the fraction of GPU memory this instance may use,
/// "e.g. you can use 0.5 for two instances"): a steady fixed-budget state, info at most.
/// The workload's budget counts what is already used (older vLLM), so the second engine
/// asks 0.9 to claim its own 0.45.
fn two_engines_at_045() -> Outcome {
    let b = CliBox::new("h100", &[]);
    let libs = libs();
    let _a = workload(&b, &libs, &["engine", "0", "0.45"], &[]);
    let _b = workload(&b, &libs, &["engine", "0", "0.9"], &[]);
    case(
        "two-vllm-engines-at-0.45-share-a-gpu",
        "vLLM docs: gpu_memory_utilization (per-instance fraction; two instances share a GPU)",
        &[],
        scan(&b, &libs),
    )
}

/// DGX Spark (GB10): nvmlDeviceGetMemoryInfo is NOT_SUPPORTED while per-process usage works
/// (vllm-project/vllm#55828, unslothai/unsloth#10283, Syllo/nvtop#511): the GPU is
/// reported with its processes, no warning.
fn gb10_job() -> Outcome {
    let b = CliBox::new("gb10", &[]);
    let libs = libs();
    let _e = workload(&b, &libs, &["managed", "0", &(2 * GIB).to_string()], &[]);
    case(
        "gb10-memory-query-not-supported",
        "vllm-project/vllm#55828; unslothai/unsloth#10283; Syllo/nvtop#511",
        &[],
        scan(&b, &libs),
    )
}

/// SchedMD/slurm `src/plugins/gres/common/gres_common.c` (`common_gres_set_env`): with
/// `ConstrainDevices=yes` a job gets local `CUDA_VISIBLE_DEVICES=0..n-1` and the global ids in
/// `SLURM_JOB_GPUS` (the device files' numbers; minors need not follow NVML order,
/// NVIDIA/nvidia-docker#1432). A job on physical GPU 1, whose device file is `nvidia0` here,
/// can open only that file.
fn slurm_constrained_job(slurm_gpus: &str) -> Outcome {
    let b = CliBox::new("4x16GiB", &["--minors", "2,0,3,1"]);
    b.detached_holder(
        &["--gpus", "1", "--strategy", "cdi", "--cgroup", "none"],
        &[
            ("CUDA_VISIBLE_DEVICES", "0"),
            ("SLURM_JOB_GPUS", slurm_gpus),
        ],
        "6GiB",
    );
    case(
        &format!("slurm-job-on-gpu1-cvd0-slurm-job-gpus-{slurm_gpus}-permuted-minors"),
        "SchedMD/slurm src/plugins/gres/common/gres_common.c; NVIDIA/nvidia-docker#1432, #376",
        &[],
        scan(&b, &libs()),
    )
}

/// `docker run --gpus device=3` (NVIDIA/nvidia-container-toolkit: only GPU 3's device file
/// is mounted; CDI keeps the image's `NVIDIA_VISIBLE_DEVICES=all`) of an image that sets
/// `CUDA_VISIBLE_DEVICES=0` (e.g. a serving image's Dockerfile `ENV`), minors permuted.
fn docker_device_with_image_cvd(strategy: &str) -> Outcome {
    let b = CliBox::new("4x16GiB", &["--minors", "2,0,3,1"]);
    b.detached_holder(
        &["--gpus", "device=3", "--strategy", strategy],
        &[("CUDA_VISIBLE_DEVICES", "0")],
        "6GiB",
    );
    case(
        &format!("docker-gpus-device-3-image-cvd0-{strategy}-permuted-minors"),
        "NVIDIA/nvidia-container-toolkit docs (docker --gpus device=N, CDI); NVIDIA/nvidia-docker#1432",
        &[],
        scan(&b, &libs()),
    )
}

// ---- failures --------------------------------------------------------------------------

/// FAILURES.md §1 (OneDiff): a context-sized allocation on cuda:0 beside the main work.
fn stray_cuda0() -> Outcome {
    let b = CliBox::new("2x16GiB", &[]);
    let _h = hold(
        &b,
        &[],
        &[
            "--device",
            "1",
            "--size",
            &(8 * GIB).to_string(),
            "--context-on",
            "0",
        ],
    );
    case(
        "stray-context-on-cuda0",
        "shared/FAILURES.md §1 (siliconflow/onediff stray cuda:0 allocation)",
        &["stray-context"],
        scan(&b, &libs()),
    )
}

/// A forked DataLoader worker keeps its dead parent's memory (pytorch/pytorch#1085-style
/// "memory not freed after process exits"; NVML keeps listing the dead PID).
fn dead_parent_memory() -> Outcome {
    let b = CliBox::new("16GiB", &[]);
    let h = hold(&b, &[], &["--size", &(4 * GIB).to_string(), "--fork-child"]);
    let child = h.field("child").expect("child pid");
    h.kill();
    let found = scan(&b, &libs());
    // SAFETY: ending the forked child this case staged.
    unsafe { libc::kill(child as i32, libc::SIGKILL) };
    case(
        "dead-process-memory-kept-by-forked-child",
        "shared/FAILURES.md §4 (memory not released); NVML lists the exited PID",
        &["no-live-owner"],
        found,
    )
}

/// Two independent claimants fill one GPU (FAILURES.md §5: a second engine next to a first).
fn two_claimants() -> Outcome {
    let b = CliBox::new("16GiB", &[]);
    let size = (7 * GIB + GIB / 5).to_string();
    let _a = hold(&b, &[], &["--size", &size]);
    let _b = hold(&b, &[], &["--size", &size]);
    case(
        "two-claimants-share-a-full-gpu",
        "shared/FAILURES.md §5 (over-committed utilisation)",
        &["low-headroom"],
        scan(&b, &libs()),
    )
}

// ---- seen from a container (issue 25) ----------------------------------------------------

/// `vramdoc scan --json` through the real NVML backend over `libs`, run inside a fresh PID
/// namespace (`unshare --pid --fork --mount-proc`: a container without `hostPID`) on `b`,
/// beside its own `sim hold OWN_ARGS` started in that namespace.
fn scan_from_a_namespace(b: &CliBox, libs: &Path, own_args: &str) -> Vec<(String, String)> {
    let exe = env!("CARGO_BIN_EXE_vramdoc");
    let d = b.dir.display();
    let script = format!(
        "{exe} sim hold {own_args} --duration 60s > {d}/own.out 2>&1 & \
         i=0; while ! grep -q holding {d}/own.out; do \
           i=$((i+1)); [ $i -gt 200 ] && {{ cat {d}/own.out >&2; exit 90; }}; sleep 0.05; \
         done; \
         {exe} scan --backend real --json > {d}/scan.json; kill $!"
    );
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "sh", "-c", &script])
        .env("VRAMDOC_SIM_DIR", &b.dir)
        .env("LD_LIBRARY_PATH", libs)
        .env_remove("VRAMDOC_PIDNS")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("NVIDIA_VISIBLE_DEVICES")
        .output()
        .expect("unshare");
    common::assert_ok(&out, "unshare ... vramdoc scan");
    let text = std::fs::read_to_string(b.dir.join("scan.json")).expect("scan.json");
    findings_of(&serde_json::from_str(&text).expect("scan JSON"))
}

/// A container's job beside a neighbour outside its PID namespace: from 535.113 the driver
/// translates PIDs into the caller's namespace and drops the rest
/// (NVIDIA/open-gpu-kernel-modules `src/nvidia/src/kernel/gpu/gpu_rmapi.c` `_gpuConvertPid`
/// → `osFindNsPid`); to the 560 series the container's own entries carry 0 bytes
/// (NVIDIA/nvidia-container-toolkit#1013, 535.183.01: no process shown while 7 GiB is used);
/// from 565.57.01 with usage (`_gpuMatchClientPid`). Before 535.113 the neighbour is listed
/// under its host PID (NVIDIA/nvidia-docker#1483).
fn neighbour_outside_the_namespace(driver: &str, source: &str) -> Outcome {
    let b = CliBox::new("16GiB", &["--driver", driver]);
    let libs = b.libs();
    let _neighbour = hold(&b, &[], &["--size", &(6 * GIB).to_string()]);
    case(
        &format!("neighbour-outside-the-container-driver-{driver}"),
        source,
        &[],
        scan_from_a_namespace(&b, &libs, "--size 1GiB"),
    )
}

/// FAILURES.md §1 seen from inside the job's container: from 565.57.01 the container's own
/// entries carry their usage (gpu_rmapi.c `_gpuMatchClientPid`), so a stray context is still
/// decided there.
fn stray_context_from_the_container() -> Outcome {
    let b = CliBox::new("2x16GiB", &["--driver", "570.86.10"]);
    let libs = b.libs();
    let _neighbour = hold(
        &b,
        &[],
        &["--device", "1", "--size", &(4 * GIB).to_string()],
    );
    let own = format!("--device 1 --size {} --context-on 0", 8 * GIB);
    case(
        "stray-context-seen-from-a-container-driver-570.86.10",
        "shared/FAILURES.md §1; open-gpu-kernel-modules gpu_rmapi.c _gpuMatchClientPid (565.57.01)",
        &["stray-context"],
        scan_from_a_namespace(&b, &libs, &own),
    )
}

/// The host still sees host PIDs under every generation (the translation is for callers in
/// other namespaces, gpu_rmapi.c): a dead process's memory kept by a forked child is lost
/// memory on a 570 driver too.
fn dead_parent_memory_on_a_translating_driver() -> Outcome {
    let b = CliBox::new("16GiB", &["--driver", "570.86.10"]);
    let libs = b.libs();
    let h = hold(&b, &[], &["--size", &(4 * GIB).to_string(), "--fork-child"]);
    let child = h.field("child").expect("child pid");
    h.kill();
    let found = scan(&b, &libs);
    // SAFETY: ending the forked child this case staged.
    unsafe { libc::kill(child as i32, libc::SIGKILL) };
    case(
        "dead-process-memory-seen-from-the-host-driver-570.86.10",
        "shared/FAILURES.md §4; open-gpu-kernel-modules gpu_rmapi.c (host callers get host PIDs)",
        &["no-live-owner"],
        found,
    )
}

/// Issue 25: the node shapes as a container without `hostPID` sees them, on each driver
/// generation, and the host's view on a translating driver.
#[test]
fn node_shapes_seen_from_a_container() {
    common::skip::require!("unshare", common::skip::unshare());
    let outcomes = vec![
        neighbour_outside_the_namespace(
            "550.54.15",
            "NVIDIA/nvidia-container-toolkit#1013; open-gpu-kernel-modules gpu_rmapi.c _gpuConvertPid",
        ),
        neighbour_outside_the_namespace(
            "570.86.10",
            "open-gpu-kernel-modules gpu_rmapi.c _gpuConvertPid, _gpuMatchClientPid (565.57.01)",
        ),
        neighbour_outside_the_namespace("535.54.03", "NVIDIA/nvidia-docker#1483"),
        stray_context_from_the_container(),
        dead_parent_memory_on_a_translating_driver(),
    ];
    assert_clean("scan (seen from a container)", &outcomes);
}

#[test]
fn node_shapes() {
    let outcomes = vec![
        ddp(2, 10 * GIB),
        ddp(4, 8 * GIB),
        ddp(8, 4 * GIB),
        engine("16GiB", "0.9"),
        engine("h100", "0.95"),
        caching_allocator_full(),
        device_plugin("envvar", &[], &[]),
        device_plugin("envvar", &["--device-ids", "index"], &[]),
        device_plugin("volume-mounts", &[], &[]),
        device_plugin("mig", &[], &[]),
        device_plugin("cdi", &[], &[("CUDA_VISIBLE_DEVICES", "0")]),
        device_plugin("cdi", &["--cdi-env", "void"], &[]),
        coherent_after_exit(),
        monitors_beside_a_job(),
        compute_and_graphics(),
        pre_r510_driver(),
        rmm_managed(),
        two_engines_at_045(),
        gb10_job(),
        slurm_constrained_job("1"),
        slurm_constrained_job("0"),
        docker_device_with_image_cvd("cdi"),
        docker_device_with_image_cvd("envvar"),
        stray_cuda0(),
        dead_parent_memory(),
        two_claimants(),
    ];
    assert_clean("scan (node shapes)", &outcomes);
}
