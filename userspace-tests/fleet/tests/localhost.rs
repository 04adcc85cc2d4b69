//! The coordinator with 4 (and 8) ranks as threads on localhost: real TCP, the real join, orders
//! and answers, and a fake pair runner (no RDMA device): every pair once, a slow link named, a
//! node with every link slow named as the node, a node not ready, a rank that dies and a rank
//! that hangs reported as such with their pairs skipped, and the run completing.

use nvpeer_fleet::coordinator::{
    coordinate, work, CoordinatorConfig, FleetRun, LostKind, PairStatus, WorkerConfig,
};
use nvpeer_fleet::launcher::Rendezvous;
use nvpeer_fleet::proto::ToRank;
use nvpeer_fleet::readiness::{Readiness, RootCause};
use nvpeer_fleet::report::{FleetReport, Outlier, Thresholds};
use nvpeer_fleet::runner::{ConnectJob, Measurement, PairOutcome, PairRunner, ServeJob, Unit};
use nvpeer_fleet::schedule::{rounds, Pairing};
use nvpeer_verdict::Verdict;
use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TOKEN: &str = "fleet-test";

/// The links the clients measured: (round, smaller rank, larger rank).
type Measured = Arc<Mutex<Vec<(u32, u32, u32)>>>;

/// Each link's bandwidth: `fast`, or what `slow` says; integrity always passes. Records what
/// each side was asked to do.
struct Fake {
    rank: u32,
    fast: f64,
    slow: Vec<((u32, u32), f64)>,
    log: Measured,
}

impl PairRunner for Fake {
    fn serve(&self, _job: &ServeJob) -> Result<(), nvpeer_fleet::runner::ServeFailure> {
        Ok(())
    }
    fn connect(&self, job: &ConnectJob) -> PairOutcome {
        let link = (self.rank.min(job.peer), self.rank.max(job.peer));
        self.log.lock().unwrap().push((job.round, link.0, link.1));
        let v = self
            .slow
            .iter()
            .find(|(l, _)| *l == link)
            .map_or(self.fast, |(_, v)| *v);
        PairOutcome {
            measurements: vec![
                Measurement {
                    test: "integrity".into(),
                    unit: Unit::PassFail,
                    value: None,
                    passed: true,
                    detail: "ok".into(),
                    line_rate_min: None,
                },
                Measurement {
                    test: "write_bw".into(),
                    unit: Unit::GBps,
                    value: Some(v),
                    passed: true,
                    detail: String::new(),
                    line_rate_min: None,
                },
            ],
        }
    }
}

fn not_ready() -> Readiness {
    Readiness {
        ready: false,
        verdict: "not_ready".into(),
        causes: vec![RootCause {
            check: "peer.client".into(),
            summary: "no peer-memory client loaded".into(),
            fix: Some("modprobe nvidia-peermem".into()),
        }],
    }
}

struct Setup {
    world: u32,
    slow: Vec<((u32, u32), f64)>,
    not_ready: Vec<u32>,
    /// Ranks played by a hand-written client that joins and then closes (dies) or goes
    /// silent (hangs) at its first pair.
    dies: Vec<u32>,
    hangs: Vec<u32>,
}

fn run_fleet(s: Setup) -> (FleetRun, Measured) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let cfg = CoordinatorConfig {
        world: s.world,
        pairing: Pairing::All,
        serve: nvpeer_harness::cli::ServeArgs {
            token: Some(TOKEN.into()),
            ..Default::default()
        },
        rounds: rounds(Pairing::All, s.world),
        base_port: port,
        join_timeout: Duration::from_secs(20),
        pair_timeout: Duration::from_secs(2),
        grace: Duration::from_millis(500),
        pair_not_ready: false,
        verbose: false,
        handshake_timeout: nvpeer_fleet::coordinator::HANDSHAKE,
        max_pending: nvpeer_fleet::coordinator::MAX_PENDING,
        max_pending_per_source: nvpeer_fleet::coordinator::MAX_PENDING_PER_SOURCE,
    };
    let coord = std::thread::spawn(move || coordinate(&l, &cfg, &|_| Verdict::Passed));
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut ranks = Vec::new();
    for rank in 0..s.world {
        let readiness = if s.not_ready.contains(&rank) {
            not_ready()
        } else {
            Readiness::assumed()
        };
        let wcfg = WorkerConfig {
            rank,
            world: s.world,
            rendezvous: Rendezvous {
                host: "127.0.0.1".into(),
                port,
            },
            token: Some(TOKEN.into()),
            name: format!("n{rank}"),
            addr: None,
            readiness: readiness.clone(),
            join_wait: Duration::from_secs(20),
            pair_timeout: Duration::from_secs(2),
            order_wait: Duration::from_secs(30),
        };
        if s.dies.contains(&rank) || s.hangs.contains(&rank) {
            let hang = s.hangs.contains(&rank);
            ranks.push(std::thread::spawn(move || {
                rogue(&wcfg, hang);
                Verdict::Passed
            }));
            continue;
        }
        let fake = Fake {
            rank,
            fast: 10.0,
            slow: s.slow.clone(),
            log: log.clone(),
        };
        ranks.push(std::thread::spawn(move || {
            work(&wcfg, Arc::new(fake)).expect("worker")
        }));
    }
    let run = coord.join().unwrap();
    for r in ranks {
        r.join().unwrap();
    }
    (run, log)
}

/// A rank that joins properly, then at its first pair closes its connection (`hang`: stops
/// answering for longer than the pair timeout and the grace).
fn rogue(cfg: &WorkerConfig, hang: bool) {
    let mut ch = nvpeer_fleet::coordinator::join_rank0(cfg).unwrap();
    loop {
        match ch.recv::<ToRank>() {
            Ok(ToRank::Order { task, .. }) if task != nvpeer_fleet::proto::Task::Sit => {
                if hang {
                    std::thread::sleep(Duration::from_secs(4));
                }
                return;
            }
            Ok(ToRank::Order { .. }) => continue,
            _ => return,
        }
    }
}

#[test]
fn four_ranks_every_pair_once_one_slow_link_named() {
    let (run, log) = run_fleet(Setup {
        world: 4,
        slow: vec![((1, 2), 1.0)],
        not_ready: vec![],
        dies: vec![],
        hangs: vec![],
    });
    assert_eq!(run.rounds, 3);
    assert_eq!(run.pairs.len(), 6);
    assert!(
        run.pairs.iter().all(|p| p.status == PairStatus::Ran),
        "{:?}",
        run.pairs
    );
    let links: HashSet<(u32, u32)> = log.lock().unwrap().iter().map(|l| (l.1, l.2)).collect();
    assert_eq!(links.len(), 6);
    // No rank in two pairs of a round.
    for round in 0..3 {
        let mut seen = HashSet::new();
        for p in run.pairs.iter().filter(|p| p.round == round) {
            assert!(seen.insert(p.server) && seen.insert(p.client));
        }
    }
    let r = FleetReport::new("test", run, Thresholds::default());
    assert_eq!(r.outliers.len(), 1, "{:?}", r.outliers);
    assert!(matches!(&r.outliers[0], Outlier::Link { a, b, .. } if a == "n1" && b == "n2"));
    assert!(r.not_ready.is_empty() && r.lost.is_empty() && r.failures.is_empty());
    assert_eq!(r.verdict(), Verdict::Failed);
}

#[test]
fn a_node_with_every_link_slow_is_the_suspect() {
    let (run, _) = run_fleet(Setup {
        world: 4,
        slow: vec![((0, 3), 1.0), ((1, 3), 1.0), ((2, 3), 2.0)],
        not_ready: vec![],
        dies: vec![],
        hangs: vec![],
    });
    let r = FleetReport::new("test", run, Thresholds::default());
    assert_eq!(r.outliers.len(), 1, "{:?}", r.outliers);
    assert!(
        matches!(&r.outliers[0], Outlier::Node { node, values, .. } if node == "n3" && values.len() == 3)
    );
}

#[test]
fn not_ready_dead_and_hung_ranks_are_named_and_the_run_completes() {
    let start = Instant::now();
    let (run, log) = run_fleet(Setup {
        world: 4,
        slow: vec![],
        not_ready: vec![3],
        dies: vec![1],
        hangs: vec![2],
    });
    assert!(start.elapsed() < Duration::from_secs(30));
    assert_eq!(run.pairs.len(), 6);
    let node = |r: usize| &run.nodes[r];
    assert_eq!(node(1).lost.as_ref().unwrap().kind, LostKind::Died);
    assert_eq!(node(2).lost.as_ref().unwrap().kind, LostKind::Hung);
    assert!(node(0).lost.is_none() && node(3).lost.is_none());
    // Rank 3 is never paired; ranks 1 and 2 only until they are lost.
    for p in &run.pairs {
        if p.server == 3 || p.client == 3 {
            assert!(matches!(&p.status, PairStatus::Skipped { .. }), "{p:?}");
        }
    }
    assert!(log.lock().unwrap().iter().all(|l| l.1 != 3 && l.2 != 3));
    // Its pair with the one live rank says why.
    let p03 = run
        .pairs
        .iter()
        .find(|p| p.server.min(p.client) == 0 && p.server.max(p.client) == 3)
        .unwrap();
    assert!(
        matches!(&p03.status, PairStatus::Skipped { why } if why.contains("rank 3 (n3) is not ready")),
        "{p03:?}"
    );
    let r = FleetReport::new("test", run, Thresholds::default());
    assert_eq!(r.not_ready.len(), 1);
    assert_eq!(r.not_ready[0].nodes, ["n3"]);
    assert_eq!(r.lost.len(), 2);
    assert!(
        r.outliers.is_empty() && r.failures.is_empty(),
        "{:?} {:?}",
        r.outliers,
        r.failures
    );
    let text = r.text();
    assert!(text.contains("LOST       n1: [NVP-F002] died"), "{text}");
    assert!(text.contains("LOST       n2: [NVP-F003] hung"), "{text}");
}

#[test]
fn a_wrong_token_is_refused() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let cfg = CoordinatorConfig {
        world: 2,
        pairing: Pairing::All,
        serve: nvpeer_harness::cli::ServeArgs {
            token: Some(TOKEN.into()),
            ..Default::default()
        },
        rounds: rounds(Pairing::All, 2),
        base_port: port,
        join_timeout: Duration::from_secs(2),
        pair_timeout: Duration::from_secs(1),
        grace: Duration::from_millis(200),
        pair_not_ready: false,
        verbose: false,
        handshake_timeout: nvpeer_fleet::coordinator::HANDSHAKE,
        max_pending: nvpeer_fleet::coordinator::MAX_PENDING,
        max_pending_per_source: nvpeer_fleet::coordinator::MAX_PENDING_PER_SOURCE,
    };
    let coord = std::thread::spawn(move || coordinate(&l, &cfg, &|_| Verdict::Passed));
    let wcfg = WorkerConfig {
        rank: 1,
        world: 2,
        rendezvous: Rendezvous {
            host: "127.0.0.1".into(),
            port,
        },
        token: Some("wrong".into()),
        name: "n1".into(),
        addr: None,
        readiness: Readiness::assumed(),
        join_wait: Duration::from_secs(5),
        pair_timeout: Duration::from_secs(1),
        order_wait: Duration::from_secs(5),
    };
    let fake = Fake {
        rank: 1,
        fast: 1.0,
        slow: vec![],
        log: Arc::new(Mutex::new(Vec::new())),
    };
    // Both sides prove the token: the rank finds rank 0's proof wrong first and says nothing
    // more.
    let e = work(&wcfg, Arc::new(fake)).unwrap_err();
    assert!(
        e.to_string().contains("does not match this rank's token"),
        "{e}"
    );
    let run = coord.join().unwrap();
    assert!(run.nodes.iter().all(|n| n
        .lost
        .as_ref()
        .is_some_and(|l| l.kind == LostKind::NeverJoined)));
    assert!(run
        .pairs
        .iter()
        .all(|p| matches!(p.status, PairStatus::Skipped { .. })));
}

/// The coordinator's own cost: 4 and 8 ranks on localhost with a runner that returns at once,
/// so the time is the join, the orders and the answers only (docs/validation.md, "Fleet").
#[test]
fn coordinator_cost() {
    for world in [4u32, 8] {
        let start = Instant::now();
        let (run, _) = run_fleet(Setup {
            world,
            slow: vec![],
            not_ready: vec![],
            dies: vec![],
            hangs: vec![],
        });
        let wall = start.elapsed().as_secs_f64();
        assert_eq!(run.pairs.len() as u32, world * (world - 1) / 2);
        println!(
            "coordinator cost: {world} ranks, {} rounds, {} pairs, {} messages, coordinator {:.1} ms, wall {:.1} ms ({:.2} ms per round)",
            run.rounds,
            run.pairs.len(),
            run.messages,
            run.elapsed_s * 1e3,
            wall * 1e3,
            run.elapsed_s * 1e3 / f64::from(run.rounds)
        );
    }
}
