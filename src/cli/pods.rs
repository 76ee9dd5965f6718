//! The pod-attribution flags `scan` and `serve` share (issue 18; docs/fleet.md "Pod
//! attribution"): where the kubelet's pod-resources socket, pod log directory and plugin
//! registration directory are.

use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct PodArgs {
    /// The kubelet's pod-resources socket, asked which GPUs each pod was allocated (a missing
    /// socket leaves allocations unknown, with a note when a GPU process runs in a pod)
    /// [default: /var/lib/kubelet/pod-resources/kubelet.sock]
    #[arg(long, value_name = "PATH")]
    pub pod_resources_socket: Option<PathBuf>,
    /// The kubelet's pod log directory, which names pods by UID (`NAMESPACE_NAME_UID`)
    #[arg(long, value_name = "DIR", default_value = crate::host::kubelet::DEFAULT_POD_LOG_DIR)]
    pub pod_log_dir: PathBuf,
    /// The kubelet's plugin registration directory: where NVIDIA's DRA kubelet plugin is
    /// registered (`gpu.nvidia.com-reg.sock`), pods may hold GPUs through ResourceClaims the
    /// pod-resources API lists only with the kubelet's KubeletPodResourcesDynamicResources
    /// gate (on from Kubernetes 1.34)
    #[arg(long, value_name = "DIR", default_value = crate::host::kubelet::DEFAULT_PLUGINS_REGISTRY)]
    pub plugins_registry: PathBuf,
    /// `serve`: report a GPU allocated to a pod that none of its processes has held memory on
    /// for this long (`allocated-gpu-idle`, info), 1s to 7d
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "30m",
        value_parser = super::duration_within(
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(7 * 24 * 3600),
            " (default 30m)"
        )
    )]
    pub allocation_idle_after: std::time::Duration,
}

impl PodArgs {
    /// The thresholds of the scan rules with these flags' allocation audit.
    pub fn thresholds(&self) -> crate::diagnose::Thresholds {
        crate::diagnose::Thresholds {
            allocation_idle_min: self.allocation_idle_after,
            ..Default::default()
        }
    }

    /// The pod-attribution configuration these flags name.
    pub fn config(&self) -> crate::pods::PodConfig {
        let mut cfg = crate::pods::PodConfig {
            log_dir: self.pod_log_dir.clone(),
            plugins_registry: self.plugins_registry.clone(),
            ..Default::default()
        };
        if let Some(s) = &self.pod_resources_socket {
            cfg.socket = s.clone();
            cfg.explicit = true;
        }
        cfg
    }
}
