//! Box specifications: the short strings (`2x24GiB`, `h100`, `rtx3090,rtx3090`, `4xt4`) that
//! describe a simulated machine, and the presets with real product names and totals.

use serde::{Deserialize, Serialize};
use thiserror::Error;
use vramdoc_gpu_spec::units::{parse_size, GIB, MIB};

/// A GPU model the simulator knows by name. Totals are what NVML reports on the real card.
#[derive(Debug, Clone, Copy)]
pub struct Preset {
    pub key: &'static str,
    pub name: &'static str,
    pub total: u64,
    pub reserved: u64,
    /// Coherent memory: the GPU's memory is a NUMA node of the host, managed by the
    /// operating system (Grace Hopper / Grace Blackwell superchips).
    pub coherent: bool,
    /// A unified-memory part with no framebuffer of its own: NVML's device memory queries
    /// answer `NVML_ERROR_NOT_SUPPORTED` while per-process usage works (GB10).
    pub no_memory_info: bool,
}

/// The presets, documented in docs/simulator.md. Totals are the NVML `total` of real cards.
pub const PRESETS: &[Preset] = &[
    Preset {
        key: "t4",
        name: "Tesla T4",
        total: 15360 * MIB,
        reserved: 255 * MIB,
        coherent: false,
        no_memory_info: false,
    },
    Preset {
        key: "v100",
        name: "Tesla V100-SXM2-16GB",
        total: 16384 * MIB,
        reserved: 255 * MIB,
        coherent: false,
        no_memory_info: false,
    },
    Preset {
        key: "rtx4060ti",
        name: "NVIDIA GeForce RTX 4060 Ti",
        total: 16380 * MIB,
        reserved: 288 * MIB,
        coherent: false,
        no_memory_info: false,
    },
    Preset {
        key: "l4",
        name: "NVIDIA L4",
        total: 23034 * MIB,
        reserved: 326 * MIB,
        coherent: false,
        no_memory_info: false,
    },
    // RTX 3090: nvidia-smi shows 24576MiB; the reservation is what puts CUDA's total
    // (`cuMemGetInfo`, which vLLM prints as total_gpu_memory) at the 23.58 GiB of public
    // start-up logs (vllm#10517; #14447 and #17327 print 23.56-23.58): 24576 - 24146 MiB.
    Preset {
        key: "rtx3090",
        name: "NVIDIA GeForce RTX 3090",
        total: 24576 * MIB,
        reserved: 430 * MIB,
        coherent: false,
        no_memory_info: false,
    },
    Preset {
        key: "rtx4090",
        name: "NVIDIA GeForce RTX 4090",
        total: 24564 * MIB,
        reserved: 360 * MIB,
        coherent: false,
        no_memory_info: false,
    },
    Preset {
        key: "a10",
        name: "NVIDIA A10",
        total: 23028 * MIB,
        reserved: 326 * MIB,
        coherent: false,
        no_memory_info: false,
    },
    // NVIDIA A10G (AWS g5): nvidia-smi shows 23028MiB, as the A10 (the same GA102 board
    // memory); its reservation is taken from the A10.
    Preset {
        key: "a10g",
        name: "NVIDIA A10G",
        total: 23028 * MIB,
        reserved: 326 * MIB,
        coherent: false,
        no_memory_info: false,
    },
    // nvidia-smi shows 32607MiB on the RTX 5090, 46068MiB on the L40 and the L40S and
    // 183359MiB on the B200; their reservations are not published (1 % here, like generic
    // cards). Sources: docs/simulator.md "Presets".
    Preset {
        key: "rtx5090",
        name: "NVIDIA GeForce RTX 5090",
        total: 32607 * MIB,
        reserved: 326 * MIB,
        coherent: false,
        no_memory_info: false,
    },
    Preset {
        key: "l40",
        name: "NVIDIA L40",
        total: 46068 * MIB,
        reserved: 460 * MIB,
        coherent: false,
        no_memory_info: false,
    },
    Preset {
        key: "l40s",
        name: "NVIDIA L40S",
        total: 46068 * MIB,
        reserved: 460 * MIB,
        coherent: false,
        no_memory_info: false,
    },
    Preset {
        key: "a100",
        name: "NVIDIA A100-SXM4-40GB",
        total: 40960 * MIB,
        reserved: 443 * MIB,
        coherent: false,
        no_memory_info: false,
    },
    Preset {
        key: "a100-80gb",
        name: "NVIDIA A100-SXM4-80GB",
        total: 81920 * MIB,
        reserved: 527 * MIB,
        coherent: false,
        no_memory_info: false,
    },
    Preset {
        key: "h100",
        name: "NVIDIA H100 80GB HBM3",
        total: 81559 * MIB,
        reserved: 522 * MIB,
        coherent: false,
        no_memory_info: false,
    },
    Preset {
        key: "h200",
        name: "NVIDIA H200",
        total: 143771 * MIB,
        reserved: 568 * MIB,
        coherent: false,
        no_memory_info: false,
    },
    Preset {
        key: "b200",
        name: "NVIDIA B200",
        total: 183359 * MIB,
        reserved: 1833 * MIB,
        coherent: false,
        no_memory_info: false,
    },
    // nvidia-smi on GH200 and GB200 nodes shows `97871MiB` and `189471MiB` totals; the
    // reservation is not published (1 % here, like generic cards).
    Preset {
        key: "gh200",
        name: "NVIDIA GH200 480GB",
        total: 97871 * MIB,
        reserved: 978 * MIB,
        coherent: true,
        no_memory_info: false,
    },
    Preset {
        key: "gb200",
        name: "NVIDIA GB200",
        total: 189471 * MIB,
        reserved: 1894 * MIB,
        coherent: true,
        no_memory_info: false,
    },
    // DGX Spark: one GB10 whose 128 GB of LPDDR5X the CPU and GPU share. NVML has no
    // framebuffer to report (`nvmlDeviceGetMemoryInfo` and `_v2`: NOT_SUPPORTED, XuehaiPan/nvitop#208,
    // leptonai/gpud#1170) while per-process usage works (vllm-project/vllm#55828); the total
    // is what CUDA reports there (121.7 GiB, vllm-project/vllm#57378).
    Preset {
        key: "gb10",
        name: "NVIDIA GB10",
        total: 124616 * MIB,
        reserved: 0,
        coherent: false,
        no_memory_info: true,
    },
];

/// Default per-context overhead: inside the 300–600 MiB band real drivers show.
pub const DEFAULT_CONTEXT_OVERHEAD: u64 = 448 * MIB;

/// Upper bound on devices in one simulated box (NVML's own limit is 64).
pub const MAX_DEVICES: usize = 64;

/// One device of a parsed spec, before the box assigns UUIDs and bus ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceModel {
    pub name: String,
    pub total: u64,
    pub reserved: u64,
    /// Coherent memory (a NUMA node of the host), see [`Preset::coherent`].
    #[serde(default)]
    pub coherent: bool,
    /// No framebuffer memory for NVML to report, see [`Preset::no_memory_info`].
    #[serde(default)]
    pub no_memory_info: bool,
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid box spec {spec:?}: {reason}. Write e.g. `2x24GiB`, `h100`, `rtx3090,rtx3090`, `4xt4`; presets: {presets}")]
pub struct SpecError {
    pub spec: String,
    pub reason: String,
    pub presets: String,
}

fn preset_list() -> String {
    PRESETS.iter().map(|p| p.key).collect::<Vec<_>>().join(", ")
}

/// A spec's devices and the driver it names after `@` (`2xh100@580`: two H100s on an R580
/// driver), if it names one.
pub fn split_driver(spec: &str) -> (&str, Option<&str>) {
    match spec.rsplit_once('@') {
        Some((devices, driver)) => (devices.trim(), Some(driver.trim())),
        None => (spec, None),
    }
}

/// Parse a box spec into its devices, in physical order (a `@DRIVER` suffix must be a
/// driver version the simulator models, [`crate::profile::DriverProfile::parse`]).
pub fn parse_spec(spec: &str) -> Result<Vec<DeviceModel>, SpecError> {
    let err = |reason: String| SpecError {
        spec: spec.to_string(),
        reason,
        presets: preset_list(),
    };
    let (devices_part, driver) = split_driver(spec);
    if let Some(v) = driver {
        crate::profile::DriverProfile::parse(v).map_err(|e| err(format!("after `@`: {e}")))?;
    }
    let mut devices = Vec::new();
    for part in devices_part.split(',') {
        let part = part.trim();
        if part.is_empty() {
            return Err(err("empty device entry".into()));
        }
        let (count, model) = match part.split_once(['x', 'X']) {
            Some((n, rest)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => {
                let n: usize = n
                    .parse()
                    .map_err(|_| err(format!("bad count in {part:?}")))?;
                (n, rest.trim())
            }
            _ => (1, part),
        };
        if count == 0 {
            return Err(err(format!("zero devices in {part:?}")));
        }
        let model = device_model(model).ok_or_else(|| err(format!("unknown device {model:?}")))?;
        for _ in 0..count {
            devices.push(model.clone());
            if devices.len() > MAX_DEVICES {
                return Err(err(format!("more than {MAX_DEVICES} devices")));
            }
        }
    }
    Ok(devices)
}

fn device_model(s: &str) -> Option<DeviceModel> {
    let key = s.to_ascii_lowercase();
    if let Some(p) = PRESETS.iter().find(|p| p.key == key) {
        return Some(DeviceModel {
            name: p.name.to_string(),
            total: p.total,
            reserved: p.reserved,
            coherent: p.coherent,
            no_memory_info: p.no_memory_info,
        });
    }
    let total = parse_size(s).ok()?;
    if total < GIB {
        return None;
    }
    // Generic cards reserve about 1% (min 256 MiB), as real boards do.
    let reserved = (total / 100).max(256 * MIB);
    Some(DeviceModel {
        name: format!("Simulated GPU {}", human_total(total)),
        total,
        reserved,
        coherent: false,
        no_memory_info: false,
    })
}

fn human_total(total: u64) -> String {
    if total.is_multiple_of(GIB) {
        format!("{}GiB", total / GIB)
    } else {
        format!("{}MiB", total / MIB)
    }
}

/// Device facts the box does not carry, by product name: (compute capability, SM count).
pub fn arch_of(name: &str) -> ((i32, i32), i32) {
    let n = name.to_ascii_lowercase();
    if n.contains("gb200") || n.contains("b200") {
        ((10, 0), 148)
    } else if n.contains("h100") || n.contains("h200") {
        ((9, 0), 132)
    } else if n.contains("a100") {
        ((8, 0), 108)
    } else if n.contains("4090") {
        ((8, 9), 128)
    } else if n.contains("5090") {
        ((12, 0), 170)
    } else if n.contains("4060") {
        ((8, 9), 34)
    } else if n.contains("l40") {
        ((8, 9), 142)
    } else if n.contains("l4") {
        ((8, 9), 58)
    } else if n.contains("3090") {
        ((8, 6), 82)
    } else if n.contains("a10g") {
        ((8, 6), 80)
    } else if n.contains("a10") {
        ((8, 6), 72)
    } else if n.contains("v100") {
        ((7, 0), 80)
    } else if n.contains("t4") {
        ((7, 5), 40)
    } else {
        ((8, 0), 108)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inference_card_presets_have_their_nvidia_smi_totals() {
        for (key, mib, arch) in [
            ("l40s", 46068, (8, 9)),
            ("l40", 46068, (8, 9)),
            ("a10g", 23028, (8, 6)),
            ("rtx5090", 32607, (12, 0)),
            ("b200", 183359, (10, 0)),
        ] {
            let d = parse_spec(key).unwrap();
            assert_eq!(d[0].total, mib * MIB, "{key}");
            assert!(
                d[0].reserved > 0 && d[0].reserved < d[0].total / 50,
                "{key}"
            );
            assert_eq!(arch_of(&d[0].name).0, arch, "{key}");
        }
        assert_eq!(arch_of("NVIDIA L4").1, 58);
        assert_eq!(arch_of("NVIDIA A10").1, 72);
    }

    #[test]
    fn parses_counts_presets_and_sizes() {
        let d = parse_spec("2x24GiB").unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].total, 24 * GIB);
        assert_eq!(d[0].name, "Simulated GPU 24GiB");
        let d = parse_spec("rtx3090,rtx3090").unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[1].name, "NVIDIA GeForce RTX 3090");
        let d = parse_spec("h100").unwrap();
        assert_eq!(d[0].total, 81559 * MIB);
        let d = parse_spec("4xT4, h200").unwrap();
        assert_eq!(d.len(), 5);
        assert_eq!(d[4].name, "NVIDIA H200");
    }

    #[test]
    fn rejects_bad_specs() {
        assert!(parse_spec("").is_err());
        assert!(parse_spec("0xh100").is_err());
        assert!(parse_spec("gtx9999").is_err());
        assert!(parse_spec("100x24GiB").is_err());
        assert!(parse_spec("2x512MiB").is_err());
        let e = parse_spec("h1000").unwrap_err().to_string();
        assert!(e.contains("unknown device"), "{e}");
        assert!(e.contains("rtx3090"), "{e}");
    }
}
