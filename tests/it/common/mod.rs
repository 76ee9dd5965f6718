//! Shared helpers of the integration tests: fresh simulated boxes, the vramdoc binary, the
//! simulated driver libraries ([`simgpu`]), `vramdoc sim hold` processes ([`hold`]), the
//! child-process harness ([`child`]), the polling helper ([`poll`]), the skip policy
//! ([`skip`]), NVML sessions in this process ([`nvml`]), report and scenario fixtures, `vramdoc
//! scan` reports ([`scans`]), `vramdoc serve` ([`exporter`]) and `vramdoc run` jobs ([`run_job`]).
#![allow(dead_code)]

pub mod child;
pub mod clients;
pub mod exporter;
pub mod hold;
pub mod no_sim;
pub mod nvml;
pub mod poll;
pub mod reports;
pub mod scans;
pub mod scenarios;
pub mod simgpu;
pub mod skip;

use std::path::{Path, PathBuf};
use std::process::Command;

/// A JSON report vramdoc wrote at `path` (the test fails, naming the file, when it is missing
/// or not JSON).
pub fn read_report(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A fresh simulated box; the directory lives as long as the returned guard.
pub fn fresh_box(spec: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    vramdoc_sim::SimBox::create(dir.path(), spec, &vramdoc_sim::InitOptions::default())
        .expect("create box");
    dir
}

/// The directory holding crates/simgpu under the names the real libraries have (set up by
/// scripts/test; see [`simgpu`]). Point `LD_LIBRARY_PATH` at it.
pub fn simgpu_lib_dir() -> &'static Path {
    simgpu::lib_dir()
}

/// A child process killed and reaped when dropped (also when a test panics).
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

/// The vramdoc binary under test, with the environment cleared of GPU-selecting variables.
/// The `XDG_RUNTIME_DIR` of every vramdoc the tests start: under cargo's scratch directory
/// for tests (target/tmp), so this user's private directory vramdoc keeps across runs (attach
/// markers, `run --torch-memory`'s hook) is never left in the system's temp dir.
pub fn runtime_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        use std::os::unix::fs::DirBuilderExt;
        let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("xdg-runtime");
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&d);
        d
    })
}

pub fn vramdoc() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vramdoc"));
    c.env("XDG_RUNTIME_DIR", runtime_dir());
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

/// A command's stderr, as text (invalid UTF-8 replaced).
pub fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `vramdoc --sim 2x16GiB run --process-period 100ms --period 20ms --out DIR/run.json [extra]
/// -- cmd…`, with crates/simgpu on LD_LIBRARY_PATH for the command. Returns the output and
/// the report (`Null` when none was written or it is not JSON).
pub fn run_job(
    dir: &Path,
    extra: &[&str],
    cmd: &[&str],
) -> (std::process::Output, serde_json::Value) {
    let out = dir.join("run.json");
    let o = vramdoc()
        .env("LD_LIBRARY_PATH", simgpu_lib_dir())
        .args([
            "--sim",
            "2x16GiB",
            "run",
            "--process-period",
            "100ms",
            "--period",
            "20ms",
        ])
        .arg("--out")
        .arg(&out)
        .args(extra)
        .arg("--")
        .args(cmd)
        .output()
        .expect("run vramdoc");
    let report = std::fs::read(&out)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(serde_json::Value::Null);
    (o, report)
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

/// Build a shared library from C `source` with the system C compiler (the one Rust links
/// with, or `$CC`) as `dir/name.so`: stand-ins for broken driver libraries.
pub fn c_library(dir: &Path, name: &str, source: &str) -> std::path::PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).expect("write C source");
    let lib = dir.join(format!("{name}.so"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(&cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| {
            panic!("run {cc} ({e}): a C compiler is needed to build stub libraries")
        });
    assert!(st.success(), "{cc} failed on {}", src.display());
    lib
}

child::entry! {
    /// Whether cudarc finds a libcuda.so in this process.
    fn libcuda_found_child() -> bool {
        vramdoc::gpu::cuda::library_present()
    }
}

/// `Ok` when a process started with `LD_LIBRARY_PATH=ld_path` (a directory without
/// libcuda.so) finds no libcuda.so; `Err` when it does, i.e. an NVIDIA driver is installed
/// and a missing library cannot be staged (skip key `real-driver`).
pub fn no_libcuda_outside(ld_path: &Path) -> Result<(), String> {
    if child::of!(libcuda_found_child)
        .env("LD_LIBRARY_PATH", ld_path)
        .run()
    {
        Err(
            "the loader finds a libcuda.so outside LD_LIBRARY_PATH (an NVIDIA driver is \
             installed), so a missing library cannot be staged"
                .into(),
        )
    } else {
        Ok(())
    }
}

/// Whether process `pid` is blocked in `nanosleep` / `clock_nanosleep` (a worker inside a
/// `pause` step, as opposed to one between steps, which waits on a pipe): the first field of
/// /proc/PID/syscall is the number of the system call it is blocked in.
pub fn sleeping(pid: u32) -> bool {
    #[cfg(target_arch = "x86_64")]
    const SLEEPS: [&str; 2] = ["35", "230"];
    #[cfg(target_arch = "aarch64")]
    const SLEEPS: [&str; 2] = ["101", "115"];
    std::fs::read_to_string(format!("/proc/{pid}/syscall")).is_ok_and(|s| {
        s.split_whitespace()
            .next()
            .is_some_and(|n| SLEEPS.contains(&n))
    })
}
