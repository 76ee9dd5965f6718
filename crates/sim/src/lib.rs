//! vramdoc-sim: the simulated GPU machine ("box"). It owns devices, the contexts and
//! allocations of every process that uses it, and fault injection. A box lives in a state
//! directory so several processes (vramdoc itself, replay workers, programs loading the
//! `vramdoc-simgpu` cdylib as libcuda.so or libnvidia-ml.so.1) see one machine:
//!
//! - `box.json`: devices and versions, written once by `vramdoc sim init`;
//! - `faults.json`: injected faults, changed at any time (`vramdoc sim fault`);
//! - `state.json`: per-process usage per physical device, replaced atomically under `lock`.
//!
//! Memory of a process that has exited is returned on the next read, as the real driver does.
//!
//! Modules: [`spec`] (box specs and presets), [`profile`] (driver branches), [`process`] (one
//! process's side: CUDA ordinals, contexts, allocations, contents), [`broker`] (host PIDs
//! across PID namespaces), [`procinfo`] (process liveness). The semantics the simulator shares
//! with vramdoc (sizes, UUIDs, the kernels' checksum, visible devices) come from
//! `vramdoc-gpu-spec`.

pub mod board;
pub mod broker;
mod cache;
pub mod calls;
pub mod codes;
pub mod container;
pub mod cuda;
mod faults;
pub mod hold;
pub mod kernlog;
pub mod libs;
pub mod mig;
pub mod nvml;
pub mod process;
pub mod procinfo;
pub mod profile;
pub mod runtime;
pub mod spec;
mod state;

use serde::{Deserialize, Serialize};
use state::reap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use thiserror::Error;
use vramdoc_gpu_spec::units::{round_up, MIB};

pub use faults::{Faults, NvmlHang};
pub use process::{ProcessEnv, SimProcess};
pub use spec::{parse_spec, DeviceModel, SpecError, DEFAULT_CONTEXT_OVERHEAD};
pub use state::{
    memory_of, processes_iter, processes_on, reclaim, DeviceUsage, IpcExport, ProcessEntry,
    SimMemory, SimProcessView, State,
};

/// Environment variable naming the box directory used by vramdoc and the simulated libraries.
pub const SIM_DIR_ENV: &str = "VRAMDOC_SIM_DIR";
/// Allocation granularity of the simulated driver.
pub const GRANULARITY: u64 = 2 * MIB;
/// Temperature every simulated device reports, degrees Celsius: the simulator models memory
/// only (utilization is always 0 %).
pub const TEMPERATURE_C: u32 = 34;

/// Errors of the simulated machine. Each maps onto a CUDA / NVML return code at the C ABI.
#[derive(Debug, Error)]
pub enum SimError {
    #[error("no simulated box: set {SIM_DIR_ENV} to a directory made by `vramdoc sim init SPEC`, or pass --sim SPEC")]
    NoBox,
    #[error("simulated box at {dir} is unreadable: {reason}")]
    BadBox { dir: PathBuf, reason: String },
    #[error("simulated box I/O on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Profile(#[from] profile::ProfileError),
    #[error(transparent)]
    Mig(#[from] mig::MigError),
    #[error("invalid device ordinal {0}")]
    InvalidDevice(u32),
    #[error("device {0} is lost (fallen off the bus)")]
    DeviceLost(u32),
    #[error("no permission to query device {0}")]
    NoPermission(u32),
    #[error("device {0} is in exclusive-process compute mode and another process holds it")]
    DeviceBusy(u32),
    #[error("an uncorrectable error on device {0} was contained; the process must restart")]
    Contained(u32),
    #[error("out of memory on physical device {device}: requested {requested} bytes, {free} free")]
    OutOfMemory {
        device: u32,
        requested: u64,
        free: u64,
    },
    #[error("no context on device ordinal {0}")]
    NoContext(u32),
    #[error("invalid device pointer {0:#x}")]
    InvalidPointer(u64),
    #[error("access of {len} bytes at {ptr:#x} is outside its allocation")]
    OutOfBounds { ptr: u64, len: u64 },
    #[error("not supported by the simulator: {0}")]
    Unsupported(String),
    #[error("not a CUDA IPC handle of this box, or its memory was freed")]
    IpcHandle,
    #[error("a CUDA IPC handle cannot be opened in the process that exported it")]
    IpcSameProcess,
    #[error("work on device {0} failed: the device has fallen off the bus")]
    LaunchFailed(u32),
    #[error("an illegal memory access was encountered on device {0}")]
    IllegalAddress(u32),
    #[error("libcuda.so is the CUDA toolkit's stub library, not the driver's")]
    StubLibrary,
    #[error("the driver library and the loaded kernel module are different versions")]
    DriverMismatch,
    #[error("the PTX JIT compiler library (libnvidia-ptxjitcompiler) is missing")]
    NoPtxJit,
    #[error("the NVML call hung past the fault's bound of {limit_ms} ms")]
    Hung { limit_ms: u64 },
    #[error("the NVML session was lost (the container lost access to its devices)")]
    SessionLost,
    #[error("{call} is not supported on device {device}")]
    NotSupported { call: &'static str, device: u32 },
    #[error("{0} is not in this driver branch's library")]
    FunctionNotFound(&'static str),
    #[error("{0}")]
    Unknown(&'static str),
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SimError + '_ {
    move |source| SimError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One physical device of a box.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimDevice {
    pub index: u32,
    pub name: String,
    pub uuid: String,
    /// NVML-style bus id, `00000000:17:00.0`.
    pub pci_bus_id: String,
    pub total: u64,
    /// Memory reserved by driver and firmware (NVML v2 `reserved`).
    pub reserved: u64,
    /// Bytes one CUDA context costs on this device.
    pub context_overhead: u64,
    /// The host NUMA node its memory is, on coherent-memory systems (GH200, GB200: GPU
    /// memory managed by the operating system); `None` on ordinary PCIe/SXM boards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// A unified-memory part (GB10): NVML reports no framebuffer memory
    /// (`nvmlDeviceGetMemoryInfo` and `_v2`: `NVML_ERROR_NOT_SUPPORTED`); per-process usage
    /// and CUDA's `cuMemGetInfo` work.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_memory_info: bool,
    /// The device's minor number (`/dev/nvidia<minor>`, `nvmlDeviceGetMinorNumber`) when it
    /// differs from its NVML index: the kernel module numbers devices in its probe order,
    /// which need not be NVML's PCI order (`sim init --minors`). `None`: the index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<u32>,
}

impl SimDevice {
    /// The minor number of the device file (`dev/nvidia<minor>`).
    pub fn minor(&self) -> u32 {
        self.minor.unwrap_or(self.index)
    }

    /// The name of its device file in the box's `dev/` (`nvidia<minor>`), as `/dev/nvidiaN`.
    pub fn node_name(&self) -> String {
        format!("nvidia{}", self.minor())
    }
}

/// The immutable description of a box.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoxConfig {
    pub spec: String,
    pub driver_version: String,
    /// CUDA driver API version as `cuDriverGetVersion` reports it (12040 = 12.4).
    pub cuda_driver_version: i32,
    pub nvml_version: String,
    pub devices: Vec<SimDevice>,
    /// The platform the driver runs on (`linux`, or `wsl`: Windows' WDDM driver under WSL2).
    #[serde(default, skip_serializing_if = "Platform::is_linux")]
    pub platform: Platform,
    /// How NVML reports clients' PIDs to callers in other PID namespaces (by driver
    /// generation; `sim init --driver VERSION`). Boxes without it: host PIDs.
    #[serde(default, skip_serializing_if = "profile::PidView::is_host_pids")]
    pub pid_view: profile::PidView,
    /// MIG instances (`sim init --mig`), parents in physical order; none: MIG off.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig: Vec<mig::MigInstance>,
}

/// Where the simulated driver runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    #[default]
    Linux,
    /// WSL2: the Windows driver (WDDM) manages memory: NVML reports per-process memory as
    /// not available, and `nvmlDeviceGetMemoryInfo_v2` fails (nvitop PR #30, "unknown error"
    /// inside WSL with driver 516.59).
    Wsl,
}

impl Platform {
    pub fn is_linux(&self) -> bool {
        *self == Platform::Linux
    }
}

impl BoxConfig {
    /// How this box's NVML lays out process records (by driver branch).
    pub fn record_layout(&self) -> profile::RecordLayout {
        profile::layout_of(&self.driver_version)
    }

    /// Which NVML entry points this box's driver branch has.
    pub fn nvml_api(&self) -> profile::NvmlApi {
        profile::api_of(&self.driver_version)
    }
}

/// A handle on a box directory.
#[derive(Debug, Clone)]
pub struct SimBox {
    dir: PathBuf,
    config: BoxConfig,
    /// The faults last read, with the file they came from ([`SimBox::faults`], [`cache`]).
    faults_seen: cache::Cached<Faults>,
    /// The state last read, likewise ([`SimBox::state`]).
    state_seen: cache::Cached<State>,
}

const BOX_FILE: &str = "box.json";
const STATE_FILE: &str = "state.json";
const FAULTS_FILE: &str = "faults.json";
const LOCK_FILE: &str = "lock";
/// Directory of the box's device files (see [`SimBox::device_nodes`]).
pub const DEV_DIR: &str = "dev";
/// The box's `/dev/nvidia-uvm` (under [`DEV_DIR`]): held open by processes with managed
/// memory (`cuMemAllocManaged`).
pub const UVM_NODE: &str = "nvidia-uvm";
/// Directory of the per-process token files under [`DEV_DIR`].
pub const CLIENTS_DIR: &str = "clients";

/// Whether the box in `dir` is still there for its daemons: `box.json` and `lock` both exist.
/// A box being removed (`rm -rf`, a test's temporary directory) loses one of them first, or
/// is left half-removed when something wrote into it meanwhile; either way its daemons exit.
pub fn box_present(dir: &Path) -> bool {
    dir.join(BOX_FILE).exists() && dir.join(LOCK_FILE).exists()
}

/// The wait of a daemon's accept loop with no client waiting: `true` once the box in `dir`
/// is gone ([`box_present`]), its socket `socket` and PID file `pid_file` then removed;
/// otherwise `false` after a client arrives on `listener` or half a second (to notice the box
/// going away).
pub(crate) fn daemon_idle(
    dir: &Path,
    listener: &std::os::unix::net::UnixListener,
    socket: &Path,
    pid_file: &str,
) -> bool {
    use std::os::fd::AsRawFd;
    if !box_present(dir) {
        let _ = fs::remove_file(socket);
        let _ = fs::remove_file(dir.join(pid_file));
        return true;
    }
    let mut fd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut fd, 1, 500) };
    false
}

/// Open (creating if needed) one of the box's device files.
pub(crate) fn open_node(path: &Path) -> Result<fs::File, SimError> {
    fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .map_err(io_err(path))
}

/// Whether some live process still holds the token file `name` open (its lock is held).
pub fn client_alive(dir: &Path, name: &str) -> bool {
    // One allocation: this runs for every process of the box on every NVML memory query.
    let mut path = PathBuf::with_capacity(
        dir.as_os_str().len() + DEV_DIR.len() + CLIENTS_DIR.len() + name.len() + 3,
    );
    path.push(dir);
    path.push(DEV_DIR);
    path.push(CLIENTS_DIR);
    path.push(name);
    let Ok(f) = fs::File::open(path) else {
        return false;
    };
    // A shared probe conflicts with the holder's exclusive lock, not with other probes; it
    // is released when `f` closes on return.
    f.try_lock_shared().is_err()
}

/// Whether the process recorded as `entry` under `pid` still holds its memory.
pub fn entry_alive(dir: &Path, pid: u32, entry: &ProcessEntry) -> bool {
    match &entry.client {
        Some(name) => client_alive(dir, name),
        None => procinfo::is_alive(pid, entry.start_time),
    }
}

/// Options for creating a box.
#[derive(Debug, Clone)]
pub struct InitOptions {
    pub context_overhead: u64,
    pub driver_version: String,
    pub cuda_driver_version: i32,
    pub platform: Platform,
    /// The driver generation's PID view ([`profile::DriverProfile::pid_view`]); host PIDs
    /// unless a driver version is chosen.
    pub pid_view: profile::PidView,
    /// MIG profiles created on every device (`sim init --mig`); empty: MIG off.
    pub mig: Vec<String>,
    /// Minor numbers by NVML index (`sim init --minors 2,0,3,1`): the device files' numbers,
    /// in the kernel module's probe order rather than PCI order. `None`: minor = index.
    pub minors: Option<Vec<u32>>,
}

/// The highest minor number a GPU can have: 255 is `/dev/nvidiactl`'s (NVIDIA's
/// open-gpu-kernel-modules `NV_CONTROL_DEVICE_MINOR`).
pub const MAX_GPU_MINOR: u32 = 254;

/// Check `--minors` against a box of `n` devices: one distinct number per device, each at
/// most [`MAX_GPU_MINOR`]. `Err`: what to change, in one line.
pub fn check_minors(minors: &[u32], n: usize) -> Result<(), String> {
    if minors.len() != n {
        return Err(format!(
            "{} number(s) for {n} device(s): give one minor per device, in NVML (PCI) order",
            minors.len()
        ));
    }
    if let Some(m) = minors.iter().find(|m| **m > MAX_GPU_MINOR) {
        return Err(format!(
            "minor {m} is out of range (0..={MAX_GPU_MINOR}; 255 is nvidiactl's)"
        ));
    }
    let mut sorted = minors.to_vec();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("minor {} is given twice", w[0]));
    }
    Ok(())
}

impl Default for InitOptions {
    fn default() -> Self {
        InitOptions {
            context_overhead: DEFAULT_CONTEXT_OVERHEAD,
            driver_version: profile::DEFAULT_DRIVER.into(),
            cuda_driver_version: 12040,
            platform: Platform::Linux,
            // The default driver's own generation: a reader in another PID namespace sees
            // what that driver shows it (docs/simulator.md, "Driver generations").
            pid_view: profile::pid_view_of(profile::DEFAULT_DRIVER),
            mig: Vec::new(),
            minors: None,
        }
    }
}

fn pseudo_random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = t ^ ((std::process::id() as u64) << 32) ^ 0x9E37_79B9_7F4A_7C15;
    // splitmix64
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn make_uuid(seed: u64, index: u32) -> String {
    let a = seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let b = a.rotate_left(17).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a.to_be_bytes());
    bytes[8..].copy_from_slice(&b.to_be_bytes());
    vramdoc_gpu_spec::uuid::format_gpu_uuid(&bytes)
}

/// The PCI bus id of device `index` as NVML writes `nvmlPciInfo_t.busId`
/// (`NVML_DEVICE_PCI_BUS_ID_FMT`, "%08X:%02X:%02X.0": domain, 8-bit bus, device). Buses
/// 0x17, 0x27, …; past bus 0xF7 the next domain, so 16+ GPUs keep valid, distinct ids.
pub fn pci_bus_id(index: u32) -> String {
    let n = 0x17 + index * 0x10;
    format!("{:08X}:{:02X}:00.0", n >> 8, n & 0xFF)
}

impl SimBox {
    /// Create a new box for `spec` in `dir` (created if missing; must not already hold a box).
    /// A `@DRIVER` suffix of `spec` (`2xh100@580`) sets the box's driver profile, over
    /// `opts`' own.
    pub fn create(dir: &Path, spec: &str, opts: &InitOptions) -> Result<SimBox, SimError> {
        let models = parse_spec(spec)?;
        let named;
        let opts = match spec::split_driver(spec).1 {
            Some(v) => {
                let p = profile::DriverProfile::parse(v).map_err(|e| SimError::BadBox {
                    dir: dir.to_path_buf(),
                    reason: e.to_string(),
                })?;
                named = InitOptions {
                    pid_view: profile::pid_view_of(&p.driver_version),
                    driver_version: p.driver_version,
                    cuda_driver_version: p.cuda_driver_version,
                    ..opts.clone()
                };
                &named
            }
            None => opts,
        };
        if let Some(m) = &opts.minors {
            check_minors(m, models.len()).map_err(|reason| SimError::BadBox {
                dir: dir.to_path_buf(),
                reason: format!("--minors: {reason}"),
            })?;
        }
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let box_path = dir.join(BOX_FILE);
        if box_path.exists() {
            return Err(SimError::BadBox {
                dir: dir.to_path_buf(),
                reason: "a box already exists there; choose another --dir or remove it".into(),
            });
        }
        let seed = pseudo_random_seed();
        // Coherent-memory GPUs: one CPU node per superchip first, then one node per GPU's
        // memory (the simulator's numbering).
        let superchips = models.iter().filter(|m| m.coherent).count() as u32;
        let mut next_node = superchips;
        let devices = models
            .iter()
            .enumerate()
            .map(|(i, m)| SimDevice {
                index: i as u32,
                name: m.name.clone(),
                uuid: make_uuid(seed, i as u32),
                pci_bus_id: pci_bus_id(i as u32),
                total: m.total,
                reserved: m.reserved,
                context_overhead: round_up(opts.context_overhead, GRANULARITY),
                numa_node: m.coherent.then(|| {
                    next_node += 1;
                    next_node - 1
                }),
                no_memory_info: m.no_memory_info,
                minor: opts
                    .minors
                    .as_ref()
                    .and_then(|v| v.get(i).copied())
                    .filter(|m| *m != i as u32),
            })
            .collect::<Vec<SimDevice>>();
        let mig = mig::plan(&devices, &opts.mig)?;
        let major = opts.cuda_driver_version / 1000;
        let config = BoxConfig {
            spec: spec.to_string(),
            driver_version: opts.driver_version.clone(),
            cuda_driver_version: opts.cuda_driver_version,
            nvml_version: format!("{major}.{}", opts.driver_version),
            devices,
            platform: opts.platform,
            pid_view: opts.pid_view,
            mig,
        };
        let sim = SimBox {
            dir: dir.to_path_buf(),
            config,
            faults_seen: Default::default(),
            state_seen: Default::default(),
        };
        // The lock file first, created exclusively: of two `sim init` racing on one
        // directory, one fails here instead of both writing a box.
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(sim.dir.join(LOCK_FILE))
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    SimError::BadBox {
                        dir: sim.dir.clone(),
                        reason: "a box already exists there (or is being created); choose another --dir or remove it".into(),
                    }
                } else {
                    io_err(&sim.dir)(e)
                }
            })?;
        write_json_atomic(&sim.dir.join(FAULTS_FILE), &Faults::default())?;
        write_json_atomic(&sim.dir.join(STATE_FILE), &State::default())?;
        let clients = sim.dir.join(DEV_DIR).join(CLIENTS_DIR);
        fs::create_dir_all(&clients).map_err(io_err(&clients))?;
        for node in sim.device_nodes() {
            open_node(&node)?;
        }
        for node in sim.mig_cap_files() {
            open_node(&node)?;
        }
        // box.json last: its presence marks a complete box.
        write_json_atomic(&box_path, &sim.config)?;
        Ok(sim)
    }

    /// Open an existing box.
    pub fn open(dir: &Path) -> Result<SimBox, SimError> {
        let path = dir.join(BOX_FILE);
        let text = fs::read_to_string(&path).map_err(|e| SimError::BadBox {
            dir: dir.to_path_buf(),
            reason: format!(
                "cannot read {}: {e} (create one with `vramdoc sim init SPEC`)",
                path.display()
            ),
        })?;
        let config: BoxConfig = serde_json::from_str(&text).map_err(|e| SimError::BadBox {
            dir: dir.to_path_buf(),
            reason: format!("{}: {e}", path.display()),
        })?;
        Ok(SimBox {
            dir: dir.to_path_buf(),
            config,
            faults_seen: Default::default(),
            state_seen: Default::default(),
        })
    }

    /// Open the box named by `VRAMDOC_SIM_DIR`.
    pub fn from_env() -> Result<SimBox, SimError> {
        match std::env::var_os(SIM_DIR_ENV) {
            Some(d) if !d.is_empty() => SimBox::open(Path::new(&d)),
            _ => Err(SimError::NoBox),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &BoxConfig {
        &self.config
    }

    pub fn devices(&self) -> &[SimDevice] {
        &self.config.devices
    }

    /// A physical device, or a MIG instance by its key ([`mig::key`]).
    pub fn device(&self, index: u32) -> Result<&SimDevice, SimError> {
        if mig::is_key(index) {
            return self
                .mig_instance(index)
                .map(|m| &m.device)
                .ok_or(SimError::InvalidDevice(index));
        }
        self.config
            .devices
            .get(index as usize)
            .ok_or(SimError::InvalidDevice(index))
    }

    /// Fail with `DeviceLost` if the device has fallen off the bus.
    pub fn check_device(&self, index: u32, faults: &Faults) -> Result<&SimDevice, SimError> {
        let dev = self.device(index)?;
        let parent = self.mig_instance(index).map_or(index, |m| m.parent);
        if faults.lost_devices.contains(&index) || faults.lost_devices.contains(&parent) {
            return Err(SimError::DeviceLost(index));
        }
        Ok(dev)
    }

    /// [`check_device`](Self::check_device) as NVML sees it: also `NoPermission` for the
    /// devices the `no_permission_devices` fault hides from this caller.
    pub fn check_nvml_device(&self, index: u32, faults: &Faults) -> Result<&SimDevice, SimError> {
        let dev = self.check_device(index, faults)?;
        if faults.no_permission_devices.contains(&index) {
            return Err(SimError::NoPermission(index));
        }
        Ok(dev)
    }

    /// Physical indices of the devices this process can open, PCI order: those whose device
    /// file (`dev/nvidiaN`) exists in its view of the box. The driver reads no environment
    /// variable for this: outside a container every file is there; a container made by the
    /// box's runtime ([`container`]) sees only the files of its GPUs, as the NVIDIA
    /// container runtime mounts only those `/dev/nvidiaN`.
    pub fn mounted(&self) -> Vec<u32> {
        let dev = self.dir.join(DEV_DIR);
        self.devices()
            .iter()
            .filter(|d| dev.join(d.node_name()).exists())
            .map(|d| d.index)
            .collect()
    }

    /// The device file of physical device `index` (`dev/nvidia<minor>`: named by its minor
    /// number, as `/dev/nvidiaN` is, not by its NVML index).
    pub fn node_path(&self, index: u32) -> Result<PathBuf, SimError> {
        Ok(self.dir.join(DEV_DIR).join(self.device(index)?.node_name()))
    }

    /// The physical (NVML) index of the device with minor number `minor`.
    pub fn index_of_minor(&self, minor: u32) -> Option<u32> {
        self.devices()
            .iter()
            .find(|d| d.minor() == minor)
            .map(|d| d.index)
    }

    /// Physical indices of the devices whose memory is a NUMA node of the host (coherent
    /// memory: GH200, GB200).
    pub fn coherent_devices(&self) -> Vec<u32> {
        self.devices()
            .iter()
            .filter(|d| d.numa_node.is_some())
            .map(|d| d.index)
            .collect()
    }

    /// Whether device `a` can map device `b`'s memory directly (`cuDeviceCanAccessPeer`):
    /// two distinct boards of the same product, except GeForce boards, whose stock drivers
    /// report no peer access (NVIDIA/nccl#1127: 8×RTX 3090 "CANNOT Access Peer"; mixed
    /// models report none either).
    pub fn can_access_peer(&self, a: u32, b: u32) -> bool {
        match (self.device(a), self.device(b)) {
            (Ok(x), Ok(y)) => a != b && x.name == y.name && !x.name.contains("GeForce"),
            _ => false,
        }
    }

    /// Consume one injected kernel fault of physical `device` (`sim fault --illegal-address`):
    /// whether the next launch there must fault.
    pub fn take_kernel_fault(&self, device: u32) -> Result<bool, SimError> {
        if !self.faults()?.illegal_address_devices.contains(&device) {
            return Ok(false);
        }
        let mut fired = false;
        self.update_faults(|f, _| {
            if let Some(i) = f.illegal_address_devices.iter().position(|d| *d == device) {
                f.illegal_address_devices.remove(i);
                fired = true;
            }
            Ok(())
        })?;
        Ok(fired)
    }

    /// Whether a process recorded in the state still holds its memory.
    pub fn is_alive(&self, pid: u32, entry: &ProcessEntry) -> bool {
        entry_alive(&self.dir, pid, entry)
    }

    /// The box's equivalents of `/dev/nvidiaN`, `/dev/nvidiactl` and `/dev/nvidia-uvm`: a
    /// process holding one of them open keeps the memory of the process that opened it
    /// alive; `nvidia-uvm` is held by processes with managed memory ([`UVM_NODE`]).
    pub fn device_nodes(&self) -> Vec<PathBuf> {
        let dev = self.dir.join(DEV_DIR);
        let mut out: Vec<PathBuf> = self
            .devices()
            .iter()
            .map(|d| dev.join(d.node_name()))
            .collect();
        out.push(dev.join("nvidiactl"));
        out.push(dev.join(UVM_NODE));
        out
    }

    fn lock(&self) -> Result<LockGuard, SimError> {
        let path = self.dir.join(LOCK_FILE);
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        // flock(2): held until the file closes (the guard drops).
        file.lock()
            .map_err(|source| SimError::Io { path, source })?;
        Ok(LockGuard { _file: file })
    }

    /// Read-modify-write the state under the box lock. Exited processes are reaped first
    /// (unless faults keep them). The closure's error leaves the state unchanged.
    pub fn update<T>(
        &self,
        f: impl FnOnce(&mut State, &Faults) -> Result<T, SimError>,
    ) -> Result<T, SimError> {
        let _lock = self.lock()?;
        let faults = self.faults()?;
        let mut st = self.read_state_raw()?;
        if !faults.keep_dead_processes {
            for name in reap(&self.dir, &mut st, &self.coherent_devices()) {
                let _ = fs::remove_file(self.dir.join(DEV_DIR).join(CLIENTS_DIR).join(name));
            }
        }
        let before = st.clone();
        let out = f(&mut st, &faults)?;
        if st != before {
            write_json_atomic(&self.dir.join(STATE_FILE), &st)?;
        }
        Ok(out)
    }

    /// Memory of one physical device under NVML v2 definitions.
    pub fn memory(&self, index: u32) -> Result<SimMemory, SimError> {
        self.memory_with(index, &self.faults()?)
    }

    /// [`memory`](Self::memory) under faults the caller has already read (one read of
    /// faults.json per query on the sampling hot path).
    pub fn memory_with(&self, index: u32, faults: &Faults) -> Result<SimMemory, SimError> {
        let dev = self.check_device(index, faults)?;
        let st = self.state_view(faults)?;
        if self.is_mig_parent(index) {
            return Ok(mig::parent_memory(dev, &self.config.mig, &st));
        }
        Ok(memory_of(dev, &st))
    }

    /// Processes with memory on one physical device, by PID.
    pub fn processes(&self, index: u32) -> Result<Vec<SimProcessView>, SimError> {
        self.processes_with(index, &self.faults()?)
    }

    /// [`processes`](Self::processes) under faults the caller has already read.
    pub fn processes_with(
        &self,
        index: u32,
        faults: &Faults,
    ) -> Result<Vec<SimProcessView>, SimError> {
        self.check_device(index, faults)?;
        Ok(processes_on(index, &*self.state_view(faults)?))
    }
}

struct LockGuard {
    _file: fs::File,
}

/// Write `value` as JSON to `path` atomically (temp file in the same directory + rename).
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), SimError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io_err(dir))?;
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| SimError::BadBox {
        dir: dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    tmp.write_all(&bytes).map_err(io_err(path))?;
    tmp.persist(path).map_err(|e| SimError::Io {
        path: path.to_path_buf(),
        source: e.error,
    })?;
    Ok(())
}

#[cfg(test)]
mod tests;
