//! Byte sizes on the command line, parsed by the `parse-size` crate with binary units: `4096`,
//! `64K` / `64KB` / `64KiB` (65,536), `1.5M`, `2G`; case-insensitive, a space before the unit is
//! allowed. Like perftest, a `K` is 1024 bytes.

/// The largest message one RDMA work request can carry: the InfiniBand maximum message size
/// (2^31 bytes); a port may advertise less (`ibv_devinfo -v`, `max_msg_sz`).
pub const MAX_MESSAGE: u64 = 1 << 31;

fn config() -> parse_size::Config {
    parse_size::Config::new().with_binary()
}

/// Parses a byte count of at least 1 byte.
pub fn parse(s: &str) -> Result<u64, String> {
    let v = parse_or_zero(s)?;
    if v == 0 {
        return Err(format!("'{s}': size must be at least 1 byte"));
    }
    Ok(v)
}

/// Parses a byte count; zero allowed (offsets).
pub fn parse_or_zero(s: &str) -> Result<u64, String> {
    config()
        .parse_size(s.trim())
        .map_err(|e| format!("'{s}': {e} (expected a number of bytes, e.g. 4096, 64K or 1MiB)"))
}

/// Parses the size of one message: 1 byte to [`MAX_MESSAGE`].
pub fn parse_message(s: &str) -> Result<u64, String> {
    let v = parse(s)?;
    check_message(v)?;
    Ok(v)
}

/// Checks that `v` bytes fit one work request.
pub fn check_message(v: u64) -> Result<(), String> {
    if v > MAX_MESSAGE {
        return Err(format!(
            "{v} bytes do not fit one RDMA message (at most {MAX_MESSAGE} bytes, the InfiniBand \
             maximum message size)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn units_are_binary() {
        assert_eq!(parse("1"), Ok(1));
        assert_eq!(parse("4096"), Ok(4096));
        assert_eq!(parse("64K"), Ok(65536));
        assert_eq!(parse("64kib"), Ok(65536));
        assert_eq!(parse("64KB"), Ok(65536));
        assert_eq!(parse("1MiB"), Ok(1 << 20));
        assert_eq!(parse("1m"), Ok(1 << 20));
        assert_eq!(parse("2G"), Ok(2 << 30));
        assert_eq!(parse("4G"), Ok(4 << 30));
        assert_eq!(parse(" 7B "), Ok(7));
        assert_eq!(parse_or_zero("0"), Ok(0));
    }

    #[test]
    fn rejected_with_a_message() {
        for bad in [
            "",
            "0",
            "K",
            "12X",
            "-1",
            "99999999999999999999",
            "17179869184G",
            "0x10",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(&format!("'{bad}'")), "{bad}: {e}");
        }
        assert!(parse("0").unwrap_err().contains("at least 1 byte"));
        assert!(parse_message("4G")
            .unwrap_err()
            .contains("one RDMA message"));
        assert_eq!(parse_message("2G"), Ok(MAX_MESSAGE));
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,24}") {
            let _ = parse(&s);
            let _ = parse_message(&s);
        }

        #[test]
        fn digits_and_units_round_trip(n in 1u64..(1 << 33), u in 0usize..4) {
            let (suffix, mul) = [("", 1u64), ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)][u];
            let s = format!("{n}{suffix}");
            match n.checked_mul(mul) {
                Some(v) => prop_assert_eq!(parse(&s), Ok(v)),
                None => prop_assert!(parse(&s).is_err()),
            }
        }

        #[test]
        fn message_limit_holds(v in 1u64..u64::MAX) {
            let r = parse_message(&v.to_string());
            prop_assert_eq!(r.is_ok(), v <= MAX_MESSAGE);
        }
    }
}
