//! Pod attribution (issue 18; docs/fleet.md "Pod attribution"): which Kubernetes pod and
//! container each GPU process runs in, and which GPUs the kubelet allocated to each pod. The
//! pod UID and container id come from the process's cgroup ([`host::place_of`]); names from
//! the kubelet's log directories ([`host::kubelet`]); allocations from the kubelet's
//! pod-resources API ([`host::podresources`], joined by namespace and name). No API-server
//! credentials anywhere. What is missing (no socket, no log directory) leaves the fields empty
//! and says so in one note; it is never an error. Findings about it are decided in
//! `diagnose::pods`.

use crate::gpu::DeviceInfo;
use crate::host::{self, kubelet, podresources};
use crate::model::{PodAllocation, PodRef, ProcessInfo};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The pods of the GPU processes seen by earlier collections (`vramdoc serve`), by PID: a
/// process that exits while the driver still lists its memory keeps the pod it was seen in.
/// Holds only PIDs the last collection listed, so it is bounded by the driver's lists.
#[derive(Debug, Clone, Default)]
pub struct PodMemory(Arc<Mutex<Remembered>>);

#[derive(Debug, Default)]
struct Remembered {
    pods: BTreeMap<u32, PodRef>,
    /// (namespace, pod, GPU index) of every allocated GPU → when a process of the pod was
    /// last seen holding memory on it (or when the allocation was first seen).
    last_use: BTreeMap<(String, String, u32), std::time::Instant>,
}

/// A GPU allocated to a pod on which no process of the pod holds memory now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleAllocation {
    pub namespace: String,
    pub pod: String,
    /// The GPU (NVML index) and the device id the kubelet allocated.
    pub device: u32,
    pub device_id: String,
    /// Since when no process of the pod was seen holding memory on it (the first collection
    /// that saw the allocation, if none ever did), in seconds.
    pub idle_seconds: f64,
}

impl PodMemory {
    fn lock(&self) -> std::sync::MutexGuard<'_, Remembered> {
        match self.0.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The allocated GPUs no process of their pod holds memory on now, with how long this
    /// memory has seen them so: a one-shot scan sees every one for the first time (0 s).
    /// Allocations no longer listed are forgotten.
    pub fn idle(
        &self,
        allocations: &[PodAllocation],
        processes: &[ProcessInfo],
        devices: &[DeviceInfo],
        now: std::time::Instant,
    ) -> Vec<IdleAllocation> {
        let used: std::collections::BTreeSet<(&str, &str, u32)> = processes
            .iter()
            .filter_map(|p| {
                let pod = p.pod.as_ref()?;
                Some((pod.namespace.as_deref()?, pod.name.as_deref()?, p))
            })
            .flat_map(|(ns, name, p)| {
                p.devices
                    .iter()
                    .filter(|u| u.used.is_some_and(|b| b > 0))
                    .map(move |u| (ns, name, u.device))
            })
            .collect();
        let mut mem = self.lock();
        let mut keep = BTreeMap::new();
        let mut out = Vec::new();
        for a in allocations {
            for id in &a.device_ids {
                let Some(d) = device_of_id(id, devices) else {
                    continue;
                };
                let key = (a.namespace.clone(), a.pod.clone(), d);
                // The same GPU again (another container of the pod, another replica id).
                if keep.contains_key(&key) {
                    continue;
                }
                let in_use = used.contains(&(a.namespace.as_str(), a.pod.as_str(), d));
                let since = if in_use {
                    now
                } else {
                    mem.last_use.get(&key).copied().unwrap_or(now)
                };
                if !in_use {
                    out.push(IdleAllocation {
                        namespace: a.namespace.clone(),
                        pod: a.pod.clone(),
                        device: d,
                        device_id: id.clone(),
                        idle_seconds: now.saturating_duration_since(since).as_secs_f64(),
                    });
                }
                keep.insert(key, since);
            }
        }
        mem.last_use = keep;
        out
    }

    /// Give the processes that are gone (not visible) the pod their PID was last seen in,
    /// then remember this collection's pods (dropping PIDs no longer listed).
    pub fn carry(&self, processes: &mut [ProcessInfo]) {
        let mut mem = self.lock();
        for p in processes
            .iter_mut()
            .filter(|p| !p.visible && p.pod.is_none())
        {
            p.pod = mem.pods.get(&p.pid).cloned();
        }
        mem.pods = processes
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
    /// The kubelet's plugin registration directory (`--plugins-registry`): whether NVIDIA's
    /// DRA kubelet plugin is registered on this node.
    pub plugins_registry: PathBuf,
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
            plugins_registry: kubelet::DEFAULT_PLUGINS_REGISTRY.into(),
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
    /// Allocated GPUs no process of their pod holds memory on, with for how long.
    pub idle: Vec<IdleAllocation>,
    /// The registration socket of NVIDIA's DRA kubelet plugin (`gpu.nvidia.com-reg.sock` in
    /// the kubelet's plugin registration directory), when it is registered on this node:
    /// pods here may hold GPUs through ResourceClaims.
    pub dra_registration: Option<PathBuf>,
    /// The pod-resources answer listed DRA claims for some container: the kubelet's
    /// `KubeletPodResourcesDynamicResources` gate is on, so an empty `dynamic_resources` means
    /// no claim.
    pub dynamic_resources_listed: bool,
}

/// The GPU (NVML index) a pod-resources device id names, if it can be told: a GPU UUID
/// (`GPU-…`), a time-slicing replica of one (`GPU-…::N`, NVIDIA device plugin
/// `api/config/v1/replicas.go`), a MIG device in the old `MIG-GPU-<uuid>/<gi>/<ci>` form (its
/// parent GPU), or `nvidiaN` (GKE's device plugin, and NVIDIA's DRA driver's `gpu-N`: the
/// device file `/dev/nvidiaN`, N its *minor number*, mapped to its GPU through each device's
/// `nvmlDeviceGetMinorNumber` — minors follow the kernel module's probe order, not NVML's
/// (NVIDIA/nvidia-docker#1432, #376); `None` when the minors are not known). A MIG UUID
/// (`MIG-<uuid>`, R470 and later) names its instance where the inventory holds it (read
/// through MIG handles), else `None`; so do `MIG-GPU-<uuid>/<gi>/<ci>` and GKE's
/// `nvidiaN/giM` (else their parent GPU). GKE's time-sharing ids (`nvidiaN/vgpuM`) name the
/// GPU of minor N. A MIG device of NVIDIA's DRA driver (`gpu-<minor>-mig-…`,
/// [`podresources::NVIDIA_DRA_DRIVER`]) names the instance of its profile on the GPU of that
/// minor where the inventory holds exactly one such instance ([`dra_mig_device`]), else `None`.
pub fn device_of_id(id: &str, devices: &[DeviceInfo]) -> Option<u32> {
    let id = id.split_once("::").map_or(id, |(base, _)| base);
    if let Some((minor, rest)) = id.strip_prefix("gpu-").and_then(|r| r.split_once("-mig-")) {
        return dra_mig_device(minor.parse().ok()?, rest, devices);
    }
    // MIG instances read through MIG handles are entries of their own: a MIG id names one.
    let mig = |uuid: Option<&str>, parent_gi| crate::gpu::mig_device_of(devices, uuid, parent_gi);
    let gi_of = |s: &str| s.trim_start_matches("gi").parse::<u32>().ok();
    let uuid = match id.strip_prefix("MIG-") {
        Some(rest) if rest.starts_with("GPU-") => {
            let mut parts = rest.split('/');
            let parent = parts.next()?;
            let p = devices
                .iter()
                .find(|d| d.uuid.eq_ignore_ascii_case(parent))?;
            let gi = parts.next().and_then(gi_of);
            return gi
                .and_then(|gi| mig(None, Some((p.index, gi))))
                .or(Some(p.index));
        }
        Some(_) => return mig(Some(id), None),
        None => id,
    };
    if uuid.starts_with("GPU-") {
        return devices
            .iter()
            .find(|d| d.uuid.eq_ignore_ascii_case(uuid))
            .map(|d| d.index);
    }
    // GKE's ids: `nvidia0`, and for its sharing `nvidia0/vgpu0` (time-sharing) and
    // `nvidia0/gi0` (MIG instances, by GPU instance id: that instance where this inventory
    // holds it, else its parent): the GPU is the part before the slash. MIG instances
    // carry no minor of their own.
    let mut parts = id.split('/');
    let n: u32 = parts.next()?.strip_prefix("nvidia")?.parse().ok()?;
    let gpus = || devices.iter().filter(|d| d.mig_instance().is_none());
    if gpus().any(|d| d.minor.is_none()) {
        return None;
    }
    let gpu = gpus().find(|d| d.minor == Some(n)).map(|d| d.index)?;
    let gi = parts.next().filter(|s| s.starts_with("gi")).and_then(gi_of);
    Some(gi.and_then(|gi| mig(None, Some((gpu, gi)))).unwrap_or(gpu))
}

/// The MIG instance a device of NVIDIA's DRA driver names, `gpu-<minor>-mig-<rest>`: the GPU
/// of that minor, and `rest` in either of the driver's forms (NVIDIA/k8s-dra-driver-gpu; its
/// own reading is the regular expression `^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$`):
/// - v25.12 on, `<profile>-<GI profile id>-<placement start>`: the profile as nvidia-smi
///   writes it, lower case, dots removed, other characters `-` (`1g.10gb+me` → `1g10gb-me`);
///   matched against each instance's profile written the same way.
/// - v25.3 – v25.8, `<GI profile id>-<placement start>-<placement size>`: the GPU-instance
///   profile id of nvml.h (`NVML_GPU_INSTANCE_PROFILE_3_SLICE` = 2, …), matched by its count
///   of compute slices (the `3g` of `3g.40gb`).
///
/// The inventory knows no placements, so the instance is the only one of its parent that
/// matches; two that match (`--mig 3g.40gb,3g.40gb`), none, or minors not known: `None`.
pub fn dra_mig_device(minor: u32, rest: &str, devices: &[DeviceInfo]) -> Option<u32> {
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (middle, last) = rest.rsplit_once('-')?;
    let (middle, before) = middle.rsplit_once('-')?;
    if middle.is_empty() || !number(last) || !number(before) {
        return None;
    }
    let gpus = || devices.iter().filter(|d| d.mig_instance().is_none());
    if gpus().any(|d| d.minor.is_none()) {
        return None;
    }
    let parent = gpus().find(|d| d.minor == Some(minor))?.index;
    let matches: Box<dyn Fn(&str) -> bool> = if number(middle) {
        // v25.3 – v25.8: `middle` is the GI profile id.
        let slices = gi_profile_slices(middle.parse().ok()?)?;
        Box::new(move |profile: &str| profile_slices(profile) == Some(slices))
    } else {
        let name = middle.to_string();
        Box::new(move |profile: &str| dra_profile_name(profile) == name)
    };
    let mut found = devices.iter().filter(|d| {
        d.mig_instance()
            .is_some_and(|m| m.parent == parent && matches(&m.profile))
    });
    let one = found.next()?;
    found.next().is_none().then_some(one.index)
}

/// A MIG profile as NVIDIA's DRA driver writes it in a device name (`toRFC1123Compliant` of
/// the profile without its dots).
fn dra_profile_name(profile: &str) -> String {
    let s: String = profile
        .to_ascii_lowercase()
        .chars()
        .filter(|c| *c != '.')
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    s.trim_matches('-').to_string()
}

/// The compute slices of a GPU-instance profile (`3g.40gb`, `1c.3g.40gb`, `1g.10gb+me`: 3,
/// 3, 1), `None` when the profile does not say.
fn profile_slices(profile: &str) -> Option<u32> {
    profile
        .split(['.', '+'])
        .find_map(|p| p.strip_suffix('g')?.parse().ok())
}

/// The compute slices of an `NVML_GPU_INSTANCE_PROFILE_*` id (nvml.h: `_1_SLICE` 0, `_2_SLICE`
/// 1, `_3_SLICE` 2, `_4_SLICE` 3, `_7_SLICE` 4, `_8_SLICE` 5, `_6_SLICE` 6, then the `_REV1`,
/// `_REV2`, `_GFX`, `_NO_ME` and `_ALL_ME` variants of 1, 2 and 4 slices, 7 to 16).
fn gi_profile_slices(id: u32) -> Option<u32> {
    const SLICES: [u32; 17] = [1, 2, 3, 4, 7, 8, 6, 1, 2, 1, 1, 2, 4, 1, 2, 1, 2];
    SLICES.get(id as usize).copied()
}

/// Pods of the GPU stack itself that hold or map GPU memory without requesting a GPU, named
/// by the pod-name prefix their DaemonSets give them: the device plugin's MPS control daemon
/// (NVIDIA/k8s-device-plugin `deployments/static/daemonset-mps-control-daemon.yml`, run with
/// `NVIDIA_VISIBLE_DEVICES=all` and no GPU request), the device plugin and GPU feature
/// discovery, dcgm-exporter and the gpu-operator's driver DaemonSet; and the GPU operator's
/// validation and DCGM pods (NVIDIA/gpu-operator): the `nvidia-operator-validator` DaemonSet
/// (`assets/state-operator-validation`), the `nvidia-cuda-validator-` pods it starts, which run
/// `vectorAdd` with `NVIDIA_VISIBLE_DEVICES=all` and no GPU request
/// (`validator/manifests/cuda-workload-validation.yaml`), and the standalone DCGM host engine,
/// DaemonSet `nvidia-dcgm` (`assets/state-dcgm/0400_dcgm.yml`), also without a GPU request.
pub const SYSTEM_POD_PREFIXES: &[&str] = &[
    "nvidia-device-plugin-mps-control-daemon",
    "nvidia-device-plugin",
    "gpu-feature-discovery",
    "nvidia-dcgm-exporter",
    "dcgm-exporter",
    "nvidia-driver-daemonset",
    "nvidia-operator-validator-",
    "nvidia-cuda-validator-",
    "nvidia-dcgm-",
];

/// The MPS daemons' process names (CUDA MPS documentation: `nvidia-cuda-mps-control`
/// starts `nvidia-cuda-mps-server`, which holds the clients' contexts).
pub const MPS_PROCESSES: &[&str] = &["nvidia-cuda-mps-control", "nvidia-cuda-mps-server"];

/// Whether a pod's process is the GPU stack's own (not a workload the allocation audit
/// judges): an MPS daemon process, or a pod named like [`SYSTEM_POD_PREFIXES`].
pub fn is_system_process(pod: &PodRef, process_name: Option<&str>) -> bool {
    if process_name.is_some_and(|n| MPS_PROCESSES.contains(&n)) {
        return true;
    }
    pod.name
        .as_deref()
        .is_some_and(|n| SYSTEM_POD_PREFIXES.iter().any(|p| n.starts_with(p)))
}

/// A resource whose devices are GPUs: the NVIDIA device plugin's (`nvidia.com/gpu`, renamed
/// shared resources `nvidia.com/gpu.shared`, MIG strategies `nvidia.com/mig-1g.10gb`).
pub fn is_gpu_resource(name: &str) -> bool {
    name.starts_with("nvidia.com/")
}

/// The pod `pid` runs in as its cgroup paths say (the kubelet's `kubepods` hierarchy): its
/// UID and container id only; `None` outside a pod or when the cgroups cannot be read.
pub fn cgroup_pod(pid: u32) -> Option<PodRef> {
    let place = host::cgroup_paths(pid)
        .ok()
        .and_then(|paths| host::place_of(&paths))?;
    Some(PodRef {
        uid: place.pod_uid?,
        namespace: None,
        name: None,
        container: None,
        container_id: place.container_id,
        allocated_gpus: None,
    })
}

/// Set [`ProcessInfo::pod`] of every visible process that runs in a pod, and read the
/// allocations. Asks the kubelet when some process runs in a pod, the socket was named, or
/// it exists (a node whose pods hold GPUs without using them); says what is missing only in
/// the first two cases.
pub fn attribute(
    processes: &mut [ProcessInfo],
    devices: &[DeviceInfo],
    cfg: &PodConfig,
) -> Attribution {
    for p in processes.iter_mut().filter(|p| p.visible) {
        p.pod = cgroup_pod(p.pid);
    }
    let in_pods = processes.iter().any(|p| p.pod.is_some());
    let wanted = in_pods || cfg.explicit;
    if !wanted && !cfg.socket.exists() {
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
            if wanted {
                notes.push(format!("GPU allocations of pods unknown: {e}"));
            }
            None
        }
    };
    name_from(
        processes.iter_mut().filter_map(|p| p.pod.as_mut()),
        &pods,
        &containers,
    );
    if let Some(listed) = &listed {
        join_allocations(
            processes.iter_mut().filter_map(|p| p.pod.as_mut()),
            &pods,
            listed,
        );
    }
    cfg.memory.carry(processes);
    let allocations = listed
        .iter()
        .flatten()
        .flat_map(|r| {
            r.containers.iter().filter_map(|c| {
                let mut device_ids: Vec<String> = c.gpu_ids(is_gpu_resource);
                device_ids.sort();
                (!device_ids.is_empty()).then(|| PodAllocation {
                    namespace: r.namespace.clone(),
                    pod: r.name.clone(),
                    container: c.name.clone(),
                    device_ids,
                })
            })
        })
        .collect::<Vec<_>>();
    let idle = cfg
        .memory
        .idle(&allocations, processes, devices, std::time::Instant::now());
    Attribution {
        note: (!notes.is_empty()).then(|| notes.join("; ")),
        allocations,
        idle,
        dra_registration: kubelet::registration_socket(
            &cfg.plugins_registry,
            podresources::NVIDIA_DRA_DRIVER,
        ),
        dynamic_resources_listed: listed
            .as_deref()
            .is_some_and(podresources::lists_dynamic_resources),
    }
}

/// Set the allocated GPUs of each named pod from the pod-resources answer, joined by
/// namespace and name (the API names no UID). A name the log directory shows under two UIDs
/// (a pod deleted and made again, its old directory not yet collected) is left without: which
/// instance the answer is about cannot be told.
fn join_allocations<'a>(
    pods: impl Iterator<Item = &'a mut PodRef>,
    dirs: &[kubelet::PodDir],
    listed: &[podresources::PodResources],
) {
    let mut uids: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for d in dirs {
        *uids
            .entry((d.namespace.as_str(), d.name.as_str()))
            .or_default() += 1;
    }
    for pod in pods {
        let (Some(ns), Some(name)) = (pod.namespace.as_deref(), pod.name.as_deref()) else {
            continue;
        };
        if uids.get(&(ns, name)).copied().unwrap_or(0) > 1 {
            continue;
        }
        if let Some(r) = listed.iter().find(|r| r.namespace == ns && r.name == name) {
            let mut ids: Vec<String> = r
                .containers
                .iter()
                .flat_map(|c| c.gpu_ids(is_gpu_resource))
                .collect();
            ids.sort();
            ids.dedup();
            pod.allocated_gpus = Some(ids);
        }
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
    fn allocations_join_by_name_unless_the_name_has_two_pod_directories() {
        use podresources::{ContainerDevices, ContainerResources, PodResources};
        let dir = |name: &str, uid: &str| kubelet::PodDir {
            namespace: "ml".into(),
            name: name.into(),
            uid: uid.into(),
            containers: vec![],
        };
        let named = |name: &str| PodRef {
            uid: "u".into(),
            namespace: Some("ml".into()),
            name: Some(name.into()),
            container: None,
            container_id: None,
            allocated_gpus: None,
        };
        let listed = |name: &str| PodResources {
            name: name.into(),
            namespace: "ml".into(),
            containers: vec![ContainerResources {
                name: "c".into(),
                devices: vec![
                    ContainerDevices {
                        resource_name: "nvidia.com/gpu".into(),
                        device_ids: vec!["GPU-b".into(), "GPU-a".into()],
                    },
                    ContainerDevices {
                        resource_name: "example.com/nic".into(),
                        device_ids: vec!["nic0".into()],
                    },
                ],
                dynamic_resources: vec![],
            }],
        };
        let dirs = [dir("a", "1"), dir("b", "2"), dir("b", "3"), dir("c", "4")];
        let listed = [listed("a"), listed("b")];
        let mut pods = [named("a"), named("b"), named("c")];
        join_allocations(pods.iter_mut(), &dirs, &listed);
        assert_eq!(
            pods[0].allocated_gpus,
            Some(vec!["GPU-a".to_string(), "GPU-b".to_string()])
        );
        assert_eq!(pods[1].allocated_gpus, None, "two instances of ml/b");
        assert_eq!(pods[2].allocated_gpus, None, "not listed");
    }

    #[test]
    fn gke_sharing_ids_name_their_gpu() {
        let devices: Vec<DeviceInfo> = (0..3)
            .map(|i| DeviceInfo {
                index: i,
                name: "t4".into(),
                uuid: format!("GPU-{i}"),
                pci_bus_id: String::new(),
                memory: crate::gpu::MemoryInfo::zeroed(),
                utilization_gpu: None,
                temperature_c: None,
                numa_node: None,
                mig: None,
                memory_unknown: None,
                status: Default::default(),
                // Minors permuted against NVML order: /dev/nvidia0 is GPU 2.
                minor: Some([2, 0, 1][i as usize]),
            })
            .collect();
        for (id, want) in [
            ("nvidia1", Some(2)),
            ("nvidia1/vgpu3", Some(2)),
            ("nvidia0/gi2", Some(1)),
            ("nvidia2", Some(0)),
            ("nvidia9/vgpu0", None),
            ("nvidiaX/vgpu0", None),
        ] {
            assert_eq!(device_of_id(id, &devices), want, "{id}");
        }
        // Minors not known: a GKE id cannot be told (UUIDs still can).
        let mut unknown = devices.clone();
        unknown[1].minor = None;
        assert_eq!(device_of_id("nvidia1", &unknown), None);
        assert_eq!(device_of_id("GPU-1", &unknown), Some(1));
    }

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
        let a = attribute(&mut procs, &[], &cfg);
        assert_eq!(a, Attribution::default());
        assert!(procs[0].pod.is_none());
        // Named on the command line: its absence is one note, not an error.
        let a = attribute(
            &mut procs,
            &[],
            &PodConfig {
                explicit: true,
                ..cfg
            },
        );
        let note = a.note.expect("a note");
        assert!(note.contains("no pod-resources socket"), "{note}");
    }
}
