//! Sizes on the command line.

/// Parses sizes like `4096`, `64K`, `1M`, `2G`.
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last() {
        Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&s[..i], 1u64 << 10),
        Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&s[..i], 1u64 << 20),
        Some((i, c)) if c.eq_ignore_ascii_case(&'g') => (&s[..i], 1u64 << 30),
        _ => (s, 1),
    };
    let n: u64 = if let Some(hex) = num.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).map_err(|e| format!("bad size '{s}': {e}"))?
    } else {
        num.parse().map_err(|e| format!("bad size '{s}': {e}"))?
    };
    n.checked_mul(mul)
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("bad size '{s}': zero or too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("1m").unwrap(), 1 << 20);
        assert_eq!(parse_size("0x10000").unwrap(), 65536);
        assert!(parse_size("0").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999G").is_err());
    }
}
