//! What job membership reads beyond one process's files (issue 17): where the cgroup
//! hierarchies are mounted ([`cgroup_mounts`], from `/proc/self/mountinfo`) and the kernel's
//! clock in the unit of a process's start time ([`ticks_since_boot`], [`ticks_per_second`]),
//! to tell a process started during a recording from one that was there before; and where a
//! process's cgroup path places it ([`place_of`]): the container id and runtime, and the
//! Kubernetes pod UID and QoS class of the kubelet's cgroup layout (issue 18). Nothing here
//! decides membership (`record::tree` does) or names a pod (`inventory`, over the kubelet's
//! files: [`super::kubelet`]).

use super::HostError;
use std::path::PathBuf;

type Result<T> = std::result::Result<T, HostError>;

/// The mount points of the cgroup hierarchies (v1 controllers and v2), from
/// `/proc/self/mountinfo` (field 5 of the lines whose filesystem type is `cgroup` or
/// `cgroup2`).
pub fn cgroup_mounts() -> Result<Vec<PathBuf>> {
    let path = PathBuf::from("/proc/self/mountinfo");
    let text =
        std::fs::read_to_string(&path).map_err(|e| HostError::from_io(None, path.clone(), e))?;
    Ok(parse_cgroup_mounts(&text))
}

/// The cgroup mount points a mountinfo text names.
fn parse_cgroup_mounts(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let fstype = right.split(' ').next()?;
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            // Octal escapes (`\040` for a space) as the kernel writes them.
            let mount = left.split(' ').nth(4)?.replace("\\040", " ");
            Some(PathBuf::from(mount))
        })
        .collect()
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, 100 on Linux), the unit of a process's
/// start time.
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf with a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|h| *h > 0).unwrap_or(100)
}

/// Clock ticks since boot now (`CLOCK_BOOTTIME` in `sysconf(_SC_CLK_TCK)` units), the unit
/// and origin of a process's start time in `/proc/PID/stat`.
pub fn ticks_since_boot() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime with a valid out pointer; sysconf with a constant.
    let (rc, hz) = unsafe {
        (
            libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts),
            libc::sysconf(libc::_SC_CLK_TCK),
        )
    };
    if rc != 0 || hz <= 0 {
        return None;
    }
    let hz = hz as u64;
    Some(ts.tv_sec as u64 * hz + ts.tv_nsec as u64 * hz / 1_000_000_000)
}

/// Where a cgroup path places a process: the container it runs in and, under the kubelet's
/// `kubepods` hierarchy, its pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CgroupPlace {
    /// The pod's UID with dashes (the systemd driver writes it with underscores).
    pub pod_uid: Option<String>,
    /// `guaranteed`, `burstable` or `besteffort` (the kubelet puts guaranteed pods directly
    /// under `kubepods`).
    pub qos: Option<String>,
    /// The container id (64 lowercase hex).
    pub container_id: Option<String>,
    /// The runtime the scope names: `containerd`, `crio`, `docker`, `podman`; `None` for a
    /// bare id (cgroupfs driver: containerd or docker, the path does not say which).
    pub runtime: Option<String>,
}

/// Where the cgroup paths of one process (every line of `/proc/PID/cgroup`, v1 and v2) place
/// it: the first path that names a pod, else the first that names a container. Shapes, after
/// the kubelet's cgroup manager (`pkg/kubelet/cm/cgroup_manager_linux.go`: cgroupfs names
/// `kubepods/burstable/pod<UID>`, systemd names `kubepods-burstable-pod<UID with _>.slice`)
/// and the runtimes' scopes (`cri-containerd-<id>.scope`, `crio-<id>.scope`,
/// `docker-<id>.scope`, `libpod-<id>.scope`; cgroupfs: a bare `<id>` or `crio-<id>`), as
/// cAdvisor's container handlers match them. `crio-conmon-<id>` (CRI-O's monitor) is not the
/// container.
pub fn place_of(paths: &[String]) -> Option<CgroupPlace> {
    let places: Vec<CgroupPlace> = paths.iter().filter_map(|p| place_of_path(p)).collect();
    places
        .iter()
        .find(|p| p.pod_uid.is_some())
        .or_else(|| places.first())
        .cloned()
}

/// [`place_of`] for one path.
fn place_of_path(path: &str) -> Option<CgroupPlace> {
    let mut place = CgroupPlace::default();
    // Read from inside a cgroup namespace (a container's, the default on cgroup v2), another
    // process's path is relative to the reader's root and climbs out of it with `..`
    // (cgroup_namespaces(7)): `/../../burstable/pod<UID>/<id>` has lost its `kubepods`.
    let mut in_kubepods = path.trim_start_matches('/').starts_with("../");
    let mut qos_seen = false;
    for comp in path.split('/').filter(|c| !c.is_empty() && *c != "..") {
        // cgroupfs driver: kubepods / [burstable|besteffort] / pod<UID> / <id>.
        if comp == "kubepods" {
            in_kubepods = true;
            qos_seen = true;
            place.qos = Some("guaranteed".into());
            continue;
        }
        // systemd driver: kubepods.slice / kubepods-burstable.slice /
        // kubepods-burstable-pod<UID>.slice / <runtime>-<id>.scope (and kind's
        // kubelet-kubepods.slice).
        if let Some(slice) = comp.strip_suffix(".slice") {
            let slice = slice.strip_prefix("kubelet-").unwrap_or(slice);
            if let Some(rest) = slice.strip_prefix("kubepods") {
                in_kubepods = true;
                qos_seen = true;
                place.qos.get_or_insert_with(|| "guaranteed".into());
                for part in rest.split('-').filter(|p| !p.is_empty()) {
                    if let Some(uid) = part.strip_prefix("pod") {
                        place.pod_uid = pod_uid(uid);
                    } else if is_qos(part) {
                        place.qos = Some(part.into());
                    }
                }
            }
            continue;
        }
        if in_kubepods && is_qos(comp) {
            qos_seen = true;
            place.qos = Some(comp.into());
            continue;
        }
        if in_kubepods {
            if let Some(uid) = comp.strip_prefix("pod").and_then(pod_uid) {
                place.pod_uid = Some(uid);
                continue;
            }
        }
        if let Some((runtime, id)) = container_of(comp) {
            place.container_id = Some(id.to_string());
            place.runtime = runtime.map(str::to_string);
        }
    }
    // A relative path that starts below the QoS level does not say the class.
    if !in_kubepods || !qos_seen {
        place.qos = None;
    }
    (place.pod_uid.is_some() || place.container_id.is_some()).then_some(place)
}

fn is_qos(s: &str) -> bool {
    s == "burstable" || s == "besteffort"
}

/// A pod UID as the cgroup spells it (dashes, or underscores under systemd), with dashes;
/// `None` unless it is 32 hex digits in the 8-4-4-4-12 shape of a UUID, or 32 hex digits
/// without dashes: a static pod's UID, the hash of its manifest (kubernetes
/// `pkg/kubelet/config/common.go` `applyDefaults`).
fn pod_uid(s: &str) -> Option<String> {
    if s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Some(s.to_ascii_lowercase());
    }
    let uid = s.replace('_', "-");
    let groups: Vec<&str> = uid.split('-').collect();
    let shape = groups.iter().map(|g| g.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12];
    (shape
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit())))
    .then(|| uid.to_ascii_lowercase())
}

/// The runtime and the 64-hex container id one cgroup path component names.
fn container_of(comp: &str) -> Option<(Option<&'static str>, &str)> {
    const SCOPES: &[(&str, &str)] = &[
        ("cri-containerd-", "containerd"),
        ("crio-", "crio"),
        ("docker-", "docker"),
        ("libpod-", "podman"),
    ];
    let is_id =
        |s: &str| s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if is_id(comp) {
        return Some((None, comp));
    }
    let base = comp.strip_suffix(".scope").unwrap_or(comp);
    SCOPES.iter().find_map(|(prefix, runtime)| {
        let id = base.strip_prefix(prefix)?;
        is_id(id).then_some((Some(*runtime), id))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_mounts_are_read_from_mountinfo() {
        let text =
            "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:12 - cgroup cgroup rw,memory\n\
                    31 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
                    32 25 0:28 / /proc rw - proc proc rw\n\
                    33 25 0:29 / /mnt/a\\040b rw - cgroup2 none rw\n";
        assert_eq!(
            parse_cgroup_mounts(text),
            [
                PathBuf::from("/sys/fs/cgroup/memory"),
                PathBuf::from("/sys/fs/cgroup/unified"),
                PathBuf::from("/mnt/a b"),
            ]
        );
        assert!(cgroup_mounts().is_ok());
    }

    /// Real `/proc/PID/cgroup` shapes: kubelet cgroupfs and systemd drivers (kubernetes
    /// `pkg/kubelet/cm/cgroup_manager_linux.go`, `ConvertCgroupNameToSystemd`; Kubernetes docs
    /// "Configuring a cgroup driver"), containerd's `cri-containerd-<id>.scope`, CRI-O's
    /// `crio-<id>.scope` and cgroupfs `crio-<id>`, cri-dockerd's `docker-<id>.scope`, kind's
    /// `kubelet.slice` prefix (cAdvisor `container/{containerd,crio,docker}` handlers; the
    /// lines nvitop's pod-attribution PRs #169/#181 match), plus plain Docker and a desktop
    /// session.
    #[test]
    fn pods_and_containers_are_placed_from_every_driver_and_runtime_shape() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let uid = "1f2e3d4c-5b6a-4798-8a7b-6c5d4e3f2a1b";
        let us = uid.replace('-', "_");
        let place = |pod: Option<&str>, qos: Option<&str>, rt: Option<&str>| {
            Some(CgroupPlace {
                pod_uid: pod.map(str::to_string),
                qos: qos.map(str::to_string),
                container_id: Some(id.to_string()),
                runtime: rt.map(str::to_string),
            })
        };
        let cases: Vec<(Vec<String>, Option<CgroupPlace>)> = vec![
            // cgroup v2, systemd driver, containerd (EKS AL2023, GKE COS, kubeadm defaults).
            (
                vec![format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{us}.slice/cri-containerd-{id}.scope"
                )],
                place(Some(uid), Some("burstable"), Some("containerd")),
            ),
            // Guaranteed QoS under systemd: the pod slice sits directly under kubepods.slice.
            (
                vec![format!("/kubepods.slice/kubepods-pod{us}.slice/cri-containerd-{id}.scope")],
                place(Some(uid), Some("guaranteed"), Some("containerd")),
            ),
            // CRI-O under systemd (OpenShift).
            (
                vec![format!(
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{us}.slice/crio-{id}.scope"
                )],
                place(Some(uid), Some("besteffort"), Some("crio")),
            ),
            // cri-dockerd under systemd.
            (
                vec![format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{us}.slice/docker-{id}.scope"
                )],
                place(Some(uid), Some("burstable"), Some("docker")),
            ),
            // cgroup v1, cgroupfs driver (every hierarchy line; the unified line is `/`).
            (
                vec![
                    format!("/kubepods/besteffort/pod{uid}/{id}"),
                    format!("/kubepods/besteffort/pod{uid}/{id}"),
                    "/".into(),
                ],
                place(Some(uid), Some("besteffort"), None),
            ),
            // Guaranteed under cgroupfs, CRI-O's cgroupfs leaf.
            (
                vec![format!("/kubepods/pod{uid}/crio-{id}")],
                place(Some(uid), Some("guaranteed"), Some("crio")),
            ),
            // kind: the kubelet's hierarchy under kubelet.slice, inside a node container.
            (
                vec![format!(
                    "/system.slice/docker-{}.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod{us}.slice/cri-containerd-{id}.scope",
                    "f".repeat(64)
                )],
                place(Some(uid), Some("burstable"), Some("containerd")),
            ),
            // A static pod: its UID is a 32-hex hash without dashes.
            (
                vec![format!("/kubepods/besteffort/pod{}/{id}", "0a".repeat(16))],
                place(Some(&"0a".repeat(16)), Some("besteffort"), None),
            ),
            // Plain Docker: a container, no pod.
            (vec![format!("/docker/{id}")], place(None, None, None)),
            (
                vec![format!("/system.slice/docker-{id}.scope")],
                place(None, None, Some("docker")),
            ),
            // CRI-O's conmon is not the container; a session is nothing.
            (
                vec![format!("/kubepods.slice/crio-conmon-{id}.scope")],
                None,
            ),
            (vec!["/user.slice/user-1000.slice/session-3.scope".into()], None),
            (vec!["/".into()], None),
            // Read from inside a cgroup namespace (cgroup v2's default for containers): paths
            // relative to the reader's root, `kubepods` climbed out of with `..`.
            (
                vec![format!("/../../../burstable/pod{uid}/{id}")],
                place(Some(uid), Some("burstable"), None),
            ),
            (
                vec![format!("/../../pod{uid}/{id}")],
                place(Some(uid), None, None),
            ),
            (
                vec![format!("/../../kubepods-besteffort-pod{us}.slice/cri-containerd-{id}.scope")],
                place(Some(uid), Some("besteffort"), Some("containerd")),
            ),
            // A pod directory that is not a UID is not a pod.
            (vec!["/kubepods/burstable/podxyz".into()], None),
        ];
        for (paths, want) in cases {
            assert_eq!(place_of(&paths), want, "{paths:?}");
        }
        // A v1 hierarchy naming the pod wins over a unified line naming only a container.
        let mixed = vec![format!("/docker/{id}"), format!("/kubepods/pod{uid}/{id}")];
        assert_eq!(
            place_of(&mixed).and_then(|p| p.pod_uid).as_deref(),
            Some(uid)
        );
    }

    proptest::proptest! {
        /// Any text a cgroup file (or a hostile container's cgroup name) holds: no panic, and
        /// a place only with a pod UID of the UUID shape or a 64-hex container id.
        #[test]
        fn any_cgroup_text_is_placed_without_panic(paths in proptest::collection::vec(".{0,200}", 0..4)) {
            if let Some(p) = place_of(&paths) {
                proptest::prop_assert!(p.pod_uid.as_deref().is_none_or(|u| u.len() == 36 || u.len() == 32));
                proptest::prop_assert!(p.container_id.as_deref().is_none_or(|c| c.len() == 64));
            }
        }
    }

    #[test]
    fn a_child_started_now_has_a_start_time_near_the_clock() {
        let before = ticks_since_boot().expect("CLOCK_BOOTTIME");
        let mut c = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let start = crate::host::start_time(c.id());
        let after = ticks_since_boot().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
        let start = start.expect("the child runs");
        assert!(
            start + 1 >= before && start <= after + 1,
            "{before} <= {start} <= {after}"
        );
    }
}
