//! `vramdoc sim hold` processes for integration tests.

use super::vramdoc;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A `vramdoc sim hold` process, killed and reaped on drop.
pub struct Holder {
    pub child: Child,
    /// The pid the holder printed in its `holding pid=` line.
    pub pid: u32,
    /// Its `holding pid=… device=… size=…` line, without the newline.
    pub line: String,
}

impl Holder {
    /// Spawn `cmd` (a `vramdoc ... sim hold ...` command, possibly under a wrapper such as
    /// `unshare`); returns once it printed `holding pid=`, and panics with its stderr if it
    /// did not.
    pub fn spawn(mut cmd: Command) -> Holder {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn sim hold");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read holder");
        if !line.starts_with("holding pid=") {
            let out = child.wait_with_output().expect("holder output");
            panic!(
                "holder failed: {line:?} {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let line = line.trim_end().to_string();
        let pid = field(&line, "pid").expect("pid in holding line");
        Holder { child, pid, line }
    }

    /// The number after `key=` in the holder's line (`child` for `--fork-child`).
    pub fn field(&self, key: &str) -> Option<u32> {
        field(&self.line, key)
    }

    /// A holder on the box `dir` with `env` and `args`; its printed pid is its own.
    pub fn start(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Holder {
        let mut cmd = vramdoc();
        cmd.env("VRAMDOC_SIM_DIR", dir)
            .args(["sim", "hold"])
            .args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let h = Holder::spawn(cmd);
        assert_eq!(h.pid, h.child.id());
        h
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Kill and reap: the process no longer exists afterwards.
    pub fn kill(mut self) -> u32 {
        self.child.kill().expect("kill holder");
        self.child.wait().expect("reap holder");
        self.pid
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if self.pid != self.child.id() {
            // Under a wrapper (`unshare --fork`) the holder is a descendant, not the child.
            // SAFETY: kill(2) on the PID of a holder this test started.
            unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The number after `key=` among the words of `line`.
fn field(line: &str, key: &str) -> Option<u32> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}
