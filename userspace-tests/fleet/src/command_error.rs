//! Why `nvpeer validate` or `nvpeer bench` could not run, with or without `--fleet`: the command
//! returns it and `main` prints it once, after the command's name, and exits with
//! `Verdict::CouldNotRun`'s status.

use crate::coordinator::FleetError;
use crate::launcher::LauncherError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The two-node or loopback `validate` could not run.
    #[error(transparent)]
    Validate(#[from] nvpeer_harness::ValidateError),
    /// The two-node or loopback `bench` could not run.
    #[error(transparent)]
    Bench(#[from] nvpeer_harness::SetupError),
    /// A command line `--fleet` cannot run.
    #[error("--fleet: {0}")]
    Args(String),
    /// No launcher, or a launcher's environment that places no fleet.
    #[error("--fleet: {0}")]
    Placement(#[from] LauncherError),
    /// Rank 0 could not listen for the ranks.
    #[error("--fleet: rank 0: {0}")]
    Listen(#[from] nvpeer_harness::server::ServeError),
    /// This rank's part ended early.
    #[error("--fleet: rank {rank}: {source}")]
    Rank { rank: u32, source: FleetError },
    /// Rank 0's coordinator thread ended without a report.
    #[error("--fleet: rank 0's coordinator panicked")]
    CoordinatorPanicked,
    /// Rank 0 could not write the report.
    #[error("--fleet: writing the report into {}: {source}", dir.display())]
    Report {
        dir: PathBuf,
        source: std::io::Error,
    },
}
