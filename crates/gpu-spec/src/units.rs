//! Byte quantities: parsing user-written sizes (`24GiB`, `512MiB`, `1.5GB`) and formatting
//! them for people (`23.50 GiB`). One place, so every output agrees.

use thiserror::Error;

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * KIB;
pub const GIB: u64 = 1024 * MIB;

/// A size string that could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid size {input:?}: {reason} (write e.g. 512MiB, 24GiB, 1.5GB or a plain byte count)")]
pub struct SizeError {
    pub input: String,
    pub reason: String,
}

/// Parse a size such as `24GiB`, `24G` (binary), `1.5GB` (decimal), `512MiB`, `4096`.
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let err = |reason: &str| SizeError {
        input: input.to_string(),
        reason: reason.to_string(),
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return Err(err("no number"));
    }
    let value: f64 = num.parse().map_err(|_| err("not a number"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => KIB,
        "m" | "mib" => MIB,
        "g" | "gib" => GIB,
        "t" | "tib" => 1024 * GIB,
        "kb" => 1000,
        "mb" => 1000 * 1000,
        "gb" => 1000 * 1000 * 1000,
        "tb" => 1000 * 1000 * 1000 * 1000,
        _ => return Err(err("unknown unit")),
    };
    let bytes = value * mult as f64;
    // `u64::MAX as f64` is 2^64 itself: a size of 2^64 or more does not fit (it used to
    // saturate to u64::MAX, issue 29 item 15).
    if !bytes.is_finite() || bytes < 0.0 || bytes >= u64::MAX as f64 {
        return Err(err("out of range"));
    }
    Ok(bytes.round() as u64)
}

/// Format bytes for people: `0 B`, `512 KiB`, `300 MiB`, `23.50 GiB`.
pub fn format_bytes(bytes: u64) -> String {
    if bytes >= GIB {
        format!("{:.2} GiB", bytes as f64 / GIB as f64)
    } else if bytes >= MIB {
        format!("{:.0} MiB", bytes as f64 / MIB as f64)
    } else if bytes >= KIB {
        format!("{:.0} KiB", bytes as f64 / KIB as f64)
    } else {
        format!("{bytes} B")
    }
}

/// Format a signed byte difference (`+1.00 GiB`, `-300 MiB`).
pub fn format_delta(delta: i64) -> String {
    let sign = if delta < 0 { "-" } else { "+" };
    format!("{sign}{}", format_bytes(delta.unsigned_abs()))
}

/// Round `bytes` up to a multiple of `granularity` (which must be non-zero).
pub fn round_up(bytes: u64, granularity: u64) -> u64 {
    if granularity == 0 {
        return bytes;
    }
    bytes.div_ceil(granularity).saturating_mul(granularity)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 29 item 15: 2^64 bytes and more are out of range, never u64::MAX.
    #[test]
    fn sizes_of_two_to_the_64_or_more_are_refused_not_saturated() {
        for s in [
            "18446744073709551616",
            "16777216TiB",
            "16777216t",
            "1e30",
            "99999999TiB",
        ] {
            assert!(parse_size(s).is_err(), "{s}: {:?}", parse_size(s));
        }
        assert_eq!(parse_size("16777215TiB").unwrap(), 16_777_215 * 1024 * GIB);
    }

    #[test]
    fn parses_binary_and_decimal_units() {
        assert_eq!(parse_size("24GiB").unwrap(), 24 * GIB);
        assert_eq!(parse_size("24G").unwrap(), 24 * GIB);
        assert_eq!(parse_size("512 MiB").unwrap(), 512 * MIB);
        assert_eq!(parse_size("1.5GB").unwrap(), 1_500_000_000);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("12XB").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("GiB").is_err());
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(300 * MIB), "300 MiB");
        assert_eq!(format_bytes(24 * GIB), "24.00 GiB");
        assert_eq!(format_delta(-(300 * MIB as i64)), "-300 MiB");
    }

    #[test]
    fn rounds_to_granularity() {
        assert_eq!(round_up(1, 2 * MIB), 2 * MIB);
        assert_eq!(round_up(2 * MIB, 2 * MIB), 2 * MIB);
        assert_eq!(round_up(0, 2 * MIB), 0);
    }
}
