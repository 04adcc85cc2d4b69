//! `nvpeer doctor`: node readiness checks for GPUDirect RDMA (placeholder until issue 6 lands).

/// Command-line arguments of `nvpeer doctor`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs the doctor; returns the process exit status (0 ready, 1 not ready, 2 could not check).
pub fn run(_args: Args) -> u8 {
    eprintln!("nvpeer doctor: not implemented yet");
    2
}
