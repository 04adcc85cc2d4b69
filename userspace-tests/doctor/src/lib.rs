//! `nvpeer doctor`: says whether this node is ready for GPUDirect RDMA through nvpeer, and why not.
//!
//! Every check of ecosystem.md §5 that can be read without root from sysfs, procfs, the kernel's
//! build tree, the CUDA driver (cudarc, dlopened) and libibverbs (sideway, dlopened). All file reads
//! go through [`root::SysRoot`], so `--root DIR` points the whole doctor at a fixture tree.
//! docs/doctor.md lists every check, its source and its fix.

pub mod checks;
pub mod kernel;
pub mod pci;
pub mod probes;
pub mod report;
pub mod root;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

/// Command-line arguments of `nvpeer doctor`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Read every file below DIR instead of `/` (fixture trees, chroots, a mounted node image).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Show details for passing checks too.
    #[arg(long, short)]
    pub verbose: bool,
    /// Skip the live CUDA and verbs probes (they only run when --root is `/`).
    #[arg(long)]
    pub no_probes: bool,
}

/// Builds the report for `args` without printing it.
pub fn diagnose(args: &Args, probes: probes::Probes) -> report::Report {
    let root = root::SysRoot::new(&args.root);
    let ctx = checks::Ctx::load(&root, probes);
    report::Report::new(args.root.display().to_string(), checks::run_all(&ctx))
}

/// Runs the doctor; returns the process exit status (0 ready, 1 not ready, 2 could not check).
pub fn run(args: Args) -> u8 {
    if !args.root.is_dir() {
        eprintln!("nvpeer doctor: --root {}: not a directory", args.root.display());
        return 2;
    }
    let live = root::SysRoot::new(&args.root).is_live() && !args.no_probes;
    let probes = if live { probes::Probes::run() } else { probes::Probes::none() };
    let report = diagnose(&args, probes);
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("nvpeer doctor: cannot encode the report: {e}");
                return 2;
            }
        }
    } else {
        print!("{}", report.render_table(args.verbose));
    }
    report.exit_code
}
