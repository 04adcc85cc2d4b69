//! Rank 0's coordinator and every rank's worker.
//!
//! Rank 0 listens on the rendezvous port (through the harness's [`nvpeer_harness::server::listen`]: a
//! network address needs the shared token, or `--allow-any-peer`) and every rank, rank 0's own
//! worker included, connects to it over the harness's [`Channel`] and joins with its token
//! (checked by [`nvpeer_harness::server::admit`], as the two-node server checks a client's), its rank
//! and its doctor verdict. Then, round by round, the coordinator tells each pair who serves and
//! who connects; the pair runs the harness's two-node mode ([`PairRunner`]) and both sides
//! report. A rank whose connection closes is lost as "died", one that does not answer within the
//! pair timeout (plus a grace) as "hung"; its later pairs are skipped and the run goes on.

use crate::launcher::Rendezvous;
use crate::proto::{Task, ToCoordinator, ToRank, FLEET_PROTO};
use crate::readiness::Readiness;
use crate::runner::{ConnectJob, Measurement, PairOutcome, PairRunner, ServeJob};
use crate::schedule::{Pair, Pairing, Round};
use nvpeer_harness::cli::ServeArgs;
use nvpeer_harness::oob::{Channel, OobError};
use serde::Serialize;
use std::net::{SocketAddr, TcpListener};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// How long a new connection has to send its join (as the two-node server's hello).
pub const JOIN_HELLO: Duration = nvpeer_harness::server::PRE_AUTH;

/// Errors that end a rank's part in the run.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("rendezvous {0}: {1}")]
    Rendezvous(Rendezvous, OobError),
    #[error("refused by rank 0: {0}")]
    Refused(String),
    #[error("rank 0 sent nothing for {} s: the coordinator is gone", .0.as_secs())]
    CoordinatorGone(Duration),
    #[error("rank 0: {0}")]
    Channel(OobError),
    #[error("rank 0 sent {0} where an order was expected")]
    Unexpected(String),
}

/// How a rank was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LostKind {
    /// It never joined within the join timeout.
    NeverJoined,
    /// Its connection closed, or it broke the protocol.
    Died,
    /// It did not answer within the pair timeout and the grace.
    Hung,
}

/// A rank that left the run early.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lost {
    pub kind: LostKind,
    /// The round it was lost in (none: before the first).
    pub round: Option<u32>,
    pub why: String,
}

/// What rank 0 knows of one rank.
#[derive(Debug, Clone, Serialize)]
pub struct NodeRecord {
    pub rank: u32,
    pub name: String,
    pub addr: Option<String>,
    pub readiness: Option<Readiness>,
    pub lost: Option<Lost>,
}

impl NodeRecord {
    /// Whether it joined and the doctor found it ready.
    pub fn ready(&self) -> bool {
        self.readiness.as_ref().is_some_and(|r| r.ready)
    }
}

/// What became of one pair.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum PairStatus {
    /// Both sides ran; the measurements are the client's.
    Ran,
    /// Not run: a rank was not ready, or was lost before or during the round.
    Skipped { why: String },
    /// It ran and did not finish: the client side timed out or the server could not serve.
    Failed { why: String },
}

/// One pair of one round.
#[derive(Debug, Clone, Serialize)]
pub struct PairRecord {
    pub round: u32,
    pub server: u32,
    pub client: u32,
    #[serde(flatten)]
    pub status: PairStatus,
    pub measurements: Vec<Measurement>,
}

/// Everything the coordinator learnt: the input of the report.
#[derive(Debug, Clone, Serialize)]
pub struct FleetRun {
    pub world: u32,
    pub pairing: Pairing,
    pub rounds: u32,
    pub nodes: Vec<NodeRecord>,
    pub pairs: Vec<PairRecord>,
    /// Seconds from the first accept to the last round's end.
    pub elapsed_s: f64,
    /// Messages the coordinator sent and received (joins, welcomes, orders, answers, finishes).
    pub messages: u64,
}

/// How the coordinator runs.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    pub world: u32,
    pub pairing: Pairing,
    /// The token and whom to admit without one (`--token`, `--allow-any-peer`).
    pub serve: ServeArgs,
    pub rounds: Vec<Round>,
    /// The rendezvous port; round `r`'s pair servers listen on `base_port + 1 + r`.
    pub base_port: u16,
    pub join_timeout: Duration,
    pub pair_timeout: Duration,
    /// Added to the pair timeout before a silent rank counts as hung (its own timeout fires
    /// first, and it still has to say so).
    pub grace: Duration,
    /// Pair ranks whose doctor verdict is "not ready" too (default: skip their pairs).
    pub pair_not_ready: bool,
    /// Print progress on stderr.
    pub verbose: bool,
}

/// The port of round `round`'s pair servers, if it fits.
pub fn pair_port(base: u16, round: u32) -> Option<u16> {
    u16::try_from(u32::from(base) + 1 + round).ok()
}

struct Slot {
    ch: Option<Channel>,
    node: NodeRecord,
}

struct Coordinator<'a> {
    cfg: &'a CoordinatorConfig,
    slots: Vec<Slot>,
    start: Instant,
    messages: u64,
}

impl Coordinator<'_> {
    fn say(&self, msg: &str) {
        if self.cfg.verbose {
            eprintln!(
                "[{:9.3}s] nvpeer fleet: {msg}",
                self.start.elapsed().as_secs_f64()
            );
        }
    }

    fn lose(&mut self, rank: u32, kind: LostKind, round: Option<u32>, why: String) {
        let s = &mut self.slots[rank as usize];
        s.ch = None;
        if s.node.lost.is_none() {
            let name = s.node.name.clone();
            s.node.lost = Some(Lost { kind, round, why });
            let kind = match kind {
                LostKind::NeverJoined => "never joined",
                LostKind::Died => "died",
                LostKind::Hung => "hung",
            };
            self.say(&format!("rank {rank} ({name}) {kind}"));
        }
    }

    fn send(&mut self, rank: u32, m: &ToRank, round: Option<u32>) {
        let Some(ch) = self.slots[rank as usize].ch.as_mut() else {
            return;
        };
        self.messages += 1;
        if let Err(e) = ch.send(m) {
            self.lose(rank, LostKind::Died, round, format!("send: {e}"));
        }
    }

    /// Accepts joins until every rank joined or the join timeout passed.
    fn join(&mut self, l: &TcpListener) {
        let deadline = self.start + self.cfg.join_timeout;
        if let Err(e) = l.set_nonblocking(true) {
            self.say(&format!("listener: {e}"));
        }
        let rounds = self.cfg.rounds.len() as u32;
        while self.slots.iter().any(|s| s.ch.is_none()) && Instant::now() < deadline {
            let (stream, peer) = match l.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                Err(e) => {
                    self.say(&format!("accept failed: {e}; still listening"));
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            let _ = stream.set_nonblocking(false);
            let Ok(mut ch) = Channel::from_stream(stream) else {
                continue;
            };
            let join = ch.recv_within::<ToCoordinator>(JOIN_HELLO);
            self.messages += 1;
            match self.admit(join, &peer) {
                Ok((rank, node)) => {
                    self.messages += 1;
                    if ch.send(&ToRank::Welcome { rounds }).is_ok() {
                        self.say(&format!(
                            "rank {rank} ({}) joined from {}: {}",
                            node.name,
                            peer.ip(),
                            node.readiness.as_ref().map_or("", |r| r.verdict.as_str())
                        ));
                        self.slots[rank as usize] = Slot { ch: Some(ch), node };
                    }
                }
                Err(why) => {
                    self.say(&format!("refused {}: {why}", peer.ip()));
                    self.messages += 1;
                    let _ = ch.send(&ToRank::Refused {
                        why: why.to_string(),
                    });
                }
            }
        }
        for r in 0..self.cfg.world {
            if self.slots[r as usize].ch.is_none() && self.slots[r as usize].node.lost.is_none() {
                let why = format!(
                    "did not join within {} s",
                    self.cfg.join_timeout.as_secs_f64()
                );
                self.lose(r, LostKind::NeverJoined, None, why);
            }
        }
    }

    fn admit(
        &self,
        join: Result<ToCoordinator, OobError>,
        peer: &SocketAddr,
    ) -> Result<(u32, NodeRecord), JoinRefusal> {
        let ToCoordinator::Join {
            proto,
            token,
            rank,
            world,
            name,
            addr,
            readiness,
        } = join.map_err(JoinRefusal::NoJoin)?
        else {
            return Err(JoinRefusal::NotAJoin);
        };
        nvpeer_harness::server::admit(&self.cfg.serve, peer, token.as_deref())?;
        if proto != FLEET_PROTO {
            return Err(JoinRefusal::Protocol(proto));
        }
        if world != self.cfg.world {
            return Err(JoinRefusal::World {
                got: world,
                want: self.cfg.world,
            });
        }
        if rank >= world {
            return Err(JoinRefusal::RankOutside { rank, world });
        }
        if self.slots[rank as usize].ch.is_some() {
            return Err(JoinRefusal::Twice(rank));
        }
        Ok((
            rank,
            NodeRecord {
                rank,
                name,
                addr: Some(addr.unwrap_or_else(|| peer.ip().to_string())),
                readiness: Some(readiness),
                lost: None,
            },
        ))
    }

    /// Why a rank cannot be paired now, if it cannot.
    fn unpairable(&self, rank: u32) -> Option<String> {
        let n = &self.slots[rank as usize].node;
        if let Some(l) = &n.lost {
            return Some(format!(
                "rank {rank} ({}) {}",
                n.name,
                match l.kind {
                    LostKind::NeverJoined => "never joined".to_string(),
                    LostKind::Died => format!("died{}", in_round(l.round)),
                    LostKind::Hung => format!("hung{}", in_round(l.round)),
                }
            ));
        }
        if !self.cfg.pair_not_ready && !n.ready() {
            return Some(format!("rank {rank} ({}) is not ready", n.name));
        }
        None
    }

    /// Reads `rank`'s answer for `round` by `deadline`; `None` when the rank was lost.
    fn answer(&mut self, rank: u32, round: u32, deadline: Instant) -> Option<ToCoordinator> {
        let left = deadline.saturating_duration_since(Instant::now());
        let ch = self.slots[rank as usize].ch.as_mut()?;
        let r = ch.recv_within::<ToCoordinator>(left.max(Duration::from_millis(1)));
        self.messages += 1;
        match r {
            Ok(
                m @ (ToCoordinator::Served { round: r, .. }
                | ToCoordinator::Measured { round: r, .. }),
            ) if r == round => Some(m),
            Ok(other) => {
                self.lose(
                    rank,
                    LostKind::Died,
                    Some(round),
                    format!("protocol: {other:?} in round {round}"),
                );
                None
            }
            Err(OobError::Timeout(_)) => {
                let why = format!(
                    "no answer within {} s",
                    (self.cfg.pair_timeout + self.cfg.grace).as_secs_f64()
                );
                self.lose(rank, LostKind::Hung, Some(round), why);
                None
            }
            Err(e) => {
                self.lose(rank, LostKind::Died, Some(round), e.to_string());
                None
            }
        }
    }

    fn round(&mut self, round: &Round, records: &mut Vec<PairRecord>) {
        let r = round.index;
        let Some(port) = pair_port(self.cfg.base_port, r) else {
            for p in &round.pairs {
                records.push(skipped(r, *p, "no TCP port left for this round".into()));
            }
            return;
        };
        let mut tasks: Vec<Option<Task>> = vec![None; self.cfg.world as usize];
        let mut pending = Vec::new();
        for p in &round.pairs {
            match self
                .unpairable(p.server)
                .or_else(|| self.unpairable(p.client))
            {
                Some(why) => records.push(skipped(r, *p, why)),
                None => {
                    let addr = self.slots[p.server as usize]
                        .node
                        .addr
                        .clone()
                        .unwrap_or_default();
                    tasks[p.server as usize] = Some(Task::Serve {
                        peer: p.client,
                        bind: addr.clone(),
                        port,
                    });
                    tasks[p.client as usize] = Some(Task::Connect {
                        peer: p.server,
                        host: addr,
                        port,
                    });
                    pending.push(*p);
                }
            }
        }
        self.say(&format!(
            "round {}/{}: {} pair(s) on port {port}",
            r + 1,
            self.cfg.rounds.len(),
            pending.len()
        ));
        for rank in 0..self.cfg.world {
            let task = tasks[rank as usize].take().unwrap_or(Task::Sit);
            self.send(rank, &ToRank::Order { round: r, task }, Some(r));
        }
        let deadline = Instant::now() + self.cfg.pair_timeout + self.cfg.grace;
        for p in pending {
            let served = self.answer(p.server, r, deadline);
            let measured = self.answer(p.client, r, deadline);
            let record = match (served, measured) {
                (_, None) | (None, _) => {
                    let why = self
                        .unpairable(p.server)
                        .or_else(|| self.unpairable(p.client))
                        .unwrap_or_else(|| "a rank was lost".into());
                    skipped(r, p, why)
                }
                (Some(s), Some(m)) => {
                    let serve_err = match s {
                        ToCoordinator::Served { result: Err(e), .. } => Some(e),
                        _ => None,
                    };
                    match m {
                        ToCoordinator::Measured {
                            outcome: Ok(PairOutcome { measurements }),
                            ..
                        } => PairRecord {
                            round: r,
                            server: p.server,
                            client: p.client,
                            status: match serve_err {
                                Some(e) if measurements.iter().any(|m| !m.passed) => {
                                    PairStatus::Failed {
                                        why: format!("server rank {}: {e}", p.server),
                                    }
                                }
                                _ => PairStatus::Ran,
                            },
                            measurements,
                        },
                        ToCoordinator::Measured {
                            outcome: Err(e), ..
                        } => PairRecord {
                            round: r,
                            server: p.server,
                            client: p.client,
                            status: PairStatus::Failed {
                                why: format!("client rank {}: {e}", p.client),
                            },
                            measurements: Vec::new(),
                        },
                        _ => skipped(r, p, "the client answered as a server".into()),
                    }
                }
            };
            records.push(record);
        }
    }
}

fn in_round(r: Option<u32>) -> String {
    r.map_or_else(String::new, |r| format!(" in round {}", r + 1))
}

fn skipped(round: u32, p: Pair, why: String) -> PairRecord {
    PairRecord {
        round,
        server: p.server,
        client: p.client,
        status: PairStatus::Skipped { why },
        measurements: Vec::new(),
    }
}

/// Runs the whole fleet from rank 0: joins, every round, then `finish` with the status `verdict`
/// gives the run. Returns what was learnt.
pub fn coordinate(
    listener: &TcpListener,
    cfg: &CoordinatorConfig,
    verdict: &dyn Fn(&FleetRun) -> u8,
) -> FleetRun {
    let mut c = Coordinator {
        cfg,
        slots: (0..cfg.world)
            .map(|rank| Slot {
                ch: None,
                node: NodeRecord {
                    rank,
                    name: format!("rank{rank}"),
                    addr: None,
                    readiness: None,
                    lost: None,
                },
            })
            .collect(),
        start: Instant::now(),
        messages: 0,
    };
    c.join(listener);
    let mut records = Vec::new();
    for round in &cfg.rounds {
        c.round(round, &mut records);
    }
    let mut run = FleetRun {
        world: cfg.world,
        pairing: cfg.pairing,
        rounds: cfg.rounds.len() as u32,
        nodes: c.slots.iter().map(|s| s.node.clone()).collect(),
        pairs: records,
        elapsed_s: c.start.elapsed().as_secs_f64(),
        messages: c.messages,
    };
    let status = verdict(&run);
    for rank in 0..cfg.world {
        c.send(rank, &ToRank::Finish { status }, None);
    }
    run.messages = c.messages;
    run.nodes = c.slots.iter().map(|s| s.node.clone()).collect();
    c.say(&format!(
        "done: {} round(s) in {:.3} s, {} message(s)",
        run.rounds, run.elapsed_s, run.messages
    ));
    run
}

/// How a rank's worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub rank: u32,
    pub world: u32,
    pub rendezvous: Rendezvous,
    pub token: Option<String>,
    pub name: String,
    /// `--fleet-addr`: the address peers reach this rank at (else what rank 0 sees).
    pub addr: Option<String>,
    pub readiness: Readiness,
    /// How long to keep trying to reach rank 0 (it may start later than this rank).
    pub join_wait: Duration,
    /// How long one side of a pair may take before it reports a timeout.
    pub pair_timeout: Duration,
    /// How long to wait for the next order before taking rank 0 for gone.
    pub order_wait: Duration,
}

/// Why a side of a pair gave no result (what the coordinator reports for the link).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SideError {
    #[error("cannot start the pair's thread: {0}")]
    Spawn(String),
    #[error("did not finish within {} s", .0.as_secs_f64())]
    Timeout(Duration),
    #[error("the pair's thread panicked")]
    Panicked,
}

/// Why rank 0 refused a rank's join (sent to that rank, which ends with it).
#[derive(Debug, thiserror::Error)]
pub enum JoinRefusal {
    #[error("no join: {0}")]
    NoJoin(OobError),
    #[error("the first message was not a join")]
    NotAJoin,
    #[error(transparent)]
    Peer(#[from] nvpeer_harness::server::Refusal),
    #[error(
        "fleet protocol {0}, this rank 0 speaks {FLEET_PROTO}: run the same nvpeer on every node"
    )]
    Protocol(u32),
    #[error("world size {got}, rank 0's is {want}: the ranks come from different launches")]
    World { got: u32, want: u32 },
    #[error("rank {rank} is not below the world size {world}")]
    RankOutside { rank: u32, world: u32 },
    #[error("rank {0} has joined already")]
    Twice(u32),
}

/// Runs one side of a pair on its own thread, bounded by `limit`: a side that does not finish
/// (a peer that never connects, a wedged device) is left behind and reported as timed out; its
/// port is never used again (each round has its own).
fn bounded<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, SideError> {
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("nvpeer-fleet-pair".into())
        .spawn(move || {
            let _ = tx.send(f());
        });
    if let Err(e) = spawned {
        return Err(SideError::Spawn(e.to_string()));
    }
    match rx.recv_timeout(limit) {
        Ok(v) => Ok(v),
        Err(mpsc::RecvTimeoutError::Timeout) => Err(SideError::Timeout(limit)),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(SideError::Panicked),
    }
}

/// Runs this rank's part: join rank 0, obey every order, return the fleet's exit status.
pub fn work(cfg: &WorkerConfig, runner: Arc<dyn PairRunner>) -> Result<u8, FleetError> {
    let rv = &cfg.rendezvous;
    let mut ch = Channel::connect(&rv.host, rv.port, cfg.join_wait)
        .map_err(|e| FleetError::Rendezvous(rv.clone(), e))?;
    ch.send(&ToCoordinator::Join {
        proto: FLEET_PROTO,
        token: cfg.token.clone(),
        rank: cfg.rank,
        world: cfg.world,
        name: cfg.name.clone(),
        addr: cfg.addr.clone(),
        readiness: cfg.readiness.clone(),
    })
    .map_err(FleetError::Channel)?;
    // Rank 0 answers once it reads the join, which it does when it accepts the connection:
    // after its other ranks' joins at the latest.
    match ch
        .recv_within::<ToRank>(cfg.join_wait + JOIN_HELLO)
        .map_err(FleetError::Channel)?
    {
        ToRank::Welcome { .. } => {}
        ToRank::Refused { why } => return Err(FleetError::Refused(why)),
        other => return Err(FleetError::Unexpected(format!("{other:?}"))),
    }
    loop {
        let m = match ch.recv_within::<ToRank>(cfg.order_wait) {
            Ok(m) => m,
            Err(OobError::Timeout(t)) => return Err(FleetError::CoordinatorGone(t)),
            Err(e) => return Err(FleetError::Channel(e)),
        };
        let (round, task) = match m {
            ToRank::Order { round, task } => (round, task),
            ToRank::Finish { status } => return Ok(status),
            other => return Err(FleetError::Unexpected(format!("{other:?}"))),
        };
        let answer = match task {
            Task::Sit => continue,
            Task::Serve { peer, bind, port } => {
                let job = ServeJob {
                    round,
                    peer,
                    bind,
                    port,
                };
                let r = runner.clone();
                // (on the wire as text: the coordinator reports it for the link)
                let result = match bounded(cfg.pair_timeout, move || r.serve(&job)) {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                ToCoordinator::Served { round, result }
            }
            Task::Connect { peer, host, port } => {
                let job = ConnectJob {
                    round,
                    peer,
                    host,
                    port,
                };
                let r = runner.clone();
                let outcome =
                    bounded(cfg.pair_timeout, move || r.connect(&job)).map_err(|e| e.to_string());
                ToCoordinator::Measured { round, outcome }
            }
        };
        ch.send(&answer).map_err(FleetError::Channel)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_round_has_its_own_port() {
        assert_eq!(pair_port(18515, 0), Some(18516));
        assert_eq!(pair_port(18515, 998), Some(19514));
        assert_eq!(pair_port(65535, 0), None);
    }

    #[test]
    fn a_side_that_never_finishes_is_bounded() {
        let r = bounded(Duration::from_millis(50), || {
            std::thread::sleep(Duration::from_secs(5));
        });
        let e = r.unwrap_err();
        assert_eq!(e, SideError::Timeout(Duration::from_millis(50)));
        assert!(
            e.to_string().contains("did not finish within 0.05 s"),
            "{e}"
        );
        assert_eq!(bounded(Duration::from_secs(5), || 7), Ok(7));
        let r: Result<(), SideError> = bounded(Duration::from_secs(5), || panic!("boom"));
        assert_eq!(r.unwrap_err(), SideError::Panicked);
    }
}
