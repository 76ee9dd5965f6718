//! Which GPUs a process sees, and how it numbers them, from its environment:
//!
//! - `NVIDIA_VISIBLE_DEVICES` ([`mounted_devices`]): read by the NVIDIA container runtime,
//!   which mounts only those GPUs into the container; NVML inside numbers them from 0 in PCI
//!   order.
//! - `CUDA_DEVICE_ORDER` ([`cuda_order`]): CUDA enumerates the mounted devices fastest first
//!   unless it is `PCI_BUS_ID`.
//! - `CUDA_VISIBLE_DEVICES` ([`visible_devices`]), as the real CUDA driver reads it: a
//!   comma-separated list of indices (in CUDA's order) or GPU UUIDs (unique prefixes allowed).
//!   Parsing stops at the first entry that is invalid, out of range or repeated; the devices
//!   before it stay visible. Unset means all. CUDA ordinals are positions in the resulting
//!   list; NVML ignores the variable and keeps physical numbering.
//!
//! Sources: CUDA C++ Programming Guide, "CUDA Environment Variables"; NVIDIA Container
//! Toolkit docs ("GPU enumeration", `NVIDIA_VISIBLE_DEVICES`).

/// The variable CUDA reads to hide and renumber devices.
pub const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";
/// The variable the NVIDIA container runtime reads to choose the GPUs it mounts.
pub const NVIDIA_VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";
/// The variable choosing CUDA's enumeration order (`FASTEST_FIRST` or `PCI_BUS_ID`).
pub const CUDA_DEVICE_ORDER: &str = "CUDA_DEVICE_ORDER";

/// The devices a process can use at all, as NVML indexes them on the host, given its
/// `NVIDIA_VISIBLE_DEVICES`. The NVIDIA container runtime reads that variable and mounts only
/// those GPUs into the container. Unset or `all`: every device. `none`, `void` or empty: none. Otherwise a
/// comma-separated list of host indices or UUIDs (unknown entries are skipped, as the runtime
/// would refuse to start the container instead). Result in host PCI (NVML) order.
pub fn mounted_devices(env: Option<&str>, uuids: &[String]) -> Vec<u32> {
    let all = || (0..uuids.len() as u32).collect();
    let Some(env) = env else {
        return all();
    };
    let env = env.trim();
    match env {
        "all" => return all(),
        "" | "none" | "void" => return Vec::new(),
        _ => {}
    }
    let mut out: Vec<u32> = env
        .split(',')
        .filter_map(|t| resolve(t.trim(), uuids))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// `CUDA_DEVICE_ORDER`: CUDA's enumeration order of `mounted` (host indices in PCI order).
/// `PCI_BUS_ID` keeps PCI order; anything else (the default, `FASTEST_FIRST`) puts the fastest
/// device first — by compute capability, then SM count, ties in PCI order — as CUDA's
/// heuristic does.
pub fn cuda_order(
    mounted: &[u32],
    order_env: Option<&str>,
    speed: impl Fn(u32) -> (i32, i32, i32),
) -> Vec<u32> {
    let mut order = mounted.to_vec();
    if order_env.map(str::trim) != Some("PCI_BUS_ID") {
        // Stable sort: equal devices keep PCI order.
        order.sort_by_key(|i| std::cmp::Reverse(speed(*i)));
    }
    order
}

/// Physical device index for each CUDA ordinal of a process, given its `CUDA_VISIBLE_DEVICES`.
/// `uuids` are in CUDA's enumeration order; the result indexes that order (map it through
/// [`cuda_order`] to reach host indices).
pub fn visible_devices(env: Option<&str>, uuids: &[String]) -> Vec<u32> {
    let Some(env) = env else {
        return (0..uuids.len() as u32).collect();
    };
    let mut out: Vec<u32> = Vec::new();
    for token in env.split(',') {
        let token = token.trim();
        let Some(index) = resolve(token, uuids) else {
            break;
        };
        if out.contains(&index) {
            break;
        }
        out.push(index);
    }
    out
}

/// One device ID as CUDA reads it: an index below the device count, or a `GPU-` UUID or
/// unique prefix of one (case ignored); `None` for anything else.
pub fn resolve(token: &str, uuids: &[String]) -> Option<u32> {
    if token.is_empty() {
        return None;
    }
    if token.chars().all(|c| c.is_ascii_digit()) {
        let i: u32 = token.parse().ok()?;
        return ((i as usize) < uuids.len()).then_some(i);
    }
    if !token.to_ascii_lowercase().starts_with("gpu-") {
        return None;
    }
    match uuid_matches(token, uuids).as_slice() {
        [one] => Some(*one),
        _ => None,
    }
}

/// The indices of the devices whose UUID starts with `prefix`, case ignored.
pub fn uuid_matches(prefix: &str, uuids: &[String]) -> Vec<u32> {
    let lower = prefix.to_ascii_lowercase();
    uuids
        .iter()
        .enumerate()
        .filter(|(_, u)| u.to_ascii_lowercase().starts_with(&lower))
        .map(|(i, _)| i as u32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fastest_first_unless_pci_bus_id_and_mounts_filter() {
        // t4 (7.5, 40 SMs) at PCI 0, h100 (9.0, 132) at PCI 1.
        let speed = |i: u32| if i == 1 { (9, 0, 132) } else { (7, 5, 40) };
        assert_eq!(cuda_order(&[0, 1], None, speed), vec![1, 0]);
        assert_eq!(
            cuda_order(&[0, 1], Some("FASTEST_FIRST"), speed),
            vec![1, 0]
        );
        assert_eq!(cuda_order(&[0, 1], Some("PCI_BUS_ID"), speed), vec![0, 1]);
        let u = uuids();
        assert_eq!(mounted_devices(None, &u), vec![0, 1, 2]);
        assert_eq!(mounted_devices(Some("all"), &u), vec![0, 1, 2]);
        assert_eq!(mounted_devices(Some("none"), &u), Vec::<u32>::new());
        assert_eq!(mounted_devices(Some("2"), &u), vec![2]);
        assert_eq!(mounted_devices(Some("GPU-bbbb2222,0"), &u), vec![0, 1]);
    }

    fn uuids() -> Vec<String> {
        vec![
            "GPU-aaaa1111-0000-0000-0000-000000000000".into(),
            "GPU-bbbb2222-0000-0000-0000-000000000000".into(),
            "GPU-bbbb3333-0000-0000-0000-000000000000".into(),
        ]
    }

    #[test]
    fn unset_means_all() {
        assert_eq!(visible_devices(None, &uuids()), vec![0, 1, 2]);
    }

    #[test]
    fn indices_renumber() {
        assert_eq!(visible_devices(Some("1"), &uuids()), vec![1]);
        assert_eq!(visible_devices(Some("2,0"), &uuids()), vec![2, 0]);
        assert_eq!(visible_devices(Some(" 1 , 2 "), &uuids()), vec![1, 2]);
    }

    #[test]
    fn stops_at_first_invalid_entry() {
        assert_eq!(visible_devices(Some("1,7,0"), &uuids()), vec![1]);
        assert_eq!(visible_devices(Some("0,-1,2"), &uuids()), vec![0]);
        assert_eq!(visible_devices(Some("1,1,2"), &uuids()), vec![1]);
        assert!(visible_devices(Some(""), &uuids()).is_empty());
        assert!(visible_devices(Some("-1"), &uuids()).is_empty());
    }

    #[test]
    fn uuid_and_unique_prefix() {
        assert_eq!(visible_devices(Some("GPU-aaaa"), &uuids()), vec![0]);
        assert_eq!(
            visible_devices(Some("gpu-bbbb3333,0"), &uuids()),
            vec![2, 0]
        );
        // ambiguous prefix is invalid
        assert!(visible_devices(Some("GPU-bbbb"), &uuids()).is_empty());
    }
}
