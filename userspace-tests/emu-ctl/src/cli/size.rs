//! Sizes on the command line: the same parser as every other nvpeer tool ([`nvpeer_figures::size`]:
//! binary units, `4096`, `64K`, `1M`, `2G`).

/// Parses a size of at least one byte.
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    nvpeer_figures::size::parse(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("1m").unwrap(), 1 << 20);
        assert!(parse_size("0").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999G").is_err());
    }
}
