//! The pod-attribution flags `scan` and `serve` share (issue 18; docs/fleet.md "Pod
//! attribution"): where the kubelet's pod-resources socket and pod log directory are.

use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct PodArgs {
    /// The kubelet's pod-resources socket, asked which GPUs each pod was allocated (when a
    /// GPU process runs in a pod; a missing socket leaves allocations unknown, with a note)
    /// [default: /var/lib/kubelet/pod-resources/kubelet.sock]
    #[arg(long, value_name = "PATH")]
    pub pod_resources_socket: Option<PathBuf>,
    /// The kubelet's pod log directory, which names pods by UID (`NAMESPACE_NAME_UID`)
    #[arg(long, value_name = "DIR", default_value = crate::host::kubelet::DEFAULT_POD_LOG_DIR)]
    pub pod_log_dir: PathBuf,
}

impl PodArgs {
    /// The pod-attribution configuration these flags name.
    pub fn config(&self) -> crate::pods::PodConfig {
        let mut cfg = crate::pods::PodConfig {
            log_dir: self.pod_log_dir.clone(),
            ..Default::default()
        };
        if let Some(s) = &self.pod_resources_socket {
            cfg.socket = s.clone();
            cfg.explicit = true;
        }
        cfg
    }
}
