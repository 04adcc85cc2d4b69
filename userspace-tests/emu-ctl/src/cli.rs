//! `nvpeer emu ...` subcommands (placeholder until issue 3 lands).

/// Arguments of `nvpeer emu`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `nvpeer emu`; returns the exit status.
pub fn run(_args: Args) -> u8 {
    eprintln!("nvpeer emu: not implemented yet");
    2
}
