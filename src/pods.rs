//! Pod attribution (issue 18; docs/fleet.md "Pod attribution"): which Kubernetes pod and
//! container each GPU process runs in, and which GPUs the kubelet allocated to each pod. The
//! pod UID and container id come from the process's cgroup ([`host::place_of`]); names from
//! the kubelet's log directories ([`host::kubelet`]); allocations from the kubelet's
//! pod-resources API ([`host::podresources`], joined by namespace and name). No API-server
//! credentials anywhere. What is missing (no socket, no log directory) leaves the fields empty
//! and says so in one note; it is never an error. Findings about it are decided in
//! `diagnose::pods`.

use crate::host::{self, kubelet, podresources};
use crate::model::{PodAllocation, PodRef, ProcessInfo};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The pods of the GPU processes seen by earlier collections (`vramdoc serve`), by PID: a
/// process that exits while the driver still lists its memory keeps the pod it was seen in.
/// Holds only PIDs the last collection listed, so it is bounded by the driver's lists.
#[derive(Debug, Clone, Default)]
pub struct PodMemory(Arc<Mutex<BTreeMap<u32, PodRef>>>);

impl PodMemory {
    /// Give the processes that are gone (not visible) the pod their PID was last seen in,
    /// then remember this collection's pods (dropping PIDs no longer listed).
    pub fn carry(&self, processes: &mut [ProcessInfo]) {
        let mut map = match self.0.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        for p in processes
            .iter_mut()
            .filter(|p| !p.visible && p.pod.is_none())
        {
            p.pod = map.get(&p.pid).cloned();
        }
        *map = processes
            .iter()
            .filter_map(|p| Some((p.pid, p.pod.clone()?)))
            .collect();
    }
}

/// Where the kubelet's files are.
#[derive(Debug, Clone)]
pub struct PodConfig {
    /// The pod-resources socket (`--pod-resources-socket`).
    pub socket: PathBuf,
    /// The kubelet's pod log directory (`--pod-log-dir`); container log links are read from
    /// `containers/` beside it.
    pub log_dir: PathBuf,
    /// The socket was named on the command line: ask it, and say when it is missing, even
    /// when no GPU process runs in a pod.
    pub explicit: bool,
    /// Longest wait for the kubelet's answer, connecting included.
    pub deadline: Duration,
    /// Pods of PIDs seen by earlier collections (one per exporter; a one-shot scan starts
    /// empty).
    pub memory: PodMemory,
}

impl Default for PodConfig {
    fn default() -> Self {
        PodConfig {
            socket: podresources::DEFAULT_SOCKET.into(),
            log_dir: kubelet::DEFAULT_POD_LOG_DIR.into(),
            explicit: false,
            deadline: Duration::from_secs(2),
            memory: PodMemory::default(),
        }
    }
}

/// What one attribution found besides the processes' own [`PodRef`]s.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Attribution {
    /// Why pod data is missing or partial, in one line.
    pub note: Option<String>,
    /// GPU allocations of every container of the node (pod-resources answered).
    pub allocations: Vec<PodAllocation>,
}

/// A resource whose devices are GPUs: the NVIDIA device plugin's (`nvidia.com/gpu`, renamed
/// shared resources `nvidia.com/gpu.shared`, MIG strategies `nvidia.com/mig-1g.10gb`).
pub fn is_gpu_resource(name: &str) -> bool {
    name.starts_with("nvidia.com/")
}

/// Set [`ProcessInfo::pod`] of every visible process that runs in a pod, and read the
/// allocations. Asks the kubelet only when some process runs in a pod (or the socket was
/// named).
pub fn attribute(processes: &mut [ProcessInfo], cfg: &PodConfig) -> Attribution {
    for p in processes.iter_mut().filter(|p| p.visible) {
        let place = host::cgroup_paths(p.pid)
            .ok()
            .and_then(|paths| host::place_of(&paths));
        p.pod = place.and_then(|pl| {
            Some(PodRef {
                uid: pl.pod_uid?,
                namespace: None,
                name: None,
                container: None,
                container_id: pl.container_id,
                allocated_gpus: None,
            })
        });
    }
    let in_pods = processes.iter().any(|p| p.pod.is_some());
    if !in_pods && !cfg.explicit {
        cfg.memory.carry(processes);
        return Attribution::default();
    }
    let mut notes = Vec::new();
    let pods = match kubelet::pod_dirs(&cfg.log_dir) {
        Ok(p) => p,
        Err(e) => {
            if in_pods {
                notes.push(format!(
                    "pods named by UID only: the kubelet's pod log directory is not readable ({e})"
                ));
            }
            Vec::new()
        }
    };
    let containers =
        kubelet::container_logs(&kubelet::containers_dir_of(&cfg.log_dir)).unwrap_or_default();
    let listed = match podresources::list(&cfg.socket, cfg.deadline) {
        Ok(l) => Some(l),
        Err(e) => {
            notes.push(format!("GPU allocations of pods unknown: {e}"));
            None
        }
    };
    name_from(
        processes.iter_mut().filter_map(|p| p.pod.as_mut()),
        &pods,
        &containers,
    );
    for pod in processes.iter_mut().filter_map(|p| p.pod.as_mut()) {
        let Some(listed) = &listed else { continue };
        let (Some(ns), Some(name)) = (&pod.namespace, &pod.name) else {
            continue;
        };
        if let Some(r) = listed
            .iter()
            .find(|r| &r.namespace == ns && &r.name == name)
        {
            let mut ids: Vec<String> = r
                .containers
                .iter()
                .flat_map(|c| &c.devices)
                .filter(|d| is_gpu_resource(&d.resource_name))
                .flat_map(|d| d.device_ids.iter().cloned())
                .collect();
            ids.sort();
            ids.dedup();
            pod.allocated_gpus = Some(ids);
        }
    }
    cfg.memory.carry(processes);
    let allocations = listed
        .iter()
        .flatten()
        .flat_map(|r| {
            r.containers.iter().filter_map(|c| {
                let mut device_ids: Vec<String> = c
                    .devices
                    .iter()
                    .filter(|d| is_gpu_resource(&d.resource_name))
                    .flat_map(|d| d.device_ids.iter().cloned())
                    .collect();
                device_ids.sort();
                (!device_ids.is_empty()).then(|| PodAllocation {
                    namespace: r.namespace.clone(),
                    pod: r.name.clone(),
                    container: c.name.clone(),
                    device_ids,
                })
            })
        })
        .collect();
    Attribution {
        note: (!notes.is_empty()).then(|| notes.join("; ")),
        allocations,
    }
}

/// Name `pods` (UID and container id known) from the kubelet's log directory `log_dir`; a
/// directory that cannot be read leaves them unnamed.
pub fn name_pods<'a>(pods: impl Iterator<Item = &'a mut PodRef>, log_dir: &std::path::Path) {
    let dirs = kubelet::pod_dirs(log_dir).unwrap_or_default();
    let containers =
        kubelet::container_logs(&kubelet::containers_dir_of(log_dir)).unwrap_or_default();
    name_from(pods, &dirs, &containers);
}

fn name_from<'a>(
    pods: impl Iterator<Item = &'a mut PodRef>,
    dirs: &[kubelet::PodDir],
    containers: &[kubelet::ContainerLog],
) {
    let by_uid: BTreeMap<&str, &kubelet::PodDir> =
        dirs.iter().map(|d| (d.uid.as_str(), d)).collect();
    let by_id: BTreeMap<&str, &kubelet::ContainerLog> = containers
        .iter()
        .map(|c| (c.container_id.as_str(), c))
        .collect();
    for pod in pods {
        if let Some(d) = by_uid.get(pod.uid.as_str()) {
            pod.namespace = Some(d.namespace.clone());
            pod.name = Some(d.name.clone());
            if let [only] = d.containers.as_slice() {
                pod.container = Some(only.clone());
            }
        }
        if let Some(c) = pod.container_id.as_deref().and_then(|id| by_id.get(id)) {
            pod.container = Some(c.container.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gone_process_keeps_the_pod_it_was_seen_in_while_it_is_listed() {
        let pod = PodRef {
            uid: "6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f".into(),
            namespace: Some("ml".into()),
            name: Some("llm-0".into()),
            container: Some("vllm".into()),
            container_id: None,
            allocated_gpus: None,
        };
        let mut first = crate::scan::sample_inventory().processes;
        first[0].pod = Some(pod.clone());
        let memory = PodMemory::default();
        memory.carry(&mut first);
        // Next collection: PID 4242 is gone but still listed; PID 77 never had a pod.
        let mut next = crate::scan::sample_inventory().processes;
        next[0].visible = false;
        memory.carry(&mut next);
        assert_eq!(next[0].pod.as_ref(), Some(&pod));
        assert_eq!(next[1].pod, None);
        // No longer listed: forgotten, so a later process with the PID starts clean.
        memory.carry(&mut []);
        let mut later = crate::scan::sample_inventory().processes;
        later[0].visible = false;
        memory.carry(&mut later);
        assert_eq!(later[0].pod, None);
    }

    #[test]
    fn no_pod_and_no_socket_named_asks_nothing_and_notes_nothing() {
        let mut procs = vec![crate::inventory::process_info(std::process::id(), vec![])];
        let cfg = PodConfig {
            socket: "/nonexistent/kubelet.sock".into(),
            ..PodConfig::default()
        };
        let a = attribute(&mut procs, &cfg);
        assert_eq!(a, Attribution::default());
        assert!(procs[0].pod.is_none());
        // Named on the command line: its absence is one note, not an error.
        let a = attribute(
            &mut procs,
            &PodConfig {
                explicit: true,
                ..cfg
            },
        );
        let note = a.note.expect("a note");
        assert!(note.contains("no pod-resources socket"), "{note}");
    }
}
