//! The container logs of the pods that hold or held GPU memory, followed under the kubelet's
//! layout (`/var/log/pods/<namespace>_<name>_<uid>/<container>/<restart>.log`, kubernetes
//! `pkg/kubelet/kuberuntime/helpers.go` `BuildContainerLogsDirectory`), each line unwrapped
//! from the CRI log format (`<RFC 3339 time> <stream> <P|F> <text>`, kubernetes
//! `pkg/kubelet/kuberuntime/logs/logs.go` `parseCRILog`) or docker's json-file format, and
//! passed to `run`'s error-line recogniser through [`recognise`] alone. Only those containers
//! are followed, for [`KEEP_AFTER`] after their pod last held GPU memory; a restart
//! (`1.log` after `0.log`) and rotation are followed. A line the runtime split into partial
//! chunks (`P`, then the last `F`: the kubelet's runtimes cut lines at 16 KiB) is joined
//! again per stream, up to [`MAX_JOINED`] bytes. Only real directories under the log root
//! are entered: a pod or container directory that is a symbolic link (to somewhere outside
//! the root) is never followed.

use super::tail::LogTail;
use crate::model::PodRef;
use crate::record::stderr::{ParsedError, StderrWatcher};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a pod's logs are followed after its processes last held GPU memory (an error
/// line is often written while the process exits).
pub const KEEP_AFTER: Duration = Duration::from_secs(600);
/// Containers followed at most.
pub const MAX_CONTAINERS: usize = 256;
/// Bytes read per container and poll at most.
pub const POLL_BUDGET: usize = 256 * 1024;
/// Longest line joined from partial CRI chunks; what comes past it starts a new line.
pub const MAX_JOINED: usize = 64 * 1024;

/// The one entry point to `run`'s error-line recogniser (src/record/stderr.rs): a
/// recogniser rewrite replaces this function's body only.
pub fn recognise(state: &mut StderrWatcher, line: &str) -> Option<ParsedError> {
    state.line(line)
}

/// The text of one container log line: CRI (`2024-01-02T03:04:05.123456789Z stderr F
/// text`), docker json-file (`{"log":"text\n","stream":"stderr",...}`), or the line as it is.
pub fn unwrap_line(line: &str) -> String {
    unwrap(line).text
}

/// One log line unwrapped: its text, and for a CRI line its stream (0 stdout, 1 stderr)
/// and whether it is a partial chunk (`P`) the next chunk of that stream continues.
struct Unwrapped {
    text: String,
    stream: Option<usize>,
    partial: bool,
}

fn unwrap(line: &str) -> Unwrapped {
    let whole = |text: String| Unwrapped {
        text,
        stream: None,
        partial: false,
    };
    if line.starts_with('{') {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
            if let Some(s) = v.get("log").and_then(|l| l.as_str()) {
                return whole(s.trim_end_matches(['\n', '\r']).to_string());
            }
        }
    }
    let mut it = line.splitn(4, ' ');
    if let (Some(ts), Some(stream), Some(tag), Some(text)) =
        (it.next(), it.next(), it.next(), it.next())
    {
        let ts_ok = ts.len() >= 20 && ts.as_bytes().get(4) == Some(&b'-') && ts.contains('T');
        let tag = tag.as_bytes().first();
        if ts_ok && matches!(stream, "stdout" | "stderr") && matches!(tag, Some(b'P' | b'F')) {
            return Unwrapped {
                text: text.to_string(),
                stream: Some(usize::from(stream == "stderr")),
                partial: tag == Some(&b'P'),
            };
        }
    }
    whole(line.to_string())
}

/// Partial CRI chunks waiting for their stream's last chunk (stdout, stderr).
#[derive(Debug, Default)]
struct Joiner {
    pending: [String; 2],
}

impl Joiner {
    /// The whole line `raw` completes, if any (bounded by [`MAX_JOINED`]).
    fn push(&mut self, raw: &str) -> Option<String> {
        let u = unwrap(raw);
        let Some(stream) = u.stream else {
            return Some(u.text);
        };
        let buf = &mut self.pending[stream];
        let room = MAX_JOINED.saturating_sub(buf.len());
        let mut cut = u.text.len().min(room);
        while !u.text.is_char_boundary(cut) {
            cut -= 1;
        }
        buf.push_str(&u.text[..cut]);
        if u.partial && buf.len() < MAX_JOINED {
            return None;
        }
        // The line is complete, or as long as a joined line may be.
        Some(std::mem::take(buf))
    }
}

/// One followed container.
#[derive(Debug)]
struct Followed {
    pod: PodRef,
    dir: PathBuf,
    tail: LogTail,
    recogniser: StderrWatcher,
    joiner: Joiner,
    last_held: f64,
}

/// A recognised line of a pod's container.
#[derive(Debug, Clone)]
pub struct PodLine {
    pub pod: PodRef,
    pub error: ParsedError,
}

/// The followed containers, by (pod UID, container).
#[derive(Debug, Default)]
pub struct PodLogs {
    root: PathBuf,
    followed: BTreeMap<(String, String), Followed>,
}

impl PodLogs {
    pub fn new(root: &Path) -> PodLogs {
        PodLogs {
            root: root.to_path_buf(),
            followed: BTreeMap::new(),
        }
    }

    /// Containers followed now.
    pub fn len(&self) -> usize {
        self.followed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.followed.is_empty()
    }

    /// Follow the containers of `pods` (pods holding GPU memory at `t_unix`), from their
    /// logs' current end; forget those not seen holding memory for [`KEEP_AFTER`].
    pub fn hold(&mut self, pods: &[&PodRef], t_unix: f64) {
        for pod in pods {
            let Some(pod_dir) = self.pod_dir(&pod.uid) else {
                continue;
            };
            let containers: Vec<String> = match &pod.container {
                Some(c) => vec![c.clone()],
                None => names(&pod_dir),
            };
            for c in containers {
                let key = (pod.uid.clone(), c.clone());
                if let Some(f) = self.followed.get_mut(&key) {
                    f.last_held = t_unix;
                    continue;
                }
                if self.followed.len() >= MAX_CONTAINERS {
                    break;
                }
                let dir = pod_dir.join(&c);
                if !real_dir(&dir) {
                    continue;
                }
                let Some(file) = latest_log(&dir) else {
                    continue;
                };
                let mut pod = (*pod).clone();
                pod.container = Some(c.clone());
                self.followed.insert(
                    key,
                    Followed {
                        pod,
                        dir,
                        tail: LogTail::at_end(&file),
                        recogniser: StderrWatcher::new(),
                        joiner: Joiner::default(),
                        last_held: t_unix,
                    },
                );
            }
        }
        let keep = KEEP_AFTER.as_secs_f64();
        self.followed.retain(|_, f| t_unix - f.last_held <= keep);
    }

    /// Read what every followed container appended; the lines the recogniser knows.
    pub fn poll(&mut self) -> Vec<PodLine> {
        let mut out = Vec::new();
        for f in self.followed.values_mut() {
            let mut lines = Vec::new();
            if let Some(newest) = latest_log(&f.dir) {
                if newest != f.tail.path() {
                    f.tail.switch(&newest, POLL_BUDGET, &mut lines);
                }
            }
            lines.extend(f.tail.poll(POLL_BUDGET));
            for l in lines {
                let Some(text) = f.joiner.push(&l) else {
                    continue;
                };
                if let Some(error) = recognise(&mut f.recogniser, &text) {
                    out.push(PodLine {
                        pod: f.pod.clone(),
                        error,
                    });
                }
            }
        }
        out
    }

    /// `<root>/<namespace>_<name>_<uid>`.
    fn pod_dir(&self, uid: &str) -> Option<PathBuf> {
        let suffix = format!("_{uid}");
        names(&self.root)
            .into_iter()
            .find(|n| n.ends_with(&suffix))
            .map(|n| self.root.join(n))
            .filter(|d| real_dir(d))
    }
}

/// A directory that is not a symbolic link (its target could be anywhere, outside the
/// log root).
fn real_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_dir())
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The newest `<restart>.log` of a container's directory (the highest restart count).
fn latest_log(dir: &Path) -> Option<PathBuf> {
    names(dir)
        .into_iter()
        .filter_map(|n| {
            let k: u32 = n.strip_suffix(".log")?.parse().ok()?;
            Some((k, n))
        })
        .max()
        .map(|(_, n)| dir.join(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cri_and_json_lines_are_unwrapped() {
        assert_eq!(
            unwrap_line("2026-11-27T21:00:00.123456789Z stderr F torch.OutOfMemoryError: CUDA out of memory."),
            "torch.OutOfMemoryError: CUDA out of memory."
        );
        assert_eq!(
            unwrap_line(r#"{"log":"RuntimeError: CUDA error: out of memory\n","stream":"stderr"}"#),
            "RuntimeError: CUDA error: out of memory"
        );
        assert_eq!(unwrap_line("plain text"), "plain text");
        assert_eq!(unwrap_line("a b c d"), "a b c d");
    }

    fn pod(uid: &str, container: Option<&str>) -> PodRef {
        PodRef {
            uid: uid.into(),
            namespace: Some("ml".into()),
            name: Some("llm-0".into()),
            container: container.map(str::to_string),
            container_id: None,
            allocated_gpus: None,
        }
    }

    fn append(path: &Path, text: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    /// Issue 39 item 5: an OOM line split into CRI `P` + `F` chunks was recorded as
    /// "torch.OutOfMemoryError: CUDA out of" with no request size.
    #[test]
    fn partial_cri_chunks_are_joined_per_stream() {
        let dir = tempfile::tempdir().unwrap();
        let uid = "6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f";
        let c = dir.path().join(format!("ml_llm-0_{uid}/vllm"));
        std::fs::create_dir_all(&c).unwrap();
        append(&c.join("0.log"), "");
        let mut logs = PodLogs::new(dir.path());
        logs.hold(&[&pod(uid, Some("vllm"))], 100.0);
        append(
            &c.join("0.log"),
            "2026-11-27T21:00:00.1Z stderr P torch.OutOfMemoryError: CUDA out of\n\
             2026-11-27T21:00:00.1Z stdout F step 7 done\n\
             2026-11-27T21:00:00.2Z stderr F  memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.77 GiB of which 1.06 GiB is free.\n",
        );
        let got = logs.poll();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].error.requested, Some(2 << 30), "{got:?}");
    }

    #[test]
    fn a_joined_line_is_bounded() {
        let mut j = Joiner::default();
        let chunk = format!("2026-11-27T21:00:00.1Z stderr P {}", "x".repeat(16 * 1024));
        let mut out = Vec::new();
        for _ in 0..10 {
            out.extend(j.push(&chunk));
        }
        assert_eq!(out.len(), 2, "one at 64 KiB, one after");
        assert!(out.iter().all(|l| l.len() == MAX_JOINED));
        assert!(j.pending[1].len() <= MAX_JOINED);
    }

    /// Issue 39 item 5: a container directory that is a symlink to a directory outside the
    /// log root was followed.
    #[test]
    fn a_symlinked_container_directory_is_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let uid = "6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f";
        let p = root.path().join(format!("ml_llm-0_{uid}"));
        std::fs::create_dir_all(&p).unwrap();
        append(&outside.path().join("0.log"), "");
        std::os::unix::fs::symlink(outside.path(), p.join("vllm")).unwrap();
        let mut logs = PodLogs::new(root.path());
        logs.hold(&[&pod(uid, None)], 100.0);
        logs.hold(&[&pod(uid, Some("vllm"))], 100.0);
        assert!(logs.is_empty(), "nothing followed");
        // A pod directory that is a link is not entered either.
        let uid2 = "7f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f";
        std::fs::create_dir_all(outside.path().join("c")).unwrap();
        append(&outside.path().join("c/0.log"), "");
        std::os::unix::fs::symlink(outside.path(), root.path().join(format!("ml_x_{uid2}")))
            .unwrap();
        logs.hold(&[&pod(uid2, Some("c"))], 100.0);
        assert!(logs.is_empty());
    }

    #[test]
    fn a_pod_s_container_is_followed_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let uid = "6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f";
        let c = dir.path().join(format!("ml_llm-0_{uid}/vllm"));
        std::fs::create_dir_all(&c).unwrap();
        std::fs::write(
            c.join("0.log"),
            "2026-11-27T21:00:00Z stderr F CUDA error: out of memory\n",
        )
        .unwrap();
        let pod = PodRef {
            uid: uid.into(),
            namespace: Some("ml".into()),
            name: Some("llm-0".into()),
            container: Some("vllm".into()),
            container_id: None,
            allocated_gpus: None,
        };
        let mut logs = PodLogs::new(dir.path());
        logs.hold(&[&pod], 100.0);
        assert_eq!(logs.len(), 1);
        assert!(logs.poll().is_empty(), "lines before are the past");
        std::fs::write(
            c.join("1.log"),
            "2026-11-27T21:00:01Z stderr F RuntimeError: CUDA error: out of memory\n",
        )
        .unwrap();
        let got = logs.poll();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].pod.name.as_deref(), Some("llm-0"));
        logs.hold(&[], 100.0 + KEEP_AFTER.as_secs_f64() + 1.0);
        assert!(logs.is_empty());
    }
}
