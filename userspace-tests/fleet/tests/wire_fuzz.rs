//! The fleet protocol's wire fuzzer: seeded random, mutated, truncated and oversized frames fed to
//! the message decoders (sealed frames included) and to a live coordinator on localhost, for a
//! bounded time. Nothing
//! panics, rank 0 answers every connection with a refusal (or a challenge), never a welcome, and
//! a real rank still joins afterwards. A failure prints its seed; NVPEER_FLEET_FUZZ_SEED=<seed>
//! replays it.

use nvpeer_fleet::coordinator::{coordinate, work, CoordinatorConfig, WorkerConfig};
use nvpeer_fleet::launcher::Rendezvous;
use nvpeer_fleet::proto::{name_refusal, printable, Opening, ToCoordinator, ToRank};
use nvpeer_fleet::readiness::Readiness;
use nvpeer_fleet::runner::{ConnectJob, PairOutcome, PairRunner, ServeJob};
use nvpeer_fleet::schedule::{rounds, Pairing};
use nvpeer_verdict::Verdict;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOKEN: &str = "fleet-fuzz-token";

/// How long each part of the fuzzer may run.
const BUDGET: Duration = Duration::from_secs(3);

/// Frames of the protocol as a rank or rank 0 would send them: the material that mutations
/// start from.
const TEMPLATES: &[&str] = &[
    r#"{"msg":"hello","proto":3,"nonce":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31]}"#,
    r#"{"msg":"join","proof":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"rank":0,"world":1,"name":"n0","addr":"127.0.0.1","readiness":{"ready":true,"verdict":"ready","causes":[{"check":"c","summary":"s","fix":null}]}}"#,
    r#"{"msg":"join","proto":1,"token":"fleet-fuzz-token","rank":0,"world":1,"name":"n0","readiness":{"ready":true,"verdict":"ready","causes":[]}}"#,
    r#"{"msg":"served","round":0,"result":{"Err":"no device"}}"#,
    r#"{"msg":"measured","round":0,"outcome":{"Ok":{"measurements":[{"test":"write_bw","unit":"g_bps","value":1.5,"passed":true,"detail":""}]}}}"#,
    r#"{"msg":"challenge","proto":3,"nonce":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31],"proof":null}"#,
    r#"{"msg":"order","round":4294967295,"task":{"task":"connect","peer":7,"host":"h","port":65535}}"#,
    r#"{"seq":0,"body":"{\"msg\":\"join\",\"proof\":null,\"rank\":0,\"world\":1,\"name\":\"n0\",\"readiness\":{\"ready\":true,\"verdict\":\"ready\",\"causes\":[]}}","mac":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}"#,
    r#"{"seq":1,"body":"{\"msg\":\"served\",\"round\":0,\"result\":{\"Ok\":null}}","mac":null}"#,
    r#"{"msg":"busy","why":"x"}"#,
    r#"{"msg":"welcome","rounds":3}"#,
    r#"{"msg":"finish","status":255}"#,
];

/// The seed of this run: NVPEER_FLEET_FUZZ_SEED, else the clock.
fn seed() -> u64 {
    std::env::var("NVPEER_FLEET_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

fn runner(seed: u64, cases: u32) -> TestRunner {
    let mut bytes = [0u8; 32];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = seed.to_le_bytes()[i % 8] ^ (i as u8);
    }
    TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    )
}

/// A template changed at one place: cut there, a byte replaced, a run of bytes put in, or the
/// text between two places repeated.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(TEMPLATES),
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
        vec(any::<u8>(), 0..16),
        0..4u8,
    )
        .prop_map(|(t, a, b, junk, how)| {
            let t = t.as_bytes();
            let (i, j) = (a.index(t.len() + 1), b.index(t.len() + 1));
            let (i, j) = (i.min(j), i.max(j));
            match how {
                0 => t[..i].to_vec(),
                1 => {
                    let mut v = t.to_vec();
                    if let (Some(x), Some(y)) = (v.get_mut(i), junk.first()) {
                        *x = *y;
                    }
                    v
                }
                2 => [&t[..i], &junk[..], &t[i..]].concat(),
                _ => [&t[..j], &t[i..j].repeat(8), &t[j..]].concat(),
            }
        })
}

/// One frame: random bytes, random text, a mutated template, or deep nesting.
fn frame() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..300),
        "\\PC{0,200}".prop_map(String::into_bytes),
        mutated(),
        (1..400usize).prop_map(|n| [b"[".repeat(n), b"]".repeat(n)].concat()),
    ]
}

/// Whatever the bytes, the decoders and the text guards return; they never panic.
#[test]
fn decoders_take_any_frame() {
    let seed = seed();
    let start = Instant::now();
    let r = runner(seed, 4000).run(&(frame(), "\\PC{0,100}"), |(f, text)| {
        if start.elapsed() > BUDGET {
            return Ok(());
        }
        let _ = serde_json::from_slice::<Opening>(&f);
        let _ = serde_json::from_slice::<ToCoordinator>(&f);
        let _ = serde_json::from_slice::<ToRank>(&f);
        let _ = serde_json::from_slice::<nvpeer_fleet::seal::Frame>(&f);
        let p = printable(&text);
        prop_assert!(!p.chars().any(char::is_control));
        if name_refusal(&text).is_none() {
            prop_assert!(text.bytes().all(|b| b.is_ascii_graphic()));
        }
        Ok(())
    });
    if let Err(e) = r {
        panic!("fleet wire fuzz failed, seed {seed} (replay: NVPEER_FLEET_FUZZ_SEED={seed}): {e}");
    }
}

struct Idle;

impl PairRunner for Idle {
    fn serve(&self, _job: &ServeJob) -> Result<(), nvpeer_fleet::runner::ServeFailure> {
        Ok(())
    }
    fn connect(&self, _job: &ConnectJob) -> PairOutcome {
        PairOutcome::default()
    }
}

/// Sends `frames` on one connection (each with its newline or not), closes its sending side
/// and returns what rank 0 answered.
fn exchange(port: u16, frames: &[(Vec<u8>, bool)]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    for (f, newline) in frames {
        if s.write_all(f).is_err() || (*newline && s.write_all(b"\n").is_err()) {
            break;
        }
    }
    let _ = s.shutdown(Shutdown::Write);
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

/// Every line rank 0 answers is one of its messages (in clear, or sealed after the challenge),
/// and none is a welcome.
fn answers_are_refusals(got: &[u8]) -> Result<(), String> {
    for line in got.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let sealed = serde_json::from_slice::<nvpeer_fleet::seal::Frame>(line);
        let m = match &sealed {
            Ok(f) => serde_json::from_str::<ToRank>(&f.body),
            Err(_) => serde_json::from_slice::<ToRank>(line),
        };
        match m {
            Ok(ToRank::Refused { .. } | ToRank::Challenge { .. } | ToRank::Busy { .. }) => {}
            other => return Err(format!("{other:?}: {}", String::from_utf8_lossy(line))),
        }
    }
    Ok(())
}

/// A live coordinator takes fuzzed connections, an oversized frame among them, without a panic
/// or a welcome, and the real rank joins afterwards.
#[test]
fn the_coordinator_takes_any_frames_and_still_admits_the_rank() {
    let seed = seed();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let cfg = CoordinatorConfig {
        world: 1,
        pairing: Pairing::All,
        serve: nvpeer_harness::cli::ServeArgs {
            token: Some(TOKEN.into()),
            ..Default::default()
        },
        rounds: rounds(Pairing::All, 1),
        base_port: port,
        join_timeout: Duration::from_secs(30),
        pair_timeout: Duration::from_secs(1),
        grace: Duration::from_millis(200),
        pair_not_ready: false,
        verbose: false,
        handshake_timeout: Duration::from_millis(500),
        max_pending: 8,
        max_pending_per_source: 8,
    };
    let coord = std::thread::spawn(move || coordinate(&l, &cfg, &|_| Verdict::Passed));
    // One byte longer than a frame may be (1 MiB and its newline): refused there, nothing more
    // is read or kept.
    let big = exchange(port, &[(vec![b'['; (1 << 20) + 2], false)]);
    assert!(
        String::from_utf8_lossy(&big).contains("longer than"),
        "{}",
        String::from_utf8_lossy(&big)
    );
    let start = Instant::now();
    let sent = AtomicUsize::new(0);
    let r = runner(seed, 1000).run(&vec((frame(), any::<bool>()), 1..4), |frames| {
        if start.elapsed() > BUDGET {
            return Ok(());
        }
        sent.fetch_add(1, Ordering::Relaxed);
        let got = exchange(port, &frames);
        answers_are_refusals(&got).map_err(TestCaseError::fail)
    });
    if let Err(e) = r {
        panic!("fleet wire fuzz failed, seed {seed} (replay: NVPEER_FLEET_FUZZ_SEED={seed}): {e}");
    }
    println!(
        "fleet wire fuzz: seed {seed}, {} fuzzed connection(s) in {:.2} s",
        sent.load(Ordering::Relaxed),
        start.elapsed().as_secs_f64()
    );
    let w = WorkerConfig {
        rank: 0,
        world: 1,
        rendezvous: Rendezvous {
            host: "127.0.0.1".into(),
            port,
        },
        token: Some(TOKEN.into()),
        name: "n0".into(),
        addr: None,
        readiness: Readiness::assumed(),
        join_wait: Duration::from_secs(10),
        pair_timeout: Duration::from_secs(1),
        order_wait: Duration::from_secs(10),
    };
    assert_eq!(
        work(&w, Arc::new(Idle)).unwrap(),
        Verdict::Passed,
        "seed {seed}"
    );
    let run = coord.join().expect("the coordinator panicked");
    assert!(run.nodes[0].lost.is_none(), "seed {seed}: {:?}", run.nodes);
}
