//! Helpers for tests/simulator_clients.rs: boxes made by `vramdoc sim init`, the Python
//! clients of tests/simulator_clients.py (pynvml, ctypes CUDA clients, cuda-python) over the
//! simulated libraries, containers of the box's runtime, and vramdoc's real-backend scan.

use super::poll::{eventually, SECS_10};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use vramdoc_sim::SimBox;

pub fn python() -> String {
    std::env::var("VRAMDOC_PYTHON").unwrap_or_else(|_| "python3".into())
}

pub fn script() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/simulator_clients.py")
}

pub fn ptx() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/vramdoc.ptx")
}

/// Fail (never skip) when a Python package is missing, with the command that installs it.
pub fn require_python(module: &str, package: &str) {
    let py = python();
    let out = Command::new(&py)
        .args(["-c", &format!("import {module}")])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {py} ({e}); install Python 3 or set VRAMDOC_PYTHON")
        });
    assert!(
        out.status.success(),
        "{package} is not installed for {py}: run scripts/test, or `{py} -m pip install {package}`. {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// A box made by `vramdoc sim init` (with its broker and runtime daemon), removed on drop.
pub struct CliBox {
    _tmp: tempfile::TempDir,
    pub dir: PathBuf,
}

impl Drop for CliBox {
    /// Remove the box's marker first and let its daemons stop (the runtime daemon kills the
    /// containers still running and removes their cgroups) before the directory goes.
    fn drop(&mut self) {
        let daemon = std::fs::read_to_string(self.dir.join("runtime.pid")).ok();
        let _ = std::fs::remove_file(self.dir.join("box.json"));
        if let Some(pid) = daemon.and_then(|p| p.trim().parse::<u32>().ok()) {
            let proc_dir = PathBuf::from(format!("/proc/{pid}"));
            for _ in 0..150 {
                if !proc_dir.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

impl CliBox {
    pub fn new(spec: &str, extra: &[&str]) -> CliBox {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("box");
        let out = super::vramdoc()
            .args(["sim", "init", spec, "--dir"])
            .arg(&dir)
            .args(extra)
            .output()
            .unwrap();
        super::assert_ok(&out, "sim init");
        // The runtime daemon writes its PID file once it is up; `sim init` does not wait.
        eventually(SECS_10, "the box's runtime daemon is up", || {
            dir.join("runtime.pid").exists()
        });
        CliBox { _tmp: tmp, dir }
    }

    pub fn sim(&self) -> SimBox {
        SimBox::open(&self.dir).unwrap()
    }

    /// `vramdoc ARGS` on this box.
    pub fn vramdoc(&self) -> Command {
        let mut c = super::vramdoc();
        c.env("VRAMDOC_SIM_DIR", &self.dir);
        c
    }

    /// A detached container of this box's runtime (`vramdoc sim run -d RUN_ARGS`, with `env`
    /// and no inherited `CUDA_VISIBLE_DEVICES` / `NVIDIA_VISIBLE_DEVICES`) whose process holds
    /// `size`; returns the PID of the process holding at least 1 GiB, once it does.
    pub fn detached_holder(&self, run_args: &[&str], env: &[(&str, &str)], size: &str) -> u64 {
        let mut c = self.vramdoc();
        c.args(["sim", "run", "-d"])
            .args(run_args)
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_vramdoc"))
            .args(["sim", "hold", "--size", size])
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("NVIDIA_VISIBLE_DEVICES");
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().expect("sim run");
        super::assert_ok(&out, "sim run -d");
        eventually(SECS_10, "the container holds its memory", || {
            let st = self.sim().state().expect("box state");
            st.processes
                .iter()
                .find(|(_, p)| p.devices.values().any(|u| u.alloc_bytes >= 1 << 30))
                .map(|(pid, _)| u64::from(*pid))
        })
    }

    pub fn fault(&self, args: &[&str]) {
        super::sim_fault(&self.dir, args);
    }

    /// This box's libraries, installed for its driver profile (`vramdoc sim libs`).
    pub fn libs(&self) -> PathBuf {
        let built = super::simgpu_lib_dir().join("libcuda.so.1");
        let dir = self.dir.parent().unwrap().join("libs");
        let out = self
            .vramdoc()
            .args(["sim", "libs"])
            .arg(&dir)
            .arg("--from")
            .arg(&built)
            .output()
            .unwrap();
        super::assert_ok(&out, "sim libs");
        dir
    }
}

/// A Python client on `dir` over the libraries in `libs`.
pub fn client(dir: &Path, libs: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(python());
    c.arg(script())
        .args(args)
        .env("VRAMDOC_SIM_DIR", dir)
        .env("LD_LIBRARY_PATH", libs)
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("NVIDIA_VISIBLE_DEVICES")
        .env_remove("CUDA_DEVICE_ORDER");
    c
}

/// Run a client to completion; its one JSON line.
pub fn client_json(dir: &Path, libs: &Path, args: &[&str]) -> Value {
    let out = client(dir, libs, args).output().unwrap();
    assert!(
        out.status.success(),
        "client {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "client {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A client that keeps running (holding what it made) until its stdin closes.
pub struct Live {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
}

impl Live {
    pub fn start(mut cmd: Command) -> Live {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().unwrap());
        Live { child, stdin, out }
    }

    pub fn line(&mut self) -> Value {
        let mut l = String::new();
        self.out.read_line(&mut l).unwrap();
        serde_json::from_str(&l).unwrap_or_else(|e| panic!("client printed {l:?} ({e})"))
    }

    pub fn send(&mut self, text: &str) {
        let s = self.stdin.as_mut().unwrap();
        writeln!(s, "{text}").unwrap();
        s.flush().unwrap();
    }

    /// Close stdin and wait for the client to end.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `[pid, used]` pairs of a pynvml process list.
pub fn listed(v: &Value) -> Vec<(u64, Option<u64>)> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|p| (p[0].as_u64().unwrap(), p[1].as_u64()))
                .collect()
        })
        .unwrap_or_default()
}

pub fn field<'a>(v: &'a Value, dev: usize, key: &str) -> &'a Value {
    &v["devices"][dev][key]
}

/// A detached container holding memory; returns its record from `sim ps --json`.
pub fn detached(b: &CliBox, args: &[&str]) -> Value {
    let out = b
        .vramdoc()
        .args(["sim", "run", "-d"])
        .args(args)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_vramdoc"))
        .args(["sim", "hold", "--size", "1GiB"])
        .output()
        .unwrap();
    super::assert_ok(&out, "sim run -d");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(id.len(), 64, "a docker-shaped id: {id:?}");
    let mut rec = Value::Null;
    eventually(SECS_10, "the container holds its memory", || {
        let ps = super::json_ok(
            &b.vramdoc().args(["sim", "ps", "--json"]).output().unwrap(),
            "ps",
        );
        rec = ps
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id.as_str())
            .cloned()
            .unwrap_or(Value::Null);
        let pid = rec["pid"].as_u64().unwrap_or(0) as u32;
        pid > 0 && b.sim().state().unwrap().processes.contains_key(&pid)
    });
    rec
}

pub fn environ(pid: u64, key: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")).map(String::from))
}

/// What vramdoc's real NVML backend reports (scan --backend real --json).
pub fn vramdoc_scan(b: &CliBox, libs: &Path) -> Value {
    let out = b
        .vramdoc()
        .args(["scan", "--backend", "real", "--json"])
        .env("LD_LIBRARY_PATH", libs)
        .env("VRAMDOC_PIDNS", "host")
        .output()
        .unwrap();
    // Findings may make it exit 1; only an error is a failure here.
    assert!(
        matches!(out.status.code(), Some(0) | Some(1)),
        "scan failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

pub fn scan_memory(v: &Value) -> &Value {
    &v["environment"]["devices"][0]["memory"]
}

pub fn scan_used_by(v: &Value, pid: u32) -> Option<u64> {
    v["scan"]["processes"]
        .as_array()?
        .iter()
        .find(|p| p["pid"] == pid)?["devices"][0]["used"]
        .as_u64()
}
