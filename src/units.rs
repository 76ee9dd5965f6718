//! Quantities people write and read: byte sizes (`24GiB`, `512MiB`, `1.5GB`, shown as
//! `23.50 GiB`) and durations (`500us`, `4.5ms`, `2s`, `1m`, `1h`, `1h30m`). Sizes are defined once in
//! `vramdoc-gpu-spec` (box specs, flags and every output agree) and re-exported here;
//! durations are vramdoc's own (flags and scenario files).

pub use vramdoc_gpu_spec::units::*;

use std::time::Duration;
use thiserror::Error;

/// A duration string that could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid duration {0:?}: write e.g. 500us, 1ms, 4.5ms, 2s, 1m, 1h or 1h30m")]
pub struct DurationError(pub String);

/// Parse a duration, the one parser of every duration flag and scenario field: a number
/// (decimals allowed) and a unit, `ns`, `us` (`µs`), `ms`, `s` (or none), `m` (`min`) or `h`,
/// e.g. `250us`, `4.5ms`, `2s`, `3600s`, `1h`; or whole numbers with units one after another,
/// as the `humantime` crate reads them (`1h30m`, `2m 30s`, `1d`). At most 10^9 seconds.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    single_unit(s).or_else(|e| {
        humantime::parse_duration(s.trim())
            .ok()
            .filter(|d| d.as_secs() <= 1_000_000_000)
            .ok_or(e)
    })
}

/// One number and one unit (`4.5ms`, `3600`, `1h`).
fn single_unit(s: &str) -> Result<Duration, DurationError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || DurationError(s.to_string());
    let v: f64 = num.parse().map_err(|_| bad())?;
    let secs = match unit.trim() {
        "ns" => v / 1e9,
        "us" | "µs" => v / 1e6,
        "ms" => v / 1e3,
        "s" | "" => v,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(bad()),
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Format a duration the way people write it: the largest unit that shows it exactly
/// (`1h`, `15m`, `30s`, `200ms`, `250us`, `10ns`), so it reads back through
/// [`parse_duration`] unchanged.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    for (unit, per) in [
        ("h", 3_600_000_000_000u128),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ] {
        if ns > 0 && ns.is_multiple_of(per) {
            return format!("{}{unit}", ns / per);
        }
    }
    format!("{ns}ns")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1ms").unwrap().as_micros(), 1000);
        assert_eq!(parse_duration("4.5ms").unwrap().as_micros(), 4500);
        assert_eq!(parse_duration("250us").unwrap().as_micros(), 250);
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        // Issue 19: an hour is accepted however it is written.
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(
            parse_duration("3600s").unwrap(),
            parse_duration("1h").unwrap()
        );
        // Issue 19: combined units, as every duration flag reads them.
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("2m 30s").unwrap(), Duration::from_secs(150));
        assert_eq!(
            parse_duration("1s500ms").unwrap(),
            Duration::from_millis(1500)
        );
        assert!(parse_duration("1h-30m").is_err());
        assert!(parse_duration("100000y").is_err(), "over 10^9 s");
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("1 fortnight").is_err());
        assert!(parse_duration("-1s").is_err());
        let e = parse_duration("soon").unwrap_err().to_string();
        assert!(e.contains("\"soon\"") && e.contains("1h"), "{e}");
    }

    #[test]
    fn durations_format_as_written() {
        for s in [
            "1h", "15m", "30s", "200ms", "250us", "10ns", "90s", "1500ms",
        ] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
        assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
        assert_eq!(format_duration(Duration::ZERO), "0ns");
    }
}
