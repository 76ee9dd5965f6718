//! `CUDA_VISIBLE_DEVICES` as the real CUDA driver reads it: a comma-separated list of physical
//! indices or GPU UUIDs (unique prefixes allowed). Parsing stops at the first entry that is
//! invalid, out of range or repeated; the devices before it stay visible. Unset means all.
//! CUDA ordinals are positions in the resulting list; NVML keeps physical numbering.

/// Physical device index for each CUDA ordinal of a process, given its `CUDA_VISIBLE_DEVICES`.
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

fn resolve(token: &str, uuids: &[String]) -> Option<u32> {
    if token.is_empty() {
        return None;
    }
    if token.chars().all(|c| c.is_ascii_digit()) {
        let i: u32 = token.parse().ok()?;
        return ((i as usize) < uuids.len()).then_some(i);
    }
    let lower = token.to_ascii_lowercase();
    if !lower.starts_with("gpu-") {
        return None;
    }
    let matches: Vec<u32> = uuids
        .iter()
        .enumerate()
        .filter(|(_, u)| u.to_ascii_lowercase().starts_with(&lower))
        .map(|(i, _)| i as u32)
        .collect();
    match matches.as_slice() {
        [one] => Some(*one),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
