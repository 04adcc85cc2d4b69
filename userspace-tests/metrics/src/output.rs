//! Writing a file that another daemon reads at any moment (node_exporter's textfile collector,
//! NFD's local source): a temporary file in the same directory, flushed to disk, then renamed over
//! the old one, so a reader sees the old file or the new one, never half of one.

use crate::Error;
use std::path::{Path, PathBuf};

/// The mode of the files written: world-readable, since node_exporter reads them as its own user
/// (`prometheus` on Debian); they hold no secret. (nvpeer-files' temporary names are hidden, which
/// NFD skips, and do not end in `.prom`, which node_exporter reads.)
pub const MODE: u32 = nvpeer_files::FILE_MODE;

/// Writes `text` to `dir/name` atomically and returns the path; `Ok(None)` when `dir` does not
/// exist and `skip_missing` is set (a node without node_exporter or NFD).
pub fn write_into(
    dir: &Path,
    name: &str,
    text: &str,
    what: &'static str,
    skip_missing: bool,
) -> Result<Option<PathBuf>, Error> {
    if !dir.is_dir() {
        return if skip_missing {
            Ok(None)
        } else {
            Err(Error::NoDir {
                dir: dir.to_path_buf(),
                what,
            })
        };
    }
    let path = dir.join(name);
    // (the temporary file, the rename and the refusal of a link: nvpeer-files, shared with the
    // reports the other tools write)
    match nvpeer_files::write_file(&path, text.as_bytes()) {
        Ok(()) => Ok(Some(path)),
        Err(e) => Err(Error::Write {
            path,
            source: e.into_io(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = write_into(d.path(), "x.prom", "a 1\n", "test", false)
            .ok()
            .flatten();
        assert_eq!(p.as_deref(), Some(d.path().join("x.prom").as_path()));
        write_into(d.path(), "x.prom", "a 2\n", "test", false).expect("second write");
        assert_eq!(
            fs::read_to_string(d.path().join("x.prom")).ok().as_deref(),
            Some("a 2\n")
        );
        let names: Vec<String> = fs::read_dir(d.path())
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["x.prom"]);
        let mode = fs::metadata(d.path().join("x.prom"))
            .map(|m| m.permissions().mode() & 0o777)
            .ok();
        assert_eq!(mode, Some(MODE));
    }

    #[test]
    fn a_missing_directory_fails_or_is_skipped() {
        let d = tempfile::tempdir().expect("tempdir");
        let gone = d.path().join("gone");
        let e = write_into(&gone, "x.prom", "", "node_exporter", false);
        assert!(matches!(e, Err(Error::NoDir { .. })), "{e:?}");
        let msg = e.map_err(|e| e.to_string()).unwrap_err();
        assert!(
            msg.contains("gone: no such directory (node_exporter"),
            "{msg}"
        );
        assert!(matches!(
            write_into(&gone, "x.prom", "", "node_exporter", true),
            Ok(None)
        ));
    }

    #[test]
    fn a_failed_write_names_the_file_and_cleans_up() {
        let d = tempfile::tempdir().expect("tempdir");
        // A directory where the file should go: the rename fails.
        fs::create_dir(d.path().join("x.prom")).expect("dir");
        fs::write(d.path().join("x.prom/keep"), "").expect("file");
        let e = write_into(d.path(), "x.prom", "a 1\n", "test", false);
        assert!(matches!(e, Err(Error::Write { .. })), "{e:?}");
        let left: Vec<String> = fs::read_dir(d.path())
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["x.prom"], "a temporary file was left behind");
    }

    #[test]
    fn temporary_names_are_hidden_and_not_prom() {
        assert!(
            nvpeer_files::TEMP_PREFIX.starts_with('.')
                && !nvpeer_files::TEMP_SUFFIX.ends_with(".prom")
        );
    }
}
