//! Starting a container process: cgroups joined, mount namespace with only the container's
//! GPU device files (and the volume-mounts device list), the runtime's environment, then
//! `exec` of the command. Everything the child does between `fork` and `exec` is a raw
//! system call on data prepared beforehand (no allocation, no lock), so it is safe in a
//! multi-threaded daemon.

use super::{Cgroups, ContainerError, ContainerRecord, ContainerSpec, NVIDIA_VISIBLE_DEVICES};
use crate::SimBox;
use std::ffi::{CString, OsString};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The three standard streams of a container process.
pub struct Stdio3 {
    pub stdin: Stdio,
    pub stdout: Stdio,
    pub stderr: Stdio,
}

impl Stdio3 {
    /// Inherit the caller's streams.
    pub fn inherit() -> Stdio3 {
        Stdio3 {
            stdin: Stdio::inherit(),
            stdout: Stdio::inherit(),
            stderr: Stdio::inherit(),
        }
    }
}

/// A started container: its main process and its record (not yet written).
pub struct Started {
    pub child: Child,
    pub record: ContainerRecord,
    /// Cgroup directories created for it, to remove after it exits.
    pub created_cgroups: Vec<PathBuf>,
}

fn cstr(p: &Path) -> Result<CString, ContainerError> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| ContainerError::Spawn(format!("{}: path contains a NUL byte", p.display())))
}

/// What the child does before exec, prepared in the parent.
struct Plan {
    /// Raw descriptors of `cgroup.procs` files (kept open by `_procs`).
    procs: Vec<i32>,
    /// The box's `dev/` directory (mount target of the tmpfs).
    dev: CString,
    /// A descriptor number the bind sources go through (`/proc/self/fd/<n>/…`): reopened on
    /// `dev` inside the new namespace (a bind mount's source must be in the caller's
    /// namespace), before the tmpfs hides it.
    dev_fd: i32,
    /// (source, target, is_dir) bind mounts into the new `dev/`.
    binds: Vec<(CString, CString, bool)>,
    /// The volume-mounts list: its root and (target) entries, each bound to /dev/null.
    volume_root: Option<CString>,
    volume_entries: Vec<CString>,
}

fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Plan {
    /// Runs in the child between fork and exec: only system calls on prepared data.
    fn apply(&self) -> std::io::Result<()> {
        for fd in &self.procs {
            // Writing 0 moves the writing process (v1 and v2).
            // SAFETY: write(2) of 1 byte from a static buffer to an inherited descriptor.
            if unsafe { libc::write(*fd, b"0".as_ptr().cast(), 1) } != 1 {
                return Err(std::io::Error::last_os_error());
            }
        }
        let tmpfs = c"tmpfs";
        let none = c"none";
        let mode = c"mode=755";
        // SAFETY: unshare/mount/open/close/mkdir with NUL-terminated strings prepared before
        // fork; none allocates or takes a lock.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS))?;
            check(libc::mount(
                none.as_ptr(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            let fd = libc::open(
                self.dev.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            );
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::dup3(fd, self.dev_fd, libc::O_CLOEXEC) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(fd);
            check(libc::mount(
                tmpfs.as_ptr(),
                self.dev.as_ptr(),
                tmpfs.as_ptr(),
                libc::MS_NOSUID,
                mode.as_ptr().cast(),
            ))?;
            for (src, dst, dir) in &self.binds {
                if *dir {
                    check(libc::mkdir(dst.as_ptr(), 0o755))?;
                } else {
                    let fd = libc::open(
                        dst.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o666,
                    );
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    libc::close(fd);
                }
                check(libc::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                ))?;
            }
            if let Some(root) = &self.volume_root {
                check(libc::mount(
                    tmpfs.as_ptr(),
                    root.as_ptr(),
                    tmpfs.as_ptr(),
                    libc::MS_NOSUID,
                    mode.as_ptr().cast(),
                ))?;
                for e in &self.volume_entries {
                    let fd = libc::open(
                        e.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o644,
                    );
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    libc::close(fd);
                    check(libc::mount(
                        c"/dev/null".as_ptr(),
                        e.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND,
                        std::ptr::null(),
                    ))?;
                }
            }
        }
        Ok(())
    }
}

/// Start `cmd` as container `id` on the box: see the module docs. `env` is the container's
/// whole environment before the runtime adds `NVIDIA_VISIBLE_DEVICES` (any value in it is
/// replaced).
pub fn spawn(
    sim: &SimBox,
    spec: &ContainerSpec,
    id: &str,
    cmd: &[OsString],
    env: &[(OsString, OsString)],
    cwd: Option<&Path>,
    stdio: Stdio3,
) -> Result<Started, ContainerError> {
    let Some(program) = cmd.first() else {
        return Err(ContainerError::Spawn("no command to run".into()));
    };
    let boxdir = std::fs::canonicalize(sim.dir())
        .map_err(|e| ContainerError::Sim(crate::io_err(sim.dir())(e)))?;
    let dev = boxdir.join(crate::DEV_DIR);
    let dev_fd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(&dev)
        .map_err(|e| ContainerError::Sim(crate::io_err(&dev)(e)))?;
    let via = PathBuf::from(format!("/proc/self/fd/{}", dev_fd.as_raw_fd()));
    let mut binds = Vec::new();
    let mut names: Vec<(String, bool)> = spec
        .gpus
        .iter()
        .filter_map(|i| sim.device(*i).ok())
        .map(|d| (d.node_name(), false))
        .collect();
    names.push(("nvidiactl".into(), false));
    // The runtime mounts /dev/nvidia-uvm too (managed memory); boxes made before it have none.
    if dev.join(crate::UVM_NODE).exists() {
        names.push((crate::UVM_NODE.into(), false));
    }
    names.push((crate::CLIENTS_DIR.into(), true));
    for (name, dir) in names {
        binds.push((cstr(&via.join(&name))?, cstr(&dev.join(&name))?, dir));
    }
    let entries = spec.volume_entries(sim);
    let (volume_root, volume_entries) = if spec.strategy == super::Strategy::VolumeMounts {
        let root = Path::new(super::VOLUME_MOUNTS_ROOT);
        // The mount point must exist on the host (an empty directory, as a runtime creates
        // mount points in the container's root); the list itself is only in the namespace.
        std::fs::create_dir_all(root).map_err(|e| ContainerError::Refused {
            what: format!("creating the mount point {}", root.display()),
            source: e,
        })?;
        let list = entries
            .iter()
            .map(|e| cstr(&root.join(e)))
            .collect::<Result<Vec<_>, _>>()?;
        (Some(cstr(root)?), list)
    } else {
        (None, Vec::new())
    };
    let cgroup_rel = spec.cgroup.as_ref().map(|c| c.replace("{id}", id));
    let cgroups = match &cgroup_rel {
        Some(rel) => Cgroups::create(rel)?,
        None => Cgroups::default(),
    };
    let procs_files = match cgroups.procs_files() {
        Ok(f) => f,
        Err(e) => {
            cgroups.remove();
            return Err(e);
        }
    };
    let plan = Plan {
        procs: procs_files.iter().map(|f| f.as_raw_fd()).collect(),
        dev: cstr(&dev)?,
        dev_fd: dev_fd.as_raw_fd(),
        binds,
        volume_root,
        volume_entries,
    };
    let visible = spec.visible_env(sim);
    let mut command = Command::new(program);
    command
        .args(&cmd[1..])
        .env_clear()
        .envs(
            env.iter()
                .filter(|(k, _)| k != NVIDIA_VISIBLE_DEVICES)
                .map(|(k, v)| (k, v)),
        )
        .env(NVIDIA_VISIBLE_DEVICES, &visible)
        .stdin(stdio.stdin)
        .stdout(stdio.stdout)
        .stderr(stdio.stderr);
    if let Some(d) = cwd {
        command.current_dir(d);
    }
    // SAFETY: `Plan::apply` only makes system calls on data prepared above.
    unsafe {
        command.pre_exec(move || plan.apply());
    }
    let child = command.spawn().map_err(|e| {
        cgroups.remove();
        match e.kind() {
            std::io::ErrorKind::NotFound => ContainerError::Spawn(format!(
                "{}: command not found",
                program.to_string_lossy()
            )),
            _ if e.raw_os_error().is_some_and(|c| c == libc::EPERM || c == libc::EACCES || c == libc::EROFS) => {
                ContainerError::Refused {
                    what: "setting up the container (cgroup, mount namespace, device mounts)".into(),
                    source: e,
                }
            }
            _ => ContainerError::Spawn(format!(
                "starting {}: {e} (while setting up its cgroup and mount namespace, or executing it)",
                program.to_string_lossy()
            )),
        }
    })?;
    drop(procs_files);
    drop(dev_fd);
    let record = ContainerRecord {
        id: id.to_string(),
        pid: child.id(),
        spec: spec.clone(),
        gpu_uuids: spec
            .gpus
            .iter()
            .filter_map(|i| sim.device(*i).ok())
            .map(|d| d.uuid.clone())
            .collect(),
        nvidia_visible_devices: visible,
        cgroups: cgroups.dirs.clone(),
        cgroup: cgroup_rel.map(|r| format!("/{}", r.trim_start_matches('/'))),
        command: cmd
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        started: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        exit_code: None,
    };
    Ok(Started {
        child,
        record,
        created_cgroups: cgroups.created().to_vec(),
    })
}
