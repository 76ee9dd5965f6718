//! Scan inventory: everything `vramdoc scan` reads about the machine, and nothing it decides.
//! GPU facts come through the [`Monitor`] trait (versions, one `devices()` call, one
//! `processes(i)` call per device: every query once per device per scan); facts about each
//! process come from /proc (user, name, redacted command line, `CUDA_VISIBLE_DEVICES`,
//! container hint, whether the PID exists in our PID namespace). Findings are decided from
//! this in `crate::diagnose`, never here.

use crate::gpu::{DeviceInfo, GpuError, Monitor};
use crate::report::{Environment, ProcessDeviceUsage, ProcessInfo};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::ErrorKind;

/// Test and diagnostic knob: force the PID-namespace verdict (`host` or `container`).
pub const PIDNS_ENV: &str = "VRAMDOC_PIDNS";

/// `CUDA_VISIBLE_DEVICES` value shown when the variable is not set for a process.
pub const CVD_UNSET: &str = "unset";
/// `CUDA_VISIBLE_DEVICES` value shown when /proc/PID/environ cannot be read.
pub const CVD_UNKNOWN: &str = "unknown";

/// Which PID namespace vramdoc runs in, and how that was decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PidNamespace {
    /// True in the host (initial) PID namespace, where NVML's PIDs are our PIDs.
    pub host: bool,
    /// One line: why we think so.
    pub reason: String,
}

impl PidNamespace {
    pub fn label(&self) -> &'static str {
        if self.host {
            "host"
        } else {
            "container"
        }
    }
}

/// Decide the PID namespace: `VRAMDOC_PIDNS=host|container` overrides; otherwise an `NSpid`
/// line in /proc/self/status with more than one entry means a child namespace; otherwise the
/// kernel thread `kthreadd` (PID 2) is visible only from the host namespace.
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
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        if let Some(line) = status.lines().find(|l| l.starts_with("NSpid:")) {
            let n = line.split_whitespace().count().saturating_sub(1);
            if n > 1 {
                return Ok(PidNamespace {
                    host: false,
                    reason: format!("/proc/self/status NSpid lists {n} nested PID namespaces"),
                });
            }
        }
    }
    let kthreadd = std::fs::read_to_string("/proc/2/comm")
        .map(|s| s.trim() == "kthreadd")
        .unwrap_or(false);
    Ok(if kthreadd {
        PidNamespace {
            host: true,
            reason: "kernel threads (kthreadd, PID 2) are visible".into(),
        }
    } else {
        PidNamespace {
            host: false,
            reason: "kernel threads are not visible: a child PID namespace (container)".into(),
        }
    })
}

/// Everything one scan read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    /// Host, versions and devices (as NVML numbers them, with memory at scan time).
    pub environment: Environment,
    /// Processes NVML lists on any device, merged by PID, sorted by PID.
    pub processes: Vec<ProcessInfo>,
    pub pid_namespace: PidNamespace,
}

impl Inventory {
    /// Devices as NVML numbers them (physical), with memory at scan time.
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.environment.devices
    }

    /// UUIDs in physical order (for `CUDA_VISIBLE_DEVICES` mapping).
    pub fn uuids(&self) -> Vec<String> {
        self.devices().iter().map(|d| d.uuid.clone()).collect()
    }
}

/// Collect one scan through `monitor`: `versions()` once, `devices()` once, `processes(i)`
/// once per device, then /proc for each PID.
pub fn collect(
    monitor: &dyn Monitor,
    sim_spec: Option<String>,
    pid_namespace: PidNamespace,
) -> Result<Inventory, GpuError> {
    let environment = crate::report::environment::collect(monitor, sim_spec)?;
    let mut by_pid: BTreeMap<u32, Vec<ProcessDeviceUsage>> = BTreeMap::new();
    for d in &environment.devices {
        for p in monitor.processes(d.index)? {
            by_pid.entry(p.pid).or_default().push(ProcessDeviceUsage {
                device: d.index,
                used: p.used,
            });
        }
    }
    let processes = by_pid
        .into_iter()
        .map(|(pid, mut usage)| {
            usage.sort_by_key(|u| u.device);
            process_info(pid, usage)
        })
        .collect();
    Ok(Inventory {
        environment,
        processes,
        pid_namespace,
    })
}

/// What /proc says about one PID (all optional: a PID may not exist here).
pub fn process_info(pid: u32, devices: Vec<ProcessDeviceUsage>) -> ProcessInfo {
    let process = i32::try_from(pid)
        .ok()
        .and_then(|p| procfs::process::Process::new(p).ok());
    let status = process.as_ref().and_then(|p| p.status().ok());
    let visible = status
        .as_ref()
        .is_some_and(|s| !matches!(s.state.chars().next(), Some('Z' | 'X')));
    let (Some(process), Some(status), true) = (process, status, visible) else {
        return ProcessInfo {
            pid,
            visible: false,
            user: None,
            name: None,
            cmdline: None,
            cuda_visible_devices: CVD_UNKNOWN.into(),
            container: None,
            devices,
        };
    };
    let name = Some(status.name.clone());
    let user = Some(user_name(status.ruid));
    let cmdline = process
        .cmdline()
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| crate::redact::redact_cmdline(&v));
    ProcessInfo {
        pid,
        visible: true,
        user,
        name,
        cmdline,
        cuda_visible_devices: cuda_visible_devices(pid),
        container: container_hint(pid),
        devices,
    }
}

fn split_nul(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// `CUDA_VISIBLE_DEVICES` of `pid`, through the one redaction function: the value, `unset`,
/// or `unknown` when /proc/PID/environ cannot be read (another user's process, gone).
pub fn cuda_visible_devices(pid: u32) -> String {
    match std::fs::read(format!("/proc/{pid}/environ")) {
        Ok(bytes) => cvd_from_environ(&bytes),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => CVD_UNKNOWN.into(),
        Err(_) => CVD_UNKNOWN.into(),
    }
}

/// `CUDA_VISIBLE_DEVICES` from the bytes of an environ file (NUL-separated `K=V`).
pub fn cvd_from_environ(bytes: &[u8]) -> String {
    const KEY: &str = "CUDA_VISIBLE_DEVICES";
    for entry in split_nul(bytes) {
        if let Some((k, v)) = entry.split_once('=') {
            if k == KEY {
                return crate::redact::redact_env(k, v).unwrap_or_else(|| CVD_UNKNOWN.into());
            }
        }
    }
    CVD_UNSET.into()
}

/// A container runtime named in /proc/PID/cgroup (`docker`, `kubepods`, `containerd`,
/// `podman`, `lxc`, `crio`), if any.
pub fn container_hint(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    container_from_cgroup(&text)
}

pub fn container_from_cgroup(text: &str) -> Option<String> {
    const HINTS: &[(&str, &str)] = &[
        ("kubepods", "kubepods"),
        ("docker", "docker"),
        ("libpod", "podman"),
        ("crio", "crio"),
        ("containerd", "containerd"),
        ("lxc", "lxc"),
    ];
    let lower = text.to_ascii_lowercase();
    HINTS
        .iter()
        .find(|(needle, _)| lower.contains(needle))
        .map(|(_, name)| name.to_string())
}

/// The login name of `uid` from /etc/passwd, or the number.
fn user_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let mut it = l.split(':');
                let name = it.next()?;
                let _pw = it.next()?;
                let id: u32 = it.next()?.parse().ok()?;
                (id == uid).then(|| name.to_string())
            })
        })
        .unwrap_or_else(|| uid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cvd_from_environ_bytes() {
        assert_eq!(
            cvd_from_environ(b"HOME=/root\0CUDA_VISIBLE_DEVICES=1,0\0"),
            "1,0"
        );
        assert_eq!(cvd_from_environ(b"HOME=/root\0"), CVD_UNSET);
        assert_eq!(cvd_from_environ(b"CUDA_VISIBLE_DEVICES=\0"), "");
    }

    #[test]
    fn cgroup_hints() {
        assert_eq!(
            container_from_cgroup("0::/system.slice/docker-abc.scope\n").as_deref(),
            Some("docker")
        );
        assert_eq!(
            container_from_cgroup("0::/kubepods/burstable/pod1/x\n").as_deref(),
            Some("kubepods")
        );
        assert_eq!(
            container_from_cgroup("0::/user.slice/session-1.scope\n"),
            None
        );
    }

    #[test]
    fn own_process_and_child_env_are_read() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("CUDA_VISIBLE_DEVICES", "1")
            .spawn()
            .unwrap();
        // Wait until the child has exec'd (before that /proc shows the test binary).
        let mut info = process_info(child.id(), vec![]);
        for _ in 0..400 {
            // exec sets the name before the new command line: wait for both.
            if info.name.as_deref() == Some("sleep") && info.cmdline.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            info = process_info(child.id(), vec![]);
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(info.visible);
        assert_eq!(info.name.as_deref(), Some("sleep"));
        assert_eq!(info.cmdline.as_deref(), Some("sleep 30"));
        assert_eq!(info.cuda_visible_devices, "1");
        assert!(info.user.is_some());
        // Reaped: no longer visible.
        let gone = process_info(child.id(), vec![]);
        assert!(!gone.visible);
        assert_eq!(gone.cuda_visible_devices, CVD_UNKNOWN);
    }

    #[test]
    fn unreadable_environ_is_unknown_not_failure() {
        // A PID that does not exist.
        assert_eq!(cuda_visible_devices(u32::MAX - 1), CVD_UNKNOWN);
        // PID 1's environ is unreadable unless we are root (or PID 1 is ours).
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root && std::fs::read("/proc/1/environ").is_err() {
            assert_eq!(cuda_visible_devices(1), CVD_UNKNOWN);
        }
    }
}
