//! vramdoc's two CUDA kernels (kernels/vramdoc.cu, compiled to kernels/vramdoc.ptx) by name, and
//! what they compute. vramdoc's CUDA backend launches them; the simulated driver emulates them
//! by name. Both sides take the names and the checksum from here.
//!
//! - `vramdoc_fill_u32(u32 *ptr, u64 n_words, u32 value)`: every word of `ptr[0..n_words)`
//!   := `value`;
//! - `vramdoc_checksum_u32(const u32 *ptr, u64 n_words, u64 *out)`: `*out +=` the sum of the
//!   words as 64-bit integers (wrapping), the caller having zeroed `*out`.

/// Entry name of the fill kernel.
pub const FILL: &str = "vramdoc_fill_u32";
/// Entry name of the checksum kernel.
pub const CHECKSUM: &str = "vramdoc_checksum_u32";

/// The checksum kernel's result over `words`: their sum as 64-bit integers, wrapping.
pub fn checksum(words: impl IntoIterator<Item = u32>) -> u64 {
    words
        .into_iter()
        .fold(0u64, |sum, w| sum.wrapping_add(w as u64))
}

/// The checksum kernel's result over `n_words` words that all hold `value` (what a fill
/// leaves), without visiting them.
pub fn checksum_uniform(value: u32, n_words: u64) -> u64 {
    (value as u64).wrapping_mul(n_words)
}

/// The checksum a fill of `bytes` with `value` must read back (whole words only).
pub fn expected_checksum(bytes: u64, value: u32) -> u64 {
    checksum_uniform(value, bytes / 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_checksum_agrees_with_the_sum_and_wraps() {
        assert_eq!(checksum([7; 1024]), checksum_uniform(7, 1024));
        assert_eq!(expected_checksum(4096, 7), 7 * 1024);
        assert_eq!(
            expected_checksum(4099, 1),
            1024,
            "partial words are not summed"
        );
        assert_eq!(checksum([]), 0);
        let n = (1u64 << 33) + 5;
        assert_eq!(
            checksum_uniform(u32::MAX, n),
            (u32::MAX as u64).wrapping_mul(n)
        );
    }
}
