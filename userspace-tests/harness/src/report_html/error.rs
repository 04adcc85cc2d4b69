//! Why `nvpeer validate --report DIR` could not write its report (exit status 2, in one place:
//! the `nvpeer` command maps it).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("--report-from and --report-bench need --report DIR")]
    NoDirectory,
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not an `nvpeer validate --json` document: {source}", path.display())]
    NotValidate {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{} is not an `nvpeer bench --json` document: {source}", path.display())]
    NotBench {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("writing {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("drawing the plot '{title}': {msg}")]
    Plot { title: String, msg: String },
}
