//! What can go wrong reading the module's interfaces.

use std::path::PathBuf;

/// A reader's failure: the file is not there or not readable, or what it holds is not what the
/// interface documents.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read: missing (module not loaded, debugfs not mounted, a core without
    /// `memory_peers`) or not readable (debugfs is root only).
    #[error("{}: {source}", path.display())]
    Read {
        /// The file, under the root it was read from.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// A file that holds one decimal number holds something else.
    #[error("{}: not a number: {text:?}", path.display())]
    NotANumber {
        /// The file, under the root it was read from.
        path: PathBuf,
        /// What it held, trimmed.
        text: String,
    },
    /// A line of debugfs `mrs` is not a registration record.
    #[error("mrs line {line}: {problem}")]
    Mrs {
        /// Line number, from 1.
        line: usize,
        /// What is wrong with it.
        problem: crate::debugfs::MrLineError,
    },
    /// debugfs `mrs` says the module could not allocate the snapshot it prints.
    #[error("mrs: the module ran out of memory taking its snapshot")]
    MrsOutOfMemory,
}
