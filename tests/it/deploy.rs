//! The shipped deployment files (deploy/, docs/fleet.md "Kubernetes"):
//! - each kustomize overlay (deploy/kubernetes/overlays/PLATFORM), rendered by kustomize
//!   (`kubectl kustomize`), is the committed deploy/kubernetes/rendered/PLATFORM.yaml;
//! - every Kubernetes object passes the API's OpenAPI schemas (`kubernetes-validate
//!   --strict`, for the oldest and newest Kubernetes it ships), the optional PodMonitor the
//!   Prometheus Operator's (the `@kubernetes-models/prometheus-operator` npm package);
//! - each platform's DaemonSet mounts the driver's libraries where that platform puts them,
//!   the kubelet's pod-resources socket and pod log directory, and agrees with itself on
//!   the port.
//!
//! The Grafana dashboard's tests are in `grafana`.
//!
//! scripts/test installs the tools (kubectl, kubernetes-validate, the npm models); a missing
//! one fails the test unless `VRAMDOC_ALLOW_SKIP=kubernetes`.

use crate::common;

use clap::Parser;
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The platforms, one overlay and one rendered manifest each.
const PLATFORMS: [&str; 5] = [
    "container-toolkit",
    "eks-al2",
    "eks-bottlerocket",
    "gke",
    "gpu-operator",
];

/// The port every manifest serves on: `vramdoc serve`'s default (src/cli.rs
/// `DEFAULT_LISTEN`), which no well-known exporter uses.
const PORT: u16 = 10042;

/// The oldest and newest Kubernetes the manifests are validated against (the pod-resources
/// API is GA since 1.28).
const KUBERNETES_VERSIONS: [&str; 2] = ["1.28", "1.37"];

const POD_RESOURCES_DIR: &str = "/var/lib/kubelet/pod-resources";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn k8s_dir() -> PathBuf {
    root().join("deploy/kubernetes")
}

fn rendered(platform: &str) -> PathBuf {
    k8s_dir().join(format!("rendered/{platform}.yaml"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A kubectl with kustomize built in: `VRAMDOC_KUBECTL` (scripts/test sets it when it
/// installed one), else `kubectl` on PATH.
fn kubectl() -> Result<PathBuf, String> {
    let candidate = match std::env::var_os("VRAMDOC_KUBECTL") {
        Some(p) => PathBuf::from(p),
        None => common::skip::tool("kubectl", "kubernetes-client").map_err(|_| {
            "kubectl is not on PATH and VRAMDOC_KUBECTL is unset (scripts/test installs a \
             kubectl with kustomize)"
                .to_string()
        })?,
    };
    let ok = Command::new(&candidate)
        .args(["kustomize", "--help"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        Ok(candidate)
    } else {
        Err(format!(
            "{} has no working `kustomize` subcommand",
            candidate.display()
        ))
    }
}

/// Python with PyYAML and `kubernetes-validate` (scripts/test installs it, pinned).
fn kubernetes_validate() -> Result<(), String> {
    let py = common::skip::python();
    let out = Command::new(&py)
        .args(["-c", "import yaml, kubernetes_validate"])
        .output()
        .map_err(|e| format!("cannot run {py} ({e})"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{py} lacks PyYAML or kubernetes-validate: `{py} -m pip install \
             kubernetes-validate==1.37.0` (scripts/test does). {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The node_modules directory holding `@kubernetes-models/prometheus-operator`
/// (`VRAMDOC_NODE_MODULES`, set by scripts/test), and `node`.
fn prometheus_operator_models() -> Result<PathBuf, String> {
    common::skip::tool("node", "nodejs")?;
    let dir = std::env::var_os("VRAMDOC_NODE_MODULES")
        .map(PathBuf::from)
        .ok_or(
            "VRAMDOC_NODE_MODULES is unset (scripts/test installs the npm package \
                @kubernetes-models/prometheus-operator and sets it)",
        )?;
    let index = dir.join("@kubernetes-models/prometheus-operator/index.js");
    if index.is_file() {
        Ok(dir)
    } else {
        Err(format!("{} is missing", index.display()))
    }
}

/// The YAML documents of `path`, as JSON (PyYAML's safe loader).
fn yaml_docs(path: &Path) -> Vec<Value> {
    let out = Command::new(common::skip::python())
        .args([
            "-c",
            "import json, sys, yaml\n\
             json.dump([d for d in yaml.safe_load_all(open(sys.argv[1])) if d], sys.stdout)",
        ])
        .arg(path)
        .output()
        .expect("run python");
    assert!(out.status.success(), "{}: {}", path.display(), text(&out));
    serde_json::from_slice(&out.stdout).expect("YAML as JSON")
}

#[test]
fn rendered_manifests_match_their_overlays() {
    let kubectl = common::skip::require!("kubernetes", kubectl());
    let overlays: BTreeSet<String> = std::fs::read_dir(k8s_dir().join("overlays"))
        .expect("overlays")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let expected: BTreeSet<String> = PLATFORMS.iter().map(|p| p.to_string()).collect();
    assert_eq!(overlays, expected, "one overlay per platform");
    let files: BTreeSet<String> = std::fs::read_dir(k8s_dir().join("rendered"))
        .expect("rendered")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let expected_files: BTreeSet<String> = PLATFORMS.iter().map(|p| format!("{p}.yaml")).collect();
    assert_eq!(files, expected_files, "one rendered manifest per overlay");
    for platform in PLATFORMS {
        let out = Command::new(root().join("scripts/render-manifests"))
            .arg(platform)
            .env("VRAMDOC_KUBECTL", &kubectl)
            .output()
            .expect("run scripts/render-manifests");
        assert!(out.status.success(), "{platform}: {}", text(&out));
        let committed = std::fs::read_to_string(rendered(platform)).expect("rendered file");
        assert!(
            committed == String::from_utf8_lossy(&out.stdout),
            "deploy/kubernetes/rendered/{platform}.yaml differs from what its overlay renders: \
             run scripts/render-manifests"
        );
    }
}

/// `kubernetes-validate --strict -k VERSION FILE`: (success, output).
fn validate(version: &str, file: &Path) -> (bool, String) {
    let out = Command::new(common::skip::python())
        .args([
            "-m",
            "kubernetes_validate",
            "--strict",
            "--no-warn",
            "-k",
            version,
        ])
        .arg(file)
        .output()
        .expect("run kubernetes-validate");
    (out.status.success(), text(&out))
}

#[test]
fn every_kubernetes_object_passes_the_api_schemas() {
    common::skip::require!("kubernetes", kubernetes_validate());
    for platform in PLATFORMS {
        let file = rendered(platform);
        let kinds: Vec<String> = yaml_docs(&file)
            .iter()
            .map(|d| d["kind"].as_str().unwrap_or("?").to_lowercase())
            .collect();
        assert_eq!(
            kinds,
            ["namespace", "daemonset", "networkpolicy"],
            "{platform}"
        );
        for version in KUBERNETES_VERSIONS {
            let (ok, out) = validate(version, &file);
            assert!(ok, "{platform} against Kubernetes {version}: {out}");
            for kind in &kinds {
                assert!(
                    out.contains(&format!("passed for resource {kind}/vramdoc")),
                    "{platform}: {kind} was not validated against {version}: {out}"
                );
            }
        }
    }
    // The validator does reject what the API would: a misspelt field, a wrong type.
    let good = std::fs::read_to_string(rendered("gke")).expect("rendered");
    let dir = tempfile::tempdir().expect("tempdir");
    for (what, bad) in [
        (
            "misspelt field",
            good.replace("hostPID: true", "hostPid: true"),
        ),
        (
            "port as text",
            good.replace(
                &format!("containerPort: {PORT}"),
                "containerPort: \"metrics\"",
            ),
        ),
    ] {
        assert_ne!(bad, good, "{what}: the mutation applies");
        let file = dir.path().join("bad.yaml");
        std::fs::write(&file, bad).expect("write");
        let (ok, out) = validate("1.37", &file);
        assert!(!ok, "{what} passed validation: {out}");
    }
}

/// Validates one PodMonitor (JSON on stdin) with the Prometheus Operator's generated models;
/// prints `ok` or `invalid: WHY` (exit 1).
const PODMONITOR_CHECK: &str = r#"
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
const models = await import(pathToFileURL(join(process.argv[1], '@kubernetes-models/prometheus-operator/index.js')));
const obj = JSON.parse(readFileSync(0, 'utf8'));
try {
  new models.monitoringCoreosCom.v1.PodMonitor(obj).validate();
  console.log('ok');
} catch (e) {
  console.log('invalid: ' + e.message);
  process.exit(1);
}
"#;

fn check_podmonitor(modules: &Path, obj: &Value) -> (bool, String) {
    let mut child = Command::new("node")
        .args(["--input-type=module", "-e", PODMONITOR_CHECK])
        .arg(modules)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run node");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(obj.to_string().as_bytes())
        .expect("feed node");
    let out = child.wait_with_output().expect("node output");
    (out.status.success(), text(&out))
}

#[test]
fn optional_podmonitor_passes_the_prometheus_operator_schema_and_names_the_job() {
    common::skip::require!("kubernetes", kubernetes_validate());
    let modules = common::skip::require!("kubernetes", prometheus_operator_models());
    let docs = yaml_docs(&k8s_dir().join("optional/podmonitor.yaml"));
    assert_eq!(docs.len(), 1);
    let pm = &docs[0];
    let (ok, out) = check_podmonitor(&modules, pm);
    assert!(ok, "PodMonitor: {out}");
    assert_eq!(out.trim(), "ok");

    // It selects the DaemonSet's pods and port, and names the job `vramdoc` (the alert
    // rules' `job="vramdoc"`) through the label the pods carry.
    let ds = daemonset("container-toolkit");
    let pod_labels = &ds["spec"]["template"]["metadata"]["labels"];
    let job_label = pm["spec"]["jobLabel"].as_str().expect("jobLabel");
    assert_eq!(pod_labels[job_label], "vramdoc");
    for (k, v) in pm["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels")
    {
        assert_eq!(&pod_labels[k], v, "selector {k}");
    }
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["port"], "metrics");
    assert_eq!(
        pm["metadata"]["namespace"], ds["metadata"]["namespace"],
        "same namespace as the DaemonSet"
    );

    // The models do reject a wrong type.
    let mut bad = pm.clone();
    bad["spec"]["podMetricsEndpoints"][0]["interval"] = Value::from(15);
    let (ok, out) = check_podmonitor(&modules, &bad);
    assert!(!ok, "a numeric interval passed: {out}");
}

/// The DaemonSet of a platform's rendered manifest.
fn daemonset(platform: &str) -> Value {
    yaml_docs(&rendered(platform))
        .into_iter()
        .find(|d| d["kind"] == "DaemonSet")
        .unwrap_or_else(|| panic!("{platform}: no DaemonSet"))
}

fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

/// The hostPath volume mounted at `mount_path` in the container: (host path, mount).
fn host_mount<'a>(spec: &'a Value, mount_path: &str) -> Option<(&'a str, &'a Value)> {
    let mount = spec["containers"][0]["volumeMounts"]
        .as_array()?
        .iter()
        .find(|m| m["mountPath"] == mount_path)?;
    let volume = spec["volumes"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == mount["name"])?;
    Some((volume["hostPath"]["path"].as_str()?, mount))
}

/// What every platform's DaemonSet has; returns its pod spec.
fn common_shape(platform: &str) -> Value {
    let docs = yaml_docs(&rendered(platform));
    let ns = docs
        .iter()
        .find(|d| d["kind"] == "Namespace")
        .unwrap_or_else(|| panic!("{platform}: no Namespace"));
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "privileged",
        "{platform}: hostPID and hostPath need the privileged Pod Security level"
    );
    let ds = daemonset(platform);
    assert_eq!(
        ds["metadata"]["namespace"], ns["metadata"]["name"],
        "{platform}"
    );
    let template = &ds["spec"]["template"];
    let spec = template["spec"].clone();
    let c = &spec["containers"][0];
    assert_eq!(spec["hostPID"], true, "{platform}: host PIDs");
    assert!(
        spec["tolerations"].as_array().is_some_and(|t| t
            .iter()
            .any(|t| t["key"] == "nvidia.com/gpu"
                && t["operator"] == "Exists"
                && t["effect"] == "NoSchedule")),
        "{platform}: tolerates the nvidia.com/gpu NoSchedule taint"
    );

    // The node's name (the `hostname` label) and the pod IP from the downward API.
    assert_eq!(
        env_value(c, "NODE_NAME").map(|e| &e["valueFrom"]["fieldRef"]["fieldPath"]),
        Some(&Value::from("spec.nodeName")),
        "{platform}"
    );
    assert_eq!(
        env_value(c, "POD_IP").map(|e| &e["valueFrom"]["fieldRef"]["fieldPath"]),
        Some(&Value::from("status.podIP")),
        "{platform}"
    );

    // One port everywhere: the listen flag, the container port, the scrape annotation.
    let args: Vec<&str> = c["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(args[0], "serve", "{platform}");
    assert!(
        args.contains(&format!("--listen=$(POD_IP):{PORT}").as_str()),
        "{platform}: {args:?}"
    );
    assert_eq!(c["ports"][0]["name"], "metrics", "{platform}");
    assert_eq!(c["ports"][0]["containerPort"], PORT, "{platform}");
    assert_eq!(
        template["metadata"]["annotations"]["prometheus.io/port"],
        PORT.to_string(),
        "{platform}"
    );
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(
            c[probe]["httpGet"]["path"], "/healthz",
            "{platform} {probe}"
        );
        assert_eq!(c[probe]["httpGet"]["port"], "metrics", "{platform} {probe}");
    }
    for r in ["cpu", "memory"] {
        assert!(
            c["resources"]["limits"][r].is_string(),
            "{platform}: a {r} limit"
        );
        assert!(
            c["resources"]["requests"][r].is_string(),
            "{platform}: a {r} request"
        );
    }

    // The kubelet's pod-resources socket (its directory, so a kubelet restart's new socket
    // is seen), pod log directory and plugin registration directory (NVIDIA's DRA plugin),
    // read-only, where the flags and defaults look.
    let socket = format!("{POD_RESOURCES_DIR}/kubelet.sock");
    assert!(
        args.contains(&format!("--pod-resources-socket={socket}").as_str()),
        "{platform}: {args:?}"
    );
    for dir in [
        POD_RESOURCES_DIR,
        "/var/log/pods",
        vramdoc::host::kubelet::DEFAULT_PLUGINS_REGISTRY,
    ] {
        let (host, mount) =
            host_mount(&spec, dir).unwrap_or_else(|| panic!("{platform}: {dir} not mounted"));
        assert_eq!(host, dir, "{platform}: {dir} comes from the host's {dir}");
        assert_eq!(mount["readOnly"], true, "{platform}: {dir} read-only");
    }
    assert_eq!(
        spec["automountServiceAccountToken"], false,
        "{platform}: no API credentials"
    );
    spec
}

/// The label keys of the node affinity's terms (ORed), in order.
fn node_selector_keys(spec: &Value) -> Vec<&str> {
    assert!(spec.get("nodeSelector").is_none(), "affinity only: {spec}");
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array()
        .expect("nodeSelectorTerms")
        .iter()
        .map(|t| t["matchExpressions"][0]["key"].as_str().expect("key"))
        .collect()
}

/// The base's node selection: an NVIDIA PCI device (NFD) or nvidia.com/gpu.present.
const GPU_NODE_LABELS: [&str; 2] = [
    "feature.node.kubernetes.io/pci-10de.present",
    "nvidia.com/gpu.present",
];

fn runtime_class(spec: &Value) -> Option<&str> {
    spec["runtimeClassName"].as_str()
}

fn privileged(spec: &Value) -> bool {
    spec["containers"][0]["securityContext"]["privileged"] == true
}

fn visible_devices(spec: &Value) -> Option<&str> {
    env_value(&spec["containers"][0], "NVIDIA_VISIBLE_DEVICES")?["value"].as_str()
}

fn ld_library_path(spec: &Value) -> Vec<&str> {
    env_value(&spec["containers"][0], "LD_LIBRARY_PATH")
        .and_then(|e| e["value"].as_str())
        .map(|s| s.split(':').collect())
        .unwrap_or_default()
}

/// One test per platform: what it mounts and how the driver's libraries reach NVML
/// (docs/fleet.md's platform table, with the sources).
mod platform_manifests {
    use super::*;

    #[test]
    fn container_toolkit_uses_the_nvidia_runtime_class() {
        common::skip::require!("kubernetes", kubernetes_validate());
        let spec = common_shape("container-toolkit");
        assert_eq!(node_selector_keys(&spec), GPU_NODE_LABELS);
        assert_eq!(runtime_class(&spec), Some("nvidia"));
        assert_eq!(visible_devices(&spec), Some("all"));
        assert!(!privileged(&spec));
        assert!(
            ld_library_path(&spec).is_empty(),
            "the runtime injects the libraries"
        );
    }

    #[test]
    fn gpu_operator_mounts_the_driver_container_root() {
        common::skip::require!("kubernetes", kubernetes_validate());
        let spec = common_shape("gpu-operator");
        assert_eq!(node_selector_keys(&spec), GPU_NODE_LABELS);
        assert_eq!(runtime_class(&spec), Some("nvidia"));
        assert_eq!(visible_devices(&spec), Some("all"));
        let (host, mount) = host_mount(&spec, "/run/nvidia/driver").expect("driver root");
        assert_eq!(host, "/run/nvidia/driver");
        assert_eq!(mount["mountPropagation"], "HostToContainer");
        assert!(
            ld_library_path(&spec).is_empty(),
            "the driver root's /usr/lib holds a foreign glibc"
        );
        let nvml = env_value(&spec["containers"][0], "VRAMDOC_NVML_LIBRARY")
            .and_then(|e| e["value"].as_str())
            .expect("NVML by absolute path");
        for p in nvml.split(':') {
            assert!(
                p.starts_with("/run/nvidia/driver/") && p.ends_with("/libnvidia-ml.so.1"),
                "{p}"
            );
        }
        assert!(!privileged(&spec));
    }

    #[test]
    fn eks_al2_relies_on_the_default_nvidia_runtime() {
        common::skip::require!("kubernetes", kubernetes_validate());
        let spec = common_shape("eks-al2");
        assert_eq!(node_selector_keys(&spec), GPU_NODE_LABELS);
        assert_eq!(runtime_class(&spec), None, "no RuntimeClass on the AMI");
        assert_eq!(visible_devices(&spec), Some("all"));
        assert!(!privileged(&spec));
    }

    #[test]
    fn eks_bottlerocket_runs_privileged_without_taking_a_gpu() {
        common::skip::require!("kubernetes", kubernetes_validate());
        let spec = common_shape("eks-bottlerocket");
        assert_eq!(node_selector_keys(&spec), GPU_NODE_LABELS);
        assert_eq!(runtime_class(&spec), None);
        assert!(
            privileged(&spec),
            "NVIDIA_VISIBLE_DEVICES is ignored unprivileged"
        );
        assert_eq!(visible_devices(&spec), Some("all"));
        assert!(
            spec["containers"][0]["resources"]["limits"]
                .get("nvidia.com/gpu")
                .is_none(),
            "a GPU request would take a GPU from the workloads"
        );
    }

    #[test]
    fn gke_mounts_the_node_driver_directory_without_a_runtime_class() {
        common::skip::require!("kubernetes", kubernetes_validate());
        let spec = common_shape("gke");
        assert_eq!(runtime_class(&spec), None, "GKE has no nvidia RuntimeClass");
        let (host, mount) = host_mount(&spec, "/usr/local/nvidia").expect("driver dir");
        assert_eq!(host, "/home/kubernetes/bin/nvidia");
        assert_eq!(mount["readOnly"], true);
        assert_eq!(ld_library_path(&spec), ["/usr/local/nvidia/lib64"]);
        assert!(privileged(&spec), "no runtime adds the device nodes");
        assert_eq!(
            node_selector_keys(&spec),
            ["cloud.google.com/gke-accelerator"],
            "GKE's own label, not the base's"
        );
    }
}

/// Flags the manifests pass that land in `vramdoc serve` from another change of issue 18
/// (pod attribution): parsed like the others once the CLI has them.
const PENDING_FLAGS: [&str; 1] = ["--pod-resources-socket"];

/// Whether `vramdoc serve` has the long flag `flag` (`--name`).
fn serve_has_flag(flag: &str) -> bool {
    use clap::CommandFactory;
    let cli = vramdoc::cli::Cli::command();
    let serve = cli.find_subcommand("serve").expect("serve subcommand");
    let long = flag.trim_start_matches("--");
    let found = serve.get_arguments().any(|a| a.get_long() == Some(long));
    found
}

#[test]
fn daemonset_arguments_parse_with_vramdocs_own_cli() {
    common::skip::require!("kubernetes", kubernetes_validate());
    for platform in PLATFORMS {
        let ds = daemonset(platform);
        let c = &ds["spec"]["template"]["spec"]["containers"][0];
        let mut argv = vec!["vramdoc".to_string()];
        for a in c["args"].as_array().expect("args") {
            // The kubelet expands $(POD_IP) from the container's environment.
            let a = a.as_str().expect("arg").replace("$(POD_IP)", "10.1.2.3");
            let flag = a.split('=').next().unwrap_or_default();
            if PENDING_FLAGS.contains(&flag) && !serve_has_flag(flag) {
                continue;
            }
            argv.push(a);
        }
        let cli = vramdoc::cli::Cli::try_parse_from(&argv)
            .unwrap_or_else(|e| panic!("{platform}: {argv:?}: {e}"));
        let vramdoc::cli::Command::Serve(serve) = cli.command else {
            panic!("{platform}: not `serve`");
        };
        assert_eq!(
            serve.listen.to_string(),
            format!("10.1.2.3:{PORT}"),
            "{platform}"
        );
        assert!(
            serve.per_process,
            "{platform}: per-pod memory needs --per-process"
        );
        assert_eq!(serve.interval.as_secs(), 15, "{platform}");
    }
    // The manifests serve on serve's default port. 9835 (nvidia_gpu_exporter's) was the
    // default before issue 18, whose exporter change moves it to PORT.
    let default: std::net::SocketAddr = vramdoc::cli::DEFAULT_LISTEN.parse().expect("default");
    if default.port() != 9835 {
        assert_eq!(
            default.port(),
            PORT,
            "serve's default port and the manifests' agree"
        );
    }
}

/// A library directory of an operating system (which holds a libc): never on the exporter's
/// `LD_LIBRARY_PATH`, where the loader would take that root's glibc over the image's.
fn is_os_library_dir(dir: &str) -> bool {
    let d = dir.trim_end_matches('/');
    d.contains("/usr/lib")
        || d.ends_with("-linux-gnu")
        || ["/lib", "/lib64", "/lib32"].iter().any(|l| {
            d == *l || d.ends_with(&format!("/driver{l}")) || d.ends_with(&format!("/root{l}"))
        })
}

/// Issue 28: each rendered overlay keeps OS library directories off `LD_LIBRARY_PATH`,
/// tolerates only the GPU nodes' NoSchedule taint (a NoExecute taint of a driver upgrade
/// or a remediation evicts it), closes NVML between collections where the driver is upgraded
/// in place (the GPU operator), and records incidents into a bounded host directory.
#[test]
fn every_overlay_is_safe_for_the_node() {
    common::skip::require!("kubernetes", kubernetes_validate());
    assert!(is_os_library_dir(
        "/run/nvidia/driver/usr/lib/x86_64-linux-gnu"
    ));
    assert!(is_os_library_dir("/run/nvidia/driver/lib64"));
    assert!(!is_os_library_dir("/usr/local/nvidia/lib64"));
    for platform in PLATFORMS {
        let spec = daemonset(platform)["spec"]["template"]["spec"].clone();
        for dir in ld_library_path(&spec) {
            assert!(
                !is_os_library_dir(dir),
                "{platform}: {dir} on LD_LIBRARY_PATH"
            );
        }
        for t in spec["tolerations"].as_array().expect("tolerations") {
            assert!(
                t["key"].is_string(),
                "{platform}: a toleration of every taint: {t}"
            );
            assert_eq!(t["effect"], "NoSchedule", "{platform}: {t}");
        }
        let args: Vec<&str> = spec["containers"][0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(
            args.contains(&"--release-between"),
            platform == "gpu-operator",
            "{platform}: --release-between where the operator upgrades the driver in place: {args:?}"
        );
        assert!(
            args.contains(&"--incidents=/var/lib/vramdoc/incidents")
                && args.iter().any(|a| a.starts_with("--incidents-max-count="))
                && args.iter().any(|a| a.starts_with("--incidents-max-bytes=")),
            "{platform}: bounded incidents: {args:?}"
        );
        let (host, mount) = host_mount(&spec, "/var/lib/vramdoc/incidents")
            .unwrap_or_else(|| panic!("{platform}: no incidents directory"));
        assert_eq!(host, "/var/lib/vramdoc/incidents", "{platform}");
        assert_ne!(mount["readOnly"], true, "{platform}: incidents are written");
    }
}

/// Issue 39 item 6: every platform ships a NetworkPolicy that admits only the Prometheus
/// namespace, on the DaemonSet's metrics port, to the DaemonSet's pods.
#[test]
fn every_platform_admits_only_the_prometheus_namespace() {
    for platform in PLATFORMS {
        let docs = yaml_docs(&rendered(platform));
        let policies: Vec<&Value> = docs
            .iter()
            .filter(|d| d["kind"] == "NetworkPolicy")
            .collect();
        assert_eq!(policies.len(), 1, "{platform}: one NetworkPolicy");
        let spec = &policies[0]["spec"];
        let ds = daemonset(platform);
        assert_eq!(
            spec["podSelector"]["matchLabels"], ds["spec"]["template"]["metadata"]["labels"],
            "{platform}: it selects the exporter's pods"
        );
        assert_eq!(
            spec["policyTypes"],
            serde_json::json!(["Ingress"]),
            "{platform}"
        );
        let rules = spec["ingress"].as_array().expect("ingress rules");
        assert_eq!(rules.len(), 1, "{platform}: {rules:?}");
        assert_eq!(
            rules[0]["from"],
            serde_json::json!([{"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": "monitoring"}}}]),
            "{platform}: only the Prometheus namespace, no ipBlock or podSelector"
        );
        assert_eq!(
            rules[0]["ports"],
            serde_json::json!([{"protocol": "TCP", "port": PORT}]),
            "{platform}"
        );
    }
}
