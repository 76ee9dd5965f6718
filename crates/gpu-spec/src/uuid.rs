//! The text form of a GPU UUID. NVML prints `GPU-` + 32 lowercase hex digits grouped 8-4-4-4-12
//! (`nvmlDeviceGetUUID`); the CUDA driver returns the same 16 bytes (`cuDeviceGetUuid`). The
//! UUID is the one key that matches a CUDA ordinal to an NVML index.

/// Format a 16-byte CUDA UUID as NVML prints it: `GPU-` + 8-4-4-4-12 lowercase hex.
pub fn format_gpu_uuid(bytes: &[u8; 16]) -> String {
    let h: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Parse an NVML UUID (`GPU-` or `MIG-` + 32 hex digits with dashes) into its 16 bytes.
pub fn parse_gpu_uuid(s: &str) -> Option<[u8; 16]> {
    let hex: String = s
        .strip_prefix("GPU-")
        .or_else(|| s.strip_prefix("MIG-"))
        .unwrap_or(s)
        .chars()
        .filter(|c| *c != '-')
        .collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_bytes_format_like_nvml() {
        let b: [u8; 16] = std::array::from_fn(|i| i as u8 * 17);
        let s = format_gpu_uuid(&b);
        assert_eq!(s, "GPU-00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(parse_gpu_uuid(&s), Some(b));
        assert_eq!(parse_gpu_uuid("GPU-12"), None);
        assert_eq!(
            parse_gpu_uuid("GPU-0011223-34455-6677-8899-aabbccddeezz"),
            None
        );
    }
}
