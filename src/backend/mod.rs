//! Which implementation of the [`gpu`](crate::gpu) traits a command gets. [`BackendKind::Real`]
//! is the real path, `gpu::cuda` and `gpu::nvml`, over whatever libcuda.so and
//! libnvidia-ml.so.1 the loader finds (NVIDIA's, or the simulated ones of `vramdoc-simgpu`);
//! [`BackendKind::Sim`] is [`sim`], the simulated machine of `vramdoc-sim` in this process with
//! no library loaded. Callers open backends here, and only here is the simulator named next
//! to the real path.

/// Built without the simulator (`--no-default-features`): the same names, failing with a
/// message that says so.
#[cfg(not(feature = "sim"))]
pub mod no_sim;
#[cfg(feature = "sim")]
pub mod sim;
#[cfg(feature = "sim")]
pub mod sim_libs;
#[cfg(not(feature = "sim"))]
pub use no_sim as sim;

use crate::gpu::{cuda::CudaDriver, nvml::NvmlMonitor, Driver, Monitor, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Which backends to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BackendKind {
    /// The in-process simulator over the session's box ([`Backend::sim_dir`]).
    Sim,
    /// cudarc + nvml-wrapper, over whatever libcuda.so / libnvidia-ml.so.1 the loader finds.
    Real,
}

/// A checked box spec (`--sim SPEC`, `whatif --on SPEC`, a scenario's `recorded_on`): the one
/// place a spec is parsed and checked, by the simulator's own parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoxSpec(String);

impl BoxSpec {
    /// `text` (surrounding spaces dropped) if the simulator can build a box of it.
    pub fn parse(text: &str) -> std::result::Result<BoxSpec, sim::SpecError> {
        let text = text.trim();
        sim::parse_spec(text)?;
        Ok(BoxSpec(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for BoxSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The session's backend as a value: which implementation, and the simulated box it serves
/// (a `--sim` private box, or `VRAMDOC_SIM_DIR` read once at start). Engines get it
/// explicitly; a child process gets the box through its own `Command` environment
/// ([`Backend::pass_to`]), never through a process-wide variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    pub kind: BackendKind,
    /// The box directory, when one is named.
    pub sim_dir: Option<PathBuf>,
}

impl Backend {
    /// The real backends; `sim_dir` names the box the simulated libraries serve, if any.
    pub fn real(sim_dir: Option<PathBuf>) -> Backend {
        Backend {
            kind: BackendKind::Real,
            sim_dir,
        }
    }

    /// The in-process simulator over the box at `dir`.
    pub fn sim(dir: PathBuf) -> Backend {
        Backend {
            kind: BackendKind::Sim,
            sim_dir: Some(dir),
        }
    }

    /// The box directory named by `VRAMDOC_SIM_DIR` in this process's environment (read once,
    /// when a session starts).
    pub fn sim_dir_from_env() -> Option<PathBuf> {
        std::env::var_os(sim::SIM_DIR_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }

    /// The box's spec, for reports (`None` on the real backends or without a readable box).
    /// The kernel log a node-level reader follows by default: the simulated box's
    /// `kern.log` (where `sim fault --xid` writes the driver's lines) on the simulator,
    /// `None` on the real backends (the caller's default, `/dev/kmsg`).
    pub fn default_kernel_log(&self) -> Option<PathBuf> {
        match self.kind {
            BackendKind::Sim => self
                .sim_dir
                .as_ref()
                .map(|d| d.join(sim::kernlog::KERN_LOG)),
            BackendKind::Real => None,
        }
    }

    pub fn sim_spec(&self) -> Option<String> {
        match self.kind {
            BackendKind::Sim => sim::box_spec(self.sim_dir.as_deref()),
            BackendKind::Real => None,
        }
    }

    /// Give a child process this session's box: `VRAMDOC_SIM_DIR` in `cmd`'s own environment
    /// (nothing changes for a session without a box).
    pub fn pass_to(&self, cmd: &mut std::process::Command) {
        cmd.envs(self.child_env());
    }

    /// What a child process's environment needs to reach this session's box.
    pub fn child_env(&self) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        self.sim_dir
            .iter()
            .map(|d| (sim::SIM_DIR_ENV.into(), d.clone().into_os_string()))
            .collect()
    }

    /// What a user's job needs on this session's box: the box, and the simulated driver
    /// libraries first on its `LD_LIBRARY_PATH` (`sim_libs`), so its CUDA programs run on the
    /// box unmodified. The second value says, in one line, why the libraries could not be
    /// given (the job still runs). Nothing changes for a session without a box.
    pub fn job_env(
        &self,
    ) -> (
        Vec<(std::ffi::OsString, std::ffi::OsString)>,
        Option<String>,
    ) {
        let mut env = self.child_env();
        let Some(dir) = self.sim_dir.as_deref() else {
            return (env, None);
        };
        match job_libs(dir) {
            Ok(libs) => {
                let path = std::ffi::OsString::from("LD_LIBRARY_PATH");
                let existing = std::env::var_os(&path);
                env.push((path, job_library_path(&libs, existing)));
                (env, None)
            }
            Err(why) => (env, Some(why)),
        }
    }

    /// [`Backend::job_env`], saying on standard error, as `who`, why the libraries could not
    /// be given.
    pub fn job_env_told(&self, who: &str) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        let (env, why) = self.job_env();
        if let Some(why) = why {
            crate::term::eprint_line(&format!("{who}: {why}"));
        }
        env
    }
}

#[cfg(feature = "sim")]
fn job_libs(dir: &std::path::Path) -> std::result::Result<PathBuf, String> {
    let sim = sim::open_box(Some(dir)).map_err(|e| e.to_string())?;
    sim_libs::driver_libs(dir, &sim.config().driver_version).map_err(|e| e.to_string())
}

#[cfg(feature = "sim")]
fn job_library_path(
    libs: &std::path::Path,
    existing: Option<std::ffi::OsString>,
) -> std::ffi::OsString {
    sim_libs::library_path(libs, existing)
}

#[cfg(not(feature = "sim"))]
fn job_libs(_dir: &std::path::Path) -> std::result::Result<PathBuf, String> {
    Err(sim::NoSimulator.to_string())
}

#[cfg(not(feature = "sim"))]
fn job_library_path(
    libs: &std::path::Path,
    _existing: Option<std::ffi::OsString>,
) -> std::ffi::OsString {
    libs.as_os_str().to_os_string()
}

/// Open a monitor of the session's backend.
pub fn open_monitor(backend: &Backend) -> Result<Box<dyn Monitor>> {
    match backend.kind {
        BackendKind::Sim => Ok(Box::new(sim::open_monitor(backend.sim_dir.as_deref())?)),
        BackendKind::Real => Ok(Box::new(real_monitor(backend)?)),
    }
}

/// Open a driver of the session's backend (honouring this process's `CUDA_VISIBLE_DEVICES`).
pub fn open_driver(backend: &Backend) -> Result<Box<dyn Driver>> {
    match backend.kind {
        BackendKind::Sim => Ok(Box::new(sim::open_driver(backend.sim_dir.as_deref())?)),
        BackendKind::Real => Ok(Box::new(CudaDriver::open()?)),
    }
}

/// Absolute paths of NVML to load instead of searching the loader's path, colon-separated;
/// the first that exists is loaded. A DaemonSet whose driver lives in another root file system
/// (the GPU operator's driver container at /run/nvidia/driver) names its library this way
/// rather than putting that root's `/usr/lib…` (a foreign glibc) on `LD_LIBRARY_PATH`.
pub const NVML_LIBRARY_ENV: &str = "VRAMDOC_NVML_LIBRARY";

/// The first existing absolute path of a [`NVML_LIBRARY_ENV`] value.
pub fn nvml_library(value: Option<&std::ffi::OsStr>) -> Option<std::path::PathBuf> {
    let v = value?.to_str()?;
    v.split(':')
        .map(std::path::Path::new)
        .find(|p| p.is_absolute() && p.is_file())
        .map(std::path::Path::to_path_buf)
}

/// NVML by name (or [`NVML_LIBRARY_ENV`]'s path). When a box is named, the library found may
/// be the simulated one serving it, whose "device files" are the box's `dev/` files
/// ([`sim::box_device_nodes`]): they are reported beside the real `/dev` ones, so a process
/// holding them open is found on this path too. The real monitor itself knows nothing of the
/// simulator.
fn real_monitor(backend: &Backend) -> Result<NvmlMonitor> {
    let monitor = match nvml_library(std::env::var_os(NVML_LIBRARY_ENV).as_deref()) {
        Some(path) => NvmlMonitor::open_path(&path)?,
        None => NvmlMonitor::open()?,
    };
    Ok(monitor.with_device_nodes(sim::box_device_nodes(backend.sim_dir.as_deref())))
}

/// What kind of failure an error that reached the command edge is, where a backend knows
/// better than its type says (the simulator's own errors): src/exit.rs makes it an exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The machine: no usable box (exit 3).
    Environment,
    /// The user's input: a bad box spec (exit 2).
    Usage,
}

/// The [`ErrorClass`] of `cause`, when a backend gives it one.
pub fn error_class(cause: &(dyn std::error::Error + 'static)) -> Option<ErrorClass> {
    sim::error_class(cause)
}

/// The box spec that stands for recorded GPUs, given as (product name, total bytes): a
/// preset where one has that name and a total within 1 % (drivers differ by a few MiB),
/// else a generic card of that size (`16GiB`).
/// Scenarios converted from recordings carry it (`recorded_on`); `--sim recorded` builds it.
pub fn recorded_box_spec(devices: &[(String, u64)]) -> Option<String> {
    use vramdoc_gpu_spec::units::{GIB, MIB};
    let parts: Vec<String> = devices
        .iter()
        .map(|(name, total)| match sim::preset_key(name, *total) {
            Some(key) => key.to_string(),
            None if total % GIB == 0 => format!("{}GiB", total / GIB),
            None if total % MIB == 0 => format!("{}MiB", total / MIB),
            None => total.to_string(),
        })
        .collect();
    if parts.is_empty() {
        return None;
    }
    // `2xt4` rather than `t4,t4` when every GPU is the same.
    Some(if parts.iter().all(|p| p == &parts[0]) && parts.len() > 1 {
        format!("{}x{}", parts.len(), parts[0])
    } else {
        parts.join(",")
    })
}

/// Why `--sim recorded` cannot be used: no scenario named, or none that records its box.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordedBoxError {
    #[error("--sim recorded: {0} does not say which GPUs it was recorded on (no `recorded_on`); give a box instead, e.g. --sim 16GiB or --sim h100")]
    NotRecorded(String),
    #[error("--sim recorded: the scenarios were recorded on different boxes ({0}); replay them one at a time")]
    Different(String),
    #[error("--sim recorded: recorded_on = {spec:?} in {file} is not a box this vramdoc can build: {reason}")]
    Unknown {
        file: String,
        spec: String,
        reason: String,
    },
}

/// The box `--sim recorded` stands for: the one every named scenario was recorded on,
/// given as (file, its `recorded_on`).
pub fn resolve_recorded(
    scenarios: &[(String, Option<String>)],
) -> std::result::Result<String, RecordedBoxError> {
    let mut spec: Option<&str> = None;
    for (file, rec) in scenarios {
        let Some(r) = rec.as_deref() else {
            return Err(RecordedBoxError::NotRecorded(file.clone()));
        };
        if let Err(reason) = sim::check_spec(r) {
            return Err(RecordedBoxError::Unknown {
                file: file.clone(),
                spec: r.to_string(),
                reason,
            });
        }
        match spec {
            Some(s) if s != r => {
                return Err(RecordedBoxError::Different(format!("{s}, {r}")));
            }
            _ => spec = Some(r),
        }
    }
    spec.map(str::to_string)
        .ok_or_else(|| RecordedBoxError::NotRecorded("no scenario file".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_box_spec_is_checked_once_by_the_simulators_parser() {
        assert_eq!(BoxSpec::parse(" 2x24GiB ").unwrap().as_str(), "2x24GiB");
        assert_eq!(BoxSpec::parse("h100").unwrap().to_string(), "h100");
        let e = BoxSpec::parse("nope9").unwrap_err();
        assert!(e.to_string().contains("nope9"), "{e}");
        assert!(BoxSpec::parse("").is_err());
    }

    #[test]
    fn a_child_gets_the_sessions_box_in_its_own_environment_only() {
        let dir = PathBuf::from("/tmp/some-box");
        let b = Backend::sim(dir.clone());
        assert_eq!(
            b.child_env(),
            vec![(sim::SIM_DIR_ENV.into(), dir.clone().into_os_string())]
        );
        let mut cmd = std::process::Command::new("true");
        b.pass_to(&mut cmd);
        let set: Vec<_> = cmd.get_envs().collect();
        assert_eq!(
            set,
            vec![(
                std::ffi::OsStr::new(sim::SIM_DIR_ENV),
                Some(dir.as_os_str())
            )]
        );
        // Nothing of this process changed.
        assert_ne!(
            std::env::var_os(sim::SIM_DIR_ENV).as_deref(),
            Some(dir.as_os_str())
        );
        assert!(Backend::real(None).child_env().is_empty());
    }

    #[test]
    fn a_simulator_session_without_a_box_is_the_simulators_no_box_error() {
        let b = Backend {
            kind: BackendKind::Sim,
            sim_dir: None,
        };
        assert!(matches!(
            sim::open_box(b.sim_dir.as_deref()),
            Err(sim::SimError::NoBox)
        ));
        assert_eq!(b.sim_spec(), None);
        assert!(open_monitor(&b).is_err());
    }

    #[test]
    fn nvml_library_takes_the_first_existing_absolute_path() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libnvidia-ml.so.1");
        std::fs::write(&lib, b"").unwrap();
        let value = format!(
            "/nonexistent/libnvidia-ml.so.1:libnvidia-ml.so.1:{}",
            lib.display()
        );
        assert_eq!(
            super::nvml_library(Some(std::ffi::OsStr::new(&value))),
            Some(lib.clone())
        );
        // Relative names are the loader's business, not this variable's.
        assert_eq!(
            super::nvml_library(Some(std::ffi::OsStr::new("libnvidia-ml.so.1"))),
            None
        );
        assert_eq!(super::nvml_library(None), None);
        // A directory is not a library.
        assert_eq!(super::nvml_library(Some(dir.path().as_os_str())), None);
    }
}
