//! `nvpeer validate --fleet` and `nvpeer bench --fleet`: every node of a cluster tested against
//! the others, one process per node, started by the cluster's own engine (Slurm's `srun`,
//! `mpirun` of Open MPI or MPICH, a Kubernetes indexed Job). nvpeer starts no processes and
//! takes no host list: it reads its place from the launcher's environment, runs the doctor,
//! meets the other ranks at rank 0, and pairs them round by round over the harness's two-node
//! mode. Rank 0 writes one report, the answer first (docs/validation.md, "Fleet").
//!
//! Files by concept: `launcher` (rank, world size and rendezvous from the environment),
//! `schedule` (who meets whom in which round), `proto` / `coordinator` (rank 0's coordinator and
//! every rank's worker), `runner` (what a pair runs: the harness), `readiness` (the doctor's
//! verdict), `report` / `heatmap` (the report, its outliers, JSON, JUnit and the picture).

pub mod auth;
mod command_error;
pub mod coordinator;
pub mod heatmap;
pub mod launcher;
pub mod proto;
pub mod readiness;
pub mod report;
pub mod runner;
pub mod schedule;
pub mod seal;

pub use command_error::CommandError;
use coordinator::{CoordinatorConfig, WorkerConfig};
use launcher::Placement;
use nvpeer_verdict::Verdict;
use report::{FleetReport, Thresholds};
use runner::{HarnessRunner, PairRunner};
use schedule::Pairing;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Options of the fleet mode, shared by `validate` and `bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct FleetArgs {
    /// Run as one process of a fleet started by srun, mpirun or a Kubernetes indexed Job: rank,
    /// world size and rendezvous from the launcher's environment; rank 0 pairs every node with
    /// the others and writes the report (docs/validation.md, "Fleet").
    #[arg(long)]
    pub fleet: bool,
    /// Which links: `all` (every pair of nodes, N-1 rounds) or `ring` (each node with its two
    /// neighbours in rank order, 2-3 rounds).
    #[arg(long = "pairs", value_enum, default_value_t = Pairing::All, requires = "fleet")]
    pub pairs: Pairing,
    /// A bandwidth link below this many GB/s (10^9 bytes/s) is an outlier.
    #[arg(long = "min-bw", value_name = "GB/s", requires = "fleet", value_parser = positive)]
    pub min_bw: Option<f64>,
    /// A bandwidth link below this fraction of the test's fleet median is an outlier (a latency
    /// link above the median divided by it).
    #[arg(long = "min-fraction", default_value_t = 0.8, value_parser = fraction)]
    pub min_fraction: f64,
    /// Rank 0's host (and port; default `-p`), where the ranks meet. Slurm: default the first
    /// host of SLURM_STEP_NODELIST; Open MPI, MPICH, Kubernetes: required, here or in
    /// NVPEER_FLEET_RENDEZVOUS.
    #[arg(long = "rendezvous", value_name = "HOST[:PORT]", requires = "fleet")]
    pub rendezvous: Option<String>,
    /// The number of ranks where the launcher does not say it (a Kubernetes indexed Job: its
    /// `completions`); also NVPEER_FLEET_WORLD_SIZE.
    #[arg(long = "world-size", value_name = "N", requires = "fleet")]
    pub world_size: Option<u32>,
    /// Directory of the report. With --fleet: rank 0's, fleet.json, fleet.xml (JUnit),
    /// matrix-TEST.svg (default nvpeer-fleet). validate without --fleet: this run's page,
    /// index.html, with validate.json and validate.xml beside it (docs/validation.md, "The
    /// report").
    #[arg(long = "report", value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// This node's name in the report (default: Slurm's SLURMD_NODENAME, else the hostname).
    #[arg(long = "node-name", env = "NVPEER_FLEET_NODE_NAME")]
    pub node_name: Option<String>,
    /// The IP address the other ranks reach this node at: rank 0 refuses it unless it is the
    /// address this rank's connection comes from, which is also the default (on a multi-homed
    /// node, give --rendezvous rank 0's address on the network the pairs should use).
    #[arg(long = "fleet-addr", value_name = "IP", env = "NVPEER_FLEET_ADDR")]
    pub addr: Option<String>,
    /// Rank 0: seconds a new connection has for its whole handshake, hello to join (a silent or
    /// trickling one is closed then).
    #[arg(long = "fleet-handshake-timeout", value_name = "SECS", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=300))]
    pub fleet_handshake_timeout: u64,
    /// Rank 0: handshakes it runs at once; a connection beyond them is told to come back (a rank
    /// does, until its join timeout).
    #[arg(long = "fleet-max-pending", value_name = "N", default_value_t = coordinator::MAX_PENDING,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub fleet_max_pending: usize,
    /// Rank 0: handshakes it runs at once from one source address (a node's ranks share one);
    /// a connection beyond them is told to come back too.
    #[arg(long = "fleet-max-pending-per-source", value_name = "N",
          default_value_t = coordinator::MAX_PENDING_PER_SOURCE,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub fleet_max_pending_per_source: usize,
    /// Seconds rank 0 waits for every rank to join (a rank that does not is "never joined").
    #[arg(long = "join-timeout", value_name = "SECS", default_value_t = 300)]
    pub join_timeout: u64,
    /// Seconds one pair may take; a side that takes longer is reported as timed out, a rank that
    /// does not answer 30 s later as hung.
    #[arg(long = "pair-timeout", value_name = "SECS", default_value_t = 600)]
    pub pair_timeout: u64,
    /// The doctor's root directory on this node (fixture trees; `nvpeer doctor --root`).
    #[arg(
        long = "doctor-root",
        value_name = "DIR",
        env = "NVPEER_FLEET_DOCTOR_ROOT",
        default_value = "/"
    )]
    pub doctor_root: PathBuf,
    /// The GPUDirect RDMA path a node must have to be ready (`nvpeer doctor --require`).
    #[arg(long = "require", value_enum, default_value = "any")]
    pub require: nvpeer_doctor::report::Require,
    /// Pair nodes the doctor finds not ready too (by default their pairs are skipped).
    #[arg(long = "pair-not-ready")]
    pub pair_not_ready: bool,
    /// validate --fleet: write_bw iterations of each link's bandwidth figure.
    #[arg(long = "link-iters", value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(5..))]
    pub link_iters: u32,
}

impl FleetArgs {
    /// The fleet report's directory: `--report`, else `nvpeer-fleet`.
    pub fn report_dir(&self) -> PathBuf {
        self.report
            .clone()
            .unwrap_or_else(|| PathBuf::from("nvpeer-fleet"))
    }
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("'{s}': expected a positive number")),
    }
}

fn fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!("'{s}': expected a fraction in (0, 1]")),
    }
}

/// `nvpeer validate`, with `--fleet`.
#[derive(clap::Args, Debug, Clone)]
pub struct ValidateCmd {
    #[command(flatten)]
    pub args: nvpeer_harness::ValidateArgs,
    #[command(flatten)]
    pub fleet: FleetArgs,
    #[command(flatten)]
    pub link_rate: LinkRateArgs,
}

/// `validate --fleet`: each link's bandwidth judged against its port's line rate, as `nvpeer
/// bench`'s own `--line-rate` and `--bw-threshold` judge its tests (`bench --fleet` takes those).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LinkRateArgs {
    /// The ports' line rate in Gb/s, one direction (default: each client's device's, from
    /// sysfs). Giving it or --bw-threshold names a link below the threshold as an outlier.
    #[arg(long = "line-rate", value_name = "GBPS", requires = "fleet",
          value_parser = nvpeer_harness::line_rate::parse_gbps)]
    pub line_rate: Option<f64>,
    /// The fraction of the line rate each link's write_bw must reach (default 0.9 with
    /// --line-rate, NVIDIA's ngc_multinode_perf).
    #[arg(long = "bw-threshold", value_name = "FRACTION", requires = "fleet",
          value_parser = nvpeer_harness::line_rate::parse_fraction)]
    pub bw_threshold: Option<f64>,
}

/// `nvpeer bench`, with `--fleet`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchCmd {
    #[command(flatten)]
    pub args: nvpeer_harness::BenchArgs,
    #[command(flatten)]
    pub fleet: FleetArgs,
}

/// Why the fleet mode refuses the command line.
fn fleet_conflicts(c: &nvpeer_harness::cli::CommonArgs) -> Option<&'static str> {
    if c.server || c.client.is_some() {
        Some("it pairs the nodes itself: no --server or --client")
    } else if c.json {
        Some("it writes its JSON into --report DIR (fleet.json): no --json")
    } else {
        None
    }
}

/// Runs `nvpeer validate` (the fleet with `--fleet`): the run's verdict, or why it could not run.
pub fn validate(cmd: ValidateCmd) -> Result<Verdict, CommandError> {
    if !cmd.fleet.fleet {
        let mut args = cmd.args;
        args.report = cmd.fleet.report;
        return Ok(nvpeer_harness::validate(args)?);
    }
    if let Some(e) = fleet_conflicts(&cmd.args.common) {
        return Err(CommandError::Args(e.into()));
    }
    let mut link =
        link_bench(&cmd.args.common, cmd.fleet.link_iters).map_err(CommandError::Args)?;
    link.line_rate = cmd.link_rate.line_rate;
    link.bw_threshold = cmd.link_rate.bw_threshold;
    let runner = HarnessRunner::Validate {
        args: Box::new(cmd.args.clone()),
        link: Box::new(link),
    };
    run(
        "nvpeer validate --fleet",
        &cmd.fleet,
        &cmd.args.common,
        Arc::new(runner),
    )
}

/// Runs `nvpeer bench` (the fleet with `--fleet`): the run's verdict, or why it could not run.
pub fn bench(cmd: BenchCmd) -> Result<Verdict, CommandError> {
    if !cmd.fleet.fleet {
        return Ok(nvpeer_harness::bench(cmd.args)?);
    }
    let mut args = cmd.args.clone();
    if let Some(e) = fleet_conflicts(&args.common) {
        return Err(CommandError::Args(e.into()));
    }
    // Registration cost is a node's own figure, not a link's: `nvpeer bench --test reg` on each.
    args.tests
        .retain(|t| *t != nvpeer_harness::cli::BenchTest::Reg);
    if args.tests.is_empty() {
        return Err(CommandError::Args(
            "it measures links: give --test with write_bw, read_bw, send_bw or write_lat".into(),
        ));
    }
    if args.perftest || args.json_file().is_some() {
        return Err(CommandError::Args(
            "it pairs nvpeer with nvpeer: no --perftest or --out_json".into(),
        ));
    }
    args.check().map_err(CommandError::Args)?;
    args.no_progress = true;
    let runner = HarnessRunner::Bench {
        args: Box::new(args.clone()),
    };
    run(
        "nvpeer bench --fleet",
        &cmd.fleet,
        &args.common,
        Arc::new(runner),
    )
}

/// The short write_bw that gives each link of `validate --fleet` its bandwidth figure, on the
/// memory and device of the validate command line.
fn link_bench(
    c: &nvpeer_harness::cli::CommonArgs,
    iters: u32,
) -> Result<nvpeer_harness::BenchArgs, String> {
    use clap::Parser;
    #[derive(Parser)]
    struct B {
        #[command(flatten)]
        b: nvpeer_harness::BenchArgs,
    }
    let n = iters.to_string();
    let mut b = B::try_parse_from(["bench", "--test", "write_bw", "-n", &n, "--no-progress"])
        .map_err(|e| e.to_string())?
        .b;
    b.common = c.clone();
    Ok(b)
}

/// This node's name: `--node-name`, else Slurm's, else the hostname, else the rank.
fn node_name(f: &FleetArgs, rank: u32) -> String {
    f.node_name
        .clone()
        .or_else(|| std::env::var("SLURMD_NODENAME").ok())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("rank{rank}"))
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// How long the rank waits for rank 0 and its orders, and rank 0 for the ranks.
fn timeouts(f: &FleetArgs) -> (Duration, Duration, Duration) {
    let join = Duration::from_secs(f.join_timeout);
    let pair = Duration::from_secs(f.pair_timeout);
    let grace = Duration::from_secs(30);
    (join, pair, grace)
}

/// Runs this rank of the fleet; rank 0 also coordinates and writes the report.
fn run(
    tool: &str,
    f: &FleetArgs,
    c: &nvpeer_harness::cli::CommonArgs,
    runner: Arc<dyn PairRunner>,
) -> Result<Verdict, CommandError> {
    let env = |k: &str| std::env::var(k).ok();
    let placement = launcher::detect(
        &env,
        &launcher::Given {
            rendezvous: f.rendezvous.as_deref(),
            world: f.world_size,
            port: c.port,
        },
    )?;
    let Placement {
        rank,
        world,
        rendezvous,
        launcher,
    } = placement.clone();
    let name = node_name(f, rank);
    eprintln!(
        "{tool}: rank {rank} of {world} ({name}), launched by {launcher}; rank 0 at {rendezvous}"
    );
    let readiness = readiness::check(&f.doctor_root, f.require);
    if !readiness.ready {
        eprintln!(
            "{tool}: this node is not ready ({}): {}",
            readiness.verdict,
            readiness
                .causes
                .iter()
                .map(|c| format!("{}: {}", c.check, c.summary))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let (join, pair, grace) = timeouts(f);
    let th = Thresholds {
        min_bw: f.min_bw,
        fraction: f.min_fraction,
    };
    let coordinator = if rank == 0 {
        let serve = nvpeer_harness::cli::ServeArgs {
            bind: if is_loopback(&rendezvous.host) {
                "127.0.0.1".into()
            } else if rendezvous.host.contains(':') {
                "::".into()
            } else {
                "0.0.0.0".into()
            },
            ..c.serve.clone()
        };
        let listener = nvpeer_harness::server::listen(&serve, rendezvous.port)?;
        let cfg = CoordinatorConfig {
            world,
            pairing: f.pairs,
            serve,
            rounds: schedule::rounds(f.pairs, world),
            base_port: rendezvous.port,
            join_timeout: join,
            pair_timeout: pair,
            grace,
            pair_not_ready: f.pair_not_ready,
            verbose: true,
            handshake_timeout: Duration::from_secs(f.fleet_handshake_timeout),
            max_pending: f.fleet_max_pending,
            max_pending_per_source: f.fleet_max_pending_per_source,
        };
        let tool = tool.to_string();
        Some(std::thread::spawn(move || {
            let run = coordinator::coordinate(&listener, &cfg, &|run| {
                FleetReport::new(&tool, run.clone(), th).verdict()
            });
            FleetReport::new(&tool, run, th)
        }))
    } else {
        None
    };
    let wcfg = WorkerConfig {
        rank,
        world,
        rendezvous,
        token: c.serve.token.clone(),
        name,
        addr: f.addr.clone(),
        readiness,
        join_wait: join,
        pair_timeout: pair,
        order_wait: join + pair + grace + Duration::from_secs(60),
    };
    let worked = coordinator::work(&wcfg, runner);
    let Some(handle) = coordinator else {
        return worked.map_err(|source| CommandError::Rank { rank, source });
    };
    // Rank 0 writes the report whatever its own part did: the coordinator names what went wrong.
    if let Err(e) = &worked {
        eprintln!("{tool}: rank {rank}: {e}");
    }
    let report = handle
        .join()
        .map_err(|_| CommandError::CoordinatorPanicked)?;
    nvpeer_harness::report::say(&report.text());
    let dir = f.report_dir();
    let files = report
        .write(&dir)
        .map_err(|source| CommandError::Report { dir, source })?;
    for file in files {
        eprintln!("{tool}: wrote {}", file.display());
    }
    Ok(report.verdict())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct V {
        #[command(flatten)]
        v: ValidateCmd,
    }

    #[derive(Parser)]
    struct B {
        #[command(flatten)]
        b: BenchCmd,
    }

    #[test]
    fn fleet_options_parse_and_need_fleet() {
        let v = V::try_parse_from([
            "x",
            "--fleet",
            "--pairs",
            "ring",
            "--min-bw",
            "12.5",
            "--rendezvous",
            "head:7000",
            "--report",
            "/tmp/r",
            "--mem",
            "host",
        ])
        .unwrap()
        .v;
        assert!(v.fleet.fleet);
        assert_eq!(v.fleet.pairs, Pairing::Ring);
        assert_eq!(v.fleet.min_bw, Some(12.5));
        assert_eq!(v.fleet.min_fraction, 0.8);
        assert_eq!(v.fleet.rendezvous.as_deref(), Some("head:7000"));
        assert_eq!(v.fleet.report_dir(), PathBuf::from("/tmp/r"));
        assert_eq!(
            (
                v.fleet.fleet_handshake_timeout,
                v.fleet.fleet_max_pending,
                v.fleet.fleet_max_pending_per_source
            ),
            (
                5,
                coordinator::MAX_PENDING,
                coordinator::MAX_PENDING_PER_SOURCE
            )
        );
        let caps = [
            "x",
            "--fleet",
            "--fleet-max-pending",
            "4",
            "--fleet-max-pending-per-source",
            "3",
            "--fleet-handshake-timeout",
            "2",
        ];
        let c = V::try_parse_from(caps).unwrap().v.fleet;
        assert_eq!(
            (
                c.fleet_handshake_timeout,
                c.fleet_max_pending,
                c.fleet_max_pending_per_source
            ),
            (2, 4, 3)
        );
        assert!(V::try_parse_from(["x", "--fleet", "--fleet-max-pending", "0"]).is_err());
        assert!(
            V::try_parse_from(["x", "--fleet", "--fleet-max-pending-per-source", "0"]).is_err()
        );
        assert!(V::try_parse_from(["x", "--fleet", "--fleet-handshake-timeout", "0"]).is_err());
        // Fleet options without --fleet are refused.
        assert!(V::try_parse_from(["x", "--pairs", "ring"]).is_err());
        assert!(V::try_parse_from(["x", "--fleet", "--min-bw", "-1"]).is_err());
        assert!(V::try_parse_from(["x", "--fleet", "--min-fraction", "1.5"]).is_err());
        // The harness's own options are still there, and perftest's --report_gbits is not --report.
        let b = B::try_parse_from(["x", "--fleet", "--test", "write_bw", "--report_gbits"])
            .unwrap()
            .b;
        assert!(b.args.report_gbits && b.fleet.fleet);
        assert_eq!(b.fleet.report_dir(), PathBuf::from("nvpeer-fleet"));
    }

    #[test]
    fn fleet_refuses_a_hand_made_pair() {
        let v = V::try_parse_from(["x", "--fleet", "--server"]).unwrap().v;
        assert!(fleet_conflicts(&v.args.common).is_some());
        let v = V::try_parse_from(["x", "--fleet", "--json"]).unwrap().v;
        assert!(fleet_conflicts(&v.args.common).is_some());
        let v = V::try_parse_from(["x", "--fleet"]).unwrap().v;
        assert!(fleet_conflicts(&v.args.common).is_none());
        let l = link_bench(&v.args.common, 50).unwrap();
        assert_eq!((l.line_rate, l.bw_threshold), (None, None));
        let v = V::try_parse_from([
            "x",
            "--fleet",
            "--line-rate",
            "200",
            "--bw-threshold",
            "0.9",
        ])
        .unwrap()
        .v;
        assert_eq!(
            (v.link_rate.line_rate, v.link_rate.bw_threshold),
            (Some(200.0), Some(0.9))
        );
        assert!(V::try_parse_from(["x", "--line-rate", "200"]).is_err());
        assert_eq!(l.tests, vec![nvpeer_harness::cli::BenchTest::WriteBw]);
        assert_eq!(l.iters, Some(50));
    }

    #[test]
    fn loopback_rendezvous_stays_on_loopback() {
        assert!(is_loopback("127.0.0.1") && is_loopback("::1") && is_loopback("localhost"));
        assert!(!is_loopback("10.0.0.1") && !is_loopback("head"));
    }
}
