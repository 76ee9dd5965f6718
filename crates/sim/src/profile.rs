//! Driver profiles: what a simulated box reports and how its NVML lays out process records,
//! by driver branch. `vramdoc sim init SPEC --driver VERSION` picks one from any version of a
//! branch (`535`, `R535`, `535.54.03`).
//!
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
#[error("invalid driver version {given:?}: {reason}. Write a branch or a full version, e.g. `525`, `R535`, `535.54.03`, `550.54.15` (CUDA 12 drivers: 525 and newer)")]
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
        if branch < 525 {
            return Err(err("older than the first CUDA 12 branch (525)"));
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
    }

    #[test]
    fn rejects_bad_versions() {
        for bad in ["", "470.82.01", "abc", "535..1", "535.54.03.1", "99999"] {
            assert!(DriverProfile::parse(bad).is_err(), "{bad}");
        }
    }
}
