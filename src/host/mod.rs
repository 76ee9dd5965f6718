//! The one door to the host: every `/proc` read vramdoc does, over the `procfs` crate where
//! it has the API, with typed errors ([`HostError`]). [`process`] reads one process (its
//! stat and liveness with start time, status and `NSpid`, comm, command line, environment,
//! cgroup, open descriptors) and lists PIDs; [`devfiles`] which of the driver's device files a
//! process holds open and the bytes it maps from the UVM device file; [`system`] reads the machine (hostname, kernel
//! release, the /proc mount's `hidepid`, user names); [`cgroup`] reads what job membership
//! needs beyond one process (cgroup mounts, the boot clock in start-time
//! ticks) and where a process's cgroup places it (container, Kubernetes pod); [`kubelet`]
//! reads the kubelet's pod and container log directories (pod names without API-server
//! credentials) and its plugin registration directory (which DRA plugins are registered), and [`podresources`] asks the kubelet's pod-resources gRPC socket which devices
//! each pod was allocated; [`devices`] which GPU device files a process can open (its view of
//! `/dev`, its v1 device cgroup); [`files`] holds the machine-wide files those readings share
//! (`/etc/passwd`, the mount table, `devices.list`), read once per scan. Callers decide what a fact means (a
//! finding, a tree member); nothing here interprets it beyond parsing. Read by hand, each
//! saying why: `stat` and `fd` (fewer syscalls for scans of every process), `comm`,
//! `environ` (the first of a repeated key, as `getenv`), hostname and kernel release.

pub mod cgroup;
pub mod container;
pub mod devfiles;
pub mod devices;
pub mod files;
pub mod kubelet;
pub mod podresources;
pub mod process;
pub mod system;

pub use cgroup::{cgroup_mounts, place_of, ticks_per_second, ticks_since_boot, CgroupPlace};
pub use devfiles::{
    canonical_nodes, device_maps, held_nodes, is_uvm_node, node_index, uvm_mapped_bytes, DeviceMaps,
};
pub use files::HostFiles;
pub use process::{
    cgroup_paths, cmdline, comm, environ, fd_targets, is_alive, nspid, own_nspid, own_pidns_link,
    pids, start_time, stat, status, Environ, Stat, Status,
};
pub use system::{hidepid_of, hostname, kernel_release, proc_hidepid, user_name};

use std::path::PathBuf;

/// A `/proc` read that failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The process does not exist in this PID namespace (never did, exited and was reaped,
    /// or its PID is out of range).
    #[error("process {pid} does not exist here")]
    Gone { pid: u32 },
    /// The file exists but is not ours to read (another user's environ, `hidepid`).
    #[error("{}: permission denied", .path.display())]
    PermissionDenied { path: PathBuf },
    /// The kernel gave a text that could not be parsed.
    #[error("{}: {reason}", .path.display())]
    Malformed { path: PathBuf, reason: String },
    /// Any other I/O error.
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl HostError {
    /// Whether the process is simply not there (gone, or never was): the common case of a
    /// PID that raced its own exit, not a failure worth reporting.
    pub fn is_gone(&self) -> bool {
        matches!(self, HostError::Gone { .. })
    }

    /// Map a procfs error of a read about `pid` (or of the machine, when `None`).
    fn from_proc(pid: Option<u32>, e: procfs::ProcError) -> HostError {
        use procfs::ProcError as E;
        let path = |p: Option<PathBuf>| p.unwrap_or_else(|| PathBuf::from("/proc"));
        match e {
            E::NotFound(p) => match pid {
                Some(pid) => HostError::Gone { pid },
                None => HostError::Io {
                    path: path(p),
                    source: std::io::ErrorKind::NotFound.into(),
                },
            },
            E::PermissionDenied(p) => HostError::PermissionDenied { path: path(p) },
            E::Io(source, p) => HostError::from_io(pid, path(p), source),
            E::Incomplete(p) => HostError::Malformed {
                path: path(p),
                reason: "incomplete".into(),
            },
            E::Other(reason) => HostError::Malformed {
                path: path(None),
                reason,
            },
            E::InternalError(e) => HostError::Malformed {
                path: path(None),
                reason: e.to_string(),
            },
        }
    }

    /// Map an I/O error reading `path` about `pid`: a missing file or a process that exited
    /// while being read (`ESRCH`) is [`HostError::Gone`].
    fn from_io(pid: Option<u32>, path: PathBuf, source: std::io::Error) -> HostError {
        let gone = source.kind() == std::io::ErrorKind::NotFound
            || source.raw_os_error() == Some(libc::ESRCH);
        match (pid, source.kind()) {
            (Some(pid), _) if gone => HostError::Gone { pid },
            (_, std::io::ErrorKind::PermissionDenied) => HostError::PermissionDenied { path },
            _ => HostError::Io { path, source },
        }
    }
}
