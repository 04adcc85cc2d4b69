//! `mrs`: every live registration object, one [`Mr`] per line, ordered by id.

use super::mr::Mr;
use crate::root::read_text;
use crate::Error;
use std::path::Path;

/// What the module prints instead of the records when it cannot allocate its snapshot.
const OUT_OF_MEMORY: &str = "# out of memory";

/// Parses the text of `mrs`; fails on the first line that is not a record.
pub fn parse_mrs(text: &str) -> Result<Vec<Mr>, Error> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| match l.trim() {
            OUT_OF_MEMORY => Err(Error::MrsOutOfMemory),
            l => Mr::parse(l).map_err(|problem| Error::Mrs {
                line: i + 1,
                problem,
            }),
        })
        .collect()
}

/// Reads `mrs` under `root`.
pub fn read_mrs(root: &Path) -> Result<Vec<Mr>, Error> {
    parse_mrs(&read_text(&crate::at(root, super::MRS))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;

    const TWO: &str = "id=1 kind=persistent state=mapped va=0x10000 size=65536 start=0x10000 len=65536 pages=1 tgid=5 core=live core_context=- pt_version=0x00020000 pt_flags=0x0 sg_entries=1 pinned_bytes=65536\n\
        id=2 kind=persistent state=held va=0x20000 size=100 start=0x20000 len=65536 pages=1 tgid=5 core=live core_context=- pt_version=0x00020000 pt_flags=0x0 sg_entries=0 pinned_bytes=65536\n";

    #[test]
    fn records_in_order() {
        let ids: Vec<u64> = parse_mrs(TWO)
            .map(|v| v.iter().map(|m| m.id).collect())
            .unwrap_or_default();
        assert_eq!(ids, [1, 2]);
        assert_eq!(parse_mrs("").map(|v| v.len()).ok(), Some(0));
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse_mrs(&format!("{TWO}id=3 kind=persistent\n"));
        assert!(matches!(e, Err(Error::Mrs { line: 3, .. })), "{e:?}");
        assert!(matches!(
            parse_mrs("# out of memory\n"),
            Err(Error::MrsOutOfMemory)
        ));
    }

    #[test]
    fn read_from_a_tree() {
        let r = FakeRoot::new();
        assert!(matches!(read_mrs(r.path()), Err(Error::Read { .. })));
        r.file(super::super::MRS, TWO);
        assert_eq!(read_mrs(r.path()).map(|v| v.len()).ok(), Some(2));
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_or_fails(text in "\\PC{0,300}") {
            let _ = parse_mrs(&text);
        }
    }
}
