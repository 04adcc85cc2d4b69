//! Validation harness and benchmarks (placeholder until issue 5 lands).

/// Arguments of `nvpeer validate`.
#[derive(clap::Args, Debug)]
pub struct ValidateArgs {}

/// Arguments of `nvpeer bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {}

/// Runs `nvpeer validate`; returns the exit status.
pub fn validate(_args: ValidateArgs) -> u8 {
    eprintln!("nvpeer validate: not implemented yet");
    2
}

/// Runs `nvpeer bench`; returns the exit status.
pub fn bench(_args: BenchArgs) -> u8 {
    eprintln!("nvpeer bench: not implemented yet");
    2
}
