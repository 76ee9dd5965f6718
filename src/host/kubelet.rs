//! What the kubelet's log directories say about the pods of this node, without API-server
//! credentials: `/var/log/pods/<namespace>_<name>_<uid>/<container>/` (one directory per pod,
//! [`pod_dirs`]) and `/var/log/containers/<pod>_<namespace>_<container>-<id>.log` (one link per
//! container, [`container_logs`]), the layout the kubelet writes (kubernetes
//! `pkg/kubelet/kuberuntime/helpers.go` `BuildPodLogsDirectory`, `pkg/kubelet/kubelet_pods.go`
//! `buildContainerLogsPath`) and log shippers read. Namespaces and pod names are DNS names and
//! never hold `_`, so the split is unambiguous. Names are returned as the files spell them:
//! untrusted text, cleaned where it is shown. Also which kubelet plugins are registered: the
//! sockets in the kubelet's plugin registration directory ([`registration_socket`]).

use super::HostError;
use std::path::{Path, PathBuf};

/// The kubelet's pod log directory (`--pod-log-dir` changes it).
pub const DEFAULT_POD_LOG_DIR: &str = "/var/log/pods";

/// The kubelet's plugin registration directory (`<root-dir>/plugins_registry`; kubernetes
/// `k8s.io/dynamic-resource-allocation/kubeletplugin` `KubeletRegistryDir`), where each DRA
/// driver's kubelet plugin puts its registration socket (`--plugins-registry` changes it).
pub const DEFAULT_PLUGINS_REGISTRY: &str = "/var/lib/kubelet/plugins_registry";

/// The registration socket of `driver`'s kubelet plugin in the registration directory `dir`,
/// when there is one: `<driver>-reg.sock`, or `<driver>-<uid>-reg.sock` when the plugin runs
/// with rolling updates (the `kubeletplugin` helper's default names, `RegistrarSocketFilename`).
/// Only a socket counts; an unreadable directory is none.
pub fn registration_socket(dir: &Path, driver: &str) -> Option<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let plain = format!("{driver}-reg.sock");
    let prefix = format!("{driver}-");
    read_names(dir).ok()?.into_iter().find_map(|n| {
        let named = n == plain || (n.starts_with(&prefix) && n.ends_with("-reg.sock"));
        let path = dir.join(&n);
        let socket = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket());
        (named && socket).then_some(path)
    })
}

/// One pod's log directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDir {
    pub namespace: String,
    pub name: String,
    /// The pod's UID as the directory names it (with dashes).
    pub uid: String,
    /// Its containers' log directories, sorted.
    pub containers: Vec<String>,
}

/// One container's log link in `/var/log/containers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerLog {
    pub pod: String,
    pub namespace: String,
    pub container: String,
    /// The container id (64 hex).
    pub container_id: String,
}

/// Every pod directory under `dir` (entries of another shape are skipped).
pub fn pod_dirs(dir: &Path) -> Result<Vec<PodDir>, HostError> {
    let mut out: Vec<PodDir> = read_names(dir)?
        .iter()
        .filter_map(|n| {
            let (namespace, name, uid) = split_pod_dir(n)?;
            let containers = read_names(&dir.join(n)).unwrap_or_default();
            Some(PodDir {
                namespace,
                name,
                uid,
                containers,
            })
        })
        .collect();
    out.sort_by(|a, b| a.uid.cmp(&b.uid));
    Ok(out)
}

/// Every container log link under `dir` (`/var/log/containers`).
pub fn container_logs(dir: &Path) -> Result<Vec<ContainerLog>, HostError> {
    Ok(read_names(dir)?
        .iter()
        .filter_map(|n| split_container_log(n))
        .collect())
}

/// The container log directory beside a pod log directory (`/var/log/pods` →
/// `/var/log/containers`).
pub fn containers_dir_of(pod_log_dir: &Path) -> PathBuf {
    pod_log_dir
        .parent()
        .unwrap_or_else(|| Path::new("/"))
        .join("containers")
}

fn read_names(dir: &Path) -> Result<Vec<String>, HostError> {
    let rd = std::fs::read_dir(dir).map_err(|e| HostError::from_io(None, dir.to_path_buf(), e))?;
    let mut names: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    names.sort();
    Ok(names)
}

/// `<namespace>_<name>_<uid>`.
fn split_pod_dir(n: &str) -> Option<(String, String, String)> {
    let mut it = n.split('_');
    let (ns, name, uid) = (it.next()?, it.next()?, it.next()?);
    if it.next().is_some() || ns.is_empty() || name.is_empty() || uid.is_empty() {
        return None;
    }
    Some((ns.into(), name.into(), uid.to_ascii_lowercase()))
}

/// `<pod>_<namespace>_<container>-<id>.log`.
fn split_container_log(n: &str) -> Option<ContainerLog> {
    let (rest, id) = n.strip_suffix(".log")?.rsplit_once('-')?;
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut it = rest.split('_');
    let (pod, ns, container) = (it.next()?, it.next()?, it.next()?);
    if it.next().is_some() || pod.is_empty() || ns.is_empty() || container.is_empty() {
        return None;
    }
    Some(ContainerLog {
        pod: pod.into(),
        namespace: ns.into(),
        container: container.into(),
        container_id: id.to_ascii_lowercase(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_and_container_log_names_are_split_as_the_kubelet_writes_them() {
        let uid = "1f2e3d4c-5b6a-4798-8a7b-6c5d4e3f2a1b";
        let id = "ab".repeat(32);
        let dir = tempfile::tempdir().expect("tempdir");
        let pods = dir.path().join("pods");
        std::fs::create_dir_all(pods.join(format!("ml_llm-0_{uid}/vllm-server"))).unwrap();
        std::fs::create_dir_all(pods.join("not-a-pod")).unwrap();
        let containers = containers_dir_of(&pods);
        std::fs::create_dir_all(&containers).unwrap();
        std::fs::write(
            containers.join(format!("llm-0_ml_vllm-server-{id}.log")),
            b"",
        )
        .unwrap();
        std::fs::write(containers.join("junk.log"), b"").unwrap();
        assert_eq!(
            pod_dirs(&pods).unwrap(),
            [PodDir {
                namespace: "ml".into(),
                name: "llm-0".into(),
                uid: uid.into(),
                containers: vec!["vllm-server".into()],
            }]
        );
        assert_eq!(
            container_logs(&containers).unwrap(),
            [ContainerLog {
                pod: "llm-0".into(),
                namespace: "ml".into(),
                container: "vllm-server".into(),
                container_id: id,
            }]
        );
        assert!(pod_dirs(&dir.path().join("none")).is_err());
    }

    /// A DRA driver's registration socket under both of the helper's names; another driver's
    /// socket, a plain file of the name and a missing directory are none.
    #[test]
    fn a_dra_plugin_is_registered_by_its_socket_in_the_registration_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let driver = "gpu.nvidia.com";
        let _other =
            std::os::unix::net::UnixListener::bind(d.join("compute-domain.nvidia.com-reg.sock"))
                .expect("bind");
        std::fs::write(d.join("gpu.nvidia.com-reg.sock"), b"").unwrap();
        assert_eq!(registration_socket(d, driver), None, "a file is no socket");
        std::fs::remove_file(d.join("gpu.nvidia.com-reg.sock")).unwrap();
        let rolling = d.join("gpu.nvidia.com-5e1c0a7d-reg.sock");
        let _l = std::os::unix::net::UnixListener::bind(&rolling).expect("bind");
        assert_eq!(registration_socket(d, driver), Some(rolling));
        let plain = tempfile::tempdir().expect("tempdir");
        let sock = plain.path().join("gpu.nvidia.com-reg.sock");
        let _p = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
        assert_eq!(registration_socket(plain.path(), driver), Some(sock));
        assert_eq!(registration_socket(&d.join("none"), driver), None);
    }
}
