//! Data patterns written before a transfer and verified after it. The byte at absolute offset
//! `o` of a pattern depends on the seed and on `o`, so a shifted, truncated or stale copy shows up
//! as a mismatch at a precise offset.

/// Pattern bytes for `[offset, offset+len)` under `seed`.
pub fn generate(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| byte_at(seed, offset + i)).collect()
}

/// One pattern byte (splitmix64 of seed and offset word, then the byte of that word).
pub fn byte_at(seed: u64, off: u64) -> u8 {
    let mut z = seed ^ (off / 8).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> ((off % 8) * 8)) as u8
}

/// First offset (relative) where `actual` differs from the pattern, if any.
pub fn first_mismatch(seed: u64, offset: u64, actual: &[u8]) -> Option<usize> {
    actual
        .iter()
        .enumerate()
        .find(|(i, b)| **b != byte_at(seed, offset + *i as u64))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_detect_corruption() {
        let p = generate(42, 100, 4096);
        assert_eq!(first_mismatch(42, 100, &p), None);
        assert_eq!(first_mismatch(43, 100, &p).map(|i| i < 8), Some(true));
        // Shifted by one byte: caught at once.
        assert_eq!(first_mismatch(42, 101, &p[..4095]), Some(0));
        let mut q = p.clone();
        q[1234] ^= 1;
        assert_eq!(first_mismatch(42, 100, &q), Some(1234));
        // Not constant: a zero-filled buffer fails.
        assert!(first_mismatch(42, 0, &[0u8; 64]).is_some());
        assert_eq!(generate(1, 0, 0), Vec::<u8>::new());
    }
}
