//! Reading the numbers out of failure lines: sizes with and without a space before the unit
//! (`2.00 GiB`, `47.08GiB`, `17.79G`, `33554432B`), byte counts, ordinals, TensorFlow tensor
//! shapes. Pure functions on `&str`; `None` where the text does not hold the number.

const KIB: f64 = 1024.0;

fn unit_mult(unit: &str) -> Option<f64> {
    Some(match unit {
        "bytes" | "byte" | "B" => 1.0,
        "KiB" | "K" => KIB,
        "MiB" | "M" => KIB * KIB,
        "GiB" | "G" => KIB * KIB * KIB,
        "TiB" | "T" => KIB * KIB * KIB * KIB,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        _ => return None,
    })
}

/// `v` units of `mult` bytes; `None` when negative or past what 64 bits hold (a float cast
/// would saturate to 2^64 − 1: "Tried to allocate 99999999999999999999999999 GiB" is no
/// size, issue 39 item 5).
fn to_bytes(v: f64, mult: f64) -> Option<u64> {
    let b = (v * mult).round();
    // u64::MAX as f64 is 2^64 exactly: below it every value converts without saturating.
    (b.is_finite() && b >= 0.0 && b < u64::MAX as f64).then_some(b as u64)
}

/// `2.00 GiB`, `20.00 MiB`, `1024.00 KiB`, `0 bytes` at the start of `s` (a space between
/// number and unit).
pub fn size_at(s: &str) -> Option<u64> {
    let mut words = s.split_whitespace();
    let num = words.next()?;
    let unit = words
        .next()?
        .trim_end_matches(|c: char| !c.is_ascii_alphabetic());
    let v: f64 = num.parse().ok()?;
    to_bytes(v, unit_mult(unit)?)
}

/// A size at the start of `s`, with or without a space before the unit (`47.08GiB`,
/// `105.47 MiB`, `17.79G`, `33554432B`, `6291456 bytes`).
pub fn size_token(s: &str) -> Option<u64> {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let v: f64 = s.get(..end)?.parse().ok()?;
    let rest = s.get(end..)?.trim_start();
    let unit: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    to_bytes(v, unit_mult(&unit)?)
}

/// The decimal number right after the first `key` in `s`.
pub fn number_after(s: &str, key: &str) -> Option<u64> {
    let rest = &s[s.find(key)? + key.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// A signed integer right after the first `key` (`exitcode: -9`).
pub fn int_after(s: &str, key: &str) -> Option<i32> {
    let rest = s[s.find(key)? + key.len()..].trim_start();
    let (sign, rest) = match rest.strip_prefix('-') {
        Some(r) => (-1, r),
        None => (1, rest),
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse::<i32>().ok().map(|v| sign * v)
}

/// The ordinal after the first `key` (`device ordinal 0`, `cuda:1`, `device:GPU:0`).
pub fn ordinal_after(s: &str, key: &str) -> Option<u32> {
    number_after(s, key).and_then(|v| u32::try_from(v).ok())
}

/// A bare byte count after the first `key` (`buffer of size 14822711296`).
pub fn bytes_after(s: &str, key: &str) -> Option<u64> {
    number_after(s, key)
}

/// The size after the first `key` (either spelling, see [`size_token`]).
pub fn size_after(s: &str, key: &str) -> Option<u64> {
    size_token(&s[s.find(key)? + key.len()..])
}

/// Bytes of a TensorFlow tensor from `shape[16,1,892800] and type float` (or `shape [4096]
/// and type float`): the element count times the dtype's size (`None` for a dtype not known).
pub fn tf_tensor_bytes(l: &str) -> Option<u64> {
    let i = l.find("shape")?;
    let rest = l[i + "shape".len()..].trim_start();
    let rest = rest.strip_prefix('[')?;
    let dims = &rest[..rest.find(']')?];
    let mut n: u64 = 1;
    for d in dims.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        n = n.checked_mul(d.parse().ok()?)?;
    }
    let dtype = l[l.find(" type ")? + " type ".len()..]
        .split_whitespace()
        .next()?;
    let size: u64 = match dtype {
        "float" | "int32" | "uint32" | "qint32" => 4,
        "double" | "int64" | "uint64" | "complex64" => 8,
        "half" | "bfloat16" | "int16" | "uint16" => 2,
        "int8" | "uint8" | "bool" | "qint8" | "quint8" => 1,
        "complex128" => 16,
        _ => return None,
    };
    n.checked_mul(size)
}

/// The CUDA device of an NCCL log line: `host:pid:tid [dev] …` (NCCL's `[%d]` is the
/// process's CUDA device, src/debug.cc).
pub fn nccl_device(l: &str) -> Option<u32> {
    let i = l.find(" [")?;
    let head = &l[..i];
    // `host:pid:tid` just before: two colons and digits.
    let tail = head.rsplit(' ').next()?;
    let mut parts = tail.rsplit(':');
    let tid = parts.next()?;
    let pid = parts.next()?;
    if tid.is_empty()
        || pid.is_empty()
        || !tid.chars().all(|c| c.is_ascii_digit())
        || !pid.chars().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let rest = &l[i + 2..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if !rest[digits.len()..].starts_with(']') {
        return None;
    }
    digits.parse().ok()
}

/// What TensorFlow's BFC allocator said of itself before an OOM (`Stats:` block, `Limit`
/// and `InUse` bytes), as appended to the OOM line by the recorder.
pub fn bfc_suffix(limit: u64, in_use: Option<u64>) -> String {
    match in_use {
        Some(u) => format!("[BFC allocator Limit: {limit} bytes, InUse: {u} bytes]"),
        None => format!("[BFC allocator Limit: {limit} bytes]"),
    }
}

/// The BFC allocator's `(Limit, InUse)` from a line carrying [`bfc_suffix`].
pub fn bfc_stats(l: &str) -> Option<(u64, Option<u64>)> {
    let limit = number_after(l, "[BFC allocator Limit: ")?;
    Some((limit, number_after(l, " bytes, InUse: ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_and_without_a_space() {
        let gib = |x: f64| (x * (1u64 << 30) as f64).round() as u64;
        assert_eq!(size_token("47.08GiB"), Some(gib(47.08)));
        assert_eq!(
            size_token("105.47 MiB on"),
            Some((105.47 * (1u64 << 20) as f64).round() as u64)
        );
        assert_eq!(size_token("17.79G (1910"), Some(gib(17.79)));
        assert_eq!(size_token("33554432B)"), Some(33_554_432));
        assert_eq!(size_token("6291456 bytes"), Some(6_291_456));
        assert_eq!(size_token("GiB"), None);
        assert_eq!(size_token("12 parsecs"), None);
        assert_eq!(size_at("2.00 GiB"), Some(2 << 30));
    }

    #[test]
    fn tensorflow_shapes_become_bytes() {
        let l = "OOM when allocating tensor with shape[16,112,112,147] and type float on \
                 /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc";
        assert_eq!(tf_tensor_bytes(l), Some(16 * 112 * 112 * 147 * 4));
        let l = "OOM when allocating tensor of shape [4096] and type half";
        assert_eq!(tf_tensor_bytes(l), Some(8192));
        assert_eq!(tf_tensor_bytes("shape[2,x] and type float"), None);
        assert_eq!(tf_tensor_bytes("shape[4] and type resource"), None);
        assert_eq!(
            tf_tensor_bytes("shape[99999999999,99999999999,99999999] and type float"),
            None
        );
    }

    #[test]
    fn nccl_device_is_the_bracket_after_host_pid_tid() {
        let l = "ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure";
        assert_eq!(nccl_device(l), Some(3));
        assert_eq!(nccl_device("x [3] y"), None);
        assert_eq!(int_after("exitcode  : -9 (pid: 1)", "exitcode"), None);
        assert_eq!(int_after("exitcode: -9 (pid: 1)", "exitcode:"), Some(-9));
    }
}
