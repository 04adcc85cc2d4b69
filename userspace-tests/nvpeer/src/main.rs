//! `nvpeer`: one command line for everything around the nvpeer kernel module.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

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
    Doctor(doctor::Args),
    /// Run the conformance suite: registrations, transfers and invalidation on GPU memory.
    Validate(harness::ValidateArgs),
    /// Measure registration cost, bandwidth and latency (perftest-compatible columns).
    Bench(harness::BenchArgs),
    /// Drive the bench's emulators (provider and peer-memory core).
    Emu(emu_ctl::cli::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Doctor(a) => doctor::run(a),
        Command::Validate(a) => harness::validate(a),
        Command::Bench(a) => harness::bench(a),
        Command::Emu(a) => emu_ctl::cli::run(a),
    };
    ExitCode::from(code)
}
