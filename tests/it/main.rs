//! vramdoc's integration tests: one test binary (`it`), one module per area, sharing the
//! helpers in `common/`. tests/README.md describes the layout, how the simulated driver
//! libraries are built and found (`VRAMDOC_SIMGPU_DIR`, set by `scripts/test`), the
//! child-process harness, the polling helper and the skip policy (`VRAMDOC_ALLOW_SKIP`).
//!
//! One area: `scripts/test --test it scan::` (or `cargo test --test it scan::` with
//! `VRAMDOC_SIMGPU_DIR` set).

mod common;

/// The behaviour suite every driver backend passes (sim in-process, cudarc over simgpu).
mod backends;
/// CI outputs: JUnit, the GitHub job summary, completions and man page.
mod ci;
/// The labelled corpus of job and node shapes: every rule's acceptance test.
mod corpus;
/// The shipped Kubernetes manifests: kustomize overlays, API schemas, each platform's mounts.
mod deploy;
/// A process's device set: minor numbers permuted against PCI order, Slurm's GPUs,
/// containers' device files, and `stray-context` on them (issue 25).
mod devsets;
/// `vramdoc explain` (PyTorch allocator snapshots, the restricted pickle reader) and
/// `run --torch-memory` (issue 27).
mod explain;
/// Every built-in scenario's bug fires its fingerprint; no fix does.
mod fingerprints;
/// Bounded fuzzing of the scenario parser and the report reader.
mod fuzz_inputs;
/// The shipped Grafana dashboard: its queries parse and read only exported metrics.
mod gpu_check;
mod grafana;
/// Untrusted input, secrets, escapes, signals, exit codes, the box under misuse.
mod hardening;
/// The flight recorder: `serve --incidents`, `vramdoc incidents`, `sim fault --xid`.
mod holders;
mod incidents;
/// Memory that is not lost: managed memory, GB10, coherent pages, low headroom on change.
mod memacct;
/// MIG: `sim init --mig`, per-instance scan rows and headroom, a container given an instance.
mod mig;
/// `NvmlMonitor` over the simulated libnvidia-ml.so.1, and that library's C ABI.
mod nvml_backend;
/// NVIDIA's Python NVML bindings read the box as vramdoc does.
mod nvml_python;
/// `vramdoc plan vllm`: will an inference server start beside the GPU's neighbours (issue 35).
mod plan;
/// `plan vllm` against real vLLM start-up logs: the published error table (issue 35).
mod plan_corpus;
/// Pod attribution: kubepods cgroups, the kubelet's log directories and pod-resources gRPC.
mod pods;
/// `vramdoc preflight`: GPUs checked before a job starts.
mod preflight;
/// Real-driver behaviours the simulator models, seen by third-party clients and by vramdoc.
mod real_drivers;
/// The recorder: hung and bad GPUs, processes in two lists, observer cost, long jobs.
mod recorder;
/// `vramdoc replay` and `vramdoc list`.
mod replay;
/// `vramdoc report`: re-rendering saved reports.
mod report_cli;
/// Renderers: Markdown snapshots, hostile text, headless Chromium.
mod report_render;
/// The report JSON Schema stays current and validates.
mod report_schema;
/// Record once, replay anywhere: `scenario from`, `run --scenario-out`, `--sim recorded`, `whatif`.
mod repro;
/// `vramdoc run -- CMD`.
mod run_cli;
/// The I/O of `vramdoc run`: pass-through, slow readers, `kill -9`, markers, output paths.
mod run_io;
/// Jobs where they really run (issue 17): process groups, outliving processes, containers, attach, --live.
mod run_jobs;
mod run_pty;
/// `vramdoc scan`.
mod scan;
// Which NVML process lists scan reads (issue 24).
mod scan_lists;
/// `vramdoc serve` and `scan --prom`, scraped by a real Prometheus.
mod serve;
/// `vramdoc serve` on real nodes: slow clients, NVML lost and found, node name, signals.
/// `serve --web.config.file`: TLS, client certificates and basic authentication.
mod serve_auth;
mod serve_fleet;
/// `vramdoc sim ...`.
mod sim_cli;
/// The simulated machine through third-party clients (pynvml, ctypes, cuda-python, nvitop, gpustat).
mod simulator_clients;
/// What the host hands vramdoc: names and arguments that are not UTF-8, secret shapes in argv,
/// a marker path that is not a file (issue 19).
mod torch;
mod untrusted_host;
/// Where vramdoc stands (issue 25): scans from inside a PID namespace on each driver generation.
mod vantage;
