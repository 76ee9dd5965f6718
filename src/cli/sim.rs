//! `vramdoc sim …` flags: the simulated machine's commands (boxes, faults, holders, the
//! container runtime). Behaviour lives in `commands/sim*.rs`.

use super::{duration, duration_within};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Create a simulated box and print its directory
    ///
    /// Then `export VRAMDOC_SIM_DIR=<dir>`: vramdoc, and programs that load crates/simgpu as
    /// libcuda.so / libnvidia-ml.so.1, share that box. Also starts the box's two daemons: the
    /// driver broker, so processes in child PID namespaces (containers, `unshare --pid`) are
    /// listed under host PIDs, and the runtime daemon that starts `sim run` containers; both
    /// exit when the box directory is removed.
    #[command(
        after_help = "Examples:\n  vramdoc sim init 2x24GiB\n  vramdoc sim init t4,h100 --dir /tmp/box\n  vramdoc sim init h100 --driver 535.54.03   # R535: 32-byte NVML process records\n  vramdoc sim init a100 --driver 470         # before R510: no nvmlDeviceGetMemoryInfo_v2\n  vramdoc sim init rtx4090 --driver 516.59 --platform wsl\n  vramdoc sim init 4xgh200                   # coherent memory: GPU memory as NUMA nodes\n  vramdoc sim init 4xa100 --minors 2,0,3,1    # /dev/nvidiaN minors not in NVML order\n  vramdoc sim init a100-80gb --mig 3g.40gb,3g.40gb   # MIG: two instances"
    )]
    Init(SimInitArgs),
    /// Show the box in VRAMDOC_SIM_DIR: devices, memory, processes, faults
    ///
    /// With --calls: the NVML calls every client (vramdoc, nvitop, gpustat, an exporter) made
    /// on the box, per entry point and client PID, with the calls per second of each, to
    /// measure what monitoring costs. Process-list calls take ~4.5 ms under the driver's
    /// lock on real drivers, a memory query ~12 us.
    #[command(
        after_help = "Examples:\n  vramdoc sim status\n  vramdoc sim status --json\n  vramdoc sim status --calls\n  vramdoc sim status --calls --json --reset-calls"
    )]
    Status(SimStatusArgs),
    /// Inject faults into the box in VRAMDOC_SIM_DIR (for tests and drills)
    #[command(
        after_help = "Examples:\n  vramdoc sim fault --lose-device 1\n  vramdoc sim fault --contained 0 --exclusive-process 1\n  vramdoc sim fault --cuda-stub\n  vramdoc sim fault --nvml-hang --device 1 --hang-limit 30s   # GPU 1's NVML calls block\n  vramdoc sim fault --nvml-session-lost     # \"Failed to initialize NVML: Unknown Error\"\n  vramdoc sim fault --clear"
    )]
    Fault(SimFaultArgs),
    /// Hold memory on the box from a new process until killed (to stage neighbours)
    #[command(
        after_help = "Examples:\n  vramdoc sim hold --device 1 --size 3GiB &\n  vramdoc sim hold --graphics --size 200MiB &          # an Xorg-like client\n  vramdoc sim hold --size 1GiB --fork-child &          # memory outlives this process\n  vramdoc sim run --gpus 1 -- vramdoc sim hold --size 1GiB &   # a container's one GPU"
    )]
    Hold(SimHoldArgs),
    /// Run a command in a container of the box, as the NVIDIA container runtime and the
    /// Kubernetes device plugin would
    ///
    /// The box's runtime daemon (started by `sim init`, like containerd) starts CMD, so CMD
    /// is not a child of this command; it gets its own cgroup (default `docker/<64-hex id>`,
    /// Docker's cgroupfs layout) and a mount namespace in which only the given GPUs' device
    /// files exist: the simulated driver then shows CMD only those GPUs, to CUDA and NVML,
    /// whatever its environment says. CMD's environment is this command's, plus what the
    /// device plugin and runtime set for --strategy: NVIDIA_VISIBLE_DEVICES=<UUIDs>
    /// (envvar), =/var/run/nvidia-container-devices with one /dev/null bind mount per
    /// device there (volume-mounts; readable from the host under /proc/PID/root/...), =all
    /// or =void (cdi), =MIG-<uuid>,... (mig). Stdin, stdout and stderr are CMD's own;
    /// signals to this command are forwarded to CMD; the exit status is CMD's. Needs root
    /// (mount namespace, cgroups). See docs/simulator.md.
    #[command(
        after_help = "Exit status: CMD's own (128+N when killed by signal N), as `docker run`; \
125 the container could not be started (the reason on stderr), 127 CMD not found.\n\n\
Examples:\n  vramdoc sim run --gpus 1 -- vramdoc sim hold --size 1GiB\n  \
vramdoc sim run --gpus GPU-3b1b,2 --strategy volume-mounts -- python train.py\n  \
vramdoc sim run --gpus 0 --strategy cdi --cdi-env void -- nvitop --once\n  \
vramdoc sim run -d --cidfile /tmp/cid --gpus all -- python serve.py   # prints the id\n  \
vramdoc sim run --cgroup 'kubepods/burstable/pod0b76-32a2/{id}' --gpus 0 -- ./job"
    )]
    Run(SimRunArgs),
    /// List the containers the box's runtime started (id, PID, GPUs, cgroup, status)
    #[command(after_help = "Examples:\n  vramdoc sim ps\n  vramdoc sim ps --json")]
    Ps(SimPsArgs),
    /// Install the simulated driver libraries for this box's driver profile into DIR
    ///
    /// Writes libcuda.so, libcuda.so.1, libnvidia-ml.so.1 and libnvidia-ml.so (all one
    /// build of crates/simgpu) into DIR, with the entry points the box's driver branch lacks
    /// removed from their dynamic symbol table, so clients that look a symbol up find it
    /// missing, as on that branch (before R510: nvmlDeviceGetMemoryInfo_v2 and the _v3
    /// process lists; before R535: nvmlDeviceGetConfComputeMemSizeInfo; before R550:
    /// nvmlDeviceGetRunningProcessDetailList). Then point LD_LIBRARY_PATH at DIR.
    #[command(
        after_help = "Examples:\n  cargo build -p vramdoc-simgpu\n  vramdoc sim libs /tmp/simlib --from target/debug/libsimgpu.so\n  LD_LIBRARY_PATH=/tmp/simlib nvitop --once"
    )]
    Libs(SimLibsArgs),
    /// List device presets usable in SPEC
    Presets,
    /// Remove a box made by `sim init` and stop its daemons (driver broker, runtime)
    ///
    /// The box is the one in --dir, else VRAMDOC_SIM_DIR. Its directory is removed, and this
    /// command waits (at most 5 s) for the two daemons `sim init` started to exit, which they
    /// do once the box is gone. Processes you staged on it (`sim hold &`) are yours: stop
    /// them first (`kill %1`).
    #[command(
        after_help = "Examples:\n  vramdoc sim down            # the box in VRAMDOC_SIM_DIR\n  unset VRAMDOC_SIM_DIR\n  vramdoc sim down --dir /tmp/box"
    )]
    Down(SimDownArgs),
    /// The box's driver broker (started by `sim init`): tells clients their host PID
    #[command(hide = true)]
    Driverd(SimDriverdArgs),
    /// The box's runtime daemon (started by `sim init`): starts `sim run` containers
    #[command(hide = true)]
    Runtimed(SimDriverdArgs),
}

/// How the device list reaches the runtime (the device plugin's DEVICE_LIST_STRATEGY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StrategyArg {
    /// NVIDIA_VISIBLE_DEVICES=<ids> (the plugin's default)
    Envvar,
    /// NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices, one entry per device there
    VolumeMounts,
    /// CDI: the plugin sets no variable (see --cdi-env)
    Cdi,
    /// NVIDIA_VISIBLE_DEVICES=MIG-<uuid>,... (MIG device ids)
    Mig,
}

#[derive(Debug, Args)]
pub struct SimRunArgs {
    /// GPUs given to the container, as `docker run --gpus`: `all`, `none`, physical indices
    /// (`0,2`), GPU UUIDs or unique prefixes, `device=0,2`
    #[arg(long, default_value = "all", value_name = "LIST")]
    pub gpus: String,
    /// How the device plugin passes the list to the runtime
    #[arg(long, value_enum, default_value_t = StrategyArg::Envvar)]
    pub strategy: StrategyArg,
    /// Name devices by UUID or by index (the device plugin's DEVICE_ID_STRATEGY)
    #[arg(long, value_enum, default_value_t = DeviceIdsArg::Uuid)]
    pub device_ids: DeviceIdsArg,
    /// With --strategy cdi: the image's NVIDIA_VISIBLE_DEVICES=all stays, or the CDI spec's
    /// `void` wins
    #[arg(long, value_enum, default_value_t = CdiEnvArg::All)]
    pub cdi_env: CdiEnvArg,
    /// The container's cgroup, relative to each cgroup hierarchy's root; `{id}` is replaced
    /// by the container id. `none`: stay in this command's cgroup
    #[arg(long, default_value = "docker/{id}", value_name = "PATH")]
    pub cgroup: String,
    /// Start CMD and print its container id; do not wait (output goes to the box's
    /// containers/<id>.log)
    #[arg(short = 'd', long)]
    pub detach: bool,
    /// Write the container id to FILE (which must not exist), as `docker run --cidfile`
    #[arg(long, value_name = "FILE")]
    pub cidfile: Option<PathBuf>,
    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub cmd: Vec<std::ffi::OsString>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceIdsArg {
    Uuid,
    Index,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CdiEnvArg {
    All,
    Void,
}

#[derive(Debug, Args)]
pub struct SimLibsArgs {
    /// Directory to install into (created if missing)
    pub dir: PathBuf,
    /// The built library (`cargo build -p vramdoc-simgpu`: target/debug/libsimgpu.so);
    /// default: libsimgpu.so next to the vramdoc executable
    #[arg(long, value_name = "LIB")]
    pub from: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SimPsArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SimDriverdArgs {
    /// Box directory to serve
    #[arg(long)]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct SimDownArgs {
    /// The box's directory (default: VRAMDOC_SIM_DIR)
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SimInitArgs {
    /// Devices: `2x24GiB`, `h100`, `rtx3090,rtx3090`, `4xt4`, ...
    pub spec: String,
    /// Directory for the box (default: a new directory under the system temp dir)
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Memory one CUDA context costs on each device
    #[arg(long, default_value = "448MiB", value_name = "SIZE")]
    pub context_overhead: String,
    /// Driver to simulate: any version of a branch (`525`, `R535`, `535.54.03`, `570.86.10`).
    /// Picks the reported versions and the NVML process-record layout of that branch
    /// (default 550.54.15)
    #[arg(long, value_name = "VERSION")]
    pub driver: Option<String>,
    /// Where the driver runs: `linux`, or `wsl` (WSL2 on Windows' WDDM driver: NVML reports
    /// per-process memory as not available and nvmlDeviceGetMemoryInfo_v2 fails)
    #[arg(long, value_enum, default_value_t = PlatformArg::Linux)]
    pub platform: PlatformArg,
    /// MIG: put every GPU in MIG mode with these instances, profiles as nvidia-smi names
    /// them (`3g.40gb,3g.40gb`; A100, H100, H200 boards). Each instance gets its own memory,
    /// processes and `MIG-<uuid>`; the parent's process lists answer only privileged callers
    #[arg(long, value_name = "PROFILE,...")]
    pub mig: Option<String>,
    /// Minor numbers of the devices, one per device in NVML (PCI) order, e.g. `2,0,3,1`: the
    /// device files become `dev/nvidia<minor>` and nvmlDeviceGetMinorNumber answers them, as
    /// when the kernel module probed the GPUs in another order than PCI's (default: minor =
    /// index)
    #[arg(long, value_name = "M,M,...", value_delimiter = ',')]
    pub minors: Option<Vec<u32>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PlatformArg {
    Linux,
    Wsl,
}

#[derive(Debug, Args)]
pub struct SimStatusArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
    /// Show the NVML calls each client made on the box, per entry point (C name) and client
    /// PID, instead of devices and processes
    #[arg(long)]
    pub calls: bool,
    /// With --calls: zero the counters after printing them
    #[arg(long, requires = "calls")]
    pub reset_calls: bool,
}

#[derive(Debug, Args)]
pub struct SimFaultArgs {
    /// Mark a physical device as fallen off the bus (repeatable)
    #[arg(long, value_name = "INDEX")]
    pub lose_device: Vec<u32>,
    /// Let N more allocations succeed, then fail every one with out-of-memory
    #[arg(long, value_name = "N")]
    pub alloc_fail_after: Option<u64>,
    /// Added latency of each NVML memory query (e.g. 12us; at most 60s)
    #[arg(long, value_name = "DURATION", value_parser = fault_latency())]
    pub nvml_memory_latency: Option<Duration>,
    /// Added latency of each NVML process-list query (e.g. 4.5ms; at most 60s)
    #[arg(long, value_name = "DURATION", value_parser = fault_latency())]
    pub nvml_process_latency: Option<Duration>,
    /// Keep the memory of exited processes (a stuck process or driver)
    #[arg(long)]
    pub keep_dead: bool,
    /// Report per-process memory as "not available", as NVML does in some containers
    #[arg(long)]
    pub usage_unavailable: bool,
    /// NVML answers NVML_ERROR_NO_PERMISSION for every query on this device (repeatable)
    #[arg(long, value_name = "INDEX")]
    pub no_permission: Vec<u32>,
    /// MIG-enabled device read without privileges: its process lists answer
    /// NVML_ERROR_NO_PERMISSION, memory still answers (repeatable)
    #[arg(long, value_name = "INDEX")]
    pub mig_unprivileged: Vec<u32>,
    /// Exclusive-process compute mode: a second process's context fails with
    /// CUDA_ERROR_DEVICE_UNAVAILABLE (repeatable)
    #[arg(long, value_name = "INDEX")]
    pub exclusive_process: Vec<u32>,
    /// An uncorrectable error was contained: launches and synchronisation return
    /// CUDA_ERROR_CONTAINED (226) (repeatable)
    #[arg(long, value_name = "INDEX")]
    pub contained: Vec<u32>,
    /// libcuda.so is the toolkit's stub: every CUDA call returns CUDA_ERROR_STUB_LIBRARY (34)
    #[arg(long)]
    pub cuda_stub: bool,
    /// The next kernel launch on this physical GPU (in any process) faults with
    /// CUDA_ERROR_ILLEGAL_ADDRESS (700), which then sticks to that context: every later call
    /// on it returns 700 until it is destroyed (repeatable: one launch per time given)
    #[arg(long, value_name = "INDEX")]
    pub illegal_address: Vec<u32>,
    /// The PTX JIT compiler is missing: loading PTX returns CUDA_ERROR_JIT_COMPILER_NOT_FOUND
    #[arg(long)]
    pub no_ptx_jit: bool,
    /// cuMemGetInfo's total excludes the device's reserved memory, as on real drivers
    #[arg(long)]
    pub cuda_total_excludes_reserved: bool,
    /// Driver upgraded without reboot: NVML init fails with "Driver/library version mismatch"
    /// and cuInit with CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
    #[arg(long)]
    pub version_mismatch: bool,
    /// NVML calls block, as on a GPU in a bad state (a driver call stuck in D state): calls
    /// on --device's GPU (every call, init included, without --device) wait until the fault
    /// is cleared, at most --hang-limit, then fail with NVML_ERROR_UNKNOWN
    #[arg(long)]
    pub nvml_hang: bool,
    /// Physical GPU whose NVML queries hang (with --nvml-hang), or that reports the Xid (with
    /// --xid; default 0)
    #[arg(long, value_name = "INDEX")]
    pub device: Option<u32>,
    /// The driver reports Xid N on --device's GPU: an `NVRM: Xid` line is appended to the
    /// box's kernel log (`BOX/kern.log`, as the real driver prints it); Xid 79 ("GPU has
    /// fallen off the bus") also loses the GPU, as --lose-device
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub xid: Option<u32>,
    /// Longest one hung call blocks (with --nvml-hang; default 2m, at most 10m)
    #[arg(long, value_name = "DURATION", value_parser = hang_limit(), requires = "nvml_hang")]
    pub hang_limit: Option<Duration>,
    /// The container lost access to its GPUs: every call of an NVML session opened before
    /// fails with NVML_ERROR_UNKNOWN, and nvmlInit fails with it until --clear (sessions
    /// lost stay lost; a new nvmlInit after --clear works)
    #[arg(long)]
    pub nvml_session_lost: bool,
    /// Remove every fault
    #[arg(long)]
    pub clear: bool,
}

#[derive(Debug, Args)]
pub struct SimHoldArgs {
    /// CUDA ordinal to hold memory on (renumbered by CUDA_VISIBLE_DEVICES)
    #[arg(long, default_value_t = 0)]
    pub device: u32,
    /// Bytes to allocate besides the context (0: context only)
    #[arg(long, default_value = "0", value_name = "SIZE")]
    pub size: String,
    /// Also create a context (only) on these CUDA ordinals (repeatable)
    #[arg(long, value_name = "ORDINAL")]
    pub context_on: Vec<u32>,
    /// Exit after this long (default: hold until killed)
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub duration: Option<Duration>,
    /// Also allocate this much managed (unified) memory with cuMemAllocManaged: counted in
    /// the GPU's used memory but in no process's usage; the process maps that much of nvidia-uvm
    #[arg(long, value_name = "SIZE")]
    pub managed: Option<String>,
    /// Stage a graphics client (like Xorg): NVML lists it only in the graphics process list
    #[arg(long, conflicts_with = "mps")]
    pub graphics: bool,
    /// Stage a client of the CUDA MPS server: NVML lists it only in the MPS process list
    #[arg(long)]
    pub mps: bool,
    /// Also a graphics client (type `C+G` in nvidia-smi: a process with compute and graphics
    /// contexts): NVML lists it in both the compute and the graphics list, with the same memory
    #[arg(long, conflicts_with_all = ["graphics", "mps"])]
    pub also_graphics: bool,
    /// Fork a child that inherits the driver descriptors and sleeps (a DataLoader worker):
    /// after this process exits, its memory stays allocated while the child lives. Prints
    /// `child=PID`
    #[arg(long)]
    pub fork_child: bool,
    /// Test-only staging: also create a context on this PHYSICAL device, bypassing
    /// CUDA_VISIBLE_DEVICES (a process whose env says 1 but has a context on 0). Repeatable.
    #[arg(long, value_name = "INDEX", hide = true)]
    pub physical_context: Vec<u32>,
    /// Ignored arguments after `--`, so a holder's command line can look like a real job's
    /// (tests plant secrets there to check redaction)
    #[arg(last = true, value_name = "ARGS")]
    pub ignored: Vec<std::ffi::OsString>,
    /// Test-only staging: set this process's name (`prctl(PR_SET_NAME)`, the kernel keeps 15
    /// bytes) to these bytes, UTF-8 or not, like a job that renames itself
    #[arg(long, value_name = "BYTES", hide = true)]
    pub set_name: Option<std::ffi::OsString>,
}

/// Longest latency a simulated fault may inject: a minute is already far past any NVML
/// timeout a monitor should tolerate; a latency of years is a typo.
fn fault_latency() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    duration_within(
        Duration::ZERO,
        Duration::from_secs(60),
        " (a latency is injected into every query)",
    )
}

/// Bound of one hung NVML call: at least 10ms, at most 10 minutes.
fn hang_limit() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    duration_within(
        Duration::from_millis(10),
        Duration::from_secs(600),
        " (a hung call fails with NVML_ERROR_UNKNOWN after this long)",
    )
}
