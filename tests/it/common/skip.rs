//! A test that cannot run here fails, naming what is missing, unless the person running the
//! tests allowed that skip with `VRAMDOC_ALLOW_SKIP` (a comma-separated list of the keys
//! below, or `1` for all). `scripts/test` installs what the tests need, so on CI nothing is
//! skipped and the variable stays unset.
//!
//! | key           | the test needs                                                          |
//! |---------------|-------------------------------------------------------------------------|
//! | `unshare`     | `unshare --pid --fork --mount-proc` (util-linux; root or user namespaces) |
//! | `setpriv`     | `setpriv` (util-linux), when the tests run as root, to drop privileges    |
//! | `real-driver` | no NVIDIA driver library on the loader's default path (a GPU machine has one) |
//! | `chromium`    | Chromium (Debian's `chromium` package)                                   |
//! | `prometheus`  | `prometheus` and `promtool` (Debian's `prometheus` package)              |
//! | `pynvml`      | Python 3 with NVIDIA's NVML bindings (`pip install nvidia-ml-py`)        |
//! | `kubernetes`  | kubectl (kustomize), `kubernetes-validate` and the npm Prometheus Operator models |
//! | `torch`       | PyTorch 2.15 from PyPI in the interpreter `VRAMDOC_TORCH_PYTHON` names (scripts/test installs it) |
//! | `no-sim-build` | the binary built without the simulator, in `VRAMDOC_NO_SIM_BIN` (`common::no_sim`) |
//!
//! Start such a test with `let x = require!(key, check);` ([`require`]).

use std::path::PathBuf;
use std::sync::OnceLock;

/// The variable that allows skips.
pub const VAR: &str = "VRAMDOC_ALLOW_SKIP";

/// The keys [`VAR`] accepts.
pub const KEYS: [&str; 10] = [
    "unshare",
    "strace",
    "setpriv",
    "real-driver",
    "chromium",
    "prometheus",
    "pynvml",
    "kubernetes",
    "torch",
    "no-sim-build",
];

/// Whether `VRAMDOC_ALLOW_SKIP` allows skipping a test that lacks `key`.
pub fn allowed(key: &str) -> bool {
    let Ok(v) = std::env::var(VAR) else {
        return false;
    };
    v.split(',')
        .map(str::trim)
        .any(|k| k == key || k == "1" || k == "all")
}

/// The test cannot run because `missing`: returns (the caller then returns: skipped) if
/// `VRAMDOC_ALLOW_SKIP` allows `key`, and fails the test naming the variable otherwise.
pub fn cannot_run(key: &str, missing: &str) {
    assert!(KEYS.contains(&key), "unknown skip key {key:?}");
    if allowed(key) {
        eprintln!("SKIPPED ({VAR} allows `{key}`): {missing}");
        return;
    }
    panic!(
        "cannot run: {missing}. scripts/test installs what the tests need; where this is a \
         known difference of this machine, set {VAR}={key} (or {VAR}=1) to skip such tests"
    );
}

/// `let value = require!(key, check);` where `check` is a `Result<T, String>`: the value
/// when `Ok`; when `Err(what is missing)`, ends the test as skipped if `VRAMDOC_ALLOW_SKIP`
/// allows `key`, and fails it naming what is missing and the variable otherwise.
macro_rules! require {
    ($key:expr, $check:expr) => {
        match $check {
            Ok(v) => v,
            Err(missing) => {
                $crate::common::skip::cannot_run($key, &missing);
                return;
            }
        }
    };
}
pub(crate) use require;

/// `name` on `PATH`; `Err` says which package brings it.
pub fn tool(name: &str, package: &str) -> Result<PathBuf, String> {
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .ok_or_else(|| {
            format!("{name} is not on PATH (Debian's `{package}` package: apt-get install -y {package})")
        })
}

/// `unshare --pid --fork --mount-proc true` succeeds: this machine can make a PID namespace
/// with its own /proc, as a container does.
pub fn unshare() -> Result<(), String> {
    static OK: OnceLock<bool> = OnceLock::new();
    let ok = *OK.get_or_init(|| {
        std::process::Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "true"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if ok {
        Ok(())
    } else {
        Err(
            "`unshare --pid --fork --mount-proc true` failed: this test needs util-linux \
             unshare and the privilege to create PID namespaces (root, or user namespaces \
             enabled)"
                .into(),
        )
    }
}

/// The Python interpreter the tests run (`VRAMDOC_PYTHON`, default `python3`).
pub fn python() -> String {
    std::env::var("VRAMDOC_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Whether [`python`] imports NVIDIA's NVML bindings (`pynvml`); `Err` says what is wrong.
pub fn pynvml() -> Result<(), String> {
    static OK: OnceLock<Result<(), String>> = OnceLock::new();
    OK.get_or_init(|| {
        let py = python();
        let out = std::process::Command::new(&py)
            .args(["-c", "import pynvml"])
            .output()
            .map_err(|e| {
                format!("cannot run {py} ({e}); install Python 3 or set VRAMDOC_PYTHON")
            })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "NVIDIA's Python NVML bindings are not installed for {py}: run `{py} -m pip \
                 install nvidia-ml-py` (module pynvml). {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    })
    .clone()
}
