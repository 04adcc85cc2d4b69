//! The server against hostile peers: a session that models what [`crate::peer::Target`] holds
//! (without a device) behind the real checks ([`limits::check`]), the tests that play each
//! hostile peer over TCP, and a seeded fuzzer of the wire.

use super::*;
use crate::limits::{self, Caps, View};
use crate::perftest_peer::fake::{self, FakeSide, Then};
use crate::perftest_peer::{self as pp, ServeOpts};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::mpsc;
use std::time::Duration;

/// The most a session was made to take at once.
#[derive(Debug, Default, Clone, Copy)]
struct Worst {
    held: u64,
    qps: u32,
    depth: u32,
    verify: u64,
    perftest: usize,
}

/// A session that keeps what the client's accepted requests would hold, behind the server's
/// checks, and records the most it held.
struct Model {
    caps: Caps,
    bufs: HashMap<u32, u64>,
    next: u32,
    qps: u32,
    depth: Option<u32>,
    worst: Rc<RefCell<Worst>>,
}

impl Model {
    fn new(caps: Caps, worst: Rc<RefCell<Worst>>) -> Self {
        Model {
            caps,
            bufs: HashMap::new(),
            next: 1,
            qps: 0,
            depth: None,
            worst,
        }
    }
}

impl View for Model {
    fn buf_len(&self, id: u32) -> Option<u64> {
        self.bufs.get(&id).copied()
    }
    fn held(&self) -> u64 {
        self.bufs.values().sum()
    }
    fn depth(&self) -> Option<u32> {
        self.depth
    }
    fn qps(&self) -> u32 {
        self.qps
    }
}

impl Session for Model {
    fn handle(&mut self, q: Req) -> Resp {
        if let Err(why) = limits::check(&q, self, &self.caps) {
            return Resp::Err {
                msg: why.to_string(),
                errno: Some(libc::EINVAL),
            };
        }
        let r = match q {
            Req::Alloc { size, .. } => {
                let id = self.next;
                self.next += 1;
                self.bufs.insert(id, size);
                Resp::Buf {
                    id,
                    addr: 0,
                    rkey: 0,
                    len: size,
                }
            }
            Req::Connect { info, depth, keep } => {
                self.qps = if keep { self.qps + 1 } else { 1 };
                self.depth = Some(depth);
                Resp::Conn { info }
            }
            Req::Drop { id } => {
                self.bufs.remove(&id);
                Resp::Ok
            }
            Req::Fill { len, .. } | Req::Verify { len, .. } => {
                let mut w = self.worst.borrow_mut();
                w.verify = w.verify.max(len);
                Resp::Verified { mismatch: None }
            }
            Req::WaitRecv { .. } => Resp::Recv {
                completions: vec![],
            },
            _ => Resp::Ok,
        };
        let held = self.held();
        let mut w = self.worst.borrow_mut();
        w.held = w.held.max(held);
        w.qps = w.qps.max(self.qps);
        w.depth = w.depth.max(self.depth.unwrap_or(0));
        r
    }

    fn perftest(&mut self, s: TcpStream) -> Option<Result<String, String>> {
        let opts = ServeOpts {
            size: 4096,
            gid_given: true,
            mtu: None,
            traffic_class: 0,
            bidirectional: false,
            relaxed_ordering: true,
            pcie_mapping: false,
        };
        let mut side = FakeSide::default();
        let r = pp::serve(s, &mut side, &opts, &self.caps);
        let offered = side.offered.lock().map(|o| o.unwrap_or(0)).unwrap_or(0);
        let mut w = self.worst.borrow_mut();
        w.perftest = w.perftest.max(offered);
        Some(
            r.map(|_| "perftest client finished".into())
                .map_err(|e| e.to_string()),
        )
    }

    fn mem(&self) -> String {
        "host".into()
    }
}

/// A server admitting loopback clients, with `caps`, on a free port.
fn server(caps: Caps) -> (ServeArgs, TcpListener, u16) {
    let a = ServeArgs {
        bind: "127.0.0.1".into(),
        caps,
        ..ServeArgs::default()
    };
    let l = listen(&a, 0).unwrap();
    let port = l.local_addr().unwrap().port();
    (a, l, port)
}

/// The caps with an idle timeout of 0.3 s (the silent peers' tests).
fn short_idle() -> Caps {
    Caps {
        idle_timeout: Duration::from_millis(300),
        ..Caps::default()
    }
}

/// A server with `caps` serving `n` connections ([`serve_n`]): its port and its log to come.
fn serving(caps: Caps, n: usize) -> (u16, mpsc::Receiver<Vec<String>>) {
    let (a, l, port) = server(caps);
    (port, serve_n(a, l, n))
}

/// Serves `n` connections of `l` one after the other on a thread (a [`Model`] each); their log
/// comes back when all are done, so that a test waits for it with a limit instead of hanging.
fn serve_n(a: ServeArgs, l: TcpListener, n: usize) -> mpsc::Receiver<Vec<String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let log = Log::keeping();
        let worst = Rc::new(RefCell::new(Worst::default()));
        for _ in 0..n {
            let Ok((st, peer)) = l.accept() else { return };
            one_client(st, peer, &a, &log, &mut || {
                Model::new(a.caps, worst.clone())
            });
        }
        let _ = tx.send(log.kept());
    });
    rx
}

/// A client that said its hello (no nonce, not `-b`: the server has no token).
fn say_hello(port: u16) -> Channel {
    let mut c = Channel::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
    c.send(&Req::Hello {
        proto: PROTO,
        nonce: None,
        bidirectional: false,
    })
    .unwrap();
    c
}

/// A client of [`say_hello`] that was admitted.
fn hello(port: u16) -> Channel {
    let mut c = say_hello(port);
    assert!(matches!(c.recv::<Resp>(), Ok(Resp::Hello { .. })));
    c
}

fn info() -> crate::verbs::ConnInfo {
    crate::verbs::ConnInfo {
        qpn: 7,
        psn: 8,
        lid: 9,
        gid: [0; 16],
        mtu: 3,
        out_reads: 1,
    }
}

fn error_of(r: Resp) -> String {
    match r {
        Resp::Err { msg, .. } => msg,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

const WAIT: Duration = Duration::from_secs(10);

/// Waits (at most [`WAIT`]) for the log of [`serve_n`]; one of its lines must hold all of `parts`.
fn logged(log: &mpsc::Receiver<Vec<String>>, parts: &[&str]) {
    let log = log.recv_timeout(WAIT).expect("the server is still serving");
    assert!(
        log.iter().any(|m| parts.iter().all(|p| m.contains(p))),
        "{parts:?} not in {log:#?}"
    );
}

#[test]
fn a_qp_flood_with_keep_is_refused_at_the_cap_over_the_wire() {
    let (port, log) = serving(
        Caps {
            max_qps: 4,
            ..Caps::default()
        },
        1,
    );
    let mut c = hello(port);
    let mut conns = 0;
    let mut refused = Vec::new();
    for i in 0..200 {
        let q = Req::Connect {
            info: info(),
            depth: 16,
            keep: i > 0,
        };
        match c.call::<_, Resp>(&q).unwrap() {
            Resp::Conn { .. } => conns += 1,
            r => refused.push(error_of(r)),
        }
    }
    assert_eq!(conns, 4);
    assert_eq!(refused.len(), 196);
    assert!(refused[0].contains("--server-max-qps"), "{}", refused[0]);
    assert!(matches!(c.call::<_, Resp>(&Req::Bye), Ok(Resp::Ok)));
    logged(&log, &["--server-max-qps"]);
}

#[test]
fn an_oversized_verify_is_refused_over_the_wire() {
    let (port, log) = serving(
        Caps {
            mem_limit: 1 << 20,
            verify_limit: 64 << 10,
            ..Caps::default()
        },
        1,
    );
    let mut c = hello(port);
    let id = match c
        .call::<_, Resp>(&Req::Alloc {
            size: 1 << 20,
            host: true,
        })
        .unwrap()
    {
        Resp::Buf { id, .. } => id,
        other => panic!("{other:?}"),
    };
    let verify = |len| Req::Verify {
        id,
        off: 0,
        len,
        seed: 1,
    };
    let e = error_of(c.call(&verify(1 << 20)).unwrap());
    assert!(e.contains("--server-verify-limit"), "{e}");
    assert!(matches!(
        c.call::<_, Resp>(&verify(64 << 10)),
        Ok(Resp::Verified { .. })
    ));
    // More memory than the cap: refused naming its flag.
    let e = error_of(
        c.call(&Req::Alloc {
            size: 1,
            host: false,
        })
        .unwrap(),
    );
    assert!(e.contains("--server-mem-limit"), "{e}");
    drop(c);
    log.recv_timeout(WAIT).unwrap();
}

#[test]
fn a_silent_admitted_client_is_dropped_and_the_next_is_served() {
    let (port, log) = serving(short_idle(), 2);
    let start = Instant::now();
    let mut silent = hello(port);
    let mut next = say_hello(port);
    // The next client is admitted once the silent one is dropped, long before it speaks again.
    assert!(matches!(next.recv::<Resp>(), Ok(Resp::Hello { .. })));
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert!(matches!(next.call::<_, Resp>(&Req::Bye), Ok(Resp::Ok)));
    // The silent one finds why it was dropped, then the end of the connection.
    let e = error_of(silent.recv().unwrap());
    assert!(
        e.contains("silent for 0.3 s (--server-idle-timeout)"),
        "{e}"
    );
    assert!(matches!(silent.recv::<Resp>(), Err(OobError::Closed)));
    logged(
        &log,
        &["dropped: silent for 0.3 s (--server-idle-timeout) after 0 requests (0 failed)"],
    );
}

#[test]
fn a_perftest_client_with_an_oversized_page_size_is_refused() {
    let (port, log) = serving(
        Caps {
            mem_limit: 1 << 20,
            ..Caps::default()
        },
        2,
    );
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    assert_eq!(
        fake::client(s, 1 << 31, Then::Finish),
        "refused in the exchange"
    );
    // The server goes on with the next client.
    assert!(matches!(
        hello(port).call::<_, Resp>(&Req::Bye),
        Ok(Resp::Ok)
    ));
    logged(
        &log,
        &[
            "perftest client: refused: a buffer of 2147483648 bytes",
            "--server-mem-limit",
        ],
    );
}

#[test]
fn a_perftest_client_silent_after_the_handshake_is_dropped_and_the_next_is_served() {
    let (port, log) = serving(short_idle(), 2);
    let start = Instant::now();
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let silent =
        std::thread::spawn(move || fake::client(s, 4096, Then::Silent(Duration::from_secs(4))));
    std::thread::sleep(Duration::from_millis(100));
    let mut next = hello(port);
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert!(matches!(next.call::<_, Resp>(&Req::Bye), Ok(Resp::Ok)));
    logged(
        &log,
        &[
            "its test did not complete within 0.3 s",
            "--server-idle-timeout",
        ],
    );
    assert_eq!(silent.join().unwrap(), "dropped after the exchange");
}

/// One frame of what a fuzzed peer sends.
#[derive(Debug, Clone)]
enum Frame {
    /// A well-formed request, as one line.
    Req(Req),
    /// The first `cut` bytes of a request's line (no newline: the peer stops mid-message).
    Truncated(Req, usize),
    /// Any bytes, as they come.
    Bytes(Vec<u8>),
    /// A line longer than the server accepts (`n` bytes over it).
    Oversized(usize),
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        1u64..=8192,
        Just(64 << 10),
        Just((64 << 10) + 1),
        Just(1 << 20),
        Just((1 << 20) + 1),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

fn small() -> impl Strategy<Value = u32> {
    prop_oneof![0u32..=8, Just(64), Just(65), Just(u32::MAX), any::<u32>()]
}

fn any_req() -> impl Strategy<Value = Req> {
    prop_oneof![
        (size(), any::<bool>()).prop_map(|(size, host)| Req::Alloc { size, host }),
        (small(), any::<bool>()).prop_map(|(depth, keep)| Req::Connect {
            info: info(),
            depth,
            keep
        }),
        (small(), size(), size()).prop_map(|(id, off, len)| Req::Fill {
            id,
            off,
            len,
            seed: 1
        }),
        (small(), size(), size()).prop_map(|(id, off, len)| Req::Verify {
            id,
            off,
            len,
            seed: 1
        }),
        small().prop_map(|id| Req::Free { id }),
        small().prop_map(|id| Req::Drop { id }),
        (small(), size(), size(), small()).prop_map(|(id, off, len, count)| Req::PostRecv {
            id,
            off,
            len,
            count
        }),
        (small(), size()).prop_map(|(count, timeout_ms)| Req::WaitRecv { count, timeout_ms }),
        (small(), any::<Option<[u8; 32]>>()).prop_map(|(proto, nonce)| Req::Hello {
            proto,
            nonce,
            bidirectional: false
        }),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(|proof| Req::Proof { proof }),
        Just(Req::Counters),
        Just(Req::Bye),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        8 => any_req().prop_map(Frame::Req),
        2 => (any_req(), 0usize..64).prop_map(|(q, cut)| Frame::Truncated(q, cut)),
        2 => proptest::collection::vec(any::<u8>(), 0..128).prop_map(Frame::Bytes),
        1 => (1usize..4096).prop_map(Frame::Oversized),
    ]
}

/// A connection: an opening (nvpeer's hello, perftest's version, or anything), then frames.
fn conversation() -> impl Strategy<Value = (u8, Vec<Frame>)> {
    (0u8..4, proptest::collection::vec(frame(), 0..24))
}

fn bytes_of(opening: u8, frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::new();
    match opening {
        // (1: to a server with a token, which answers with its challenge: the frames after it
        // are the answer)
        0 | 1 => {
            out.extend(
                serde_json::to_vec(&Req::Hello {
                    proto: PROTO,
                    nonce: (opening == 1).then_some([7; 32]),
                    bidirectional: false,
                })
                .unwrap(),
            );
            out.push(b'\n');
        }
        // perftest's version, then the frames as its exchange.
        2 => out.extend(b"6.24\0\0\0\0\0\0\0\0\0\0\0\0"),
        _ => {}
    }
    for f in frames {
        match f {
            Frame::Req(q) => {
                out.extend(serde_json::to_vec(q).unwrap());
                out.push(b'\n');
            }
            Frame::Truncated(q, cut) => {
                let line = serde_json::to_vec(q).unwrap();
                out.extend(&line[..(*cut).min(line.len())]);
            }
            Frame::Bytes(b) => out.extend(b),
            Frame::Oversized(n) => {
                out.extend(std::iter::repeat_n(b'[', crate::oob::MAX_LINE + n));
                out.push(b'\n');
            }
        }
    }
    out
}

/// The seed of the fuzzer: `NVPEER_FUZZ_SEED` if set, else from the clock.
fn fuzz_seed() -> u64 {
    std::env::var("NVPEER_FUZZ_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// Random, truncated and oversized frames to the server's whole path for one connection (the
/// opening, the hello, the challenge and its answer, the line decoder, the checks, perftest's exchange): no panic, an end within
/// the timeouts, and never more held than the caps allow. Seeded: a failure prints the seed to
/// rerun it with (`NVPEER_FUZZ_SEED`).
#[test]
fn the_wire_fuzzer_finds_no_panic_and_nothing_beyond_the_caps() {
    let caps = Caps {
        mem_limit: 1 << 20,
        max_qps: 4,
        max_depth: 64,
        verify_limit: 64 << 10,
        hello_timeout: Duration::from_secs(2),
        handshake_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(2),
    };
    let (a, l, port) = server(caps);
    // The same server's options with a token (the conversations that open with a nonce).
    let a_tok = ServeArgs {
        token: Some("fuzz-token".into()),
        ..a.clone()
    };
    let seed = fuzz_seed();
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases: 2048,
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &key));
    let started = Instant::now();
    let result = runner.run(&conversation(), |(opening, frames)| {
        let bytes = bytes_of(opening, &frames);
        let peer = std::thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            // The server may close at any point: what it does not take is left unsent.
            let _ = s.write_all(&bytes);
            let _ = s.shutdown(std::net::Shutdown::Write);
            let _ = std::io::copy(&mut s, &mut std::io::sink());
        });
        let (st, p) = l.accept().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let worst = Rc::new(RefCell::new(Worst::default()));
        let begun = Instant::now();
        let args = if opening == 1 { &a_tok } else { &a };
        one_client(st, p, args, &Log::silent(), &mut || {
            Model::new(caps, worst.clone())
        });
        let took = begun.elapsed();
        peer.join()
            .map_err(|_| TestCaseError::fail("the peer thread panicked"))?;
        let w = *worst.borrow();
        prop_assert!(
            took < Duration::from_secs(5),
            "one connection took {took:?}"
        );
        prop_assert!(w.held <= caps.mem_limit, "{w:?}");
        prop_assert!(w.qps <= caps.max_qps && w.depth <= caps.max_depth, "{w:?}");
        prop_assert!(w.verify <= caps.verify_limit, "{w:?}");
        prop_assert!(w.perftest as u64 <= caps.mem_limit, "{w:?}");
        Ok(())
    });
    if let Err(e) = result {
        panic!("wire fuzzer: {e}; rerun with NVPEER_FUZZ_SEED={seed}");
    }
    eprintln!(
        "wire fuzzer: 2048 connections in {:?} (seed {seed})",
        started.elapsed()
    );
}
