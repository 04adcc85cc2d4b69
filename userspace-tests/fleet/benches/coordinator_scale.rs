//! The fleet coordinator at scale (issue 55, item 3; docs/validation.md, "Fleet: how it scales"):
//! N ranks as threads of this process on loopback, each a real worker with its own TCP connection
//! to rank 0's coordinator, the real handshake (the token's challenge and response, the sealed
//! channel) and orders, and a pair runner that returns at once (a no-op test: no RDMA device, no
//! pair connection). Prints each phase's wall time and the process's memory after it. A
//! benchmark, not a test: it asserts only that every rank joined and every pair ran.
//!
//!   cargo bench -p nvpeer-fleet --bench coordinator_scale            # the default series
//!   cargo bench -p nvpeer-fleet --bench coordinator_scale -- 1000 ring [per-source]
//!
//! Every rank connects from 127.0.0.1, so the coordinator's per-source cap on concurrent
//! handshakes (`--fleet-max-pending-per-source`, 16) holds back all but 16 at once, as it would a
//! thousand ranks behind one NAT; on a cluster each node has its own address. The series runs
//! with the cap lifted to the global one (128, `--fleet-max-pending`) as a cluster's nodes would
//! meet it, and once with the cap as shipped (`per-source`).

use nvpeer_fleet::coordinator::{
    coordinate, pair_port, work, CoordinatorConfig, PairStatus, WorkerConfig, HANDSHAKE,
    MAX_PENDING, MAX_PENDING_PER_SOURCE,
};
use nvpeer_fleet::launcher::Rendezvous;
use nvpeer_fleet::readiness::Readiness;
use nvpeer_fleet::report::{FleetReport, Thresholds};
use nvpeer_fleet::runner::{
    ConnectJob, Measurement, PairOutcome, PairRunner, ServeFailure, ServeJob, Unit,
};
use nvpeer_fleet::schedule::{rounds, Pairing};
use nvpeer_verdict::Verdict;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOKEN: &str = "fleet-scale-bench";

/// Both sides of every pair return at once: one passing measurement.
struct NoOp;

impl PairRunner for NoOp {
    fn serve(&self, _job: &ServeJob) -> Result<(), ServeFailure> {
        Ok(())
    }
    fn connect(&self, _job: &ConnectJob) -> PairOutcome {
        PairOutcome {
            measurements: vec![Measurement {
                test: "noop".into(),
                unit: Unit::PassFail,
                value: None,
                passed: true,
                detail: String::new(),
                line_rate_min: None,
            }],
        }
    }
}

/// This process's resident and peak resident memory, MiB (`/proc/self/status`).
fn memory() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
}

/// Raises this process's open-file limit to its hard limit: every rank holds a socket, and so
/// does the coordinator for each.
fn raise_nofile(want: u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `l` is a valid rlimit for getrlimit to fill and setrlimit to read.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
    assert!(
        l.rlim_cur >= want,
        "{want} open files needed, the hard limit is {}: raise it (ulimit -Hn)",
        l.rlim_max
    );
}

/// A listener on loopback whose port leaves room for one pair port per round.
fn listener(rounds: u32) -> TcpListener {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = l.local_addr().expect("local address").port();
        if rounds == 0 || pair_port(port, rounds - 1).is_some() {
            return l;
        }
    }
}

fn run(world: u32, pairing: Pairing, per_source: bool) {
    raise_nofile(u64::from(world) * 3 + 64);
    let schedule = rounds(pairing, world);
    let nrounds = schedule.len() as u32;
    let l = listener(nrounds);
    let port = l.local_addr().expect("local address").port();
    let cfg = CoordinatorConfig {
        world,
        pairing,
        serve: nvpeer_harness::cli::ServeArgs {
            token: Some(TOKEN.into()),
            ..Default::default()
        },
        rounds: schedule,
        base_port: port,
        join_timeout: Duration::from_secs(300),
        pair_timeout: Duration::from_secs(30),
        grace: Duration::from_secs(5),
        pair_not_ready: false,
        verbose: false,
        handshake_timeout: HANDSHAKE,
        max_pending: MAX_PENDING,
        max_pending_per_source: if per_source {
            MAX_PENDING_PER_SOURCE
        } else {
            MAX_PENDING
        },
    };
    let (rss0, _) = memory();
    let start = Instant::now();
    let coord = std::thread::spawn(move || coordinate(&l, &cfg, &|_| Verdict::Passed));
    let ranks: Vec<_> = (0..world)
        .map(|rank| {
            let wcfg = WorkerConfig {
                rank,
                world,
                rendezvous: Rendezvous {
                    host: "127.0.0.1".into(),
                    port,
                },
                token: Some(TOKEN.into()),
                name: format!("node{rank:04}"),
                addr: None,
                readiness: Readiness::assumed(),
                join_wait: Duration::from_secs(300),
                pair_timeout: Duration::from_secs(30),
                order_wait: Duration::from_secs(600),
            };
            std::thread::Builder::new()
                .name(format!("rank{rank}"))
                .stack_size(256 << 10)
                .spawn(move || work(&wcfg, Arc::new(NoOp)))
                .expect("spawn a rank's thread")
        })
        .collect();
    let fleet = coord.join().expect("the coordinator's thread");
    let (rss_run, hwm_run) = memory();
    for r in ranks {
        r.join().expect("a rank's thread").expect("a rank's worker");
    }
    let wall = start.elapsed().as_secs_f64();
    let joined = fleet.nodes.iter().filter(|n| n.lost.is_none()).count();
    let ran = fleet
        .pairs
        .iter()
        .filter(|p| p.status == PairStatus::Ran)
        .count();
    assert_eq!(joined, world as usize, "every rank joins");
    assert_eq!(ran, fleet.pairs.len(), "every pair runs");
    let (joined_s, elapsed_s, pairs, messages) = (
        fleet.joined_s,
        fleet.elapsed_s,
        fleet.pairs.len(),
        fleet.messages,
    );

    let t = Instant::now();
    let report = FleetReport::new("nvpeer validate --fleet", fleet, Thresholds::default());
    let built_s = t.elapsed().as_secs_f64();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let t = Instant::now();
    let files = report.write(dir.path()).expect("the report's files");
    let written_s = t.elapsed().as_secs_f64();
    let sizes: Vec<(String, u64)> = files
        .iter()
        .map(|f| {
            let name = f
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned());
            (name, std::fs::metadata(f).map_or(0, |m| m.len()))
        })
        .collect();
    let bytes: u64 = sizes.iter().map(|(_, b)| b).sum();
    let each = sizes
        .iter()
        .map(|(n, b)| format!("{n} {:.1} MB", *b as f64 / 1e6))
        .collect::<Vec<_>>()
        .join(", ");
    let (_, hwm) = memory();
    println!(
        "{world} ranks, {pairing:?} ({nrounds} rounds, {pairs} pairs, {messages} messages), \
         per-source cap {}: join {joined_s:.3} s, rounds {:.3} s ({:.2} ms per round), finish and \
         workers' exit {:.3} s; report built {built_s:.3} s, written {written_s:.3} s ({} files, \
         {:.1} MB: {each}); memory: {rss0:.1} MiB before, {rss_run:.1} MiB after the run (peak \
         {hwm_run:.1}), peak {hwm:.1} with the report",
        if per_source {
            MAX_PENDING_PER_SOURCE
        } else {
            MAX_PENDING
        },
        elapsed_s - joined_s,
        (elapsed_s - joined_s) * 1e3 / f64::from(nrounds.max(1)),
        wall - elapsed_s,
        files.len(),
        bytes as f64 / 1e6,
    );
}

fn main() {
    // (cargo bench passes --bench; the figures are this benchmark's own)
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let pairing = |s: &str| match s {
        "all" => Pairing::All,
        "ring" => Pairing::Ring,
        other => panic!("pairing {other}: all or ring"),
    };
    if let Some(n) = args.first() {
        let world = n.parse().expect("RANKS: a number of ranks");
        let p = args.get(1).map_or(Pairing::Ring, |s| pairing(s));
        run(world, p, args.get(2).is_some_and(|s| s == "per-source"));
        return;
    }
    for (world, p, per_source) in [
        (100, Pairing::Ring, false),
        (100, Pairing::All, false),
        (1000, Pairing::Ring, false),
        (1000, Pairing::Ring, true),
        (300, Pairing::All, false),
    ] {
        run(world, p, per_source);
    }
}
