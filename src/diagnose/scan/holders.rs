//! Who keeps a GPU's memory alive through the driver's device files, for scan's
//! `no-live-owner` and the unattributed split ([`super::unattributed`]): a process NVML does
//! not list on the GPU that holds its device files open *and has a CUDA context* (its maps
//! show one: `host::DeviceMaps::has_context`). Descriptors alone say nothing: every NVML
//! client (nvidia-smi, dcgm-exporter, nvitop, vramdoc itself) holds `/dev/nvidiactl`,
//! `/dev/nvidiaN` and `/dev/nvidia-uvm` open and maps none of them, while a context, and a
//! child forked after one, maps `/dev/nvidiactl` (observed on an H200, 580.159.04,
//! 2026-11-28; docs/simulator.md, "Who holds memory through the device files"). A holder
//! whose maps could not be read is neither named nor cleared: the evidence says so.
//!
//! Also which holders concern a GPU: those holding its file (`nvidia<minor>`), or only the
//! control files (no GPU's file of this box), never those holding another GPU's file only.
//! [`maps_wanted`] is the same choice made before the maps are read, so scan reads the maps
//! of those holders only.

use crate::diagnose::evidence::ev;
use crate::gpu::DeviceInfo;
use crate::inventory::{Inventory, NodeHolder};
use crate::model::Evidence;

/// The holders of one GPU's device files that NVML does not list there as live owners.
#[derive(Debug, Default)]
pub struct DeviceHolders<'a> {
    /// With a CUDA context mapped: they keep memory alive (named by the finding).
    pub named: Vec<&'a NodeHolder>,
    /// Maps not readable (another user's process, `hidepid`): not named, not cleared.
    pub unknown: Vec<&'a NodeHolder>,
    /// Descriptors and no context (NVML clients): not holders.
    pub nvml_only: Vec<&'a NodeHolder>,
    /// System daemons and monitors by name (they hold every GPU's files by design).
    pub monitors: Vec<&'a NodeHolder>,
}

/// The device file name of `d` (`nvidia<minor>`: files are named by minor, not NVML index).
fn node_name(d: &DeviceInfo) -> String {
    format!("nvidia{}", d.minor.unwrap_or(d.index))
}

/// Whether `file` (a path as a descriptor link names it) is the file named `name`.
fn is_file(file: &str, name: &str) -> bool {
    std::path::Path::new(file)
        .file_name()
        .is_some_and(|f| f == name)
}

/// Whether a holder of `files` concerns device `d` of `devices`: it holds `d`'s file, or no
/// GPU file of `devices` at all (only the control files: which GPU is not known).
fn concerns<S: AsRef<str>>(files: &[S], d: &DeviceInfo, devices: &[DeviceInfo]) -> bool {
    let own = node_name(d);
    files.iter().any(|f| is_file(f.as_ref(), &own))
        || !files
            .iter()
            .any(|f| devices.iter().any(|x| is_file(f.as_ref(), &node_name(x))))
}

/// PIDs NVML lists on `d` as live owners (under host PIDs in a container every listed PID
/// counts as live: invisible is not dead there; `Inventory::invisible_is_dead`).
fn listed_live(inv: &Inventory, d: &DeviceInfo) -> Vec<u32> {
    let host = inv.invisible_is_dead();
    inv.processes
        .iter()
        .filter(|p| p.usage_on(d.index).is_some() && (p.visible || !host))
        .map(|p| p.pid)
        .collect()
}

/// The holders of `d`'s device files not listed on it, sorted into [`DeviceHolders`].
pub fn of_device<'a>(inv: &'a Inventory, d: &DeviceInfo) -> DeviceHolders<'a> {
    let listed = listed_live(inv, d);
    let mut out = DeviceHolders::default();
    for h in &inv.details.node_holders {
        if listed.contains(&h.pid) || !concerns(&h.nodes, d, inv.devices()) {
            continue;
        }
        let bucket = if h.name.as_deref().is_some_and(is_system_monitor) {
            &mut out.monitors
        } else {
            match h.context {
                Some(true) => &mut out.named,
                Some(false) => &mut out.nvml_only,
                None => &mut out.unknown,
            }
        };
        bucket.push(h);
    }
    out
}

/// Whether the maps of a holder named `name` holding `files` are evidence for a scan whose
/// `no-live-owner` concerns `flagged` (devices of `devices`): a holder that concerns one of
/// them and is not a system monitor by name (whose maps decide nothing).
pub fn maps_wanted(
    name: Option<&str>,
    files: &[std::path::PathBuf],
    flagged: &[&DeviceInfo],
    devices: &[DeviceInfo],
) -> bool {
    if name.is_some_and(is_system_monitor) {
        return false;
    }
    let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    flagged.iter().any(|d| concerns(&files, d, devices))
}

/// `PID N (name) user U`.
fn who(h: &NodeHolder) -> String {
    let mut who = format!("PID {}", h.pid);
    if let Some(n) = &h.name {
        who.push_str(&format!(" ({n})"));
    }
    if let Some(u) = &h.user {
        who.push_str(&format!(" user {u}"));
    }
    who
}

/// `PID N (name), ...`.
fn short(hs: &[&NodeHolder]) -> String {
    hs.iter()
        .map(|h| format!("PID {} ({})", h.pid, h.name.as_deref().unwrap_or("?")))
        .collect::<Vec<_>>()
        .join(", ")
}

impl DeviceHolders<'_> {
    /// Whether something may keep the memory alive: a named holder, or one whose maps could
    /// not be read.
    pub fn any_possible(&self) -> bool {
        !self.named.is_empty() || !self.unknown.is_empty()
    }

    /// Evidence lines: each named holder with its files, each unreadable one with what to
    /// do, then the NVML clients and the monitors (not holders).
    pub fn evidence(&self) -> Vec<Evidence> {
        let mut out: Vec<Evidence> = self
            .named
            .iter()
            .map(|h| {
                ev(
                    format!("{} holds GPU device files open", who(h)),
                    h.nodes.join(", "),
                )
            })
            .collect();
        out.extend(self.unknown.iter().map(|h| {
            ev(
                format!(
                    "{} holds GPU device files open; its maps are not readable",
                    who(h)
                ),
                "run as root to see whether it has a CUDA context (descriptors alone are \
                 what every NVML monitor holds)",
            )
        }));
        if !self.nvml_only.is_empty() {
            out.push(ev(
                "device files open with no CUDA context mapped (NVML clients, not holders)",
                short(&self.nvml_only),
            ));
        }
        if !self.monitors.is_empty() {
            out.push(ev(
                "system daemons and monitors with the device files open (not holders)",
                short(&self.monitors),
            ));
        }
        out
    }
}

/// System daemons and GPU monitors that keep the driver's device files open by design
/// (persistence daemon, DCGM host engine and exporter, the Kubernetes device plugin and
/// feature discovery, exporters, `nvidia-smi`, interactive monitors, vramdoc itself). Names
/// as the kernel's 15-byte `comm` shows them.
pub(crate) fn is_system_monitor(name: &str) -> bool {
    const KNOWN: &[&str] = &[
        "nvidia-persistenced",
        "nv-hostengine",
        "dcgm-exporter",
        "dcgmi",
        "nvidia-device-plugin",
        "gpu-feature-discovery",
        "nvidia_gpu_exporter",
        "nvidia-smi",
        "nvitop",
        "gpustat",
        "nvtop",
        "nvidia-dcgm",
    ];
    let n = name.trim();
    KNOWN.iter().any(|k| {
        let comm = &k[..k.len().min(15)];
        n == *k || n == comm
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::tests::{inv_with, proc_};
    use crate::inventory::CVD_UNSET;
    use crate::units::GIB;

    fn holder(pid: u32, name: &str, nodes: &[&str], context: Option<bool>) -> NodeHolder {
        NodeHolder {
            pid,
            name: Some(name.into()),
            user: Some("alice".into()),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            uvm_mapped: None,
            context,
        }
    }

    #[test]
    fn only_holders_with_a_context_are_named() {
        let mut inv = inv_with(1, vec![proc_(10, CVD_UNSET, &[(0, Some(GIB))])], &[], true);
        let ctl = "/dev/nvidiactl";
        inv.details.node_holders = vec![
            holder(10, "python3", &["/dev/nvidia0", ctl], Some(true)),
            holder(20, "python3", &["/dev/nvidia0", ctl], Some(true)),
            holder(21, "pynvml-loop", &["/dev/nvidia0", ctl], Some(false)),
            holder(22, "worker", &[ctl], None),
            holder(23, "nvidia-smi", &["/dev/nvidia0", ctl], None),
        ];
        let d = inv.devices()[0].clone();
        let hs = of_device(&inv, &d);
        let pids = |v: &[&NodeHolder]| v.iter().map(|h| h.pid).collect::<Vec<_>>();
        assert_eq!(pids(&hs.named), [20], "10 is listed on the GPU");
        assert_eq!(pids(&hs.nvml_only), [21]);
        assert_eq!(pids(&hs.unknown), [22], "control files only: any GPU's");
        assert_eq!(pids(&hs.monitors), [23]);
        assert!(hs.any_possible());
        let ev = hs.evidence();
        assert!(ev[0].label.starts_with("PID 20 (python3)"), "{ev:?}");
        assert!(ev[1].value.contains("run as root"), "{ev:?}");
        assert!(ev[2].value.contains("PID 21 (pynvml-loop)"), "{ev:?}");
        assert!(ev[3].value.contains("PID 23 (nvidia-smi)"), "{ev:?}");
        // An NVML client alone: nothing may keep the memory.
        inv.details.node_holders = vec![holder(21, "pynvml-loop", &[ctl], Some(false))];
        assert!(!of_device(&inv, &d).any_possible());
    }

    #[test]
    fn a_holder_of_another_gpu_s_file_only_does_not_concern_this_one() {
        let mut inv = inv_with(2, vec![proc_(10, CVD_UNSET, &[(0, Some(GIB))])], &[], true);
        let d1 = inv.devices()[1].clone();
        let other = holder(
            30,
            "python3",
            &["/dev/nvidia1", "/dev/nvidiactl"],
            Some(true),
        );
        inv.details.node_holders = vec![other];
        let d0 = inv.devices()[0].clone();
        assert!(of_device(&inv, &d0).named.is_empty());
        assert_eq!(of_device(&inv, &d1).named.len(), 1);
        // And its maps are not read for GPU 0's finding; a control-file holder's are, a
        // monitor's never.
        let f = |n: &str| vec![std::path::PathBuf::from(n)];
        let devs = inv.devices();
        assert!(!maps_wanted(None, &f("/dev/nvidia1"), &[&d0], devs));
        assert!(maps_wanted(None, &f("/dev/nvidia1"), &[&d0, &d1], devs));
        assert!(maps_wanted(None, &f("/dev/nvidiactl"), &[&d0], devs));
        assert!(maps_wanted(
            Some("python3"),
            &f("/dev/nvidia0"),
            &[&d0],
            devs
        ));
        assert!(!maps_wanted(
            Some("nvidia-smi"),
            &f("/dev/nvidia0"),
            &[&d0],
            devs
        ));
        assert!(!maps_wanted(None, &f("/dev/nvidia0"), &[], devs));
    }

    /// The rule: lost memory beside an NVML client names no holder; beside a process with
    /// a context it names that one; beside one whose maps were not read it names none and
    /// says how to see.
    #[test]
    fn no_live_owner_names_only_a_holder_with_a_context() {
        use crate::diagnose::no_live_owner;
        use crate::diagnose::Thresholds;
        let mut inv = inv_with(1, vec![], &[(0, 3 * GIB)], true);
        let files = ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"];
        let th = Thresholds::default();
        for (context, named) in [(Some(false), false), (Some(true), true), (None, false)] {
            inv.details.node_holders = vec![holder(40, "python3", &files, context)];
            let f = no_live_owner(&inv, &th);
            assert_eq!(f.len(), 1, "{context:?}");
            assert_eq!(
                f[0].title.contains("held open by PID 40 (python3)"),
                named,
                "{context:?}: {}",
                f[0].title
            );
            assert_eq!(f[0].pid, named.then_some(40), "{context:?}");
            let unreadable = f[0]
                .evidence
                .iter()
                .any(|e| e.value.contains("run as root"));
            assert_eq!(unreadable, context.is_none(), "{context:?}");
        }
    }
}
