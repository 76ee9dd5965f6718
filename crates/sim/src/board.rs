//! What a GPU board reports besides memory, by product name: the facts NVML monitors (nvitop,
//! gpustat, exporters) query — fan, power, clocks, ECC, MIG capability, persistence — and
//! which of them the board does not have (NVML answers `NVML_ERROR_NOT_SUPPORTED`, shown as
//! "N/A"). The simulator models no load: utilization is 0 %, power is the idle draw.
//!
//! Sources (docs/simulator.md): nvml.h ("For all discrete products with dedicated fans",
//! "Only applicable to devices with ECC", "For Ampere or newer" MIG); nvidia-smi captures:
//! fan `N/A` on datacenter boards (V100-SXM2 `N/A 35C P0 67W / 300W`, pytorch-lightning
//! #18845; GH200 `N/A 38C P0 106W / 900W`; GB200 `N/A 38C P0 181W / 1200W`), a percentage on
//! GeForce (`49% 53C P0 65W / 170W`, nvtop#448); ECC `Off` on an RTX 4090 and `N/A` on other
//! GeForce boards; Persistence and Display Mode `Enabled`, Display Active `Disabled` on A100
//! and T4 (NVIDIA/CUDALibrarySamples#104, nvidia-docker#1628); power caps and clocks from
//! NVIDIA's product specifications.

/// Facts of one board.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Board {
    /// A datacenter board (passively cooled, ECC, serial number, persistence on).
    pub datacenter: bool,
    /// Power cap (enforced limit), watts.
    pub power_limit_w: u32,
    /// Draw with nothing running, watts.
    pub idle_power_w: u32,
    /// Maximum SM (graphics) clock, MHz.
    pub max_sm_mhz: u32,
    /// Maximum memory clock, MHz.
    pub max_mem_mhz: u32,
    /// ECC: `None` not supported; `Some(enabled)`.
    pub ecc: Option<bool>,
    /// MIG capable (Ampere and newer datacenter boards).
    pub mig: bool,
}

impl Board {
    /// Whether the board has a fan NVML can read (datacenter boards are passively cooled).
    pub fn has_fan(&self) -> bool {
        !self.datacenter
    }
}

/// The board facts of a product name (generic datacenter values for unknown names).
pub fn board_of(name: &str) -> Board {
    let n = name.to_ascii_lowercase();
    /// (key, datacenter, cap W, idle W, SM MHz, mem MHz, ecc, mig)
    type Row = (&'static str, bool, u32, u32, u32, u32, Option<bool>, bool);
    const BOARDS: &[Row] = &[
        ("gb200", true, 1200, 160, 2062, 3996, Some(true), true),
        ("gh200", true, 900, 100, 1980, 2619, Some(true), true),
        ("b200", true, 1000, 140, 1965, 4000, Some(true), false),
        ("h200", true, 700, 75, 1980, 3201, Some(true), true),
        ("h100", true, 700, 70, 1980, 2619, Some(true), true),
        ("a100", true, 400, 55, 1410, 1593, Some(true), true),
        ("v100", true, 300, 40, 1530, 877, Some(true), false),
        ("t4", true, 70, 10, 1590, 5001, Some(true), false),
        ("l40s", true, 350, 35, 2520, 9001, Some(true), false),
        ("nvidia l40", true, 300, 35, 2490, 9001, Some(true), false),
        ("nvidia l4", true, 72, 12, 2040, 6251, Some(true), false),
        ("a10g", true, 300, 15, 1710, 6251, Some(true), false),
        ("nvidia a10", true, 150, 20, 1695, 6251, Some(true), false),
        ("rtx 5090", false, 575, 20, 3090, 14001, None, false),
        ("rtx 4090", false, 450, 25, 3105, 10501, Some(false), false),
        ("rtx 4060 ti", false, 165, 10, 2535, 9001, None, false),
        ("rtx 3090", false, 350, 30, 2100, 9751, None, false),
    ];
    for (key, datacenter, cap, idle, sm, mem, ecc, mig) in BOARDS {
        if n.contains(key) {
            return Board {
                datacenter: *datacenter,
                power_limit_w: *cap,
                idle_power_w: *idle,
                max_sm_mhz: *sm,
                max_mem_mhz: *mem,
                ecc: *ecc,
                mig: *mig,
            };
        }
    }
    Board {
        datacenter: true,
        power_limit_w: 300,
        idle_power_w: 40,
        max_sm_mhz: 1500,
        max_mem_mhz: 1500,
        ecc: Some(true),
        mig: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_get_their_boards() {
        for p in crate::spec::PRESETS {
            let b = board_of(p.name);
            assert!(b.idle_power_w < b.power_limit_w, "{}", p.name);
            assert!(b.max_sm_mhz > 0 && b.max_mem_mhz > 0, "{}", p.name);
        }
        assert!(!board_of("NVIDIA H100 80GB HBM3").has_fan());
        assert!(board_of("NVIDIA GeForce RTX 4090").has_fan());
        assert_eq!(board_of("NVIDIA GeForce RTX 3090").ecc, None);
        assert_eq!(board_of("NVIDIA GeForce RTX 4090").ecc, Some(false));
        assert!(board_of("NVIDIA A100-SXM4-40GB").mig);
        assert!(!board_of("Tesla T4").mig);
        assert_eq!(board_of("NVIDIA GB200").power_limit_w, 1200);
        assert_eq!(board_of("NVIDIA GH200 480GB").power_limit_w, 900);
        // Names that contain another preset's key get their own board.
        assert_eq!(board_of("NVIDIA L40S").power_limit_w, 350);
        assert_eq!(board_of("NVIDIA L40").power_limit_w, 300);
        assert_eq!(board_of("NVIDIA L4").power_limit_w, 72);
        assert_eq!(board_of("NVIDIA A10G").power_limit_w, 300);
        assert_eq!(board_of("NVIDIA A10").power_limit_w, 150);
        assert_eq!(board_of("NVIDIA B200").power_limit_w, 1000);
        assert!(board_of("NVIDIA GeForce RTX 5090").has_fan());
    }
}
