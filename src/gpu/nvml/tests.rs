//! Unit tests of the NVML backend's record decoding (no library loaded).
use super::*;

/// Records as a driver would write them into a sentinel-filled buffer.
fn buffer(records: &[(u32, u64)], stride: usize, capacity: usize) -> Vec<u8> {
    let mut buf = vec![SENTINEL; capacity * WIDE_RECORD];
    for (i, (pid, used)) in records.iter().enumerate() {
        let r = &mut buf[i * stride..i * stride + stride];
        r[..4].copy_from_slice(&pid.to_ne_bytes());
        r[4..8].fill(0);
        r[8..16].copy_from_slice(&used.to_ne_bytes());
        r[16..24].copy_from_slice(&[0xFF; 8]);
        if stride == WIDE_RECORD {
            r[24..32].fill(0);
        }
    }
    buf
}

#[test]
fn record_stride_is_probed_from_what_the_driver_wrote() {
    let recs = [(4242, 1 << 30), (4343, NOT_AVAILABLE), (4444, 3 << 20)];
    for stride in [NARROW_RECORD, WIDE_RECORD] {
        let buf = buffer(&recs, stride, 8);
        let got = decode_records(&buf, recs.len());
        assert_eq!(
            got,
            vec![(4242, Some(1 << 30)), (4343, None), (4444, Some(3 << 20))],
            "stride {stride}"
        );
    }
    assert!(decode_records(&buffer(&[], 24, 4), 0).is_empty());
}
