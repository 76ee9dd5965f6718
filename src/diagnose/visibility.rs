//! Which physical GPUs a process may use, as the diagnosis reads it from the process's
//! environment: `NVIDIA_VISIBLE_DEVICES` in every form the NVIDIA device plugin and container
//! toolkit set it, then `CUDA_VISIBLE_DEVICES` over those, with the cases where that cannot
//! be known said as such (never "sees none" from a form vramdoc cannot read). Where the GPUs
//! a process can open are known from its files ([`super::devset`]), `CUDA_VISIBLE_DEVICES`
//! counts those instead.

use crate::gpu::visible::visible_devices;
use crate::inventory::{GpuEnv, CVD_UNSET};

/// The physical (NVML) devices a process may use: the GPUs it can open (`base`) or those its
/// container runtime mounted
/// (`NVIDIA_VISIBLE_DEVICES`, in every form the NVIDIA device plugin and container toolkit
/// set it), then its `CUDA_VISIBLE_DEVICES` over those. `Err` (why) when that cannot be
/// known — vramdoc then raises no finding that depends on it, never "sees none" from a form
/// it cannot read.
///
/// `NVIDIA_VISIBLE_DEVICES` forms (NVIDIA/k8s-device-plugin `getAllocateResponse`,
/// nvidia-container-toolkit docs): unset or `all` (also what stays with CDI injection, where
/// the image's default is never replaced) — every GPU; `none`, `void` or empty — GPUs not
/// managed by the runtime; a comma-separated list of indices or UUIDs (envvar strategy;
/// time-sliced replicas `UUID::N`); a directory such as `/var/run/nvidia-container-devices`
/// (volume-mounts strategy: the IDs are the entries mounted there, read into
/// [`GpuEnv::mounted_device_ids`]); `MIG-GPU-<uuid>/<gi>/<ci>` (names its parent GPU) and
/// `MIG-<uuid>` (a MIG device UUID, which names a slice, not a GPU vramdoc can map here).
///
/// `base`: the GPUs the process can open when known from its files (NVML indices,
/// ascending; `crate::diagnose::devset`): `CUDA_VISIBLE_DEVICES` then counts those, and
/// `NVIDIA_VISIBLE_DEVICES` is not read. `None`: from `NVIDIA_VISIBLE_DEVICES`.
pub fn allowed_devices_over(
    base: Option<Vec<u32>>,
    cvd: &str,
    env: Option<&GpuEnv>,
    devices: &[(String, String)],
    in_container: bool,
) -> Result<Vec<u32>, String> {
    let uuids: Vec<String> = devices.iter().map(|(uuid, _)| uuid.clone()).collect();
    let from_files = base.is_some();
    let nvd = env
        .and_then(|e| e.nvidia_visible_devices.as_deref())
        .map(str::trim)
        .filter(|_| !from_files);
    // The container's GPUs (NVML indices), in NVML order.
    let mounted: Vec<u32> = match (base, nvd) {
        (Some(b), _) => b,
        (None, None | Some("all")) => (0..uuids.len() as u32).collect(),
        (None, Some(v @ ("none" | "void" | ""))) => {
            return Err(format!(
                "NVIDIA_VISIBLE_DEVICES={v}: GPUs are not managed by the runtime"
            ))
        }
        (None, Some(dir)) if dir.starts_with('/') => {
            let Some(ids) = env.and_then(|e| e.mounted_device_ids.as_ref()) else {
                return Err(format!(
                    "NVIDIA_VISIBLE_DEVICES={dir}: the device list mounted there could not be read"
                ));
            };
            if ids.is_empty() {
                return Err(format!(
                    "NVIDIA_VISIBLE_DEVICES={dir}: no device is listed there"
                ));
            }
            mounted_ids(ids.iter().map(String::as_str), &uuids)
                .map_err(|e| format!("NVIDIA_VISIBLE_DEVICES={dir}: {e}"))?
        }
        (None, Some(v)) => mounted_ids(v.split(','), &uuids)
            .map_err(|e| format!("NVIDIA_VISIBLE_DEVICES={v}: {e}"))?,
    };
    if cvd == CVD_UNSET {
        return Ok(mounted);
    }
    // CDI injects only the allocated GPUs' device nodes while the image's `all` stays: a
    // container's CUDA indices then count the injected GPUs, not the host's.
    if in_container && nvd == Some("all") && cvd_has_index(cvd) {
        return Err(
            "NVIDIA_VISIBLE_DEVICES=all in a container (CDI keeps the image's `all`): its \
             CUDA_VISIBLE_DEVICES indices may count only the GPUs injected into it"
                .into(),
        );
    }
    let mounted_names = mounted
        .iter()
        .filter_map(|i| devices.get(*i as usize))
        .map(|(_, name)| name.as_str());
    let order = env.and_then(|e| e.cuda_device_order.as_deref());
    if index_order_ambiguous(cvd, order, mounted_names) {
        return Err(
            "its CUDA_VISIBLE_DEVICES indices follow CUDA's fastest-first order on mixed GPUs \
             (set CUDA_DEVICE_ORDER=PCI_BUS_ID or use GPU UUIDs)"
                .into(),
        );
    }
    let mounted_uuids: Vec<String> = mounted
        .iter()
        .map(|i| uuids.get(*i as usize).cloned().unwrap_or_default())
        .collect();
    Ok(visible_devices(Some(cvd), &mounted_uuids)
        .into_iter()
        .map(|k| mounted[k as usize])
        .collect())
}

fn cvd_has_index(cvd: &str) -> bool {
    cvd.split(',')
        .any(|e| e.trim().chars().next().is_some_and(|c| c.is_ascii_digit()))
}

/// NVML indices of a container's device IDs (see [`allowed_devices`]), sorted; `Err` naming
/// the first ID that cannot be mapped to a GPU.
fn mounted_ids<'a>(
    ids: impl Iterator<Item = &'a str>,
    uuids: &[String],
) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for raw in ids {
        let id = raw.trim();
        if id.is_empty() {
            continue;
        }
        // Time-slicing replicas: `GPU-…::N` is GPU `GPU-…`.
        let id = id.split("::").next().unwrap_or(id);
        // Legacy MIG form `MIG-GPU-<uuid>/<gi>/<ci>` names its parent GPU.
        let id = match id.strip_prefix("MIG-") {
            Some(rest) if rest.to_ascii_uppercase().starts_with("GPU-") => {
                rest.split('/').next().unwrap_or(rest)
            }
            Some(_) => {
                return Err(format!(
                    "{id} is a MIG device; vramdoc does not map MIG devices to their GPU here"
                ))
            }
            None => id,
        };
        match crate::gpu::visible::resolve(id, uuids) {
            Some(i) => out.push(i),
            None => return Err(format!("{id} names no GPU of this machine")),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Whether integer `CUDA_VISIBLE_DEVICES` entries may not mean NVML's physical indices: CUDA
/// orders devices fastest first unless `CUDA_DEVICE_ORDER` (`order`) is `PCI_BUS_ID`, which
/// only differs from NVML's PCI order among GPUs of different models (`names`).
pub(crate) fn index_order_ambiguous<'a>(
    cvd: &str,
    order: Option<&str>,
    mut names: impl Iterator<Item = &'a str>,
) -> bool {
    let pci = order.is_some_and(|o| o.trim().eq_ignore_ascii_case("PCI_BUS_ID"));
    let numeric = cvd
        .split(',')
        .any(|e| e.trim().chars().next().is_some_and(|c| c.is_ascii_digit()));
    if pci || !numeric {
        return false;
    }
    names.next().is_some_and(|first| names.any(|n| n != first))
}
