//! A fake filesystem root for the tests: a temporary directory that files are written into by
//! their absolute path on the inspected system. Other crates' tests get it with the feature
//! `fake-root`.

use std::path::{Path, PathBuf};

/// A temporary root, removed on drop.
pub struct FakeRoot(tempfile::TempDir);

impl Default for FakeRoot {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeRoot {
    /// An empty root.
    pub fn new() -> Self {
        Self(tempfile::tempdir().expect("temporary directory"))
    }

    /// The root's path (what the readers take).
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// `abs` under the root.
    pub fn at(&self, abs: &str) -> PathBuf {
        crate::at(self.path(), abs)
    }

    /// Writes `text` to `abs`, creating its directories.
    pub fn file(&self, abs: &str, text: impl AsRef<[u8]>) -> &Self {
        let p = self.at(abs);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).expect("fixture directory");
        }
        std::fs::write(p, text).expect("fixture file");
        self
    }

    /// Creates the directory `abs`.
    pub fn dir(&self, abs: &str) -> &Self {
        std::fs::create_dir_all(self.at(abs)).expect("fixture directory");
        self
    }
}
