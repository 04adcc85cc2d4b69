//! `nvpeer doctor`: says whether GPUDirect RDMA works on this node, through which path (peer
//! memory through nvpeer, through NVIDIA's nvidia-peermem, dma-buf), which library takes which
//! path, and what to fix first.
//!
//! Every node check (docs/doctor.md) that can be read without root from sysfs, procfs, the kernel's
//! build tree and log, the CUDA driver (cudarc), NVML (nvml-wrapper) and libibverbs (sideway), all
//! three dlopened. All file reads go through [`root::SysRoot`], so `--root DIR` points the whole
//! doctor at a fixture tree. docs/doctor.md lists every check, its source and its fix.

pub mod c2c;
pub mod checks;
pub mod distro;
pub mod kernel;
pub mod kmsg;
pub mod limits;
pub mod nccl_log;
pub mod npd;
pub mod nvml;
pub mod nvreg;
pub mod paths;
pub mod pci;
pub mod probes;
pub mod profile;
pub mod report;
pub mod root;
pub mod settings;
pub mod slurm;
pub mod topology;

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
    /// Skip the live CUDA, NVML and verbs probes (they only run when --root is `/`).
    #[arg(long)]
    pub no_probes: bool,
    /// The path the verdict (and exit status) is about: `any` (ready when one path is),
    /// `nvpeer` (the strict answer: peer memory through nvpeer), `nvidia-peermem`, `dmabuf`.
    #[arg(long, value_enum, default_value = "any")]
    pub require: report::Require,
    /// Read NCCL's own answer from its `NCCL_DEBUG=INFO` output (a job's log; `-`: standard
    /// input) and set it beside the doctor's prediction for NCCL. Informs: the verdict and exit
    /// status stay the node's; a FILE that cannot be read or holds no NCCL line is a bad
    /// argument (exit 2, nothing checked).
    #[arg(long, value_name = "FILE")]
    pub nccl_log: Option<PathBuf>,
    /// Print one ASCII line of at most 80 bytes (the verdict and its root cause) for Kubernetes'
    /// node-problem-detector, whose custom plugins exit 0 OK, 1 problem, 2 unknown as the doctor
    /// does (packaging/kubernetes/npd-nvpeer-gdr.json).
    #[arg(long, conflicts_with_all = ["json", "verbose", "nccl_log"])]
    pub npd: bool,
    /// Act as Slurm's HealthCheckProgram: drain this node with the root cause's fault code
    /// (`Reason="nvpeer: NVP-D016 ..."`) when it is not ready, resume it when it is ready again
    /// and nvpeer drained it; a node drained by anyone else is left alone. Prints one line.
    /// `--slurm=prolog` / `--slurm=epilog`: as slurmd's Prolog or Epilog, drain a node that is
    /// not ready and exit 1 (the job is requeued), never resume, exit 0 otherwise.
    #[arg(
        long,
        value_enum,
        value_name = "HOOK",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "health",
        conflicts_with_all = ["json", "verbose", "nccl_log", "npd"]
    )]
    pub slurm: Option<slurm::Mode>,
    /// The node's name in Slurm (default: SLURMD_NODENAME, which slurmd sets, else the short
    /// host name).
    #[arg(long, value_name = "NAME", requires = "slurm")]
    pub slurm_node: Option<String>,
    /// Say what --slurm would do; change nothing.
    #[arg(long, requires = "slurm")]
    pub slurm_dry_run: bool,
    /// Where sinfo and scontrol are (default: found on PATH).
    #[arg(long, value_name = "DIR", requires = "slurm")]
    pub slurm_bin: Option<PathBuf>,
    /// Hold the node to a node profile (TOML: GPU and NIC counts, names, rates, BAR1, the
    /// farthest GPU-to-NIC path, driver and kernel floors; docs/operations.md): check
    /// `node.profile`, which gates every path. FILE, or a built-in profile's name where no such
    /// file is: dgx-h100, dgx-h200, azure-nd-h100-v5, azure-nd-h200-v5.
    #[arg(long, value_name = "FILE|NAME")]
    pub profile: Option<PathBuf>,
    /// Print the GPU↔NIC matrix instead of the report (as `nvidia-smi topo -m`: the path class
    /// of each pair, each device's NUMA node, CPUs and IOMMU group), each GPU's best NIC, the
    /// pairs NCCL would not use GPUDirect RDMA on by default and why; with --json, as JSON. The
    /// exit status is the doctor's.
    #[arg(long, conflicts_with_all = ["npd", "slurm", "verbose", "nccl_log"])]
    pub topology: bool,
    /// Write this node's own profile to FILE (what the doctor reads here), then report as usual.
    #[arg(long, value_name = "FILE")]
    pub write_profile: Option<PathBuf>,
}

impl Args {
    /// The arguments of a plain `nvpeer doctor --root ROOT --require REQUIRE`: every other flag
    /// off (callers that embed the doctor set what they need on top).
    pub fn new(root: PathBuf, require: report::Require) -> Self {
        Self {
            root,
            json: false,
            verbose: false,
            no_probes: false,
            require,
            nccl_log: None,
            npd: false,
            slurm: None,
            slurm_node: None,
            slurm_dry_run: false,
            slurm_bin: None,
            profile: None,
            write_profile: None,
            topology: false,
        }
    }
}

/// Builds the report for `args` without printing it.
pub fn diagnose(args: &Args, probes: probes::Probes) -> report::Report {
    let root = root::SysRoot::new(&args.root);
    let ctx = checks::Ctx::load(&root, probes);
    report_of(&ctx, args.require)
}

/// The report for `args` on a node held to `profile` (its file as given), and the context it read.
fn diagnose_with(
    args: &Args,
    probes: probes::Probes,
    profile: Option<(String, profile::Profile)>,
) -> Result<report::Report, DoctorError> {
    let root = root::SysRoot::new(&args.root);
    let mut ctx = checks::Ctx::load(&root, probes);
    ctx.profile = profile;
    if let Some(path) = &args.write_profile {
        profile::write(&profile::of_node(&ctx), path)?;
    }
    Ok(report_of(&ctx, args.require))
}

/// The report of the checks that read files under `root` only (no live CUDA, NVML or verbs
/// probe), its verdict about `require`: what `nvpeer doctor --root DIR --no-probes` prints, for
/// callers that embed the doctor's view of a node (validate's environment block).
pub fn diagnose_files(root: &std::path::Path, require: report::Require) -> report::Report {
    let root = root::SysRoot::new(root);
    report_of(&checks::Ctx::load(&root, probes::Probes::none()), require)
}

/// The check `node.profile` of the node under `root` against `profile` (as [`profile::resolve`]
/// gives it): for callers that hold a node to a profile beside their own work (`nvpeer validate
/// --profile`). The live probes run only when `root` is the running system and the profile has
/// an item that needs one (a GPU's name, BAR1).
pub fn profile_check(root: &std::path::Path, profile: (String, profile::Profile)) -> report::Check {
    let probes = if profile.1.needs_probes() {
        probes_for(root, false)
    } else {
        probes::Probes::none()
    };
    let root = root::SysRoot::new(root);
    let mut ctx = checks::Ctx::load(&root, probes);
    ctx.profile = Some(profile);
    profile::check(&ctx)
}

/// The report on what `ctx` read, its verdict about `require`: for callers that ask the context
/// more afterwards (`nvpeer metrics`: the NVML figures, who serves `nv_mem`).
pub fn report_of(ctx: &checks::Ctx, require: report::Require) -> report::Report {
    let mut report = report::Report::new(
        ctx.root.base().display().to_string(),
        checks::run_all(ctx),
        require,
    );
    report.libraries = paths::library_uses(ctx, &report.paths);
    report.os = ctx.distro.as_ref().map(|d| d.pretty.clone());
    report.kernel = ctx.release.clone();
    report
}

/// The live probes when `root` is the running system (`/`) and `no_probes` is not set; none
/// otherwise (a fixture tree says nothing about this machine's libraries).
pub fn probes_for(root: &std::path::Path, no_probes: bool) -> probes::Probes {
    if root::SysRoot::new(root).is_live() && !no_probes {
        probes::Probes::run()
    } else {
        probes::Probes::none()
    }
}

/// Why `nvpeer doctor` could not check (exit status 2, printed once by the caller).
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    #[error("--root {}: not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("cannot encode the report: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("--nccl-log {0}")]
    NcclLog(#[from] nccl_log::NcclLogError),
    #[error("profile {0}")]
    Profile(#[from] profile::ProfileError),
    #[error("--slurm: {0}")]
    Slurm(#[from] slurm::SlurmError),
    #[error("--slurm: no node name (neither SLURMD_NODENAME nor a host name): give --slurm-node")]
    NoNodeName,
}

/// Runs the doctor; returns its verdict (passed: ready, failed: not ready, could not run: could
/// not check) about the path `--require` names (by default: any path), or why it could not check.
pub fn run(args: Args) -> Result<nvpeer_verdict::Verdict, DoctorError> {
    // A prolog or epilog never takes a node out for what it could not check, its own arguments
    // included: any non-zero exit would make slurmctld drain the node and requeue the job.
    let hook = args.slurm.filter(|m| *m != slurm::Mode::Health);
    match run_args(args) {
        Err(e) => match hook {
            Some(mode) => {
                println!(
                    "nvpeer doctor {}: could not check: {e}; not drained, the job goes on",
                    mode.flag()
                );
                Ok(nvpeer_verdict::Verdict::Passed)
            }
            None => Err(e),
        },
        r => r,
    }
}

fn run_args(args: Args) -> Result<nvpeer_verdict::Verdict, DoctorError> {
    if !args.root.is_dir() {
        return Err(DoctorError::NotADirectory(args.root));
    }
    let nccl = args
        .nccl_log
        .as_deref()
        .map(nccl_log::read_path)
        .transpose()?;
    let profile = match &args.profile {
        Some(p) => Some(profile::resolve(p)?),
        None => None,
    };
    let mut report = diagnose_with(&args, probes_for(&args.root, args.no_probes), profile)?;
    report.nccl_log = nccl.map(|log| nccl_log::NcclReading::new(log, &report.libraries));
    if args.topology {
        let m = topology::Matrix::of(&root::SysRoot::new(&args.root), &report);
        if args.json {
            println!("{}", serde_json::to_string_pretty(&m)?);
        } else {
            print!("{}", m.render());
        }
    } else if args.npd {
        println!("{}", npd::line(&report));
    } else if let Some(mode) = args.slurm {
        let node = args
            .slurm_node
            .clone()
            .or_else(slurm::node_name)
            .ok_or(DoctorError::NoNodeName)?;
        let s = slurm::Slurm::new(args.slurm_bin.as_deref());
        let acted = match mode.settled(&report) {
            Some(a) => Ok(a),
            None => s.state(&node).and_then(|st| {
                let a = slurm::decide(&report, &st);
                if !args.slurm_dry_run {
                    s.act(&node, &a)?;
                }
                Ok(a)
            }),
        };
        let action = match acted {
            Ok(a) => a,
            // A hook on a node that is not ready still fails the job (exit 1): slurmctld then
            // drains the node itself (`Prolog error`), which is what matters here.
            Err(e) if mode != slurm::Mode::Health => {
                println!(
                    "nvpeer doctor {}: node {node} not ready; could not drain it ({e}); exit 1",
                    mode.flag()
                );
                return Ok(mode.verdict(report.verdict));
            }
            Err(e) => return Err(e.into()),
        };
        println!(
            "{}",
            slurm::line(mode, &node, &report, &action, args.slurm_dry_run)
        );
        // (a hook's dry run changes nothing: not even slurmctld's own drain on exit 1)
        if args.slurm_dry_run && mode != slurm::Mode::Health {
            return Ok(nvpeer_verdict::Verdict::Passed);
        }
        return Ok(mode.verdict(report.verdict));
    } else if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_table(args.verbose));
    }
    Ok(report.verdict.into())
}
