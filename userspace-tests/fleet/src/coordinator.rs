//! Rank 0's coordinator and every rank's worker.
//!
//! Rank 0 listens on the rendezvous port (through the harness's [`nvpeer_harness::server::listen`]: a
//! network address needs the shared token, or `--allow-any-peer`) and every rank, rank 0's own
//! worker included, connects to it over the harness's [`Channel`] and joins: both sides prove
//! they hold the token without sending it ([`crate::auth`]), then the rank gives its rank, name,
//! address (the one its connection comes from) and doctor verdict; that join and every message
//! after it, both ways, is sealed ([`crate::seal`]). Each connection's handshake
//! runs on its own thread within `--fleet-handshake-timeout`, at most `--fleet-max-pending` at
//! once and `--fleet-max-pending-per-source` from one address (a connection beyond that is told
//! to come back), so silent or trickling connections cannot keep the real ranks out of the join
//! window; what a rank says is kept only as printable
//! text. Then, round by round, the coordinator tells each pair who serves and
//! who connects; the pair runs the harness's two-node mode ([`PairRunner`]) and both sides
//! report. A rank whose connection closes is lost as "died", one that does not answer within the
//! pair timeout (plus a grace) as "hung"; its later pairs are skipped and the run goes on.

use crate::auth::{self, Nonce};
use crate::launcher::Rendezvous;
use crate::proto::{
    name_refusal, printable, printable_outcome, printable_readiness, Opening, Task, ToCoordinator,
    ToRank, FLEET_PROTO,
};
use crate::readiness::Readiness;
use crate::runner::{ConnectJob, Measurement, PairOutcome, PairRunner, ServeJob};
use crate::schedule::{Pair, Pairing, Round};
use crate::seal::{End, Sealed};
use nvpeer_harness::cli::ServeArgs;
use nvpeer_harness::oob::{Channel, OobError};
use nvpeer_harness::server::Refusal;
use nvpeer_verdict::Verdict;
use serde::Serialize;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a new connection has for its whole handshake, hello to join, by default
/// (`--fleet-handshake-timeout`; the two-node server's hello has as long).
pub const HANDSHAKE: Duration = nvpeer_harness::server::PRE_AUTH;

/// How many handshakes rank 0 runs at once by default (`--fleet-max-pending`).
pub const MAX_PENDING: usize = 128;

/// How many of them may come from one address by default (`--fleet-max-pending-per-source`): a
/// node's ranks share its address (one rank per GPU: eight on an HGX node), and twice that leaves
/// room for the retries of ranks told to come back.
pub const MAX_PENDING_PER_SOURCE: usize = 16;

/// How long a send to a rank may wait for it to take the bytes (a rank that stops reading is
/// lost, not a coordinator stuck).
const SEND_WAIT: Duration = Duration::from_secs(10);

/// Refusals logged one by one in a join window; later ones are counted.
const LOGGED_REFUSALS: u64 = 20;

/// Errors that end a rank's part in the run.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("rendezvous {0}: {1}")]
    Rendezvous(Rendezvous, OobError),
    #[error("refused by rank 0: {0}")]
    Refused(String),
    #[error("rank 0 at {0} is not trusted: {1}; this rank sent it its nonce only, not its join")]
    Impostor(Rendezvous, String),
    #[error(
        "rank 0 proves a token and this rank has none: give every rank the same --token (or \
         NVPEER_TOKEN)"
    )]
    TokenWanted,
    #[error("rank 0 speaks fleet protocol {0}, this rank {FLEET_PROTO}: run the same nvpeer on every node")]
    Protocol(u32),
    #[error("rank 0 stayed busy for {} s: {why}", .waited.as_secs_f64())]
    Busy { waited: Duration, why: String },
    #[error("{0}")]
    Name(String),
    #[error(transparent)]
    NoRandom(#[from] auth::NoRandom),
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

impl LostKind {
    /// Its finding's name among the fleet's fault codes (nvpeer_verdict::codes).
    pub fn finding(self) -> &'static str {
        match self {
            LostKind::NeverJoined => "lost.never_joined",
            LostKind::Died => "lost.died",
            LostKind::Hung => "lost.hung",
        }
    }
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
    /// Seconds of it the join took (until every rank joined or the join timeout passed).
    pub joined_s: f64,
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
    /// How long one connection has for its handshake, hello to join (`--fleet-handshake-timeout`).
    pub handshake_timeout: Duration,
    /// How many handshakes run at once (`--fleet-max-pending`); a connection beyond them is told
    /// to come back.
    pub max_pending: usize,
    /// How many of them may come from one source address (`--fleet-max-pending-per-source`); a
    /// connection beyond them is told to come back too.
    pub max_pending_per_source: usize,
}

/// The port of round `round`'s pair servers, if it fits.
pub fn pair_port(base: u16, round: u32) -> Option<u16> {
    u16::try_from(u32::from(base) + 1 + round).ok()
}

struct Slot {
    ch: Option<Sealed>,
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

    /// Accepts joins until every rank joined or the join timeout passed: each connection's
    /// handshake on its own thread, at most `max_pending` at once.
    fn join(&mut self, l: &TcpListener) {
        let deadline = self.start + self.cfg.join_timeout;
        if let Err(e) = l.set_nonblocking(true) {
            self.say(&format!("listener: {e}"));
        }
        let gate = Arc::new(Gate {
            token: self.cfg.serve.token.clone(),
            allow_any_peer: self.cfg.serve.allow_any_peer,
            world: self.cfg.world,
            limit: self.cfg.handshake_timeout,
        });
        let (tx, rx) = mpsc::channel();
        let pending = Pending::default();
        let mut tally = Tally::default();
        while self.slots.iter().any(|s| s.ch.is_none()) && Instant::now() < deadline {
            match l.accept() {
                Ok((stream, peer)) => {
                    self.start_handshake(stream, peer, &gate, &pending, &tx, &mut tally)
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if let Ok(h) = rx.recv_timeout(Duration::from_millis(5)) {
                        self.handshake_done(h, &mut tally);
                    }
                }
                Err(e) => {
                    self.say(&format!("accept failed: {e}; still listening"));
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            while let Ok(h) = rx.try_recv() {
                self.handshake_done(h, &mut tally);
            }
        }
        if tally.refused > LOGGED_REFUSALS {
            self.say(&format!(
                "{} more connection(s) refused (not logged one by one)",
                tally.refused - LOGGED_REFUSALS
            ));
        }
        if tally.busy > 0 {
            self.say(&format!(
                "{} connection(s) told to come back: {} handshakes at once at most (--fleet-max-pending)",
                tally.busy, self.cfg.max_pending
            ));
        }
        if tally.busy_source > 0 {
            self.say(&format!(
                "{} connection(s) told to come back: {} handshakes from one address at once at most \
                 (--fleet-max-pending-per-source)",
                tally.busy_source, self.cfg.max_pending_per_source
            ));
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

    /// Hands a new connection to a handshake thread, or tells it to come back when
    /// `max_pending` handshakes run already, or `max_pending_per_source` from its address.
    fn start_handshake(
        &mut self,
        stream: TcpStream,
        peer: SocketAddr,
        gate: &Arc<Gate>,
        pending: &Pending,
        tx: &mpsc::Sender<Handshake>,
        tally: &mut Tally,
    ) {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_write_timeout(Some(SEND_WAIT));
        let Ok(mut ch) = Channel::from_stream(stream) else {
            return;
        };
        let why = if pending.total.load(Ordering::SeqCst) >= self.cfg.max_pending {
            tally.busy += 1;
            format!(
                "{} joins in progress, the most rank 0 takes at once (--fleet-max-pending)",
                self.cfg.max_pending
            )
        } else if pending.from(peer.ip()) >= self.cfg.max_pending_per_source {
            tally.busy_source += 1;
            format!(
                "{} joins in progress from {}, the most rank 0 takes from one address at once \
                 (--fleet-max-pending-per-source)",
                self.cfg.max_pending_per_source,
                peer.ip()
            )
        } else {
            String::new()
        };
        if !why.is_empty() {
            self.messages += 1;
            let _ = ch.send(&ToRank::Busy { why });
            return;
        }
        let slot = PendingSlot::take(pending, peer.ip());
        let (gate, tx) = (gate.clone(), tx.clone());
        let spawned = std::thread::Builder::new()
            .name("nvpeer-fleet-join".into())
            .stack_size(256 << 10)
            .spawn(move || {
                let _slot = slot;
                let _ = tx.send(gate.handshake(ch, peer));
            });
        if let Err(e) = spawned {
            self.say(&format!("no thread for {}'s join: {e}", peer.ip()));
        }
    }

    /// Takes a finished handshake: welcomes a rank whose place is free.
    fn handshake_done(&mut self, h: Handshake, tally: &mut Tally) {
        match h {
            Handshake::Joined {
                mut ch,
                peer,
                rank,
                node,
                messages,
            } => {
                self.messages += messages + 1;
                if self.slots[rank as usize].ch.is_some() {
                    let why = JoinRefusal::Twice(rank).to_string();
                    self.refused(&peer, &why, tally);
                    let _ = ch.send(&ToRank::Refused { why });
                    return;
                }
                let rounds = self.cfg.rounds.len() as u32;
                if ch.send(&ToRank::Welcome { rounds }).is_ok() {
                    self.say(&format!(
                        "rank {rank} ({}) joined from {}: {}",
                        node.name,
                        peer.ip(),
                        node.readiness.as_ref().map_or("", |r| r.verdict.as_str())
                    ));
                    self.slots[rank as usize] = Slot {
                        ch: Some(*ch),
                        node,
                    };
                }
            }
            Handshake::Refused {
                peer,
                why,
                messages,
            } => {
                self.messages += messages;
                self.refused(&peer, &why, tally);
            }
        }
    }

    fn refused(&self, peer: &SocketAddr, why: &str, tally: &mut Tally) {
        tally.refused += 1;
        if tally.refused <= LOGGED_REFUSALS {
            self.say(&format!("refused {}: {why}", peer.ip()));
        }
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
            Ok(ToCoordinator::Served { round: r, result }) if r == round => {
                Some(ToCoordinator::Served {
                    round,
                    result: result.map_err(|e| printable(&e)),
                })
            }
            Ok(ToCoordinator::Measured { round: r, outcome }) if r == round => {
                Some(ToCoordinator::Measured {
                    round,
                    outcome: outcome.map(printable_outcome).map_err(|e| printable(&e)),
                })
            }
            Ok(other) => {
                self.lose(
                    rank,
                    LostKind::Died,
                    Some(round),
                    printable(&format!("protocol: {other:?} in round {round}")),
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
                self.lose(rank, LostKind::Died, Some(round), printable(&e.to_string()));
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

/// Connections turned away in one join window.
#[derive(Default)]
struct Tally {
    /// Told to come back: `max_pending` handshakes ran already.
    busy: u64,
    /// Told to come back: `max_pending_per_source` handshakes from its address ran already.
    busy_source: u64,
    refused: u64,
}

/// The handshakes running now: how many in all and how many from each source address (an
/// address is in the map while it has one at least).
#[derive(Default, Clone)]
struct Pending {
    total: Arc<AtomicUsize>,
    by_source: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Pending {
    /// The handshakes running from `ip`.
    fn from(&self, ip: IpAddr) -> usize {
        let map = self.by_source.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&ip).copied().unwrap_or(0)
    }
}

/// One of the handshakes that may run at once, counted in all and for its source address, given
/// back when its thread ends.
struct PendingSlot {
    pending: Pending,
    ip: IpAddr,
}

impl PendingSlot {
    fn take(pending: &Pending, ip: IpAddr) -> Self {
        pending.total.fetch_add(1, Ordering::SeqCst);
        *pending
            .by_source
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(ip)
            .or_insert(0) += 1;
        PendingSlot {
            pending: pending.clone(),
            ip,
        }
    }
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        self.pending.total.fetch_sub(1, Ordering::SeqCst);
        let mut map = self
            .pending
            .by_source
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// What a handshake thread found.
enum Handshake {
    Joined {
        ch: Box<Sealed>,
        peer: SocketAddr,
        rank: u32,
        node: NodeRecord,
        messages: u64,
    },
    Refused {
        peer: SocketAddr,
        why: String,
        messages: u64,
    },
}

/// What a handshake needs of the coordinator's configuration.
struct Gate {
    token: Option<String>,
    allow_any_peer: bool,
    world: u32,
    limit: Duration,
}

impl Gate {
    /// One connection's handshake, hello to join (a refusal is sent to the peer: in clear before
    /// the challenge, sealed after it).
    fn handshake(&self, mut ch: Channel, peer: SocketAddr) -> Handshake {
        let mut messages = 0;
        let deadline = Instant::now() + self.limit;
        let refused = |why: JoinRefusal, messages: u64| Handshake::Refused {
            peer,
            why: why.to_string(),
            messages,
        };
        let (rank_nonce, coord_nonce) =
            match self.challenge(&mut ch, &peer, deadline, &mut messages) {
                Ok(n) => n,
                Err(why) => {
                    let _ = ch.send(&ToRank::Refused {
                        why: why.to_string(),
                    });
                    return refused(why, messages + 1);
                }
            };
        let token = self.token.as_deref();
        let mut ch = match Sealed::new(ch, End::Coordinator, token, &rank_nonce, &coord_nonce) {
            Ok(ch) => ch,
            Err(e) => return refused(JoinRefusal::NoJoin(e), messages),
        };
        match self.take_join(
            &mut ch,
            &peer,
            deadline,
            (&rank_nonce, &coord_nonce),
            &mut messages,
        ) {
            Ok((rank, node)) => Handshake::Joined {
                ch: Box::new(ch),
                peer,
                rank,
                node,
                messages,
            },
            Err(why) => {
                let _ = ch.send(&ToRank::Refused {
                    why: why.to_string(),
                });
                refused(why, messages + 1)
            }
        }
    }

    /// How a failed read of the handshake is refused.
    fn recv_refusal(&self, e: OobError) -> JoinRefusal {
        match e {
            OobError::Timeout(_) => JoinRefusal::Slow(self.limit),
            // (the join's frame MAC is keyed by the token: a rank without it fails there first)
            OobError::Forged(_) if self.token.is_some() => Refusal::Token.into(),
            e => JoinRefusal::NoJoin(e),
        }
    }

    /// The hello and the challenge: both nonces (the rank's, then ours).
    fn challenge(
        &self,
        ch: &mut Channel,
        peer: &SocketAddr,
        deadline: Instant,
        messages: &mut u64,
    ) -> Result<(Nonce, Nonce), JoinRefusal> {
        let first = ch
            .recv_within::<Opening>(left_until(deadline))
            .map_err(|e| self.recv_refusal(e))?;
        *messages += 1;
        match first.proto {
            Some(FLEET_PROTO) => {}
            Some(p) => return Err(JoinRefusal::Protocol(p)),
            None => return Err(JoinRefusal::NotAHello),
        }
        let (true, Some(rank_nonce)) = (first.msg == "hello", first.nonce) else {
            return Err(JoinRefusal::NotAHello);
        };
        if self.token.is_none() && !peer.ip().is_loopback() && !self.allow_any_peer {
            return Err(Refusal::NotLoopback(peer.ip()).into());
        }
        let coord_nonce = auth::nonce()?;
        let proof = self
            .token
            .as_deref()
            .and_then(|t| auth::coordinator_proof(t, &rank_nonce, &coord_nonce));
        *messages += 1;
        ch.send(&ToRank::Challenge {
            proto: FLEET_PROTO,
            nonce: coord_nonce,
            proof,
        })
        .map_err(JoinRefusal::NoJoin)?;
        Ok((rank_nonce, coord_nonce))
    }

    /// The sealed join after the challenge: the rank and what rank 0 records of it.
    fn take_join(
        &self,
        ch: &mut Sealed,
        peer: &SocketAddr,
        deadline: Instant,
        (rank_nonce, coord_nonce): (&Nonce, &Nonce),
        messages: &mut u64,
    ) -> Result<(u32, NodeRecord), JoinRefusal> {
        let join = ch
            .recv_within::<ToCoordinator>(left_until(deadline))
            .map_err(|e| self.recv_refusal(e))?;
        *messages += 1;
        let ToCoordinator::Join {
            proof,
            rank,
            world,
            name,
            addr,
            readiness,
        } = join
        else {
            return Err(JoinRefusal::NotAJoin);
        };
        if let Some(t) = &self.token {
            let proved = proof
                .as_deref()
                .is_some_and(|p| auth::rank_proved(t, coord_nonce, rank_nonce, rank, world, p));
            if !proved {
                return Err(Refusal::Token.into());
            }
        }
        self.admit(peer, rank, world, &name, addr.as_deref())?;
        Ok((
            rank,
            NodeRecord {
                rank,
                name,
                addr: Some(peer.ip().to_canonical().to_string()),
                readiness: Some(printable_readiness(readiness)),
                lost: None,
            },
        ))
    }

    /// Whether an authenticated join may take its place (whether the place is free is the
    /// coordinator's to say).
    fn admit(
        &self,
        peer: &SocketAddr,
        rank: u32,
        world: u32,
        name: &str,
        addr: Option<&str>,
    ) -> Result<(), JoinRefusal> {
        if world != self.world {
            return Err(JoinRefusal::World {
                got: world,
                want: self.world,
            });
        }
        if rank >= world {
            return Err(JoinRefusal::RankOutside { rank, world });
        }
        if let Some(why) = name_refusal(name) {
            return Err(JoinRefusal::Name(why));
        }
        let from = peer.ip().to_canonical();
        match addr.map(|a| (a, a.parse::<IpAddr>())) {
            None => Ok(()),
            Some((_, Ok(ip))) if ip.to_canonical() == from => Ok(()),
            Some((a, Ok(_))) => Err(JoinRefusal::AddrElsewhere {
                addr: printable(a),
                from,
            }),
            Some((a, Err(_))) => Err(JoinRefusal::AddrNotIp(printable(a))),
        }
    }
}

/// What is left of the time until `deadline` (at least 1 ms: a zero wait would mean none).
fn left_until(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
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
    verdict: &dyn Fn(&FleetRun) -> Verdict,
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
    let joined_s = c.start.elapsed().as_secs_f64();
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
        joined_s,
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
    #[error("no hello and join within {} s (--fleet-handshake-timeout)", .0.as_secs_f64())]
    Slow(Duration),
    #[error("the first message was not a hello of fleet protocol {FLEET_PROTO}")]
    NotAHello,
    #[error("the message after the challenge was not a join")]
    NotAJoin,
    #[error(transparent)]
    Peer(#[from] Refusal),
    #[error(
        "fleet protocol {0}, this rank 0 speaks {FLEET_PROTO}: run the same nvpeer on every node"
    )]
    Protocol(u32),
    #[error(transparent)]
    NoRandom(#[from] auth::NoRandom),
    #[error("{0}")]
    Name(String),
    #[error(
        "the rank announces {addr} (--fleet-addr) and its connection comes from {from}: rank 0 \
         sends peers only to the address a rank connects from. Leave out --fleet-addr, or give \
         --rendezvous rank 0's address on {addr}'s network, so that the rank connects from {addr}"
    )]
    AddrElsewhere { addr: String, from: IpAddr },
    #[error("--fleet-addr {0} is not an IP address (rank 0 checks it against the connection)")]
    AddrNotIp(String),
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

/// How long a rank waits before it comes back to a busy rank 0.
const BUSY_RETRY: Duration = Duration::from_millis(200);

/// Joins rank 0, coming back while it is busy, until `cfg.join_wait` has passed: the channel
/// the orders come on.
pub fn join_rank0(cfg: &WorkerConfig) -> Result<Sealed, FleetError> {
    let end = Instant::now() + cfg.join_wait;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match join_once(cfg, left)? {
            Ok(ch) => return Ok(ch),
            Err(why) if Instant::now() + BUSY_RETRY >= end => {
                return Err(FleetError::Busy {
                    waited: cfg.join_wait,
                    why: printable(&why),
                })
            }
            Err(_) => std::thread::sleep(BUSY_RETRY),
        }
    }
}

/// One attempt at the handshake: the joined channel, or why rank 0 was busy.
fn join_once(cfg: &WorkerConfig, left: Duration) -> Result<Result<Sealed, String>, FleetError> {
    let rv = &cfg.rendezvous;
    let mut ch = Channel::connect(&rv.host, rv.port, left)
        .map_err(|e| FleetError::Rendezvous(rv.clone(), e))?;
    let rank_nonce = auth::nonce()?;
    ch.send(&ToCoordinator::Hello {
        proto: FLEET_PROTO,
        nonce: rank_nonce,
    })
    .map_err(FleetError::Channel)?;
    // Rank 0 answers as soon as it accepts the connection, which it may start to do later than
    // this rank connects.
    let (coord_nonce, proof) = match ch
        .recv_within::<ToRank>(left + HANDSHAKE)
        .map_err(FleetError::Channel)?
    {
        ToRank::Challenge {
            proto: FLEET_PROTO,
            nonce,
            proof,
        } => (nonce, proof),
        ToRank::Challenge { proto, .. } => return Err(FleetError::Protocol(proto)),
        ToRank::Busy { why } => return Ok(Err(why)),
        ToRank::Refused { why } => return Err(FleetError::Refused(refusal_text(&why))),
        other => {
            return Err(FleetError::Impostor(
                rv.clone(),
                printable(&format!("it answered the hello with {other:?}")),
            ))
        }
    };
    check_coordinator(cfg, &rank_nonce, &coord_nonce, proof.as_deref())?;
    let token = cfg.token.as_deref();
    let mut ch = Sealed::new(ch, End::Rank, token, &rank_nonce, &coord_nonce)
        .map_err(FleetError::Channel)?;
    ch.send(&ToCoordinator::Join {
        proof: cfg
            .token
            .as_deref()
            .and_then(|t| auth::rank_proof(t, &coord_nonce, &rank_nonce, cfg.rank, cfg.world)),
        rank: cfg.rank,
        world: cfg.world,
        name: cfg.name.clone(),
        addr: cfg.addr.clone(),
        readiness: cfg.readiness.clone(),
    })
    .map_err(FleetError::Channel)?;
    match ch
        .recv_within::<ToRank>(HANDSHAKE)
        .map_err(FleetError::Channel)?
    {
        ToRank::Welcome { .. } => Ok(Ok(ch)),
        ToRank::Refused { why } => Err(FleetError::Refused(refusal_text(&why))),
        other => Err(FleetError::Unexpected(printable(&format!("{other:?}")))),
    }
}

/// Whether the challenge proves that rank 0 holds this rank's token (or that neither has one).
fn check_coordinator(
    cfg: &WorkerConfig,
    rank_nonce: &Nonce,
    coord_nonce: &Nonce,
    proof: Option<&[u8]>,
) -> Result<(), FleetError> {
    let impostor = |why: &str| Err(FleetError::Impostor(cfg.rendezvous.clone(), why.into()));
    match (&cfg.token, proof) {
        (Some(t), Some(p)) if auth::coordinator_proved(t, rank_nonce, coord_nonce, p) => Ok(()),
        (Some(_), Some(_)) => {
            impostor("its proof does not match this rank's token (another --token there?)")
        }
        (Some(_), None) => impostor("it did not prove that it holds the token (no --token there?)"),
        (None, Some(_)) => Err(FleetError::TokenWanted),
        (None, None) => Ok(()),
    }
}

/// A refusal's text as this rank shows it: printable, and naming an older rank 0.
fn refusal_text(why: &str) -> String {
    let why = printable(why);
    if why.contains("unknown variant `hello`") {
        format!("{why} (rank 0 runs an older nvpeer, of fleet protocol 1: run the same nvpeer on every node)")
    } else {
        why
    }
}

/// Runs this rank's part: join rank 0, obey every order, return the fleet's verdict.
pub fn work(cfg: &WorkerConfig, runner: Arc<dyn PairRunner>) -> Result<Verdict, FleetError> {
    if let Some(why) = name_refusal(&cfg.name) {
        return Err(FleetError::Name(why));
    }
    let mut ch = join_rank0(cfg)?;
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
