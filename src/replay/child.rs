//! A child `vramdoc __worker` (the worker or a neighbour) with its event stream: spawned in
//! its own process group, dying with vramdoc (`job::process`), its plan on stdin, its events
//! read on a thread, its stderr kept for the error message.

use super::protocol::{self, Timed, WorkerInput};
use super::{ReplayError, ReplayOptions};
use crate::backend::BackendKind;
use crate::job::process;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn backend_arg(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::Sim => "sim",
        BackendKind::Real => "real",
    }
}

/// A running worker or neighbour.
pub(super) struct WorkerChild {
    pub(super) child: Child,
    stdin: Option<ChildStdin>,
    pub(super) events: Receiver<Result<Timed, String>>,
    stderr: Arc<Mutex<String>>,
}

impl WorkerChild {
    pub(super) fn spawn(
        opts: &ReplayOptions,
        env: &[(String, Option<String>)],
        input: &WorkerInput,
        what: &str,
    ) -> Result<WorkerChild, ReplayError> {
        let mut cmd = Command::new(&opts.exe);
        cmd.arg("--backend")
            .arg(backend_arg(opts.backend.kind))
            .arg("__worker")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            match v {
                // The parser refuses these already; a plan built in code is held to the same
                // allow-list (docs/security.md).
                Some(_)
                    if crate::scenario::parse::env_refusal(k).is_some()
                        && k != "CUDA_VISIBLE_DEVICES" => {}
                Some(v) => {
                    cmd.env(k, v);
                }
                None => {
                    cmd.env_remove(k);
                }
            };
        }
        // The session's box, in this child's own environment.
        opts.backend.pass_to(&mut cmd);
        // Its own process group: a terminal's Ctrl-C reaches the monitor, which stops the
        // worker itself and records that it did.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        // If the monitor dies (even by SIGKILL), the child dies too and its memory is freed.
        process::die_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(|source| ReplayError::Spawn {
            what: what.to_string(),
            source,
        })?;
        let mut stdin = child.stdin.take();
        if let Some(s) = stdin.as_mut() {
            let line = serde_json::to_string(input).unwrap_or_default();
            let _ = writeln!(s, "{line}").and_then(|_| s.flush());
        }
        let (tx, rx) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    let ev = protocol::parse_event(&line).ok_or(line);
                    if tx.send(ev).is_err() {
                        break;
                    }
                }
            });
        }
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(mut err) = child.stderr.take() {
            let buf = stderr.clone();
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = err.read_to_string(&mut s);
                if let Ok(mut b) = buf.lock() {
                    *b = s;
                }
            });
        }
        Ok(WorkerChild {
            child,
            stdin,
            events: rx,
            stderr,
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Let a lockstep worker run its next step.
    pub(super) fn ack(&mut self) {
        if let Some(s) = self.stdin.as_mut() {
            let _ = writeln!(s).and_then(|_| s.flush());
        }
    }

    pub(super) fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// Whether the process is still running (not exited, not a zombie).
    pub(super) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Close stdin, give the process `grace` to exit, then kill it; reap it.
    pub(super) fn finish(mut self, grace: Duration) {
        self.stdin.take();
        process::stop(&mut self.child, grace);
    }

    /// The last 300 characters of its stderr, on one line.
    pub(super) fn stderr_tail(&self) -> String {
        let s = self.stderr.lock().map(|s| s.clone()).unwrap_or_default();
        let s = s.trim();
        let tail: String = s
            .chars()
            .rev()
            .take(300)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        tail.replace('\n', " ")
    }
}
