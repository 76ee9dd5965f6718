//! Driver profiles: what a simulated box reports and how its NVML lays out process records,
//! by driver branch. `vramdoc sim init SPEC --driver VERSION` picks one from any version of a
//! branch (`535`, `R535`, `535.54.03`).
//!
//! - Before R510 (CUDA 11.0–11.5): no `nvmlDeviceGetMemoryInfo_v2` and no `_v3` process
//!   lists; v1 memory reports `total` without the driver's reservation and `used` without it
//!   (an A100-SXM4-40GB shows `40536MiB` total on R470, `40960MiB` on R510+).
//! - R510–R520 (CUDA 11.6–11.8): `_v2` memory and `_v3` lists arrive; v1 `used` now includes
//!   the reservation (gpustat#141: "308MB used even no process" on 515.76); `_v2` with a
//!   `version` other than `nvmlMemory_v2` answers `NVML_ERROR_FUNCTION_NOT_FOUND`
//!   (NVIDIA/nvidia-settings#78, 510.39.01).
//! - R525 (CUDA 12.0): `_v3` process lists fill `nvmlProcessInfo_v2_t` (24 bytes).
//! - R530–R545 ("R535", CUDA 12.1–12.3): `_v3` lists fill 32-byte records (an extra
//!   `usedGpuCcProtectedMemory`) without a version bump (nvitop PR #79, go-nvml #75,
//!   pynvml #50): a client that passes a 24-byte array gets scrambled PIDs and an overrun.
//! - R550+ (CUDA 12.4+): `_v3` lists are 24 bytes again, and
//!   `nvmlDeviceGetRunningProcessDetailList` offers 32-byte `nvmlProcessDetail_v1_t` records.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The driver version a box gets without `--driver`.
pub const DEFAULT_DRIVER: &str = "550.54.15";

/// Known branches: (branch, a released full version, CUDA driver API version it reports).
const BRANCHES: &[(u32, &str, i32)] = &[
    (450, "450.80.02", 11000),
    (460, "460.91.03", 11020),
    (470, "470.82.01", 11040),
    (495, "495.29.05", 11050),
    (510, "510.39.01", 11060),
    (515, "515.65.01", 11070),
    (520, "520.61.05", 11080),
    (525, "525.147.05", 12000),
    (530, "530.30.02", 12010),
    (535, "535.54.03", 12020),
    (545, "545.29.06", 12030),
    (550, "550.54.15", 12040),
    (555, "555.42.06", 12050),
    (560, "560.35.03", 12060),
    (565, "565.57.01", 12070),
    (570, "570.124.06", 12080),
    (575, "575.57.08", 12090),
    (580, "580.65.06", 13000),
];

#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid driver version {given:?}: {reason}. Write a branch or a full version, e.g. `470`, `510.39.01`, `R535`, `535.54.03`, `550.54.15` (450 and newer)")]
pub struct ProfileError {
    pub given: String,
    pub reason: String,
}

/// Which process-record layout and entry points a driver branch has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordLayout {
    /// R525: `_v3` lists fill 24-byte `nvmlProcessInfo_v2_t`; no DetailList.
    R525,
    /// R530–R545: `_v3` lists fill 32-byte records; no DetailList.
    R535,
    /// R550 and newer: 24-byte `_v3` records and `nvmlDeviceGetRunningProcessDetailList`.
    R550,
}

/// A resolved driver profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverProfile {
    pub branch: u32,
    pub driver_version: String,
    pub cuda_driver_version: i32,
}

impl DriverProfile {
    /// Resolve `535`, `R535`, `r535`, `535.54.03`, `550.54.15` into a profile.
    pub fn parse(given: &str) -> Result<DriverProfile, ProfileError> {
        let err = |reason: &str| ProfileError {
            given: given.to_string(),
            reason: reason.to_string(),
        };
        let t = given.trim();
        let t = t.strip_prefix(['R', 'r']).unwrap_or(t);
        let parts: Vec<&str> = t.split('.').collect();
        if parts.is_empty()
            || parts.len() > 3
            || parts
                .iter()
                .any(|p| p.is_empty() || p.len() > 4 || !p.chars().all(|c| c.is_ascii_digit()))
        {
            return Err(err("not a driver version"));
        }
        let branch: u32 = parts[0].parse().map_err(|_| err("not a driver version"))?;
        if branch < 450 {
            return Err(err(
                "older than the first branch the simulator models (450)",
            ));
        }
        if branch > 999 {
            return Err(err("no such branch"));
        }
        let &(_, full, cuda) = BRANCHES
            .iter()
            .rev()
            .find(|(b, _, _)| *b <= branch)
            .ok_or_else(|| err("no such branch"))?;
        let driver_version = if parts.len() == 1 {
            if BRANCHES.iter().any(|(b, _, _)| *b == branch) {
                full.to_string()
            } else {
                format!("{branch}.00.00")
            }
        } else {
            t.to_string()
        };
        Ok(DriverProfile {
            branch,
            driver_version,
            cuda_driver_version: cuda,
        })
    }
}

/// The branch of a full driver version (`535.54.03` → 535); 0 when unparsable.
pub fn branch_of(driver_version: &str) -> u32 {
    driver_version
        .split('.')
        .next()
        .and_then(|b| b.parse().ok())
        .unwrap_or(0)
}

/// Which NVML entry points a driver branch has, and how they behave where branches differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmlApi {
    /// `nvmlDeviceGetMemoryInfo_v2` exists (R510+).
    pub memory_v2: bool,
    /// v1 `used` includes the driver's reservation and `total` counts it (R510+); before,
    /// both leave it out.
    pub v1_counts_reserved: bool,
    /// A `_v2` call whose `version` is not `nvmlMemory_v2` answers `FUNCTION_NOT_FOUND`
    /// (R510–R520, nvidia-settings#78) rather than `ARGUMENT_VERSION_MISMATCH` (R525+ here).
    pub wrong_version_is_function_not_found: bool,
    /// The `_v3` process lists exist (R510+).
    pub process_v3: bool,
    /// `nvmlDeviceGetRunningProcessDetailList` exists (R550+).
    pub detail_list: bool,
    /// `nvmlDeviceGetConfComputeMemSizeInfo` exists (R535+, confidential computing).
    pub conf_compute: bool,
}

/// The NVML entry points of a driver version.
pub fn api_of(driver_version: &str) -> NvmlApi {
    let b = branch_of(driver_version);
    NvmlApi {
        memory_v2: b >= 510,
        v1_counts_reserved: b >= 510,
        wrong_version_is_function_not_found: (510..525).contains(&b),
        process_v3: b >= 510,
        detail_list: b >= 550,
        conf_compute: b >= 535,
    }
}

/// Entry points a real library of the driver version lacks (for [`crate::libs`]).
pub fn missing_symbols(driver_version: &str) -> Vec<&'static str> {
    let api = api_of(driver_version);
    let mut out = Vec::new();
    if !api.memory_v2 {
        out.push("nvmlDeviceGetMemoryInfo_v2");
    }
    if !api.process_v3 {
        out.extend([
            "nvmlDeviceGetComputeRunningProcesses_v3",
            "nvmlDeviceGetGraphicsRunningProcesses_v3",
            "nvmlDeviceGetMPSComputeRunningProcesses_v3",
        ]);
    }
    if !api.detail_list {
        out.push("nvmlDeviceGetRunningProcessDetailList");
    }
    if !api.conf_compute {
        out.push("nvmlDeviceGetConfComputeMemSizeInfo");
    }
    out
}

/// How the driver reports GPU clients' PIDs to a caller in a PID namespace other than the
/// host's (a container without `hostPID`). A caller in the host namespace sees host PIDs with
/// their usage under every generation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PidView {
    /// Host PIDs, with usage, to every caller (before 535.113.01: "the nvidia-driver itself
    /// does not support pid-namespaces", NVIDIA/nvidia-docker#1483).
    #[default]
    HostPids,
    /// From 535.113.01 to the 560 series: each client's PID translated into the caller's
    /// namespace and clients not visible there dropped (open-gpu-kernel-modules
    /// `gpu_rmapi.c` `_gpuConvertPid` → `osFindNsPid`, `os-interface.c` `pid_vnr`), while the
    /// per-PID usage lookup still compares the host PID: the caller's own namespace's
    /// processes are listed with 0 bytes (NVIDIA/nvidia-container-toolkit#1013, 535.183.01).
    TranslatedZeroUsage,
    /// 565.57.01 on: translated and filtered, with usage (`_gpuMatchClientPid`).
    Translated,
}

impl PidView {
    pub fn is_host_pids(&self) -> bool {
        *self == PidView::HostPids
    }
}

/// The PID view of a driver version (`535.113.01` → [`PidView::TranslatedZeroUsage`]): the
/// generation vramdoc reads from the same version
/// ([`vramdoc_gpu_spec::driver::generation_of`]); a version that does not parse shows host
/// PIDs.
pub fn pid_view_of(driver_version: &str) -> PidView {
    use vramdoc_gpu_spec::driver::{generation_of, DriverGeneration};
    match generation_of(driver_version) {
        DriverGeneration::Translated => PidView::Translated,
        DriverGeneration::TranslatedZeroUsage => PidView::TranslatedZeroUsage,
        DriverGeneration::HostPids | DriverGeneration::Unknown => PidView::HostPids,
    }
}

impl DriverProfile {
    /// How this driver reports PIDs across PID namespaces ([`pid_view_of`]).
    pub fn pid_view(&self) -> PidView {
        pid_view_of(&self.driver_version)
    }
}

/// The process-record layout of a driver version.
pub fn layout_of(driver_version: &str) -> RecordLayout {
    match branch_of(driver_version) {
        0..=529 => RecordLayout::R525,
        530..=549 => RecordLayout::R535,
        _ => RecordLayout::R550,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_version_of_a_branch_picks_its_profile() {
        let p = DriverProfile::parse("535.54.03").unwrap();
        assert_eq!((p.branch, p.cuda_driver_version), (535, 12020));
        assert_eq!(p.driver_version, "535.54.03");
        assert_eq!(
            DriverProfile::parse("R535").unwrap().driver_version,
            "535.54.03"
        );
        assert_eq!(
            DriverProfile::parse("525").unwrap().cuda_driver_version,
            12000
        );
        assert_eq!(
            DriverProfile::parse("550.127.05")
                .unwrap()
                .cuda_driver_version,
            12040
        );
        assert_eq!(
            DriverProfile::parse("540").unwrap().cuda_driver_version,
            12020
        );
        assert_eq!(layout_of("535.104.05"), RecordLayout::R535);
        assert_eq!(layout_of("525.60.13"), RecordLayout::R525);
        assert_eq!(layout_of("570.86.10"), RecordLayout::R550);
        assert_eq!(layout_of(DEFAULT_DRIVER), RecordLayout::R550);
        let p = DriverProfile::parse("470").unwrap();
        assert_eq!(
            (p.driver_version.as_str(), p.cuda_driver_version),
            ("470.82.01", 11040)
        );
        let old = api_of("470.82.01");
        assert!(!old.memory_v2 && !old.process_v3 && !old.v1_counts_reserved);
        let r510 = api_of("510.39.01");
        assert!(r510.memory_v2 && r510.wrong_version_is_function_not_found && !r510.detail_list);
        assert!(!api_of("550.54.15").wrong_version_is_function_not_found);
        assert_eq!(
            missing_symbols("535.54.03"),
            vec!["nvmlDeviceGetRunningProcessDetailList"]
        );
        assert!(missing_symbols(DEFAULT_DRIVER).is_empty());
        assert!(missing_symbols("470").contains(&"nvmlDeviceGetMemoryInfo_v2"));
    }

    #[test]
    fn pid_views_follow_the_driver_generation() {
        for (v, want) in [
            ("470.82.01", PidView::HostPids),
            ("535.54.03", PidView::HostPids),
            ("535.113.01", PidView::TranslatedZeroUsage),
            ("535.183.01", PidView::TranslatedZeroUsage),
            ("550.54.15", PidView::TranslatedZeroUsage),
            ("560.35.03", PidView::TranslatedZeroUsage),
            ("565.57.01", PidView::Translated),
            ("580.65.06", PidView::Translated),
        ] {
            assert_eq!(pid_view_of(v), want, "{v}");
        }
        assert_eq!(
            DriverProfile::parse("565").unwrap().pid_view(),
            PidView::Translated
        );
    }

    #[test]
    fn rejects_bad_versions() {
        for bad in ["", "440.33.01", "abc", "535..1", "535.54.03.1", "99999"] {
            assert!(DriverProfile::parse(bad).is_err(), "{bad}");
        }
    }
}
