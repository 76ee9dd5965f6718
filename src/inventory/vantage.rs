//! The vantage a scan reads from: which PID namespace vramdoc stands in (the host's or a
//! container's, from /proc and the `VRAMDOC_PIDNS` knob) and what the driver adds to it;
//! docs/findings.md "the vantage". Decided once per command, read by every rule that
//! depends on where vramdoc stands.

use super::container_hint;
use crate::gpu::Monitor;
use crate::host;
use crate::model::{Environment, Vantage};

/// Test and diagnostic knob: force the PID-namespace verdict (`host` or `container`).
pub const PIDNS_ENV: &str = "VRAMDOC_PIDNS";

pub use crate::model::PidNamespace;

/// The vantage, established once at the start of a command (scan, run, serve, preflight):
/// the PID namespace now ([`detect_pid_namespace`]); the driver's facts are added by the
/// first read of the driver ([`collect`], [`complete_vantage`]).
pub fn establish_vantage() -> Result<Vantage, crate::exit::UsageError> {
    Ok(Vantage::new(detect_pid_namespace()?, None))
}

/// The vantage of a command that reads the driver once, at its start (`run`): established
/// and completed with `environment` (read through `monitor`).
pub fn vantage_here(
    environment: &Environment,
    monitor: &dyn Monitor,
) -> Result<Vantage, crate::exit::UsageError> {
    Ok(complete_vantage(establish_vantage()?, environment, monitor))
}

/// `vantage` with the driver's facts read through `monitor` where it lacks them: the
/// version from `environment`, and which GPU device nodes (`nvidiaN`) exist.
pub fn complete_vantage(
    vantage: Vantage,
    environment: &Environment,
    monitor: &dyn Monitor,
) -> Vantage {
    let nodes = if vantage.device_nodes.is_some() {
        Vec::new()
    } else {
        gpu_node_names(&monitor.device_nodes())
    };
    vantage.with_driver(&environment.versions.driver, nodes)
}

/// The names of the GPU device nodes (`nvidiaN`) among `nodes` that exist, sorted by N.
fn gpu_node_names(nodes: &[std::path::PathBuf]) -> Vec<String> {
    let mut out: Vec<(u32, String)> = nodes
        .iter()
        .filter(|p| p.exists())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?;
            let n: u32 = name.strip_prefix("nvidia")?.parse().ok()?;
            Some((n, name.to_string()))
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, n)| n).collect()
}

/// Decide the PID namespace: `VRAMDOC_PIDNS=host|container` overrides; otherwise the
/// definitive check, the namespace's inode from `readlink /proc/self/ns/pid`
/// ([`decide_from_ns_link`]); where that cannot be read, the heuristics of
/// [`decide_pid_namespace`] (an `NSpid` line in /proc/self/status with more than one entry
/// means a child namespace; the kernel thread `kthreadd`, PID 2, is visible only from the
/// host namespace).
pub fn detect_pid_namespace() -> Result<PidNamespace, crate::exit::UsageError> {
    if let Ok(v) = std::env::var(PIDNS_ENV) {
        return match v.trim() {
            "host" => Ok(PidNamespace {
                host: true,
                reason: format!("{PIDNS_ENV}=host"),
            }),
            "container" => Ok(PidNamespace {
                host: false,
                reason: format!("{PIDNS_ENV}=container"),
            }),
            "" => detect_from_proc(),
            other => Err(crate::exit::UsageError(format!(
                "{PIDNS_ENV}={other:?}: write host or container, or unset it"
            ))),
        };
    }
    detect_from_proc()
}

fn detect_from_proc() -> Result<PidNamespace, crate::exit::UsageError> {
    if let Some(ns) = host::own_pidns_link().and_then(|l| decide_from_ns_link(&l)) {
        return Ok(ns);
    }
    // No NSpid line (kernels before 4.1): one namespace as far as we can tell.
    let nspid = host::own_nspid().len().max(1);
    let kthreadd = host::comm(2).is_ok_and(|c| c == b"kthreadd");
    let hidepid = host::proc_hidepid().ok().flatten();
    let sign = container_sign();
    Ok(decide_pid_namespace(
        nspid,
        kthreadd,
        hidepid.as_deref(),
        sign.as_deref(),
    ))
}

/// The inode of the initial PID namespace, `PROC_PID_INIT_INO` (0xEFFFFFFC) in the kernel's
/// `include/linux/proc_ns.h`: `readlink /proc/self/ns/pid` is `pid:[4026531836]` there and
/// nowhere else.
pub const INIT_PIDNS_INODE: u64 = 0xEFFF_FFFC;

/// The PID namespace from the text of `readlink /proc/self/ns/pid` (`pid:[INODE]`): the
/// initial namespace's inode is fixed ([`INIT_PIDNS_INODE`]), any other is a child
/// namespace. `None` for text of another shape.
pub fn decide_from_ns_link(link: &str) -> Option<PidNamespace> {
    let inode: u64 = link
        .trim()
        .strip_prefix("pid:[")?
        .strip_suffix(']')?
        .parse()
        .ok()?;
    Some(if inode == INIT_PIDNS_INODE {
        PidNamespace {
            host: true,
            reason: format!("/proc/self/ns/pid is pid:[{inode}], the initial PID namespace"),
        }
    } else {
        PidNamespace {
            host: false,
            reason: format!(
                "/proc/self/ns/pid is pid:[{inode}], not the initial namespace's \
                 pid:[{INIT_PIDNS_INODE}]: a container"
            ),
        }
    })
}

/// A sign of a container runtime other than hidden kernel threads: `/.dockerenv`,
/// `/run/.containerenv`, or a runtime named in PID 1's cgroup.
fn container_sign() -> Option<String> {
    for f in ["/.dockerenv", "/run/.containerenv"] {
        if std::path::Path::new(f).exists() {
            return Some(format!("{f} exists"));
        }
    }
    container_hint(1).map(|c| format!("PID 1's cgroup names {c}"))
}

/// The PID-namespace verdict from what /proc shows: `nspid` entries in our NSpid line,
/// whether kthreadd (PID 2) is visible, the /proc mount's `hidepid` option, and any other
/// container sign. Kernel threads hidden by `hidepid` are not taken for a container.
pub fn decide_pid_namespace(
    nspid: usize,
    kthreadd: bool,
    hidepid: Option<&str>,
    sign: Option<&str>,
) -> PidNamespace {
    if nspid > 1 {
        return PidNamespace {
            host: false,
            reason: format!("/proc/self/status NSpid lists {nspid} nested PID namespaces"),
        };
    }
    if kthreadd {
        return PidNamespace {
            host: true,
            reason: "kernel threads (kthreadd, PID 2) are visible".into(),
        };
    }
    match (hidepid, sign) {
        (Some(h), None) => PidNamespace {
            host: true,
            reason: format!(
                "kernel threads are hidden by the /proc mount option hidepid={h}, and nothing \
                 else says container"
            ),
        },
        (_, Some(sign)) => PidNamespace {
            host: false,
            reason: format!("kernel threads are not visible and {sign}: a container"),
        },
        (None, None) => PidNamespace {
            host: false,
            reason: "kernel threads are not visible: a child PID namespace (container)".into(),
        },
    }
}
