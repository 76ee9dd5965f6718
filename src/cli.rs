//! Command-line interface (clap). Every subcommand's flags live here; behaviour lives in
//! `commands/`.

use clap::{Args, Parser, Subcommand, ValueEnum};

mod explain;
mod incidents;
mod plan;
mod pods;
mod replay;
mod scenario;
mod sim;
pub use explain::ExplainArgs;
pub use incidents::*;
pub use plan::{KvCacheDtype, PlanCommand, VllmPlanArgs};
pub use pods::PodArgs;
pub use replay::ReplayArgs;
pub use scenario::{ScenarioCommand, ScenarioFromArgs, WhatifArgs};
pub use sim::*;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// `vramdoc serve`'s default address: loopback only.
/// Port 10042: outside Prometheus' fully allocated 9100-9999 exporter range and free in its
/// list of exporters beyond it (docs/fleet.md, "Port").
pub const DEFAULT_LISTEN: &str = "127.0.0.1:10042";

/// Diagnose and reproduce GPU memory (VRAM) failures.
///
/// vramdoc shows who holds which GPU memory and what is wrong with it (`scan`), replays
/// documented VRAM failures with and without their fix (`replay`), and writes reports to
/// attach to bug tickets. Without a GPU, run any command on a simulated machine with
/// `--sim SPEC` (e.g. `--sim 2x24GiB`, `--sim h100`).
#[derive(Debug, Parser)]
#[command(
    name = "vramdoc",
    version,
    propagate_version = true,
    max_term_width = 100
)]
#[command(
    after_help = "Exit codes: 0 ok, 1 findings or unexpected replay, 2 usage or bad input, 3 environment (no driver, no device).\n\nExamples:\n  vramdoc --sim 2x24GiB scan\n  vramdoc scan --fail-on warn --json\n  vramdoc --sim 2xrtx3090 replay stray-cuda0"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args, Clone)]
pub struct GlobalArgs {
    /// Run on a fresh private simulated box, e.g. `2x24GiB`, `h100`, `rtx3090,rtx3090`, `4xt4`
    /// (see `vramdoc sim presets`); `recorded`: the box a converted scenario was recorded on
    /// (docs/repro.md)
    #[arg(long, global = true, value_name = "SPEC")]
    pub sim: Option<String>,

    /// Which GPU backend to use: `auto` picks the simulator when --sim or VRAMDOC_SIM_DIR is
    /// set and the real CUDA/NVML libraries otherwise
    #[arg(long, global = true, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Auto,
    /// In-process simulator over the box in VRAMDOC_SIM_DIR (or --sim)
    Sim,
    /// cudarc + nvml-wrapper over libcuda.so and libnvidia-ml.so.1
    Real,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show who holds which GPU memory, and what is wrong with it
    Scan(ScanArgs),
    /// Check that the GPUs a job was given are clean before it starts (Slurm prolog, Node
    /// Problem Detector)
    ///
    /// Refuses a GPU on which another process holds memory, one holding a dead process's
    /// memory (memory with no live owner), a lost or unreadable GPU, and, with --need, one
    /// with less free memory than that. The GPUs are --gpus, else the first of
    /// SLURM_STEP_GPUS, SLURM_JOB_GPUS, GPU_DEVICE_ORDINAL, CUDA_VISIBLE_DEVICES,
    /// NVIDIA_VISIBLE_DEVICES that is set (physical indices or GPU UUIDs), else every GPU.
    /// With no GPU named (a node check) another live process is no problem; for a job it is,
    /// after --grace, unless the scheduler shares the GPU (SLURM_SHARDS_ON_NODE, MPS,
    /// time-slicing `::N` ids, or --shared). A graphics client (a display server: NVML's
    /// graphics list only, no CUDA context) passes with a note, unless --strict-graphics.
    /// Prints one line. See docs/fleet.md.
    #[command(
        after_help = "Exit codes: 0 ok, 1 problem (the line says which GPU and why), 2 unknown (the GPU list cannot be resolved, bad flags), 3 environment (no driver). Node Problem Detector reads 0/1/other the same way; a Slurm prolog that exits non-zero drains the node.\n\nExamples:\n  vramdoc preflight\n  vramdoc preflight --gpus 0,1 --need 20GiB\n  SLURM_JOB_GPUS=2,3 vramdoc preflight --json\n  vramdoc preflight --strict-graphics   (refuse a GPU a display server uses too)\n  vramdoc preflight --shared   (a Slurm Prolog on a node with gres/shard)"
    )]
    Preflight(PreflightArgs),
    /// Plan an inference server on the GPUs as they are now: will it start, with which flags
    #[command(subcommand)]
    Plan(PlanCommand),
    /// List the built-in failure scenarios
    #[command(after_help = "Examples:\n  vramdoc list\n  vramdoc list --json")]
    List(ListArgs),
    /// Replay failure scenarios (bug and fix variants) while sampling memory
    ///
    /// Each variant runs as a worker process next to the scenario's neighbour processes; a
    /// background sampler reads every GPU's memory. Verdicts: reproduced (bug shown), fixed
    /// (fix met its expectations), unexpected, skipped (too few GPUs). See docs/replay.md and,
    /// for writing your own scenario files, docs/scenarios.md.
    ///
    /// Your own reproduction replays as a scenario too: `replay --expect FINGERPRINT [--fix
    /// ARGS]... -- CMD` watches CMD as `vramdoc run` does (on a simulated box, an unmodified
    /// PyTorch job runs on the simulated driver with its own allocator) and checks that the
    /// fingerprint fires; each --fix runs the command again with those arguments or
    /// NAME=VALUE settings and checks that it exits 0 and the fingerprint stays silent. The
    /// command comes from the command line only: a scenario file never runs anything.
    #[command(
        after_help = "Exit codes: 0 every variant as expected, 1 not (or killed, interrupted, skipped with --require), 2 bad scenario or flags, 3 environment (no driver, or GPUs busy with other processes and no --force); with a command: 125 vramdoc could not watch it, 126 not executable, 127 not found.\n\nExamples:\n  vramdoc --sim 2x16GiB replay stray-cuda0\n  vramdoc replay all --force --step-timeout 30s\n  vramdoc replay --all --variant bug   (every scenario's bug variant)\n  vramdoc replay multi-size-oom --variant bug --period 1ms\n  vramdoc replay stray-cuda0 overcommit --out replay.json --require\n  vramdoc replay ./my-scenario.toml --json\n  vramdoc replay all --out replay.html --junit junit.xml   (CI: see docs/ci.md)\n  \
vramdoc --sim 2xh100@580 replay --expect stray-context --fix=--fixed -- python repro.py\n  \
vramdoc --sim 2xh100@580 replay --expect stray-context --fix CUDA_VISIBLE_DEVICES=1 --junit j.xml -- python repro.py"
    )]
    Replay(ReplayArgs),
    /// Run your own command and record its GPU memory, then name the failure it hit
    ///
    /// Starts CMD (stdin, stdout and stderr pass through), records every device's memory and
    /// the per-process usage of the job: the command's whole process tree, the containers it
    /// starts (found through their new cgroups) and processes carrying its $VRAMDOC_MARKERS
    /// or Slurm step. Recognises out-of-memory lines in its stderr, and decides findings on
    /// the timeline (out-of-memory, stray-context, growth-without-release, not-released,
    /// double-load, overcommit, held-after-exit, outlived-command). Signals sent to vramdoc
    /// reach the job's whole process group, as with `timeout`. Label phases from the job
    /// with `vramdoc mark TEXT` or by appending a line to the file in $VRAMDOC_MARKERS. Or
    /// attach to a job that runs already: --pid, --cgroup, --container. See docs/run.md.
    ///
    /// On a simulated box (--sim SPEC or VRAMDOC_SIM_DIR) the job gets the simulated driver
    /// first on its LD_LIBRARY_PATH, so an unmodified CUDA program runs on the box: PyTorch
    /// from PyPI with its own caching allocator, cuBLAS and cuDNN (give the box a driver of CUDA
    /// 13 for today's builds: `--sim 2xh100@580`, or `sim init SPEC --driver 580`). Allocation sizes and order, contexts, caching,
    /// fragmentation and PyTorch's out-of-memory error are PyTorch's own; tensor values (zeros),
    /// data-dependent shapes, timings and benchmarked algorithm choices are not
    /// (docs/simulator.md, "An unmodified CUDA runtime").
    #[command(
        after_help = "Exit status: the command's own (128+N when killed by signal N), as `time` \
and `timeout` do; 1 instead of 0 when --fail-on is met; 125 vramdoc itself failed (bad flags, \
no GPU, report not writable), 126 CMD found but not executable, 127 CMD not found.\n\n\
Examples:\n  vramdoc run -- python train.py --epochs 3\n  \
vramdoc run --out run.html --out run.json -- torchrun --nproc-per-node 2 train.py\n  \
vramdoc run --samples run.jsonl --fail-on warn -- vllm serve my-model\n  \
vramdoc --sim 2x16GiB run -- vramdoc sim hold --size 4GiB --duration 1s\n  \
vramdoc --sim 2xh100@580 run -- python train.py   (your PyTorch job on a simulated box)\n  \
vramdoc run --out run.html --junit junit.xml --fail-on warn -- ./train.sh   (CI: docs/ci.md)\n  \
vramdoc run --kill-after 10s -- sh -c 'python train.py & python eval.py'\n  \
vramdoc run --pid 4242 --duration 2h --out server.html   (attach to a running server)\n  \
vramdoc run --live -- docker run --gpus all img python train.py   (docs/run.md: containers)\n\n\
Markers, from the job:\n  echo \"release model\" >> \"$VRAMDOC_MARKERS\"\n  \
vramdoc mark load 1024x1024"
    )]
    Run(RunArgs),
    /// Add a marker to the timeline of the `vramdoc run` this process runs under
    #[command(
        after_help = "Writes TEXT as one line to the file named by $VRAMDOC_MARKERS (set by \
`vramdoc run` for the command it starts). A marker starting with `release` says the job has \
released what it loaded (drives the not-released finding).\n\n\
Examples:\n  vramdoc mark load model\n  vramdoc mark release model\n  \
vramdoc mark --pid 4242 reload weights   (a recording attached with `vramdoc run --pid 4242`)\n\n\
From Python:\n  open(os.environ[\"VRAMDOC_MARKERS\"], \"a\").write(\"release model\\n\")"
    )]
    Mark(MarkArgs),
    /// Re-render a saved JSON report as Markdown or HTML
    Report(ReportArgs),
    /// Explain a PyTorch out-of-memory from the allocator's own snapshot
    ///
    /// SNAPSHOT is the pickle `torch.cuda.memory._dump_snapshot` writes (or `run
    /// --torch-memory` keeps). Read by a restricted reader that runs nothing from it. Says per
    /// device what was requested, reserved, allocated and cached free, the cause those numbers
    /// decide, the Python sites holding the memory and the fix (docs/explain.md).
    #[command(
        after_help = "Exit codes: 0 explained, 2 the file is not a snapshot, is too large, or names a global (refused: nothing runs).\n\n\
Examples:\n  vramdoc explain oom_snapshot.pickle\n  vramdoc explain snap.pickle --json\n  \
vramdoc explain snap.pickle --out oom.html --device-total 24GiB"
    )]
    Explain(ExplainArgs),
    /// Create and inspect simulated GPU boxes
    ///
    /// A box is a simulated GPU machine in a directory, shared by every process that sets
    /// VRAMDOC_SIM_DIR: vramdoc, `sim hold` neighbours, containers of its runtime (`sim run`),
    /// and any CUDA or NVML client loading the simulated libcuda.so / libnvidia-ml.so.1 (`sim
    /// libs`). See docs/simulator.md.
    #[command(
        subcommand,
        after_help = "Examples:\n  export VRAMDOC_SIM_DIR=$(vramdoc sim init 2xh100)\n  \
vramdoc sim hold --size 20GiB &                 # a neighbour on GPU 0\n  \
vramdoc sim run --gpus 1 --strategy volume-mounts -- python train.py   # a container\n  \
vramdoc sim fault --lose-device 1               # GPU 1 falls off the bus\n  \
vramdoc sim libs /tmp/simlib && LD_LIBRARY_PATH=/tmp/simlib nvitop --once\n  \
vramdoc sim status --calls                      # what nvitop cost the driver"
    )]
    Sim(SimCommand),
    /// Serve Prometheus metrics: memory, findings and vLLM headroom of every GPU
    ///
    /// Collects on its own cadence (the same reading and diagnosis as `scan`) and answers
    /// `GET /metrics` and `GET /healthz` from the last collection. Metrics and deployment
    /// (DaemonSet, systemd, alert rules) are documented in docs/fleet.md.
    #[command(
        after_help = "Exit codes: 0 stopped by SIGTERM or Ctrl-C, 2 bad flags, 3 environment \
(address in use). Without a driver or a GPU it keeps serving `vramdoc_collect_success 0` and \
reads the GPUs once NVML works.\n\nExamples:\n  vramdoc serve\n  \
vramdoc serve --listen 0.0.0.0:10042 --interval 30s\n  vramdoc serve --per-process\n  \
vramdoc serve --incidents /var/lib/vramdoc/incidents   (GPU failures become incidents: docs/fleet.md)\n  \
curl -s http://127.0.0.1:10042/metrics | grep vramdoc_findings"
    )]
    Serve(ServeArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    #[command(
        after_help = "Examples:\n  vramdoc completions bash > /etc/bash_completion.d/vramdoc\n  \
vramdoc completions zsh > \"${fpath[1]}/_vramdoc\"\n  \
vramdoc completions fish > ~/.config/fish/completions/vramdoc.fish"
    )]
    Completions(CompletionsArgs),
    /// Print the man page (roff), generated from these definitions
    #[command(
        after_help = "Examples:\n  vramdoc man > /usr/local/share/man/man1/vramdoc.1\n  vramdoc man | man -l -"
    )]
    Man,
    /// Make reproductions from recordings (`scenario from REPORT`)
    ///
    /// Turns a `vramdoc run` recording into a scenario file that replays the job's memory
    /// behaviour without its model, data or GPUs: attach it to a ticket, replay it anywhere.
    /// See docs/repro.md.
    #[command(
        subcommand,
        after_help = "Examples:\n  vramdoc scenario from job.json --out repro.toml\n  \
vramdoc scenario from job.jsonl --out repro.toml   (the --samples stream, also after a crash)\n  \
vramdoc replay repro.toml --sim recorded\n  vramdoc whatif repro.toml --on t4,l4,a100-80gb,h100,2xh100"
    )]
    Scenario(ScenarioCommand),
    /// Read the incidents `vramdoc serve --incidents DIR` recorded (list, show ID)
    ///
    /// Each incident is one GPU failure on the node with the pod, the recognised line, the
    /// findings, the memory timeline before it and a replayable scenario. See docs/fleet.md.
    #[command(
        subcommand,
        after_help = "Exit codes: 0 ok, 2 bad id or not an incident file.\n\nExamples:\n  \
vramdoc incidents list --dir /var/lib/vramdoc/incidents\n  \
vramdoc incidents show 20261127T215700Z-out-of-memory-1 --markdown\n  \
vramdoc incidents show ID --scenario > repro.toml && vramdoc replay repro.toml --sim recorded"
    )]
    Incidents(IncidentsCommand),
    /// Would it fit on ...? A scenario's bug, or your own command, on several simulated boxes
    ///
    /// With a scenario (e.g. one made by `vramdoc scenario from`): runs its `bug` variant on a
    /// fresh simulated box per spec, in parallel where the machine has the cores, and prints
    /// per box whether the recorded failure reproduces, whether every step fits, and each
    /// GPU's peak and headroom; then the smallest box it fits on.
    ///
    /// With a command after `--` (fit by execution): runs it on a fresh simulated box of each
    /// spec, one after the other, with the simulated driver in its environment. An unmodified
    /// PyTorch runs there with its own caching allocator, so whether it fits is decided by
    /// PyTorch itself; where it does not, the row quotes the job's own error
    /// (`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...`). Kernels compute
    /// nothing and tensors read back zeros: sizes, order, caching and fragmentation are the
    /// program's own; timings, values and data-dependent shapes are not. The job's output
    /// passes through on stderr. See docs/repro.md.
    #[command(
        after_help = "Exit codes: 0 every box ran (it may not fit on some: see the table), 1 a box could not be run (its row says why), 2 bad scenario, box spec or command.\n\n\
Examples:\n  vramdoc whatif repro.toml --on t4,l4,a100-80gb,h100,2xh100\n  \
vramdoc whatif repro.toml --on recorded,2xrtx4090,h100 --json\n  vramdoc whatif multi-size-oom --on t4,l4\n  \
vramdoc whatif --on t4,l4,a100-80gb -- python train.py --batch 32"
    )]
    Whatif(WhatifArgs),
    /// Internal: a replay worker (reads a plan as JSON on stdin, prints events)
    #[command(name = "__worker", hide = true)]
    Worker,
    /// Internal: passes a `vramdoc run` job's output through (started by `vramdoc run`)
    #[command(name = "__pump", hide = true)]
    Pump(PumpArgs),
}

#[derive(Debug, Args)]
pub struct PumpArgs {
    /// The marker directory to remove when vramdoc is gone at the end of the output
    #[arg(long, value_name = "DIR")]
    pub marker_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PreflightArgs {
    /// The GPUs to check: physical indices or GPU UUIDs (unique prefixes), comma-separated,
    /// or `all` (default: from the job's environment, see above)
    #[arg(long, value_name = "LIST")]
    pub gpus: Option<String>,
    /// Also refuse a GPU with less free memory than this (e.g. 20GiB, 512MiB)
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub need: Option<u64>,
    /// Print the verdict as JSON (selection, need, problems)
    #[arg(long)]
    pub json: bool,
    /// How long other processes on the job's GPUs may take to go away (a previous job
    /// tearing down) before they are a problem, 0s to 60s
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "2s",
        value_parser = duration_within(Duration::ZERO, Duration::from_secs(60), " (default 2s)")
    )]
    pub grace: Duration,
    /// Refuse a job's GPU that a graphics client uses too (a display server such as Xorg:
    /// NVML's graphics list only, no CUDA context), as any other process; by default it
    /// passes with a note
    #[arg(long)]
    pub strict_graphics: bool,
    /// The site shares these GPUs between jobs (Slurm shards, MPS, time-slicing): other
    /// processes are no problem, as without a job. Slurm's Prolog does not get
    /// SLURM_SHARDS_ON_NODE, so a prolog on a node with gres/shard needs this flag
    #[arg(long)]
    pub shared: bool,
}

fn size_arg(s: &str) -> Result<u64, String> {
    vramdoc_gpu_spec::units::parse_size(s).map_err(|e| format!("{e} (e.g. 20GiB, 512MiB)"))
}

#[derive(Debug, Args)]
#[command(
    after_help = "Findings: stray-context, no-live-owner, invisible-processes, \
usage-unavailable, low-headroom, duplicate-copy (see docs/scan.md); on Kubernetes nodes \
unallocated-gpu-use, pod-allocation-unknown (docs/fleet.md).\n\
Exit codes: 0 ok, 1 a finding at or above --fail-on, 2 usage, 3 environment.\n\n\
Examples:\n  vramdoc scan\n  vramdoc scan --json > scan.json\n  \
vramdoc scan --fail-on warn --out scan.md\n  vramdoc --sim 2x24GiB scan\n  \
vramdoc scan --prom /var/lib/node_exporter/textfile/vramdoc.prom",
    // Each command's help speaks of that command (issue 39 item 7).
    mut_arg("json", |a| a.help("Print the scan report as JSON on standard output (versioned; fields in docs/json.md) instead of the summary")),
    mut_arg("out", |a| a.help("Also write the scan report; the format follows the extension (.json, .md, .html; .csv: the findings); repeat for several formats. Checked before the scan")),
    mut_arg("force", |a| a.help("Overwrite --out files that exist")),
    mut_arg("allocation_idle_after", |a| a.hide(true)),
)]
pub struct ScanArgs {
    #[command(flatten)]
    pub output: OutputArgs,
    /// Print Markdown, ready to paste into a ticket
    #[arg(long, conflicts_with = "json")]
    pub markdown: bool,
    /// Exit 1 when a finding at or above this severity exists
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub fail_on: Option<Severity>,
    /// Also write the metrics `vramdoc serve` exports to this file (atomically, replacing
    /// it), for node_exporter's textfile collector; the name must end in `.prom`
    #[arg(long, value_name = "FILE")]
    pub prom: Option<PathBuf>,
    /// With --prom: also export per-process memory (`vramdoc_process_gpu_memory_bytes`)
    #[arg(long, requires = "prom")]
    pub per_process: bool,
    /// Read NVML's graphics and MPS process lists of every GPU too (by default only where
    /// the compute list leaves used memory unexplained; each list costs ~4.5 ms)
    #[arg(long)]
    pub all_lists: bool,
    #[command(flatten)]
    pub pods: PodArgs,
}

pub use crate::model::Severity;

/// The report outputs of `scan`, `replay`, `run` and `explain` (one struct; its paths are
/// checked before any work by `report::sink::Sink::new`). Each command words its help for
/// itself (`mut_arg` on its own flags).
#[derive(Debug, Args, Clone)]
pub struct OutputArgs {
    /// Print the JSON report on standard output (versioned; fields in docs/json.md) instead
    /// of the summary (`run`: at the end, the summary and the command's own standard output
    /// then go to stderr)
    #[arg(long)]
    pub json: bool,
    /// Also write a report; the format follows the extension (.json, .md, .html; .csv: the findings); repeat for
    /// several formats. Checked before any work is done
    #[arg(long, value_name = "FILE")]
    pub out: Vec<PathBuf>,
    /// Overwrite output files that exist (--out, --junit, --samples, --scenario-out); for
    /// `replay`, also replay on GPUs other processes are using (refused without it, exit 3:
    /// it would disturb their work and their memory would distort the replay's numbers)
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on; loopback by default, `0.0.0.0:10042` (or the pod IP) to be
    /// scraped from other hosts
    #[arg(long, default_value = DEFAULT_LISTEN, value_name = "ADDR", value_parser = listen_addr)]
    pub listen: SocketAddr,
    /// Time between collections (process lists included), 100ms to 1h; scrapes never
    /// trigger one
    #[arg(
        long,
        default_value = "15s",
        value_name = "DURATION",
        value_parser = duration_within(Duration::from_millis(100), Duration::from_secs(3600), " (default 15s)")
    )]
    pub interval: Duration,
    /// Also export per-process memory (`vramdoc_process_gpu_memory_bytes{gpu, uuid, pid,
    /// comm}`; one series per process: opt-in)
    #[arg(long)]
    pub per_process: bool,
    #[command(flatten)]
    pub pods: PodArgs,
    /// The node's name, the `hostname` label of every series (as dcgm-exporter's
    /// `Hostname`); default: the NODE_NAME environment variable (a DaemonSet sets it from
    /// `spec.nodeName`), else the host name
    #[arg(long, value_name = "NAME", value_parser = node_name)]
    pub node_name: Option<String>,
    /// Shut NVML down after every collection and initialise it again for the next: costs an
    /// NVML init per collection, but never holds the driver open between collections (driver
    /// upgrades and `nvidia-smi --gpu-reset` need it closed)
    #[arg(long)]
    pub release_between: bool,
    /// TLS and basic authentication as Prometheus exporters take them: a web configuration
    /// file in the exporter-toolkit format (`tls_server_config` with `cert_file`/`key_file`
    /// and optional `client_ca_file`, `basic_auth_users` with bcrypt hashes; docs/fleet.md
    /// "TLS and authentication"). Checked on every connection and read again when it or a
    /// file it names changes; wrong or missing credentials get 401
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,
    #[command(flatten)]
    pub incidents: IncidentFlags,
}

/// A node name: 1 to 253 printable ASCII characters, as Kubernetes node names are.
fn node_name(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 253 || !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("1 to 253 printable ASCII characters".into());
    }
    Ok(s.to_string())
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to generate for
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("attach").args(["pid", "cgroup", "container"]).multiple(true))]
#[command(
    mut_arg("json", |a| a.help("Print the run report as JSON on standard output when the command ends (versioned; fields in docs/json.md); the summary and the command's own standard output then go to stderr")),
    mut_arg("out", |a| a.help("Also write the run report; the format follows the extension (.json, .md, .html with the memory timeline; .csv: the findings); repeat for several formats. Checked before the command starts")),
    mut_arg("force", |a| a.help("Overwrite output files that exist (--out, --junit, --samples, --scenario-out)")),
)]
pub struct RunArgs {
    /// Memory sampling period (e.g. 50ms, 1s; 1ms to 60s)
    #[arg(
        long,
        default_value = "100ms",
        value_name = "DURATION",
        value_parser = duration_within(Duration::from_millis(1), Duration::from_secs(60), " (default 100ms)")
    )]
    pub period: Duration,
    /// Period of the process-tree scan and of the per-process lists, which are read then only
    /// on GPUs where they can have changed (memory moved, a job process started or exited)
    /// and at least every 10s (graphics/MPS lists: 30s) to keep the driver's lock free
    /// (10ms to 60s)
    #[arg(
        long,
        default_value = "500ms",
        value_name = "DURATION",
        value_parser = duration_within(Duration::from_millis(10), Duration::from_secs(60), " (default 500ms)")
    )]
    pub process_period: Duration,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Turn the command's exit status 0 into 1 when a finding at or above this severity exists
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub fail_on: Option<Severity>,
    /// Stream every sample, process, marker and error to this JSONL file as it is taken
    #[arg(long, value_name = "FILE.jsonl")]
    pub samples: Option<PathBuf>,
    /// Also write JUnit XML for CI: one test case, a failure (with the evidence) when the
    /// command failed or a finding reaches --fail-on. Checked before the command starts
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Also write a reproduction of the job's memory behaviour: a scenario file with sizes
    /// and redacted marker texts only, to replay anywhere (docs/repro.md). Checked before the
    /// command starts
    #[arg(long, value_name = "FILE.toml")]
    pub scenario_out: Option<PathBuf>,
    // --- Issue 17: signals, outliving processes, attach, live status (docs/run.md).
    /// After the command ends, end its processes still holding GPU memory: SIGTERM, then
    /// SIGKILL this long after (as `timeout -k`). Without it they are reported, not ended
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = duration_within(Duration::ZERO, Duration::from_secs(3600), ""),
        conflicts_with_all = ["pid", "cgroup", "container"]
    )]
    pub kill_after: Option<Duration>,
    /// Attach: record this running process and its descendants (no CMD) until it exits,
    /// --duration passes or vramdoc gets Ctrl-C/SIGTERM; markers through `vramdoc mark --pid`
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Attach: record the processes of this cgroup (as /proc/PID/cgroup shows it, e.g.
    /// /docker/ID, or its directory under /sys/fs/cgroup)
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// Attach: record the processes of this container (its id, at least 12 hex digits)
    #[arg(long, value_name = "ID")]
    pub container: Option<String>,
    /// Attach: stop recording after this long (e.g. 10m, 2h)
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = duration_within(Duration::from_millis(1), Duration::from_secs(30 * 24 * 3600), ""),
        requires = "attach"
    )]
    pub duration: Option<Duration>,
    /// Draw a one-line live status (peak so far per GPU) on the terminal, redrawn in place;
    /// off when stderr is not a terminal
    #[arg(long)]
    pub live: bool,
    /// Give the job pipes for stdout and stderr even where vramdoc's are terminals (by
    /// default the job writes to a pseudo-terminal there, so it sees a terminal as it would
    /// without vramdoc: line-buffered output, colours, progress bars; docs/run.md "Output")
    #[arg(long, conflicts_with = "attach")]
    pub no_pty: bool,
    /// The command to run, after `--` (none when attaching with --pid/--cgroup/--container)
    #[arg(
        last = true,
        required_unless_present_any = ["pid", "cgroup", "container"],
        conflicts_with_all = ["pid", "cgroup", "container"],
        value_name = "CMD",
        value_parser = clap::value_parser!(std::ffi::OsString)
    )]
    pub command: Vec<std::ffi::OsString>,
    /// The kubelet's pod log directory, which names the pods the job's processes run in
    #[arg(long, value_name = "DIR", default_value = crate::host::kubelet::DEFAULT_POD_LOG_DIR)]
    pub pod_log_dir: PathBuf,
    /// Inject code into the job's Python processes (a sitecustomize on PYTHONPATH; inert
    /// without torch and CUDA) that records PyTorch's allocator history and dumps a snapshot
    /// at an out-of-memory error; the out-of-memory finding then carries its explanation and
    /// the snapshot is kept next to the first --out report (docs/explain.md)
    #[arg(long, conflicts_with = "attach")]
    pub torch_memory: bool,
    /// History entries the allocator keeps with --torch-memory (its `max_entries`)
    #[arg(long, value_name = "N", default_value_t = crate::explain::inject::DEFAULT_MAX_ENTRIES, requires = "torch_memory")]
    pub torch_memory_entries: u64,
}

#[derive(Debug, Args)]
pub struct MarkArgs {
    /// Mark the recording attached to this process (`vramdoc run --pid PID`) instead of
    /// the one in $VRAMDOC_MARKERS
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// The marker's text (words are joined by spaces)
    #[arg(required = true, value_name = "TEXT")]
    pub text: Vec<String>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "The JSON report is the source of truth (docs/json.md, schema in \
docs/report.schema.json); Markdown fits a GitHub issue, HTML is one self-contained page with a \
memory chart per device. Bad input exits 2.\n\nExamples:\n  \
vramdoc report run.json --format md > ticket.md\n  \
vramdoc report run.json --format html --out run.html\n  \
vramdoc report run.json --format html --out run.html --force"
)]
pub struct ReportArgs {
    /// A JSON report written by `scan --out` or `replay --out`
    pub input: PathBuf,
    /// Output format: `md` (for a GitHub issue), `html` (one self-contained page with charts)
    /// or `json` (the report again, re-redacted)
    #[arg(long, value_enum)]
    pub format: ReportFormat,
    /// Write here instead of standard output
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Overwrite --out if it exists
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Json,
    Md,
    Html,
    /// The findings, one CSV row each
    Csv,
}

/// Clap value parser for a duration flag: `500us`, `4.5ms`, `2s`, `1m`, `1h`, `1h30m`
/// ([`crate::units::parse_duration`]).
pub fn duration(s: &str) -> Result<Duration, String> {
    crate::units::parse_duration(s).map_err(|e| e.to_string())
}

/// Clap value parser for a duration flag within `min..=max` (`Duration::MAX`: no upper
/// bound); `note` ends the message of a value out of range, e.g. `" (default 15s)"`. Bounds
/// are written as [`crate::units::format_duration`] writes them, except that whole seconds
/// up to a minute stay seconds (`60s`, not `1m`).
pub fn duration_within(
    min: Duration,
    max: Duration,
    note: &'static str,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    fn f(d: Duration) -> String {
        if d.subsec_nanos() == 0 && (1..=60).contains(&d.as_secs()) {
            format!("{}s", d.as_secs())
        } else {
            crate::units::format_duration(d)
        }
    }
    move |s: &str| {
        let d = duration(s)?;
        if (min..=max).contains(&d) {
            return Ok(d);
        }
        Err(match (min.is_zero(), max == Duration::MAX) {
            (true, _) => format!("at most {}{note}", f(max)),
            (false, true) => format!("choose at least {}{note}", f(min)),
            (false, false) => format!("choose between {} and {}{note}", f(min), f(max)),
        })
    }
}

/// Clap value parser for `--listen`: `HOST:PORT`, resolved now (the first address).
pub fn listen_addr(s: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let bad = |why: String| format!("{why}; write e.g. {DEFAULT_LISTEN}");
    let mut addrs = s.to_socket_addrs().map_err(|e| bad(e.to_string()))?;
    addrs
        .next()
        .ok_or_else(|| bad("resolves to no address".into()))
}

/// The exit status of a command line clap refused: `vramdoc run`'s usage errors exit 125
/// (never a status the command could have), every other command's 2. Which subcommand it
/// was is what clap itself matched, read leniently.
pub fn usage_error_status<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matched = <Cli as clap::CommandFactory>::command()
        .ignore_errors(true)
        .try_get_matches_from(args);
    match matched.as_ref().ok().and_then(|m| m.subcommand_name()) {
        Some("run") => crate::exit::RUN_FAILED,
        _ => crate::exit::USAGE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_errors_of_run_are_recognised_from_what_clap_matched() {
        assert_eq!(
            usage_error_status(["vramdoc", "run", "--nope", "--", "x"]),
            125
        );
        assert_eq!(
            usage_error_status(["vramdoc", "--sim", "h100", "run", "--period"]),
            125
        );
        assert_eq!(usage_error_status(["vramdoc", "--backend=sim", "run"]), 125);
        // A duration clap's value parser refuses (out of range, or not a duration).
        for period in ["61s", "fast"] {
            let args = ["vramdoc", "run", "--period", period, "--", "true"];
            assert_eq!(usage_error_status(args), 125, "{period}");
        }
        assert_eq!(
            usage_error_status(["vramdoc", "replay", "all", "--period", "2s"]),
            2
        );
        assert_eq!(usage_error_status(["vramdoc", "scan", "--nope"]), 2);
        assert_eq!(usage_error_status(["vramdoc", "--sim", "run"]), 2);
        assert_eq!(usage_error_status(["vramdoc"]), 2);
    }

    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("vramdoc").chain(args.iter().copied()))
    }

    #[test]
    fn duration_flags_are_typed_and_bounded() {
        let Command::Serve(s) = parse(&["serve", "--interval", "1h"]).unwrap().command else {
            panic!("not serve");
        };
        assert_eq!(
            s.interval,
            Duration::from_secs(3600),
            "issue 19: 1h as 3600s"
        );
        assert_eq!(s.listen.to_string(), DEFAULT_LISTEN);
        let Command::Serve(s) = parse(&["serve", "--interval", "1m30s"]).unwrap().command else {
            panic!("not serve");
        };
        assert_eq!(
            s.interval,
            Duration::from_secs(90),
            "issue 19: combined units"
        );
        let Command::Serve(s) = parse(&["serve"]).unwrap().command else {
            panic!("not serve");
        };
        assert_eq!(s.interval, Duration::from_secs(15));
        for (args, want) in [
            (
                &["serve", "--interval", "1ms"][..],
                "choose between 100ms and 1h (default 15s)",
            ),
            (
                &["serve", "--interval", "2h"][..],
                "choose between 100ms and 1h",
            ),
            (
                &["serve", "--interval", "soon"][..],
                "invalid duration \"soon\"",
            ),
            (
                &["replay", "all", "--step-timeout", "1ms"][..],
                "choose at least 10ms",
            ),
            (
                &["sim", "fault", "--nvml-memory-latency", "2m"][..],
                "at most 60s",
            ),
            (
                &["replay", "all", "--period", "2s"][..],
                "choose between 100us and 1s (default 5ms)",
            ),
            (
                &["run", "--period", "61s", "--", "true"][..],
                "choose between 1ms and 60s (default 100ms)",
            ),
            (
                &["run", "--process-period", "1ms", "--", "true"][..],
                "choose between 10ms and 60s (default 500ms)",
            ),
        ] {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(want), "{args:?}: {e}");
            assert!(e.contains(args[args.len() - 2]), "names the flag: {e}");
        }
        let Command::Sim(SimCommand::Fault(f)) =
            parse(&["sim", "fault", "--nvml-process-latency", "4.5ms"])
                .unwrap()
                .command
        else {
            panic!("not sim fault");
        };
        assert_eq!(f.nvml_process_latency, Some(Duration::from_micros(4500)));
    }

    #[test]
    fn replay_all_flag_means_every_scenario() {
        let Command::Replay(r) = parse(&["replay", "--all"]).unwrap().command else {
            panic!("not replay");
        };
        assert!(r.all && r.scenarios.is_empty());
        // With a variant: every scenario's `bug` variant.
        let Command::Replay(r) = parse(&["replay", "--all", "--variant", "bug"])
            .unwrap()
            .command
        else {
            panic!("not replay");
        };
        assert_eq!(r.variant.as_deref(), Some("bug"));
        // Naming nothing at all is still a usage error.
        assert!(parse(&["replay"]).is_err());
    }
}
