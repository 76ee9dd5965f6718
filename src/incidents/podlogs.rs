//! The container logs of the pods that hold or held GPU memory, followed under the kubelet's
//! layout (`/var/log/pods/<namespace>_<name>_<uid>/<container>/<restart>.log`, kubernetes
//! `pkg/kubelet/kuberuntime/helpers.go` `BuildContainerLogsDirectory`), each line unwrapped
//! from the CRI log format (`<RFC 3339 time> <stream> <P|F> <text>`, kubernetes
//! `pkg/kubelet/kuberuntime/logs/logs.go` `parseCRILog`) or docker's json-file format, and
//! passed to `run`'s error-line recogniser through [`recognise`] alone. Only those containers
//! are followed, for [`KEEP_AFTER`] after their pod last held GPU memory; a restart
//! (`1.log` after `0.log`) and rotation are followed.

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

/// The one entry point to `run`'s error-line recogniser (src/record/stderr.rs): a
/// recogniser rewrite replaces this function's body only.
pub fn recognise(state: &mut StderrWatcher, line: &str) -> Option<ParsedError> {
    state.line(line)
}

/// The text of one container log line: CRI (`2024-01-02T03:04:05.123456789Z stderr F
/// text`), docker json-file (`{"log":"text\n","stream":"stderr",...}`), or the line as it is.
pub fn unwrap_line(line: &str) -> String {
    if line.starts_with('{') {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
            if let Some(s) = v.get("log").and_then(|l| l.as_str()) {
                return s.trim_end_matches(['\n', '\r']).to_string();
            }
        }
    }
    let mut it = line.splitn(4, ' ');
    if let (Some(ts), Some(stream), Some(tag), Some(text)) =
        (it.next(), it.next(), it.next(), it.next())
    {
        let ts_ok = ts.len() >= 20 && ts.as_bytes().get(4) == Some(&b'-') && ts.contains('T');
        if ts_ok
            && matches!(stream, "stdout" | "stderr")
            && matches!(tag.as_bytes().first(), Some(b'P' | b'F'))
        {
            return text.to_string();
        }
    }
    line.to_string()
}

/// One followed container.
#[derive(Debug)]
struct Followed {
    pod: PodRef,
    dir: PathBuf,
    tail: LogTail,
    recogniser: StderrWatcher,
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
                let text = unwrap_line(&l);
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
    }
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
