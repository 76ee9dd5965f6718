//! Driver generations as they matter to a reader of NVML's process lists in a PID namespace
//! other than the host's (a container without `hostPID`): one function from the driver
//! version ([`generation_of`]), shared by the simulator (which shows each generation) and
//! vramdoc (which decides what its rules can conclude from where it stands).
//!
//! Sources: before 535.113.01 the kernel module reports host PIDs to every caller ("the
//! nvidia-driver itself does not support pid-namespaces", NVIDIA/nvidia-docker#1483). From
//! 535.113.01 each client's PID is translated into the caller's namespace and clients not
//! visible there are dropped (NVIDIA/open-gpu-kernel-modules
//! `src/nvidia/src/kernel/gpu/gpu_rmapi.c`: `_gpuConvertPid` → `osFindNsPid`;
//! `kernel-open/nvidia/os-interface.c`: `pid_vnr`), while the per-PID usage lookup still
//! compares the host PID up to the 560 series, so the caller's own namespace's processes are
//! listed with 0 bytes (NVIDIA/nvidia-container-toolkit#1013 on 535.183.01). 565.57.01
//! matches the client's PID in either form (`_gpuMatchClientPid`): translated, with usage.

use serde::{Deserialize, Serialize};

/// What NVML's process lists show a caller outside the host PID namespace, by driver
/// generation. A caller in the host namespace sees host PIDs with usage under every one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum DriverGeneration {
    /// Before 535.113.01: host PIDs, with usage, to every caller.
    HostPids,
    /// 535.113.01 to the 560 series: PIDs translated into the caller's namespace, clients
    /// not visible there dropped, the caller's own namespace's processes listed with 0 bytes.
    TranslatedZeroUsage,
    /// 565.57.01 on: translated and filtered, with usage.
    Translated,
    /// The driver version could not be read or parsed.
    #[default]
    Unknown,
}

impl DriverGeneration {
    /// Whether a caller outside the host namespace sees only its own namespace's processes
    /// (every other tenant's memory is in `used` but in no list).
    pub fn translates(self) -> bool {
        matches!(
            self,
            DriverGeneration::TranslatedZeroUsage | DriverGeneration::Translated
        )
    }

    /// A few words for a one-line header.
    pub fn short(self) -> &'static str {
        match self {
            DriverGeneration::HostPids => "host PIDs",
            DriverGeneration::TranslatedZeroUsage => "translated, own entries 0 bytes",
            DriverGeneration::Translated => "translated, with usage",
            DriverGeneration::Unknown => "generation unknown",
        }
    }

    /// A phrase for people, with the driver series it holds for.
    pub fn describe(self) -> &'static str {
        match self {
            DriverGeneration::HostPids => "host PIDs to every caller (before 535.113)",
            DriverGeneration::TranslatedZeroUsage => {
                "PIDs translated into the caller's namespace, others dropped, own entries \
                 with 0 bytes (535.113 to 560)"
            }
            DriverGeneration::Translated => {
                "PIDs translated into the caller's namespace, others dropped, with usage (565 on)"
            }
            DriverGeneration::Unknown => "unknown driver generation",
        }
    }
}

/// The generation of a driver version as NVML prints it (`535.113.01`, `570.86.10`); a
/// branch alone (`565`) counts as its first release. Text that is not a version: unknown.
pub fn generation_of(driver_version: &str) -> DriverGeneration {
    let mut parts = driver_version.trim().split('.');
    let Some(branch) = parts.next().and_then(|p| p.parse::<u32>().ok()) else {
        return DriverGeneration::Unknown;
    };
    let minor = match parts.next() {
        None => 0,
        Some(m) => match m.parse::<u32>() {
            Ok(m) => m,
            Err(_) => return DriverGeneration::Unknown,
        },
    };
    if branch >= 565 {
        DriverGeneration::Translated
    } else if (branch, minor) >= (535, 113) {
        DriverGeneration::TranslatedZeroUsage
    } else {
        DriverGeneration::HostPids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_follow_the_driver_version() {
        use DriverGeneration::*;
        for (v, want) in [
            ("470.82.01", HostPids),
            ("535.54.03", HostPids),
            ("535.104.05", HostPids),
            ("535.113.01", TranslatedZeroUsage),
            ("535.183.01", TranslatedZeroUsage),
            ("550.54.15", TranslatedZeroUsage),
            ("560.35.03", TranslatedZeroUsage),
            ("565.57.01", Translated),
            ("570.86.10", Translated),
            ("580", Translated),
            ("535", HostPids),
            ("", Unknown),
            ("N/A", Unknown),
            ("550.x", Unknown),
        ] {
            assert_eq!(generation_of(v), want, "{v:?}");
        }
        assert!(Translated.translates() && TranslatedZeroUsage.translates());
        assert!(!HostPids.translates() && !Unknown.translates());
    }
}
