//! Shared helpers for integration tests: fresh simulated boxes, and the simulated driver
//! libraries (crates/simgpu built as libcuda.so, libcuda.so.1, libnvidia-ml.so.1).
#![allow(dead_code)]

pub mod clients;
pub mod hold;
pub mod reports;
pub mod scenarios;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// A fresh simulated box; the directory lives as long as the returned guard.
pub fn fresh_box(spec: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    vramdoc_sim::SimBox::create(dir.path(), spec, &vramdoc_sim::InitOptions::default())
        .expect("create box");
    dir
}

fn target_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target")
}

/// Build crates/simgpu (once per test binary) and return a directory holding it under the
/// names the real libraries have. Point `LD_LIBRARY_PATH` at it.
pub fn simgpu_lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "vramdoc-simgpu"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build -p vramdoc-simgpu");
        assert!(status.success(), "building crates/simgpu failed");
        let built = target_dir().join("debug").join("libsimgpu.so");
        assert!(built.exists(), "{} missing after build", built.display());
        // One directory per test process, so concurrent test binaries never see a
        // half-copied library.
        let dir = target_dir().join(format!("simgpu-libs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create lib dir");
        for name in [
            "libcuda.so",
            "libcuda.so.1",
            "libnvidia-ml.so.1",
            "libnvidia-ml.so",
        ] {
            let dest = dir.join(name);
            let tmp = dir.join(format!(".{name}.tmp"));
            std::fs::copy(&built, &tmp).expect("copy simgpu");
            std::fs::rename(&tmp, &dest).expect("rename simgpu");
        }
        dir
    })
}

/// The vramdoc binary under test, with the environment cleared of GPU-selecting variables.
pub fn vramdoc() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vramdoc"));
    c.env_remove("VRAMDOC_SIM_DIR")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("LD_LIBRARY_PATH");
    c
}

/// [`vramdoc`] on the simulated box `dir`, reading process lists as the host PID namespace.
pub fn on_box(dir: &Path) -> Command {
    let mut c = vramdoc();
    c.env("VRAMDOC_SIM_DIR", dir).env("VRAMDOC_PIDNS", "host");
    c
}

/// The JSON a command printed, after checking it exited 0 (its stderr, after `what`, when
/// it did not).
pub fn json_ok(out: &std::process::Output, what: &str) -> serde_json::Value {
    assert_ok(out, what);
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

/// Check a command exited 0; its stderr, after `what`, when it did not.
pub fn assert_ok(out: &std::process::Output, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `vramdoc sim fault ARGS` on the box `dir`; panics with its stderr unless it succeeded.
pub fn sim_fault(dir: &Path, args: &[&str]) {
    let out = vramdoc()
        .env("VRAMDOC_SIM_DIR", dir)
        .args(["sim", "fault"])
        .args(args)
        .output()
        .expect("run vramdoc sim fault");
    assert!(
        out.status.success(),
        "sim fault {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
