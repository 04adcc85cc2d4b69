//! `nvpeer emu scenario ...`: the concurrency scenarios against the loaded client.

use super::json;
use crate::error::{EmuError, Result};
use crate::scenario;
use clap::Parser;

#[derive(Parser, Debug)]
pub(super) struct ScenarioArgs {
    /// Scenario name, or `all`.
    #[arg(required_unless_present = "list")]
    pub(super) name: Option<String>,
    /// List scenarios.
    #[arg(long)]
    pub(super) list: bool,
    /// Iterations of repeated scenarios.
    #[arg(long, default_value_t = 20)]
    pub(super) iterations: u32,
    /// Threads of parallel scenarios.
    #[arg(long, default_value_t = 4)]
    pub(super) threads: u32,
    /// GPU pages (64 KiB) per allocation.
    #[arg(long, default_value_t = 4)]
    pub(super) pages: u64,
    /// Delay armed at delay points, ms.
    #[arg(long, default_value_t = 1500)]
    pub(super) delay_ms: u32,
    /// Client module name (unload scenario).
    #[arg(long, default_value = "classic_peer")]
    pub(super) module: String,
    /// Pass only if this violation is recorded (repeat or `a|b` for alternatives).
    #[arg(long)]
    pub(super) expect: Vec<String>,
    /// Core hang detector, ms.
    #[arg(long, default_value_t = 8000)]
    pub(super) hang_timeout_ms: u32,
    /// race-stress, invalidating client: most NVIDIA API window hits (provider dma_map_uaf) per
    /// 100k registrations before the run fails (docs/design.md). A persistent client must have 0.
    #[arg(long, default_value_t = scenario::WINDOW_BOUND_PER_100K)]
    pub(super) window_bound: f64,
    /// fuzz: the seed to replay (default: from the clock; printed either way).
    #[arg(long)]
    pub(super) seed: Option<u64>,
    /// fuzz: run sequences for this many seconds (0: --iterations sequences).
    #[arg(long, default_value_t = 0)]
    pub(super) seconds: u32,
    /// JSON output.
    #[arg(long)]
    pub(super) json: bool,
}

pub(super) fn scenario_cmd(a: ScenarioArgs) -> Result<u8> {
    if a.list {
        for s in scenario::SCENARIOS {
            println!("{:<32} {}", s.name, s.about);
        }
        // (the fuzzer is not in `all` nor in the list the suites iterate over)
        eprintln!("also: {} ({})", scenario::FUZZ.name, scenario::FUZZ.about);
        return Ok(0);
    }
    let name = a.name.unwrap_or_default();
    let list: Vec<&scenario::Scenario> = if name == "all" {
        scenario::SCENARIOS.iter().collect()
    } else {
        vec![scenario::find(&name)
            .ok_or_else(|| EmuError::Invalid(format!("unknown scenario '{name}' (see --list)")))?]
    };
    let opts = scenario::Opts {
        iterations: a.iterations,
        threads: a.threads,
        pages: a.pages.max(1),
        delay_ms: a.delay_ms,
        module: a.module,
        expect: a
            .expect
            .iter()
            .flat_map(|x| x.split('|').map(str::to_string))
            .collect(),
        hang_timeout_ms: a.hang_timeout_ms,
        window_bound: a.window_bound,
        seed: a.seed,
        seconds: a.seconds,
    };
    let mut failed = 0;
    for s in list {
        let o = scenario::run(s, opts.clone())?;
        if a.json {
            json(&o)?;
        } else {
            print!("{}", o.log);
            println!("{} {}", if o.pass { "PASS" } else { "FAIL" }, o.message);
        }
        failed += u32::from(!o.pass);
    }
    Ok(u8::from(failed != 0))
}
