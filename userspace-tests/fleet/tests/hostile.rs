//! The coordinator and the ranks against hostile peers on localhost (no RDMA device): a flood of
//! silent and trickling connections, a name with escape sequences, a token of the wrong length,
//! an impostor at the rendezvous port, a rank that steers its peers to another address, and an
//! attacker on the path that alters, replays or drops a frame.

use nvpeer_fleet::coordinator::{
    coordinate, work, CoordinatorConfig, FleetError, FleetRun, LostKind, PairStatus, WorkerConfig,
};
use nvpeer_fleet::launcher::Rendezvous;
use nvpeer_fleet::readiness::{Readiness, RootCause};
use nvpeer_fleet::report::{FleetReport, Thresholds};
use nvpeer_fleet::runner::{ConnectJob, PairOutcome, PairRunner, ServeJob};
use nvpeer_fleet::schedule::{rounds, Pairing};
use nvpeer_verdict::Verdict;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const TOKEN: &str = "fleet-hostile-test-token";

/// Every address a pair was sent to, serve binds and connect hosts alike.
type Seen = Arc<Mutex<Vec<String>>>;

struct Fake(Seen);

impl PairRunner for Fake {
    fn serve(&self, job: &ServeJob) -> Result<(), nvpeer_fleet::runner::ServeFailure> {
        self.0.lock().unwrap().push(job.bind.clone());
        Ok(())
    }
    fn connect(&self, job: &ConnectJob) -> PairOutcome {
        self.0.lock().unwrap().push(job.host.clone());
        PairOutcome::default()
    }
}

fn config(port: u16, world: u32, join: Duration) -> CoordinatorConfig {
    CoordinatorConfig {
        world,
        pairing: Pairing::All,
        serve: nvpeer_harness::cli::ServeArgs {
            token: Some(TOKEN.into()),
            ..Default::default()
        },
        rounds: rounds(Pairing::All, world),
        base_port: port,
        join_timeout: join,
        pair_timeout: Duration::from_secs(1),
        grace: Duration::from_millis(300),
        pair_not_ready: false,
        verbose: false,
        handshake_timeout: Duration::from_millis(500),
        max_pending: 16,
        max_pending_per_source: 16,
    }
}

fn worker(port: u16, rank: u32, world: u32, join: Duration) -> WorkerConfig {
    WorkerConfig {
        rank,
        world,
        rendezvous: Rendezvous {
            host: "127.0.0.1".into(),
            port,
        },
        token: Some(TOKEN.into()),
        name: format!("n{rank}"),
        addr: None,
        readiness: Readiness::assumed(),
        join_wait: join,
        pair_timeout: Duration::from_secs(1),
        order_wait: Duration::from_secs(10),
    }
}

fn start(cfg: CoordinatorConfig) -> (u16, JoinHandle<FleetRun>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let cfg = CoordinatorConfig {
        base_port: port,
        ..cfg
    };
    (
        port,
        std::thread::spawn(move || coordinate(&l, &cfg, &|_| Verdict::Passed)),
    )
}

fn spawn_worker(w: WorkerConfig, seen: &Seen) -> JoinHandle<Result<Verdict, FleetError>> {
    let fake = Arc::new(Fake(seen.clone()));
    std::thread::spawn(move || work(&w, fake))
}

/// Ranks 0 and 1 of a world of two join rank 0 at `port` and each ends with status 0.
fn two_ranks_join(port: u16, join: Duration) {
    let seen = Seen::default();
    let ranks: Vec<_> = (0..2)
        .map(|r| spawn_worker(worker(port, r, 2, join), &seen))
        .collect();
    for r in ranks {
        assert_eq!(r.join().unwrap().unwrap(), Verdict::Passed);
    }
}

/// Many silent connections and a few that trickle a byte at a time, then the real ranks: they
/// still join within a join window shorter than one old per-connection wait.
#[test]
fn a_join_flood_does_not_keep_the_real_ranks_out() {
    let join = Duration::from_secs(4);
    let (port, coord) = start(config(0, 2, join));
    let mut flood = Vec::new();
    for _ in 0..60 {
        flood.push(TcpStream::connect(("127.0.0.1", port)).unwrap());
    }
    let trickle: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                    return;
                };
                for b in br#"{"msg":"hello","proto":"#.iter().cycle().take(40) {
                    if s.write_all(&[*b]).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        })
        .collect();
    let start = Instant::now();
    let seen = Seen::default();
    let ranks: Vec<_> = (0..2)
        .map(|r| spawn_worker(worker(port, r, 2, join), &seen))
        .collect();
    let run = coord.join().unwrap();
    for r in ranks {
        assert_eq!(r.join().unwrap().expect("a real rank"), Verdict::Passed);
    }
    assert!(start.elapsed() < join + Duration::from_secs(3));
    assert!(
        run.nodes.iter().all(|n| n.lost.is_none()),
        "{:?}",
        run.nodes
    );
    assert!(run.pairs.iter().all(|p| p.status == PairStatus::Ran));
    drop(flood);
    for t in trickle {
        t.join().unwrap();
    }
}

/// A name with terminal escape sequences never reaches the run, its report or its files, and
/// neither does an escape sequence in another text a rank sends (a doctor cause).
#[test]
fn escape_sequences_from_a_rank_reach_neither_terminal_nor_report() {
    let join = Duration::from_secs(5);
    let (port, coord) = start(config(0, 2, join));
    let seen = Seen::default();
    let mut w0 = worker(port, 0, 2, join);
    w0.readiness = Readiness {
        ready: false,
        verdict: "not_ready\u{1b}[2J".into(),
        causes: vec![RootCause {
            check: "peer.client\u{1b}]0;owned\u{7}".into(),
            summary: "no client\u{1b}[31m\r\n".into(),
            fix: Some("\u{9b}2J".into()),
        }],
    };
    let mut w1 = worker(port, 1, 2, join);
    w1.name = "n1\u{1b}]0;owned\u{7}\u{1b}[2J".into();
    let r0 = spawn_worker(w0, &seen);
    let r1 = spawn_worker(w1, &seen);
    let e = r1.join().unwrap().unwrap_err().to_string();
    assert!(e.contains("name"), "{e}");
    assert!(!e.contains('\u{1b}'), "{e:?}");
    let run = coord.join().unwrap();
    let _ = r0.join().unwrap();
    for n in &run.nodes {
        assert!(!n.name.chars().any(char::is_control), "{:?}", n.name);
    }
    assert_eq!(
        run.nodes[1].lost.as_ref().map(|l| l.kind),
        Some(LostKind::NeverJoined)
    );
    let report = FleetReport::new("test", run, Thresholds::default());
    let text = report.text();
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{9b}'),
        "{text:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    for f in report.write(dir.path()).unwrap() {
        let bytes = std::fs::read(&f).unwrap();
        assert!(
            !bytes.contains(&0x1b) && !String::from_utf8_lossy(&bytes).contains('\u{9b}'),
            "{}",
            f.display()
        );
    }
}

/// A token shorter or longer than rank 0's is refused like any other wrong token: by the rank,
/// which finds rank 0's proof wrong, and by rank 0, which checks a proof of any length in
/// constant time (`hmac`'s `verify_slice`; a proof of another length than 32 bytes is refused
/// the same way).
#[test]
fn a_token_of_the_wrong_length_is_refused() {
    for token in ["x", "fleet-hostile-test-token-but-longer-than-rank-0s", ""] {
        let join = Duration::from_secs(2);
        let (port, coord) = start(config(0, 2, join));
        let mut w = worker(port, 1, 2, join);
        w.token = Some(token.into());
        let e = work(&w, Arc::new(Fake(Seen::default()))).unwrap_err();
        assert!(
            e.to_string().contains("does not match this rank's token")
                || e.to_string().contains("wrong or missing token"),
            "{token:?}: {e}"
        );
        // A rank that goes on regardless: proofs from tokens of other lengths, and proofs of
        // other lengths, are refused by rank 0.
        for proof in [
            Proof::Token(token),
            Proof::Bytes(vec![0; 31]),
            Proof::Bytes(vec![0; 33]),
            Proof::Bytes(Vec::new()),
            Proof::None,
        ] {
            let why = raw_join(port, proof, 1, "n1", None).unwrap_err();
            assert!(why.contains("wrong or missing token"), "{token:?}: {why}");
        }
        let run = coord.join().unwrap();
        assert!(run.nodes.iter().all(|n| n.lost.is_some()));
    }
}

/// What a hand-made rank proves in its join.
enum Proof<'a> {
    /// A proof made with this token.
    Token(&'a str),
    Bytes(Vec<u8>),
    None,
}

/// A rank that speaks the protocol by hand and does not check rank 0's proof: the join's
/// refusal, or the welcome.
fn raw_join(
    port: u16,
    proof: Proof,
    rank: u32,
    name: &str,
    addr: Option<&str>,
) -> Result<(), String> {
    use nvpeer_fleet::proto::{ToCoordinator, ToRank, FLEET_PROTO};
    use nvpeer_fleet::seal::Frame;
    let mut ch =
        nvpeer_harness::oob::Channel::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
    let rn = nvpeer_fleet::auth::nonce().unwrap();
    ch.send(&ToCoordinator::Hello {
        proto: FLEET_PROTO,
        nonce: rn,
    })
    .unwrap();
    let ToRank::Challenge { nonce: cn, .. } = ch.recv::<ToRank>().unwrap() else {
        panic!("no challenge");
    };
    // (the join's frame is sealed with the proof's token, or with the right one where the
    // proof itself is what is wrong)
    let (proof, seal_with) = match proof {
        Proof::Token(t) => (nvpeer_fleet::auth::rank_proof(t, &cn, &rn, rank, 2), t),
        Proof::Bytes(b) => (Some(b), TOKEN),
        Proof::None => (None, TOKEN),
    };
    let body = serde_json::to_string(&ToCoordinator::Join {
        proof,
        rank,
        world: 2,
        name: name.into(),
        addr: addr.map(Into::into),
        readiness: Readiness::assumed(),
    })
    .unwrap();
    let key = nvpeer_fleet::auth::session_key(seal_with, &rn, &cn).unwrap();
    let mac = nvpeer_fleet::auth::frame_mac(&key, b"to-coordinator", 0, body.as_bytes());
    ch.send(&Frame {
        seq: 0,
        body,
        mac: Some(mac),
    })
    .unwrap();
    // (rank 0's answer read without checking its MAC: this rank may hold another token)
    let answer = ch.recv::<Frame>().unwrap();
    match serde_json::from_str::<ToRank>(&answer.body).unwrap() {
        ToRank::Welcome { .. } => Ok(()),
        ToRank::Refused { why } => Err(why),
        other => panic!("{other:?}"),
    }
}

/// What an on-path attacker does to the frames it relays ([`relay`]).
#[derive(Clone, Copy)]
enum OnPath {
    /// Changes the address in rank 0's first order (the MAC left as it was).
    AlterOrder,
    /// Sends rank 0's welcome twice.
    ReplayWelcome,
    /// Drops rank 0's welcome: its first order arrives as the rank's first frame.
    DropWelcome,
    /// Changes the name in the rank's join.
    AlterJoin,
}

/// Relays one connection between `client` and rank 0 at `port`, line by line, doing `what`.
fn relay(client: TcpStream, port: u16, what: OnPath) {
    use std::io::{BufRead, BufReader};
    let up = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let pipe = |from: TcpStream, mut to: TcpStream, to_rank: bool| {
        std::thread::spawn(move || {
            let mut frames = 0;
            for line in BufReader::new(from).lines() {
                let Ok(mut line) = line else { return };
                // rank 0's challenge and the rank's hello are in clear: frames start after them
                let seq = line
                    .contains("\"seq\"")
                    .then_some(frames)
                    .inspect(|_| frames += 1);
                let mut out = vec![line.clone()];
                match (what, to_rank, seq) {
                    (OnPath::AlterOrder, true, Some(1)) => {
                        line = line.replace("127.0.0.1", "127.0.0.9");
                        out = vec![line];
                    }
                    (OnPath::ReplayWelcome, true, Some(0)) => out.push(line),
                    (OnPath::DropWelcome, true, Some(0)) => out.clear(),
                    (OnPath::AlterJoin, false, Some(0)) => {
                        out = vec![line.replace("\\\"n1\\\"", "\\\"n9\\\"")];
                    }
                    _ => {}
                }
                for l in out {
                    if to.write_all(format!("{l}\n").as_bytes()).is_err() {
                        return;
                    }
                }
            }
            let _ = to.shutdown(std::net::Shutdown::Write);
        })
    };
    pipe(client.try_clone().unwrap(), up.try_clone().unwrap(), false);
    pipe(up, client, true);
}

/// An attacker between a rank and rank 0 that alters, replays or drops a frame after the
/// challenge: the side that receives it refuses it and the connection with it (fleet protocol
/// 2 carried every message after the challenge in clear, so each of these went through).
#[test]
fn a_frame_altered_replayed_or_dropped_on_the_way_is_refused() {
    for what in [
        OnPath::AlterOrder,
        OnPath::ReplayWelcome,
        OnPath::DropWelcome,
        OnPath::AlterJoin,
    ] {
        let join = Duration::from_secs(3);
        let (port, coord) = start(config(0, 2, join));
        let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy_port = proxy.local_addr().unwrap().port();
        std::thread::spawn(move || {
            if let Ok((c, _)) = proxy.accept() {
                relay(c, port, what);
            }
        });
        let seen = Seen::default();
        let r0 = spawn_worker(worker(port, 0, 2, join), &seen);
        let r1 = spawn_worker(worker(proxy_port, 1, 2, join), &seen);
        let e = r1.join().unwrap().unwrap_err().to_string();
        let want = match what {
            OnPath::AlterOrder => "frame 1 fails its MAC",
            OnPath::ReplayWelcome => "frame 0 where frame 1 was due",
            OnPath::DropWelcome => "frame 1 where frame 0 was due",
            OnPath::AlterJoin => "wrong or missing token",
        };
        assert!(e.contains(want), "{want}: {e}");
        let _ = r0.join().unwrap();
        let run = coord.join().unwrap();
        assert!(run.nodes[1].lost.is_some(), "{:?}", run.nodes[1]);
        assert!(
            !seen.lock().unwrap().iter().any(|a| a.contains("127.0.0.9")),
            "an altered address was used"
        );
    }
}

/// What rank 0 itself refuses of a rank that holds the token: a name with escape sequences, an
/// address it does not connect from, another protocol version.
#[test]
fn rank_0_refuses_bad_names_foreign_addresses_and_other_versions() {
    let (port, coord) = start(config(0, 2, Duration::from_secs(3)));
    let why = raw_join(port, Proof::Token(TOKEN), 1, "n1\u{1b}[2J", None).unwrap_err();
    assert!(
        why.contains("rank name") && !why.contains('\u{1b}'),
        "{why:?}"
    );
    let why = raw_join(port, Proof::Token(TOKEN), 1, "n1", Some("10.9.8.7")).unwrap_err();
    assert!(
        why.contains("10.9.8.7") && why.contains("127.0.0.1"),
        "{why}"
    );
    let why = raw_join(port, Proof::Token(TOKEN), 1, "n1", Some("head-node")).unwrap_err();
    assert!(why.contains("not an IP address"), "{why}");
    // A rank of protocol 1 opens with its join (and its token): refused, both versions named.
    let mut ch =
        nvpeer_harness::oob::Channel::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
    ch.send(&serde_json::json!({"msg": "join", "proto": 1, "token": TOKEN, "rank": 1}))
        .unwrap();
    let why = match ch.recv::<nvpeer_fleet::proto::ToRank>().unwrap() {
        nvpeer_fleet::proto::ToRank::Refused { why } => why,
        other => panic!("{other:?}"),
    };
    assert!(
        why.contains("fleet protocol 1")
            && why.contains(&format!("speaks {}", nvpeer_fleet::proto::FLEET_PROTO)),
        "{why}"
    );
    assert!(raw_join(port, Proof::Token(TOKEN), 1, "n1", Some("127.0.0.1")).is_ok());
    // (it joined; it left again once it was welcomed)
    let n1 = &coord.join().unwrap().nodes[1];
    assert!(n1.readiness.is_some() && n1.name == "n1", "{n1:?}");
    assert_eq!(n1.addr.as_deref(), Some("127.0.0.1"));
}

/// Beyond `max_pending` handshakes at once, a connection is told to come back at once (not
/// left waiting), and a rank that is told so comes back until it gets in.
#[test]
fn pending_joins_are_capped_and_a_busy_rank_comes_back() {
    let join = Duration::from_secs(5);
    let (port, coord) = start(CoordinatorConfig {
        max_pending: 4,
        handshake_timeout: Duration::from_secs(1),
        ..config(0, 2, join)
    });
    let silent: Vec<_> = (0..4)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut ch =
        nvpeer_harness::oob::Channel::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
    let t = Instant::now();
    let busy = ch
        .recv_within::<nvpeer_fleet::proto::ToRank>(Duration::from_secs(2))
        .unwrap();
    assert!(
        matches!(&busy, nvpeer_fleet::proto::ToRank::Busy { why } if why.contains("--fleet-max-pending")),
        "{busy:?}"
    );
    assert!(t.elapsed() < Duration::from_millis(500));
    two_ranks_join(port, join);
    assert!(coord.join().unwrap().nodes.iter().all(|n| n.lost.is_none()));
    drop(silent);
}

/// One address that holds its share of the handshakes is told to come back for more, while
/// ranks from another address join at once: one host cannot fill every slot.
#[test]
fn one_address_cannot_take_every_pending_join() {
    let join = Duration::from_secs(5);
    // (the flood comes from 127.0.0.2, bound before it connects; the ranks from 127.0.0.1)
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let from_second = || {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&SocketAddr::from(([127, 0, 0, 2], 0)).into())
            .unwrap();
        s.connect(&SocketAddr::from(([127, 0, 0, 1], port)).into())
            .unwrap();
        TcpStream::from(s)
    };
    let cfg = CoordinatorConfig {
        max_pending: 16,
        max_pending_per_source: 3,
        handshake_timeout: Duration::from_secs(4),
        base_port: port,
        ..config(0, 2, join)
    };
    let coord = std::thread::spawn(move || coordinate(&l, &cfg, &|_| Verdict::Passed));
    let silent: Vec<_> = (0..3).map(|_| from_second()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut ch = nvpeer_harness::oob::Channel::from_stream(from_second()).unwrap();
    let busy = ch
        .recv_within::<nvpeer_fleet::proto::ToRank>(Duration::from_secs(2))
        .unwrap();
    assert!(
        matches!(&busy, nvpeer_fleet::proto::ToRank::Busy { why }
            if why.contains("--fleet-max-pending-per-source") && why.contains("127.0.0.2")),
        "{busy:?}"
    );
    // The ranks join while the three silent connections still hold their handshakes.
    let t = Instant::now();
    two_ranks_join(port, join);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(coord.join().unwrap().nodes.iter().all(|n| n.lost.is_none()));
    drop(silent);
}

/// Something else answers at the rendezvous port: whatever it says, the rank never sends it the
/// token and does not take its orders.
#[test]
fn an_impostor_at_the_rendezvous_never_sees_the_token() {
    let replies: [&[u8]; 3] = [
        br#"{"msg":"welcome","rounds":1}"#,
        br#"{"msg":"challenge","proto":2,"nonce":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32],"proof":null}"#,
        br#"{"msg":"challenge","proto":2,"nonce":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32],"proof":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}"#,
    ];
    for reply in replies {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let impostor = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            let end = Instant::now() + Duration::from_secs(2);
            let mut answered = false;
            while Instant::now() < end {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        got.extend_from_slice(&buf[..n]);
                        // Answer the first line, then an order, as a coordinator would.
                        if !answered && got.contains(&b'\n') {
                            answered = true;
                            let _ = s.write_all(reply);
                            let _ = s.write_all(b"\n{\"msg\":\"order\",\"round\":0,\"task\":{\"task\":\"connect\",\"peer\":0,\"host\":\"127.0.0.1\",\"port\":9}}\n");
                        }
                    }
                    Err(_) => continue,
                }
            }
            got
        });
        let mut w = worker(port, 1, 2, Duration::from_secs(2));
        w.order_wait = Duration::from_secs(1);
        let seen = Seen::default();
        let r = work(&w, Arc::new(Fake(seen.clone())));
        let got = impostor.join().unwrap();
        let text = String::from_utf8_lossy(&got);
        assert!(
            !got.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes()),
            "the rank sent the token to an impostor: {text}"
        );
        assert!(r.is_err(), "took orders from an impostor: {r:?}");
        assert!(
            seen.lock().unwrap().is_empty(),
            "{:?}",
            seen.lock().unwrap()
        );
    }
}

/// A rank that announces an address other than the one its connection comes from is refused,
/// and no rank is sent there.
#[test]
fn a_rank_cannot_steer_its_peers_elsewhere() {
    let join = Duration::from_secs(3);
    let (port, coord) = start(config(0, 2, join));
    let seen = Seen::default();
    let mut w1 = worker(port, 1, 2, join);
    w1.addr = Some("198.51.100.7".into());
    let r0 = spawn_worker(worker(port, 0, 2, join), &seen);
    let r1 = spawn_worker(w1, &seen);
    let e1 = r1.join().unwrap();
    let run = coord.join().unwrap();
    let _ = r0.join().unwrap();
    assert!(
        !seen.lock().unwrap().iter().any(|a| a == "198.51.100.7"),
        "{:?}",
        seen.lock().unwrap()
    );
    let e = e1.unwrap_err().to_string();
    assert!(e.contains("198.51.100.7") && e.contains("127.0.0.1"), "{e}");
    assert!(run.nodes[1].lost.is_some());
    // The address it connects from is accepted as its own.
    let (port, coord) = start(config(0, 2, join));
    let mut w1 = worker(port, 1, 2, join);
    w1.addr = Some("127.0.0.1".into());
    let r0 = spawn_worker(worker(port, 0, 2, join), &seen);
    let r1 = spawn_worker(w1, &seen);
    assert_eq!(r1.join().unwrap().unwrap(), Verdict::Passed);
    assert_eq!(r0.join().unwrap().unwrap(), Verdict::Passed);
    let run = coord.join().unwrap();
    assert!(run.pairs.iter().all(|p| p.status == PairStatus::Ran));
}
