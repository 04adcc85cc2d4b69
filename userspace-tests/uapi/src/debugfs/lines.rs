//! The `<key> <value>` lines of `stats` and `config`.

/// The `<key> <value>` pairs of `text`, value trimmed: `Ok` per pair, `Err` with the line for a
/// line that has a key but no value. Blank lines and `#` comments are skipped.
pub(super) fn pairs(text: &str) -> impl Iterator<Item = Result<(&str, &str), &str>> {
    text.lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| match l.split_once(' ') {
            Some((k, v)) if !k.is_empty() && !v.trim().is_empty() => Ok((k, v.trim())),
            _ => Err(l),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_blanks_comments_and_bad_lines() {
        let got: Vec<_> = pairs("a 1\n\n# note\nb  two words \nlonely\n c\n").collect();
        assert_eq!(
            got,
            vec![
                Ok(("a", "1")),
                Ok(("b", "two words")),
                Err("lonely"),
                Err(" c")
            ]
        );
    }
}
