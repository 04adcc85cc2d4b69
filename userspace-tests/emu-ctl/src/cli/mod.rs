//! `nvpeer emu ...`: drive the bench's emulators from a shell.
//!
//! Exit status: 0 ok, 1 a check failed (violation recorded, scenario failed, leak found),
//! 2 usage or device error.

mod gpu;
mod peer_mem;
mod scenario;
mod size;
mod steps;

pub use size::parse_size;

use self::peer_mem::{core_cmd, CoreCmd};
use crate::cost_model;
use crate::error::{EmuError, Result};
use clap::Subcommand;
use gpu::{gpu_cmd, GpuCmd};
use scenario::{scenario_cmd, ScenarioArgs};
use steps::steps_cmd;

/// Arguments of `nvpeer emu`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// The NVIDIA P2P provider emulator (/dev/nvp2p_emu).
    #[command(subcommand)]
    Gpu(GpuCmd),
    /// The peer-memory core emulator (/dev/peer_mem_emu).
    #[command(subcommand)]
    Core(CoreCmd),
    /// Run a concurrency scenario against the loaded client (`--list` to see them).
    Scenario(ScenarioArgs),
    /// Run steps in one process: alloc:SIZE reg[:OFF:LEN] free dereg activate sleep:MS show.
    Steps {
        /// Steps, in order (memory and MRs die with this process).
        #[arg(required = true)]
        steps: Vec<String>,
    },
    /// Print /sys/kernel/mm/memory_peers/CLIENT/* counters.
    Sysfs {
        /// Client name (nv_mem, nv_mem_nc).
        #[arg(default_value = "nv_mem")]
        client: String,
    },
    /// Registration-path benchmark: measure one path, or merge paths into a report.
    Regpath(crate::regpath::Args),
    /// Time the calibration workload (64 KiB anonymous mmap+populate+munmap) and print JSON;
    /// run on the host and in the bench guest, the ratio is the guest's software slowdown.
    /// Also lists the RM cost-model presets.
    Calibrate {
        /// Rounds (the median round is reported).
        #[arg(long, default_value_t = 7)]
        rounds: u32,
        /// Iterations per round.
        #[arg(long, default_value_t = 2000)]
        iters: u32,
    },
}

/// Runs `nvpeer emu`; returns the exit status.
pub fn run(args: Args) -> u8 {
    match dispatch(args.cmd) {
        Ok(code) => code,
        Err(e @ EmuError::Check(_)) => {
            eprintln!("nvpeer emu: {e}");
            1
        }
        Err(e) => {
            eprintln!("nvpeer emu: {e}");
            2
        }
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!(
        "{}",
        serde_json::to_string_pretty(v).map_err(|e| EmuError::Invalid(e.to_string()))?
    );
    Ok(())
}

fn dispatch(cmd: Cmd) -> Result<u8> {
    match cmd {
        Cmd::Gpu(c) => gpu_cmd(c),
        Cmd::Core(c) => core_cmd(c),
        Cmd::Scenario(a) => scenario_cmd(a),
        Cmd::Steps { steps } => steps_cmd(&steps),
        Cmd::Regpath(a) => crate::regpath::run(a),
        Cmd::Calibrate { rounds, iters } => {
            let (median, per_round) = cost_model::calibrate(rounds, iters)?;
            let presets: serde_json::Map<String, serde_json::Value> = cost_model::PRESETS
                .iter()
                .map(|(n, why)| (n.to_string(), serde_json::json!(why)))
                .collect();
            json(&serde_json::json!({
                "workload": "mmap 64 KiB anonymous MAP_POPULATE + munmap",
                "rounds": rounds, "iters": iters,
                "median_ns_per_iter": median, "ns_per_iter_per_round": per_round,
                "cost_model_presets": presets,
            }))?;
            Ok(0)
        }
        Cmd::Sysfs { client } => {
            for (k, v) in crate::sysfs::read(&client)? {
                println!("{k} {v}");
            }
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Top {
        #[command(flatten)]
        a: Args,
    }

    #[test]
    fn command_lines_parse() {
        let t = Top::try_parse_from(["emu", "scenario", "basic", "--expect", "sg_entry|sg_nmap"])
            .unwrap();
        assert!(matches!(t.a.cmd, Cmd::Scenario(ref s) if s.expect == ["sg_entry|sg_nmap"]));
        let t = Top::try_parse_from(["emu", "gpu", "faults", "--op", "get_pages", "--err", "-12"])
            .unwrap();
        assert!(matches!(t.a.cmd, Cmd::Gpu(GpuCmd::Faults { err: -12, .. })));
        let t = Top::try_parse_from(["emu", "core", "model", "5.1", "--hang-timeout-ms", "3000"])
            .unwrap();
        assert!(matches!(
            t.a.cmd,
            Cmd::Core(CoreCmd::Model {
                hang_timeout_ms: Some(3000),
                ..
            })
        ));
        assert!(Top::try_parse_from(["emu", "scenario"]).is_err());
        assert!(Top::try_parse_from(["emu", "scenario", "--list"]).is_ok());
    }
}
