//! Why `nvpeer bench` could not run (exit status 2): each one line, printed once by the caller.

use crate::mem::MemError;

/// A prerequisite of the run that failed.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The arguments contradict each other.
    #[error("{0}")]
    Args(String),
    /// `--max-size` is not a message size the transfer tests can send.
    #[error("--max-size: {0}")]
    MaxSize(String),
    /// The memory backend could not be opened.
    #[error(transparent)]
    Memory(#[from] MemError),
    /// The RDMA device could not be opened (with its probable cause).
    #[error("{error}\n  probable cause: {cause}")]
    Device { error: String, cause: String },
    /// The two-node server could not be reached.
    #[error("{0} (is `nvpeer bench --server` running there?)")]
    Connect(String),
    /// The two-node server refused the session.
    #[error("{0}")]
    Hello(String),
    /// `--server` could not start, or stopped serving.
    #[error(transparent)]
    Server(#[from] crate::peer::ServerError),
}
