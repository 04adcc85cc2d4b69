//! The `nvpeer emu regpath` command line: its arguments and what each subcommand runs.

use super::check::check;
use super::document::Via;
use super::document::{PathDoc, Report};
use super::json_file::{read_json, write_json};
use super::measure::measure;
use super::report::report;
use super::tables::tables;
use crate::cli::parse_size;
use crate::error::Result;
use std::path::PathBuf;

/// Arguments of `nvpeer emu regpath`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Subcommand, Debug)]
enum Cmd {
    /// Measure one path (the loaded client through the core, or the raw floor) and write JSON.
    Measure(Box<MeasureArgs>),
    /// Merge per-path JSON files, add ratios to the floor, write one document, print tables.
    Report {
        /// Per-path files written by `measure`.
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        /// Merged output file.
        #[arg(long)]
        out: PathBuf,
        /// Free text describing the machine, kernel and run (stored in the document).
        #[arg(long, default_value = "")]
        machine: String,
    },
    /// Check a merged document: numbers present, pins per registration (exit 1 otherwise).
    Check {
        /// Merged document.
        file: PathBuf,
        /// PATH=N: every cell of PATH must show N provider pins per registration.
        #[arg(long)]
        pins: Vec<String>,
    },
    /// Print the tables of a merged document written by `report`.
    Table {
        /// Merged document.
        file: PathBuf,
    },
}
#[derive(clap::Args, Debug, Clone)]
pub(super) struct MeasureArgs {
    /// Label of this path (floor, floor-persistent, classic, nvpeer-inval, nvpeer-persistent).
    #[arg(long)]
    pub(super) path: String,
    /// `floor` (rawfloor.ko) or `core` (peer_mem_emu REGISTER through the loaded client).
    #[arg(long, value_enum)]
    pub(super) via: Via,
    /// Floor: use the persistent pin API. Core paths: the API of the adjacent floor.
    #[arg(long)]
    pub(super) persistent: bool,
    /// Core paths: measure a floor cell (rawfloor, same size and threads) with each cell,
    /// interleaved with it in --rounds rounds, and compute that cell's ratios against it, so that
    /// drift of the shared host's load or of the kernel's caches does not enter the ratios.
    #[arg(long)]
    pub(super) adjacent_floor: bool,
    /// With --adjacent-floor: rounds of floor, then client cycles, per cell.
    #[arg(long, default_value_t = 5)]
    pub(super) rounds: u32,
    /// The path whose numbers are this one's 1.0x (stored for `report`).
    #[arg(long, default_value = "floor")]
    pub(super) floor_ref: String,
    /// The classic C client path this one is compared with (stored for `report`).
    #[arg(long, default_value = "classic")]
    pub(super) classic_ref: String,
    /// Registration sizes (K/M/G suffixes), comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "64K,1M")]
    pub(super) sizes: Vec<u64>,
    /// Thread counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub(super) threads: Vec<u32>,
    /// Registration cycles per cell at 64 KiB (fewer for larger sizes, at least --min-ops).
    #[arg(long, default_value_t = 40)]
    pub(super) ops: u32,
    /// Fewest cycles per cell.
    #[arg(long, default_value_t = 4)]
    pub(super) min_ops: u32,
    /// Stop a cell after this many seconds (once every thread made one cycle).
    #[arg(long, default_value_t = 20)]
    pub(super) cell_budget_s: u64,
    /// Largest size x threads (bytes of emulated GPU memory DMA-mapped at once); cells above it
    /// are skipped and reported as such.
    #[arg(long, value_parser = parse_size, default_value = "2G")]
    pub(super) max_mapped: u64,
    /// Frees under a live MR per size (invalidation latency); 0 skips.
    #[arg(long, default_value_t = 5)]
    pub(super) inval_iters: u32,
    /// Registration cost against live MRs: the 64 KiB, 1-thread cell again with each of these
    /// numbers of other 64 KiB MRs live (e.g. 0,1000,10000,100000); none skips.
    #[arg(long, value_delimiter = ',')]
    pub(super) live_mrs: Vec<u32>,
    /// Invalidation at scale: one free of an allocation carrying each of these numbers of live
    /// 64 KiB MRs (e.g. 1,10,100,1000,10000); none skips.
    #[arg(long, value_delimiter = ',')]
    pub(super) inval_mrs: Vec<u32>,
    /// Invalidation at scale: this many frees at once from as many threads (0 skips), each of an
    /// allocation carrying `--inval-concurrent-mrs` MRs.
    #[arg(long, default_value_t = 0)]
    pub(super) inval_concurrent: u32,
    /// Invalidation at scale: MRs on each allocation of `--inval-concurrent`.
    #[arg(long, default_value_t = 16)]
    pub(super) inval_concurrent_mrs: u32,
    /// Live 64 KiB MRs for the slab-memory measurement; 0 skips.
    #[arg(long, default_value_t = 500)]
    pub(super) mem_mrs: u32,
    /// Measure only the slab memory per live MR (no cells, no invalidation, no scale test): the
    /// first pass of `make bench`, run for every path before any large cell can disturb the
    /// kernel's caches.
    #[arg(long)]
    pub(super) mem_only: bool,
    /// Take the memory figures from this earlier `--mem-only` file of the same path instead of
    /// measuring them again.
    #[arg(long, conflicts_with = "mem_only")]
    pub(super) memory_from: Option<PathBuf>,
    /// Live-MR scale test: MRs to hold at once (0 skips).
    #[arg(long, default_value_t = 0)]
    pub(super) scale: u32,
    /// Scale test stops registering after this many seconds (0 = no limit).
    #[arg(long, default_value_t = 0)]
    pub(super) scale_budget_s: u64,
    /// Before the memory and scale measurements, wait up to this many seconds for the IOMMU's
    /// IOVA cache to stop draining (left over from large cells); 0: do not wait.
    #[arg(long, default_value_t = 0)]
    pub(super) settle_s: u64,
    /// Scale test stops early when MemAvailable drops below this (MiB).
    #[arg(long, default_value_t = 384)]
    pub(super) scale_min_avail_mb: u64,
    /// The provider's RM cost model: a preset of `nvpeer emu calibrate` (pinmaplat-v100,
    /// uniform-250us, none).
    #[arg(long, default_value = "pinmaplat-v100")]
    pub(super) cost_model: String,
    /// Multiply the model's costs by this factor: the guest's measured software slowdown against
    /// the machine the model was taken from (docs/performance.md).
    #[arg(long, default_value_t = 1.0)]
    pub(super) dilate: f64,
    /// Where the dilation factor came from (stored in the document).
    #[arg(long, default_value = "")]
    pub(super) dilate_source: String,
    /// Output file.
    #[arg(long)]
    pub(super) out: PathBuf,
}

/// Runs `nvpeer emu regpath`.
pub fn run(args: Args) -> Result<u8> {
    match args.cmd {
        Cmd::Measure(m) => {
            let doc = measure(&m)?;
            write_json(&m.out, &doc)?;
            eprintln!("regpath: {} written to {}", m.path, m.out.display());
            Ok(0)
        }
        Cmd::Report {
            inputs,
            out,
            machine,
        } => {
            // A file that is not a `measure` output fails here, naming the file and the field.
            let paths = inputs
                .iter()
                .map(|f| read_json::<PathDoc>(f))
                .collect::<Result<Vec<_>>>()?;
            let doc = report(paths, &machine);
            write_json(&out, &doc)?;
            print!("{}", tables(&doc));
            Ok(0)
        }
        Cmd::Table { file } => {
            print!("{}", tables(&read_json::<Report>(&file)?));
            Ok(0)
        }
        Cmd::Check { file, pins } => {
            let problems = check(&read_json::<Report>(&file)?, &pins);
            for p in &problems {
                println!("{p}");
            }
            if problems.is_empty() {
                println!(
                    "numbers present; pins per registration as expected ({})",
                    pins.join(", ")
                );
                Ok(0)
            } else {
                Ok(1)
            }
        }
    }
}
