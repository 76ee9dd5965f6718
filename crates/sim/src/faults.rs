//! Faults injected into a box (`faults.json`, `vramdoc sim fault`): read on every operation,
//! so they can change while processes run; reading (parsed once per version of the file:
//! [`crate::cache`]) and updating.

use crate::{write_json_atomic, SimBox, SimError, State, FAULTS_FILE};
use serde::{Deserialize, Serialize};

impl SimBox {
    /// Current faults (missing file: none).
    ///
    /// Read on every operation (a kernel launch, an NVML call), so the file is parsed again
    /// only when it was replaced since the last read ([`crate::cache`]): a `stat`, not a read
    /// and a parse, per call on an unchanged box.
    pub fn faults(&self) -> Result<Faults, SimError> {
        let path = self.dir.join(FAULTS_FILE);
        Ok(self
            .faults_seen
            .read(&self.dir, &path)?
            .map(|f| (*f).clone())
            .unwrap_or_default())
    }

    /// Read-modify-write the faults under the box lock (concurrent `sim fault` calls do not
    /// lose each other's changes). Returns the faults written.
    pub fn update_faults(
        &self,
        f: impl FnOnce(&mut Faults, &State) -> Result<(), SimError>,
    ) -> Result<Faults, SimError> {
        let _lock = self.lock()?;
        let mut faults = self.faults()?;
        let st = self.read_state_raw()?;
        f(&mut faults, &st)?;
        write_json_atomic(&self.dir.join(FAULTS_FILE), &faults)?;
        Ok(faults)
    }

    pub fn set_faults(&self, faults: &Faults) -> Result<(), SimError> {
        let _lock = self.lock()?;
        write_json_atomic(&self.dir.join(FAULTS_FILE), faults)
    }
}

/// Faults injected into a box; read on every operation, so they can change while processes run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Faults {
    /// Physical indices of devices that have fallen off the bus.
    pub lost_devices: Vec<u32>,
    /// Allocations (counted across the box) that succeed before every later one fails with
    /// out-of-memory.
    pub alloc_fail_after: Option<u64>,
    /// Added latency of an NVML memory query, microseconds.
    pub nvml_memory_latency_us: u64,
    /// Added latency of an NVML process-list query, microseconds (~4500 on real drivers).
    pub nvml_process_latency_us: u64,
    /// Keep the memory of exited processes (a stuck process or driver problem).
    pub keep_dead_processes: bool,
    /// NVML reports per-process used memory as "not available" (`NVML_VALUE_NOT_AVAILABLE`),
    /// as in containers without the host PID namespace or under Windows WDDM.
    pub nvml_used_memory_unavailable: bool,
    /// Physical indices NVML refuses to query for this caller (`NVML_ERROR_NO_PERMISSION`).
    pub no_permission_devices: Vec<u32>,
    /// MIG-enabled devices read by an unprivileged caller: memory answers, but the process
    /// lists of the parent device return `NVML_ERROR_NO_PERMISSION` (no aggregate data).
    pub mig_unprivileged_devices: Vec<u32>,
    /// Devices in `EXCLUSIVE_PROCESS` compute mode: a second process's context fails with
    /// `CUDA_ERROR_DEVICE_UNAVAILABLE` (46).
    pub exclusive_process_devices: Vec<u32>,
    /// Devices where an uncorrectable error was contained: launches and synchronisation
    /// return `CUDA_ERROR_CONTAINED` (226, newer than the CUDA 12.0 headers).
    pub contained_devices: Vec<u32>,
    /// libcuda.so is the CUDA toolkit's stub (`lib64/stubs`) shadowing the driver: every
    /// call returns `CUDA_ERROR_STUB_LIBRARY` (34).
    pub cuda_stub_library: bool,
    /// The PTX JIT compiler (libnvidia-ptxjitcompiler) is missing: loading PTX returns
    /// `CUDA_ERROR_JIT_COMPILER_NOT_FOUND` (221).
    pub no_ptx_jit: bool,
    /// `cuMemGetInfo` reports `total` minus the device's reservation, as real drivers do
    /// (NVML's `total` counts it).
    pub cuda_total_excludes_reserved: bool,
    /// NVML init fails with `NVML_ERROR_LIB_RM_VERSION_MISMATCH` (18) and cuInit with
    /// `CUDA_ERROR_SYSTEM_DRIVER_MISMATCH` (803): the library was upgraded, the kernel
    /// module not (until reboot).
    pub driver_version_mismatch: bool,
    /// NVML calls block, as on a GPU in a bad state (a D-state driver call): calls on
    /// `device` (every call, init included, when `None`) wait while this fault is set, at
    /// most `limit_ms`, then fail with `NVML_ERROR_UNKNOWN`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvml_hang: Option<NvmlHang>,
    /// The container lost access to its devices: every call of an NVML session opened before
    /// (epoch below [`Faults::nvml_epoch`]) fails with `NVML_ERROR_UNKNOWN`, and `nvmlInit`
    /// fails with it while this is set.
    pub nvml_sessions_lost: bool,
    /// Generation of NVML sessions: a session opened at an older epoch is lost. Survives
    /// `sim fault --clear` (a lost session stays lost; a new one works).
    pub nvml_epoch: u64,
    /// Devices whose next kernel launch (in any process) faults with
    /// `CUDA_ERROR_ILLEGAL_ADDRESS` (700), which then sticks to that context. One entry is
    /// consumed per fault.
    pub illegal_address_devices: Vec<u32>,
}

/// How NVML calls hang ([`Faults::nvml_hang`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmlHang {
    /// Physical device whose queries hang; `None`: every NVML call.
    pub device: Option<u32>,
    /// Longest one call blocks, milliseconds.
    pub limit_ms: u64,
}

impl NvmlHang {
    /// Default bound of one hung call: long enough for any monitor's timeout to fire, short
    /// enough that a test that forgets to clear the fault ends.
    pub const DEFAULT_LIMIT_MS: u64 = 120_000;
    /// Upper bound accepted for `limit_ms`.
    pub const MAX_LIMIT_MS: u64 = 600_000;

    /// Whether a call on physical `device` (`None`: a call not about one device) hangs.
    pub fn applies(&self, device: Option<u32>) -> bool {
        match (self.device, device) {
            (None, _) => true,
            (Some(d), Some(q)) => d == q,
            (Some(_), None) => false,
        }
    }
}

impl Faults {
    /// Every fault removed, except the NVML session epoch (sessions lost stay lost).
    pub fn cleared(&self) -> Faults {
        Faults {
            nvml_epoch: self.nvml_epoch,
            ..Faults::default()
        }
    }

    /// Whether no fault is active (the epoch alone is not a fault).
    pub fn is_clear(&self) -> bool {
        *self == self.cleared()
    }
}
