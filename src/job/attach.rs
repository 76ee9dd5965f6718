//! Attach (`vramdoc run --pid PID`, `--cgroup PATH`, `--container ID`): record processes
//! vramdoc did not start — a server that leaks for days, a job under a scheduler — with the
//! same recorder, report and findings as `run -- CMD`, until the process exits (or the cgroup
//! empties), `--duration` passes, or vramdoc gets SIGINT/SIGTERM/SIGHUP (which stop the
//! recording and are not passed on: the job keeps running). Markers come through
//! `vramdoc mark --pid PID TEXT`, which appends to a per-PID marker file in a directory
//! only this user can write ([`marker_file`]).

use super::markers::{MarkError, MarkerTail};
use super::{process::Exit, recorder_config, signals, Feed, JobError, JobRun, JobSpec, TICK};
use crate::gpu::{DeviceInfo, Monitor};
use crate::model::MarkerKind;
use crate::record::tree::{CgroupMatch, Scope};
use crate::record::{JobEnd, Recorder};
use std::path::{Path, PathBuf};
use std::time::Instant;
use thiserror::Error;

/// A PID no process has: the root of a scope made of cgroup matches only.
const NO_ROOT: u32 = u32::MAX;

/// What to attach to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Target {
    pub pid: Option<u32>,
    /// A cgroup path as `/proc/PID/cgroup` shows it, or its directory under a cgroup mount.
    pub cgroup: Option<PathBuf>,
    /// A container id (at least 12 hex digits).
    pub container: Option<String>,
}

/// Why vramdoc cannot attach, or `vramdoc mark --pid` cannot write.
#[derive(Debug, Error)]
pub enum AttachError {
    #[error("process {0} does not exist (or has exited): pass the PID of a running process, as `ps` shows it")]
    NoProcess(u32),
    #[error("--container {0:?}: give the container id (at least 12 of its hex digits, as `docker ps` shows it)")]
    BadContainer(String),
    #[error("--cgroup {0}: not a cgroup path (write it as /proc/PID/cgroup shows it, e.g. /docker/ID, or as its directory under /sys/fs/cgroup)")]
    BadCgroup(String),
    #[error("no `vramdoc run --pid {0}` is recording that process (as this user)")]
    NotAttached(u32),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> AttachError + '_ {
    move |source| AttachError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The directory of the attach marker files: `$XDG_RUNTIME_DIR/vramdoc`, else
/// `TMPDIR/vramdoc-UID`, created mode 0700; refused when it is a link or another user's.
fn marker_dir(create: bool) -> Result<PathBuf, AttachError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("vramdoc"),
        None => std::env::temp_dir().join(format!("vramdoc-{uid}")),
    };
    if create {
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(&dir)(e)),
        }
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(io(&dir))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(io(&dir)(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "not a directory of this user's only (remove it and try again)",
        )));
    }
    Ok(dir)
}

/// This user's private directory (the one of the attach markers), created if needed:
/// `$XDG_RUNTIME_DIR/vramdoc`, else `TMPDIR/vramdoc-UID`, mode 0700, refused when it is a
/// link or another user's. vramdoc never removes it, so a path under it that vramdoc gives
/// up can only be made again by this user (`run --torch-memory`'s hook directory, issue 39
/// item 3).
pub fn user_dir() -> Result<PathBuf, AttachError> {
    marker_dir(true)
}

/// The name of the marker file of one `vramdoc run --pid` (`key`: the attached PID, by
/// vramdoc's own for a cgroup or container), owned by the recording vramdoc `own`: two
/// recordings attached to one PID each have their own file (issue 29 item 12: the first to
/// end removed the other's).
fn marker_name(key: u32, own: u32) -> String {
    format!("attach-{key}-{own}.markers")
}

/// The marker files of every `vramdoc run --pid PID` recording now attached to `pid`.
pub fn marker_files(pid: u32) -> Result<Vec<PathBuf>, AttachError> {
    let dir = marker_dir(false).map_err(|_| AttachError::NotAttached(pid))?;
    let prefix = format!("attach-{pid}-");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|_| AttachError::NotAttached(pid))?
        .flatten()
        .filter(|e| {
            e.file_name().to_str().is_some_and(|n| {
                n.strip_prefix(&prefix)
                    .and_then(|r| r.strip_suffix(".markers"))
                    .is_some_and(|own| !own.is_empty() && own.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .map(|e| e.path())
        .collect();
    files.sort();
    Ok(files)
}

/// `vramdoc mark --pid PID TEXT`: append one line to the marker file of every recording
/// attached to `pid`.
pub fn mark(pid: u32, text: &str) -> Result<(), AttachError> {
    let mut marked = false;
    for path in marker_files(pid)? {
        // Anything but a regular file put in its place (a FIFO would hang the marking job):
        // not a recording's; a recording that ended meanwhile: gone.
        match super::markers::append_line(&path, text) {
            Ok(()) => marked = true,
            Err(MarkError::Write { source, .. }) => return Err(io(&path)(source)),
            Err(_) => {}
        }
    }
    if marked {
        Ok(())
    } else {
        Err(AttachError::NotAttached(pid))
    }
}

/// The marker file while attached; removed on drop.
struct AttachMarkers {
    path: Option<PathBuf>,
}

impl Drop for AttachMarkers {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The cgroup path `given` names: as /proc/PID/cgroup shows it, or a directory under a
/// cgroup mount (whose mount point is cut off).
fn cgroup_path(given: &Path) -> Result<String, AttachError> {
    let bad = || AttachError::BadCgroup(crate::term::one_line(&given.display().to_string()));
    let s = given.to_str().ok_or_else(bad)?;
    if !s.starts_with('/') {
        return Err(bad());
    }
    let mounts = crate::host::cgroup_mounts().unwrap_or_default();
    for m in mounts {
        if let Ok(rest) = given.strip_prefix(&m) {
            let rest = rest.to_str().ok_or_else(bad)?;
            return Ok(format!("/{}", rest.trim_matches('/')));
        }
    }
    if s.starts_with("/sys/fs/cgroup") {
        return Err(bad());
    }
    Ok(s.trim_end_matches('/').to_string())
}

/// The scope of an attached recording: the PID and its descendants, the processes of the
/// cgroup or container, and the Slurm step the PID runs in.
fn scope(target: &Target) -> Result<(Scope, Option<u64>), AttachError> {
    let mut scope = Scope::descendants(NO_ROOT);
    let mut start = None;
    if let Some(pid) = target.pid {
        let st = crate::host::start_time(pid).ok_or(AttachError::NoProcess(pid))?;
        start = Some(st);
        scope.root = pid;
        scope.include_root = true;
        if let Ok(env) = crate::host::environ(pid) {
            if let (Some(j), Some(s)) = (env.get("SLURM_JOB_ID"), env.get("SLURM_STEP_ID")) {
                scope.env.push(vec![
                    ("SLURM_JOB_ID".into(), j),
                    ("SLURM_STEP_ID".into(), s),
                ]);
            }
        }
    }
    if let Some(c) = &target.cgroup {
        scope.cgroups.push(CgroupMatch::Path(cgroup_path(c)?));
    }
    if let Some(id) = &target.container {
        let ok = id.len() >= 12
            && id.len() <= 64
            && id
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
        if !ok {
            return Err(AttachError::BadContainer(crate::term::one_line(id)));
        }
        scope.cgroups.push(CgroupMatch::Container(id.clone()));
    }
    Ok((scope, start))
}

/// Record `target` until it ends, `--duration` passes or a signal stops vramdoc.
pub fn run(
    target: Target,
    mut spec: JobSpec,
    monitor: Box<dyn Monitor>,
    devices: &[DeviceInfo],
) -> Result<JobRun, JobError> {
    let (scope, start) = scope(&target)?;
    // Keyed by the attached PID (by vramdoc's own for a cgroup or container).
    let key = target.pid.unwrap_or(std::process::id());
    // Signals stop the recording; they are queued, never passed on. Handled before the marker
    // file exists: whoever sees the file (`vramdoc mark --pid`) may signal vramdoc at once.
    signals::handle(signals::Mode::Forward);
    let path = marker_dir(true)?.join(marker_name(key, std::process::id()));
    std::fs::write(&path, b"").map_err(io(&path))?;
    let tail = std::sync::Mutex::new(MarkerTail::open(&path).map_err(io(&path))?);
    let _markers = AttachMarkers { path: Some(path) };
    let t0 = Instant::now();
    let cfg = recorder_config(&mut spec, devices, scope);
    let recorder = Recorder::start(monitor, devices, t0, cfg);
    let mut live = super::live::Live::new(spec.live, devices.iter().map(|d| d.index).collect());
    recorder.reading();
    recorder.round();
    let what = describe(&target);
    recorder.mark(MarkerKind::Start, &format!("attached to {what}"), None);
    let (_tx, rx) = std::sync::mpsc::channel();
    let mut feed = Feed {
        recorder: &recorder,
        devices,
        markers: &tail,
        lines: rx,
        errors: Vec::new(),
        poll: true,
    };
    let mut seen_members = false;
    let why = loop {
        feed.take();
        live.tick(&recorder);
        if let Some(r) = signals::take_received().first() {
            break format!(
                "recording stopped by {} (the job keeps running)",
                signals::signal_name(r.signal)
            );
        }
        if spec.duration.is_some_and(|d| t0.elapsed() >= d) {
            break "recording stopped: --duration reached".to_string();
        }
        if let (Some(pid), Some(st)) = (target.pid, start) {
            if !crate::host::is_alive(pid, st) {
                break format!("process {pid} exited");
            }
        } else {
            let n = recorder.live_members().len();
            seen_members |= n > 0;
            if seen_members && n == 0 {
                break format!("{what}: no process left");
            }
        }
        std::thread::sleep(TICK);
    };
    let end_ms = recorder.t_ms();
    recorder.mark(MarkerKind::Exit, &why, None);
    feed.settle(super::SETTLE, &mut live);
    live.clear();
    feed.drain();
    recorder.round();
    let errors = std::mem::take(&mut feed.errors);
    let recorded = recorder.finish(JobEnd { end_ms, exit: None });
    Ok(JobRun {
        pid: target.pid.unwrap_or(0),
        exit: Exit::Code(0),
        end_ms,
        recorded,
        errors,
        stderr_tail: Vec::new(),
        attached: Some(what),
        output: None,
    })
}

/// The command line a report shows for an attached recording: the process's own
/// (redacted), else `cgroup PATH` / `container ID`.
pub fn command_of(t: &Target) -> Vec<String> {
    if let Some(args) = t
        .pid
        .and_then(|p| crate::host::cmdline(p).ok())
        .filter(|a| !a.is_empty())
    {
        return crate::redact::redact_args(&crate::term::escape_args(&args));
    }
    vec![describe(t)]
}

/// `pid 1234 (python3)`, `cgroup /docker/…`, `container 0123abcd…`.
fn describe(t: &Target) -> String {
    let mut parts = Vec::new();
    if let Some(pid) = t.pid {
        let name = crate::host::comm(pid)
            .map(|n| {
                format!(
                    " ({})",
                    crate::term::one_line(&crate::term::escape_bytes(&n))
                )
            })
            .unwrap_or_default();
        parts.push(format!("pid {pid}{name}"));
    }
    if let Some(c) = &t.cgroup {
        parts.push(format!(
            "cgroup {}",
            crate::term::one_line(&c.display().to_string())
        ));
    }
    if let Some(c) = &t.container {
        parts.push(format!("container {}", crate::term::one_line(c)));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_paths_are_taken_as_proc_shows_them_or_under_a_mount() {
        assert_eq!(
            cgroup_path(Path::new("/docker/abc/")).unwrap(),
            "/docker/abc"
        );
        if let Some(m) = crate::host::cgroup_mounts().unwrap_or_default().first() {
            assert_eq!(cgroup_path(&m.join("docker/abc")).unwrap(), "/docker/abc");
        }
        assert!(cgroup_path(Path::new("docker/abc")).is_err());
    }

    #[test]
    fn container_ids_and_pids_are_checked_before_recording() {
        let t = |c: &str| Target {
            container: Some(c.into()),
            ..Target::default()
        };
        assert!(matches!(
            scope(&t("abc")),
            Err(AttachError::BadContainer(_))
        ));
        assert!(matches!(
            scope(&t("0123456789AB")),
            Err(AttachError::BadContainer(_))
        ));
        assert!(scope(&t("0123456789ab")).is_ok());
        let gone = Target {
            pid: Some(u32::MAX - 1),
            ..Target::default()
        };
        assert!(matches!(scope(&gone), Err(AttachError::NoProcess(_))));
        let (s, start) = scope(&Target {
            pid: Some(std::process::id()),
            ..Target::default()
        })
        .unwrap();
        assert!(s.include_root && start.is_some());
    }
}
