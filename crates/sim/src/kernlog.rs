//! The box's kernel log (`BOX/kern.log`): the lines a real NVIDIA driver writes to the kernel
//! ring buffer when it reports an Xid, appended by `vramdoc sim fault --xid N` so that log
//! readers (`vramdoc serve --kernel-log BOX/kern.log`) see them as on a real node. The line's
//! shape is the open driver's (NVIDIA/open-gpu-kernel-modules
//! `src/nvidia/src/kernel/gpu/rc/kernel_rc.c`: `NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s,
//! name=%s, <message>`); the messages are those of NVIDIA's Xid catalogue
//! (<https://docs.nvidia.com/deploy/xid-errors/index.html>).

use crate::{SimBox, SimError};
use std::io::Write;
use std::path::PathBuf;

/// The kernel log's file name in the box.
pub const KERN_LOG: &str = "kern.log";

/// The driver's message for an Xid (what the catalogue's "Xid message" column shows).
pub fn message(code: u32) -> &'static str {
    match code {
        13 => "Graphics Exception: ESR 0x404490=0x80000002",
        31 => "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x0_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
        43 => "Ch 00000008",
        48 => "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer",
        63 => "Row Remapper: New row marked for remapping, reset gpu to activate.",
        64 => "Row Remapper: Failed to remap row",
        74 => "NVLink: fatal error detected on link 0",
        79 => "GPU has fallen off the bus.",
        94 => "Contained: SM (0x1). RST: No, D-RST: No",
        95 => "Uncontained: FBHUB. RST: Yes, D-RST: No",
        _ => "Xid reported by the simulated driver",
    }
}

/// The box's kernel log path.
pub fn path(sim: &SimBox) -> PathBuf {
    sim.dir().join(KERN_LOG)
}

/// Append device `device`'s Xid `code` line to the box's kernel log; returns the line.
pub fn append_xid(sim: &SimBox, device: u32, code: u32) -> Result<String, SimError> {
    let pci = crate::pci_bus_id(device);
    // NVML's `00000000:17:00.0` → the driver's `0000:17:00`.
    let short = pci
        .split_once(':')
        .map(|(dom, rest)| {
            let dom = &dom[dom.len().saturating_sub(4)..];
            format!("{dom}:{}", rest.trim_end_matches(".0"))
        })
        .unwrap_or(pci)
        .to_ascii_lowercase();
    let line = format!(
        "NVRM: Xid (PCI:{short}): {code}, pid='<unknown>', name=<unknown>, {}",
        message(code)
    );
    let p = path(sim);
    let io = |source| SimError::Io {
        path: p.clone(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&p)
        .map_err(io)?;
    f.write_all(format!("{line}\n").as_bytes()).map_err(io)?;
    Ok(line)
}
