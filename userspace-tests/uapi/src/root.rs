//! Paths of the inspected system under a root directory, and the one way this crate reads a file.

use crate::Error;
use std::path::{Path, PathBuf};

/// The absolute path `abs` of the inspected system under `root` (`/` on the running system).
pub fn at(root: &Path, abs: &str) -> PathBuf {
    root.join(abs.trim_start_matches('/'))
}

/// The whole text of a file, invalid UTF-8 replaced (kernel files are ASCII; a crafted one must
/// not make the reader fail for it).
pub(crate) fn read_text(path: &Path) -> Result<String, Error> {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })
}

/// The decimal number a one-value file holds (surrounding whitespace ignored).
pub(crate) fn read_u64(path: &Path) -> Result<u64, Error> {
    let text = read_text(path)?;
    let text = text.trim();
    text.parse().map_err(|_| Error::NotANumber {
        path: path.to_path_buf(),
        text: text.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;

    #[test]
    fn paths_resolve_under_the_root() {
        assert_eq!(
            at(Path::new("/tmp/x"), "/sys/module/nvpeer"),
            Path::new("/tmp/x/sys/module/nvpeer")
        );
        assert_eq!(at(Path::new("/"), "/sys"), Path::new("/sys"));
    }

    #[test]
    fn numbers_and_their_errors() {
        let r = FakeRoot::new();
        r.file("/n", " 42\n");
        r.file("/bad", "4x2\n");
        r.file("/latin1", b"\xff\n".as_slice());
        assert_eq!(read_u64(&r.at("/n")).ok(), Some(42));
        let e = read_u64(&r.at("/bad")).unwrap_err();
        assert!(e.to_string().ends_with("bad: not a number: \"4x2\""), "{e}");
        assert!(matches!(read_u64(&r.at("/none")), Err(Error::Read { .. })));
        assert_eq!(
            read_text(&r.at("/latin1")).ok().as_deref(),
            Some("\u{fffd}\n")
        );
    }
}
