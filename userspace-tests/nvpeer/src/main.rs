//! `nvpeer`: one command line for everything around the nvpeer kernel module.

use clap::{Parser, Subcommand};
use nvpeer_verdict::Verdict;
use std::process::ExitCode;

/// Exit statuses of `validate` and `bench`, shown under their `--help`.
const EXIT_STATUSES: &str = "\
Exit status:
  0  every case that ran passed
  1  a case or measurement failed (the node ran it and got a wrong or failed result)
  2  could not run: bad arguments, a missing prerequisite (memory backend, RDMA device,
     peer-memory client, the two-node server), or a report file that could not be written
With --fleet (rank 0's status; every rank exits with it): 1 when a node is not ready or lost,
or a link is an outlier or failed.";

/// Exit statuses of `metrics` and `labels`, shown under their `--help`.
const OUTPUT_STATUSES: &str = "\
Exit status:
  0  written (a node without nvpeer, NVML or a ready path is described, not an error)
  2  could not write: --root not a directory, an output directory missing (without
     --skip-missing-dirs), or a write that failed";

#[derive(Parser)]
#[command(
    name = "nvpeer",
    version,
    about = "GPUDirect RDMA peer-memory tools for nvpeer"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check whether this node is ready for GPUDirect RDMA, and say why not.
    Doctor(nvpeer_doctor::Args),
    /// Run the conformance suite: registrations, transfers and invalidation on GPU memory
    /// (`--fleet`: every node of a cluster against the others, under srun, mpirun or Kubernetes).
    #[command(after_help = EXIT_STATUSES)]
    Validate(nvpeer_fleet::ValidateCmd),
    /// Measure registration cost, bandwidth and latency (perftest-compatible columns; `--fleet`:
    /// every link of a cluster).
    #[command(after_help = EXIT_STATUSES)]
    Bench(nvpeer_fleet::BenchCmd),
    /// Prometheus metrics for node_exporter's textfile collector: nvpeer's counters, BAR1 per
    /// GPU, who serves nv_mem, one gauge per doctor check.
    #[command(after_help = OUTPUT_STATUSES)]
    Metrics(nvpeer_metrics::MetricsArgs),
    /// Node Feature Discovery labels: the doctor's verdict per GPUDirect RDMA path and nvpeer's
    /// version.
    #[command(after_help = OUTPUT_STATUSES)]
    Labels(nvpeer_metrics::LabelsArgs),
    /// Drive the bench's emulators (provider and peer-memory core).
    #[cfg(feature = "bench")]
    Emu(nvpeer_emu::cli::Args),
}

/// Restores the default action of SIGPIPE, which the Rust runtime ignores: a reader that goes
/// away (`nvpeer validate | head -1`) then ends this process quietly, as it ends `cat` or
/// `ib_write_bw`, instead of a failed write turning into a panic (exit 101). Sockets are not
/// affected: the standard library sends with `MSG_NOSIGNAL`, so a vanished two-node peer is still
/// an error the server logs and survives.
fn default_sigpipe() {
    // SAFETY: called first thing in `main`, before any thread exists; SIG_DFL is a valid action
    // and no Rust code relies on SIGPIPE being ignored for pipes.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// The verdict of a command, or "could not run" with its error printed after the command's name:
/// the one place a command's conclusion becomes the process's exit status (nvpeer-verdict).
fn verdict<E: std::fmt::Display>(cmd: &str, r: Result<Verdict, E>) -> Verdict {
    r.unwrap_or_else(|e| {
        eprintln!("nvpeer {cmd}: {e}");
        Verdict::CouldNotRun
    })
}

fn main() -> ExitCode {
    default_sigpipe();
    let cli = Cli::parse();
    let written = |()| Verdict::Passed;
    match cli.command {
        Command::Doctor(a) => verdict("doctor", nvpeer_doctor::run(a)),
        Command::Validate(a) => verdict("validate", nvpeer_fleet::validate(a)),
        Command::Bench(a) => verdict("bench", nvpeer_fleet::bench(a)),
        Command::Metrics(a) => verdict("metrics", nvpeer_metrics::metrics(a).map(written)),
        Command::Labels(a) => verdict("labels", nvpeer_metrics::labels(a).map(written)),
        // (the bench's emulator client, not shipped: its own 0/1/2)
        #[cfg(feature = "bench")]
        Command::Emu(a) => return ExitCode::from(nvpeer_emu::cli::run(a)),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// clap's own consistency checks of every flag (names that conflicts_with and requires refer
    /// to, duplicate flags): in a test, not at a user's first run.
    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn npd_refuses_the_flags_that_would_change_its_one_line() {
        for other in ["--json", "-v", "--nccl-log=x"] {
            assert!(Cli::try_parse_from(["nvpeer", "doctor", "--npd", other]).is_err());
        }
        assert!(Cli::try_parse_from(["nvpeer", "doctor", "--npd", "--require", "nvpeer"]).is_ok());
    }
}
