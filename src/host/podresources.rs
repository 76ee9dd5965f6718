//! The kubelet's pod-resources API (`PodResourcesLister`, v1, GA since Kubernetes 1.28): which
//! devices the kubelet allocated to each pod's containers, read with one `List` call over gRPC
//! on the kubelet's unix socket (default [`DEFAULT_SOCKET`]). No API-server credentials: the
//! socket is a node-local file (mounted into the DaemonSet; docs/fleet.md "Pod attribution").
//!
//! The messages are written by hand after `k8s.io/kubelet/pkg/apis/podresources/v1/api.proto`
//! (only the fields vramdoc reads, DRA claims' devices — `dynamic_resources`, field 5 —
//! included; prost skips the others: CPU ids, memory, topology), so no `protoc` is needed at
//! build time. The client is tonic's, on a current-thread tokio runtime made for the call,
//! with one deadline for connecting and
//! answering: a blocking function for the synchronous callers (scan, serve's collector).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the kubelet serves the API (`--pod-resources-socket` changes it).
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// The gRPC method path of `List` (`package v1; service PodResourcesLister`).
pub const LIST_PATH: &str = "/v1.PodResourcesLister/List";

/// `ListPodResourcesRequest {}`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesRequest {}

/// `ListPodResourcesResponse { repeated PodResources pod_resources = 1; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

/// `PodResources { string name = 1; string namespace = 2; repeated ContainerResources
/// containers = 3; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

/// `ContainerResources { string name = 1; repeated ContainerDevices devices = 2; ...;
/// repeated DynamicResource dynamic_resources = 5; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
    /// Devices of the container's DRA ResourceClaims: filled by the kubelet only with its
    /// `KubeletPodResourcesDynamicResources` feature gate on (alpha and off by default in
    /// Kubernetes 1.27–1.33, beta and on from 1.34: kubernetes `pkg/features/kube_features.go`);
    /// with it off the field is empty whatever the container claimed.
    #[prost(message, repeated, tag = "5")]
    pub dynamic_resources: Vec<DynamicResource>,
}

/// `DynamicResource { string claim_name = 2; string claim_namespace = 3; repeated
/// ClaimResource claim_resources = 4; }` (field 1, `class_name`, was removed).
#[derive(Clone, PartialEq, prost::Message)]
pub struct DynamicResource {
    #[prost(string, tag = "2")]
    pub claim_name: String,
    #[prost(string, tag = "3")]
    pub claim_namespace: String,
    #[prost(message, repeated, tag = "4")]
    pub claim_resources: Vec<ClaimResource>,
}

/// `ClaimResource { repeated CDIDevice cdi_devices = 1; string driver_name = 2; string
/// pool_name = 3; string device_name = 4; }`: one allocated device of a claim.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClaimResource {
    #[prost(message, repeated, tag = "1")]
    pub cdi_devices: Vec<CdiDevice>,
    #[prost(string, tag = "2")]
    pub driver_name: String,
    #[prost(string, tag = "3")]
    pub pool_name: String,
    #[prost(string, tag = "4")]
    pub device_name: String,
}

/// `CDIDevice { string name = 1; }` (a fully qualified CDI name, `vendor.com/class=dev`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct CdiDevice {
    #[prost(string, tag = "1")]
    pub name: String,
}

/// The DRA driver of NVIDIA GPUs (NVIDIA/k8s-dra-driver-gpu `cmd/gpu-kubelet-plugin`:
/// `gpu.nvidia.com`). Its devices are named `gpu-<minor>` (`GpuInfo.CanonicalName`); its MIG
/// devices `gpu-<minor>-mig-<GI profile id>-<placement start>-<placement size>` up to v25.8
/// and `gpu-<minor>-mig-<profile, dots removed>-<GI profile id>-<placement start>` from
/// v25.12 (`MigSpecTuple.ToCanonicalName`), read by `pods::device_of_id`.
pub const NVIDIA_DRA_DRIVER: &str = "gpu.nvidia.com";

impl ContainerResources {
    /// The GPU device ids allocated to this container: the device plugin's for resources
    /// `is_gpu` accepts, and those of its DRA claims from NVIDIA's driver: a whole GPU as
    /// `nvidia<minor>` (`gpu-3` → `nvidia3`), any other device under the driver's own name
    /// (a MIG device `gpu-0-mig-…`; a name vramdoc cannot read stays too, so the pod's
    /// allocation is known to hold something it cannot map, never read as less than it is).
    pub fn gpu_ids(&self, is_gpu: impl Fn(&str) -> bool) -> Vec<String> {
        let mut ids: Vec<String> = self
            .devices
            .iter()
            .filter(|d| is_gpu(&d.resource_name))
            .flat_map(|d| d.device_ids.iter().cloned())
            .collect();
        for c in self
            .dynamic_resources
            .iter()
            .flat_map(|d| &d.claim_resources)
        {
            if c.driver_name != NVIDIA_DRA_DRIVER {
                continue;
            }
            let name = c.device_name.as_str();
            match name.strip_prefix("gpu-") {
                Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                    ids.push(format!("nvidia{n}"))
                }
                _ => ids.push(name.to_string()),
            }
        }
        ids
    }
}

/// Whether any container of the answer has DRA claims listed (`dynamic_resources`): the
/// kubelet fills them only with its `KubeletPodResourcesDynamicResources` feature gate on, so
/// one listed claim shows the gate is on; none shows nothing.
pub fn lists_dynamic_resources(pods: &[PodResources]) -> bool {
    pods.iter()
        .flat_map(|p| &p.containers)
        .any(|c| !c.dynamic_resources.is_empty())
}

/// `ContainerDevices { string resource_name = 1; repeated string device_ids = 2; ... }`:
/// the ids the device plugin advertised (NVIDIA's: GPU UUIDs, MIG UUIDs, `<UUID>::<n>` for a
/// time-slicing replica; GKE's: `nvidia0`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    #[prost(string, tag = "1")]
    pub resource_name: String,
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
}

/// A `List` call that gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    /// No socket at the path: not a Kubernetes node, or the socket is not mounted.
    #[error("{}: no pod-resources socket (not a Kubernetes node, or the kubelet's socket is not mounted)", .path.display())]
    NoSocket { path: PathBuf },
    #[error("{}: {source}", .path.display())]
    Connect {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("{}: List failed: {status}", .path.display())]
    Rpc {
        path: PathBuf,
        status: Box<tonic::Status>,
    },
    #[error("{}: no answer within {deadline:?}", .path.display())]
    Deadline { path: PathBuf, deadline: Duration },
    #[error("starting the gRPC runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// Every pod the kubelet knows with the devices allocated to its containers: one `List` call
/// on `socket`, answered within `deadline` (connecting included) or an error.
pub fn list(socket: &Path, deadline: Duration) -> Result<Vec<PodResources>, PodResourcesError> {
    if !socket.exists() {
        return Err(PodResourcesError::NoSocket {
            path: socket.to_path_buf(),
        });
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(PodResourcesError::Runtime)?;
    let path = socket.to_path_buf();
    rt.block_on(async {
        match tokio::time::timeout(deadline, list_async(path.clone())).await {
            Ok(r) => r,
            Err(_) => Err(PodResourcesError::Deadline { path, deadline }),
        }
    })
}

async fn list_async(path: PathBuf) -> Result<Vec<PodResources>, PodResourcesError> {
    use hyper_util::rt::TokioIo;
    use tonic::codegen::http::uri::PathAndQuery;
    // The URI is not used for a unix socket (the connector ignores it); tonic needs one.
    let endpoint = tonic::transport::Endpoint::from_static("http://localhost");
    let sock = path.clone();
    let channel = endpoint
        .connect_with_connector(tower::service_fn(move |_: tonic::codegen::http::Uri| {
            let sock = sock.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(sock).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|source| PodResourcesError::Connect {
            path: path.clone(),
            source,
        })?;
    let rpc = |status: tonic::Status| PodResourcesError::Rpc {
        path: path.clone(),
        status: Box::new(status),
    };
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| rpc(tonic::Status::unavailable(e.to_string())))?;
    let codec: tonic_prost::ProstCodec<ListPodResourcesRequest, ListPodResourcesResponse> =
        tonic_prost::ProstCodec::default();
    let answer = grpc
        .unary(
            tonic::Request::new(ListPodResourcesRequest {}),
            PathAndQuery::from_static(LIST_PATH),
            codec,
        )
        .await
        .map_err(rpc)?;
    Ok(answer.into_inner().pod_resources)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The wire bytes of a response as the kubelet's gogo-generated Go code encodes it (field
    /// numbers of api.proto), decoded by the hand-written messages; unknown fields (a
    /// container's `cpu_ids = 3`) are skipped.
    #[test]
    fn messages_decode_the_proto_s_field_numbers() {
        fn field(tag: u8, body: &[u8]) -> Vec<u8> {
            let mut v = vec![tag << 3 | 2, body.len() as u8];
            v.extend_from_slice(body);
            v
        }
        let devices = [
            field(1, b"nvidia.com/gpu"),
            field(2, b"GPU-0"),
            field(2, b"GPU-1::3"),
        ]
        .concat();
        let mut container = [field(1, b"trainer"), field(2, &devices)].concat();
        container.extend_from_slice(&[3 << 3, 7]); // cpu_ids = 3 (varint 7): not read.
        let pod = [field(1, b"llm-0"), field(2, b"ml"), field(3, &container)].concat();
        let bytes = field(1, &pod);
        let r = ListPodResourcesResponse::decode(bytes.as_slice()).expect("decodes");
        let p = &r.pod_resources[0];
        assert_eq!((p.name.as_str(), p.namespace.as_str()), ("llm-0", "ml"));
        assert_eq!(p.containers[0].name, "trainer");
        assert_eq!(p.containers[0].devices[0].resource_name, "nvidia.com/gpu");
        assert_eq!(p.containers[0].devices[0].device_ids, ["GPU-0", "GPU-1::3"]);
        assert_eq!(
            r.encode_to_vec(),
            field(
                1,
                &[
                    field(1, b"llm-0"),
                    field(2, b"ml"),
                    field(3, &[field(1, b"trainer"), field(2, &devices)].concat())
                ]
                .concat()
            )
        );
    }

    /// A container's DRA claim (`dynamic_resources = 5`) decoded, and its NVIDIA devices
    /// given as GPU ids; another driver's devices are not GPUs.
    #[test]
    fn dra_claims_decode_and_name_gpus() {
        fn field(tag: u8, body: &[u8]) -> Vec<u8> {
            let mut v = vec![tag << 3 | 2];
            prost::encoding::encode_varint(body.len() as u64, &mut v);
            v.extend_from_slice(body);
            v
        }
        let claim = |driver: &[u8], device: &[u8]| {
            field(
                4,
                &[
                    field(1, &field(1, b"k8s.gpu.nvidia.com/device=gpu-1")),
                    field(2, driver),
                    field(3, b"node-1"),
                    field(4, device),
                ]
                .concat(),
            )
        };
        let dynamic = [
            field(2, b"llm-gpu"),
            field(3, b"ml"),
            claim(b"gpu.nvidia.com", b"gpu-1"),
            claim(b"gpu.nvidia.com", b"gpu-2-mig-1g10gb-0-0"),
            claim(b"gpu.nvidia.com", b"gpu-3-mig-0-0-1"),
            claim(b"nic.example.com", b"gpu-4"),
        ]
        .concat();
        let container = [field(1, b"vllm"), field(5, &dynamic)].concat();
        let c = ContainerResources::decode(container.as_slice()).expect("decodes");
        let d = &c.dynamic_resources[0];
        assert_eq!(
            (d.claim_name.as_str(), d.claim_namespace.as_str()),
            ("llm-gpu", "ml")
        );
        assert_eq!(
            d.claim_resources[0].cdi_devices[0].name,
            "k8s.gpu.nvidia.com/device=gpu-1"
        );
        // A whole GPU by its minor; MIG devices (v25.12's and v25.3's names) kept as the
        // driver names them, for `device_of_id` to find their instance.
        assert_eq!(
            c.gpu_ids(|_| true),
            ["nvidia1", "gpu-2-mig-1g10gb-0-0", "gpu-3-mig-0-0-1"]
        );
    }

    #[test]
    fn a_missing_socket_is_its_own_error_and_a_dead_one_fails_within_the_deadline() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("kubelet.sock");
        assert!(matches!(
            list(&missing, Duration::from_secs(1)),
            Err(PodResourcesError::NoSocket { .. })
        ));
        // A socket file nobody listens on: refused at once, never a hang.
        let listener = std::os::unix::net::UnixListener::bind(&missing).expect("bind");
        drop(listener);
        let start = std::time::Instant::now();
        assert!(list(&missing, Duration::from_secs(2)).is_err());
        assert!(start.elapsed() < Duration::from_secs(3));
    }
}
