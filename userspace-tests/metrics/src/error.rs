//! What can stop `nvpeer metrics` and `nvpeer labels`.

use std::path::PathBuf;

/// A failure to produce or write the output; `main` maps every one to the verdict "could not run"
/// (exit status 2, nvpeer-verdict).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--root` is not a directory.
    #[error("--root {}: not a directory", .0.display())]
    Root(PathBuf),
    /// An output directory does not exist (and `--skip-missing-dirs` was not given).
    #[error("{}: no such directory ({what} is not set up here; --skip-missing-dirs skips it)", dir.display())]
    NoDir {
        /// The directory.
        dir: PathBuf,
        /// Who reads it (node_exporter's textfile collector, NFD's local source).
        what: &'static str,
    },
    /// Writing a file (or standard output) failed.
    #[error("{}: {source}", path.display())]
    Write {
        /// The file written, or its temporary sibling when the rename failed.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The Prometheus encoder failed (it writes into a String: not expected).
    #[error("cannot encode the metrics: {0}")]
    Encode(#[from] std::fmt::Error),
}
