//! The messages between the ranks and rank 0's coordinator: JSON lines over the harness's
//! out-of-band [`nvpeer_harness::oob::Channel`] (one line is at most 1 MiB, longer ones are
//! refused unread), one connection per rank for the whole run.
//!
//! A rank opens with a hello (the protocol version and its nonce); the coordinator answers with a
//! challenge (its nonce and, with a token, its proof of the token over both nonces: [`crate::auth`]),
//! or turns the connection away as busy (too many joins in progress) or refused. The rank checks
//! the proof before it says anything else, then joins (its own proof, rank, world size, name,
//! address and doctor verdict); the coordinator welcomes or refuses it. The token itself never
//! crosses the wire. From the join on, every message in both directions travels sealed in a
//! [`crate::seal::Frame`]: numbered and, with a token, authenticated under the connection's key. Then, every round, every live rank gets one order (serve, connect, or sit
//! this round out), and each rank of a pair answers once (the server whether it served, the
//! client its measurements). The run ends with `finish` and the fleet's exit status.

use crate::auth::Nonce;
use crate::readiness::Readiness;
use crate::runner::PairOutcome;
use nvpeer_verdict::Verdict;
use serde::{Deserialize, Serialize};

/// Version of these messages; a rank of another version is refused at its first message (3:
/// every message after the challenge sealed, [`crate::seal`]; 2: the challenge-response join with
/// the later messages in clear; 1 sent the token itself).
pub const FLEET_PROTO: u32 = 3;

/// The longest rank name (`--node-name`), in bytes.
pub const MAX_NAME: usize = 64;

/// The longest text a rank sends (a doctor cause, an error, a measurement's detail) that the
/// coordinator keeps; the rest is cut.
pub const MAX_TEXT: usize = 512;

/// The most doctor causes and measurements of one message that the coordinator keeps.
pub const MAX_ITEMS: usize = 64;

/// The coordinator's first read of a connection: just enough to tell a hello of this version
/// from anything else (a rank of another version, whatever its message looks like, is refused
/// with both versions named).
#[derive(Debug, Clone, Deserialize)]
pub struct Opening {
    pub msg: String,
    #[serde(default)]
    pub proto: Option<u32>,
    #[serde(default)]
    pub nonce: Option<Nonce>,
}

/// From a rank to the coordinator.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum ToCoordinator {
    /// The first message: the rank's version and its fresh nonce.
    Hello { proto: u32, nonce: Nonce },
    /// After the coordinator's challenge checked out.
    Join {
        /// The rank's proof of the token ([`crate::auth::rank_proof`]); none without a token.
        #[serde(default)]
        proof: Option<Vec<u8>>,
        rank: u32,
        world: u32,
        name: String,
        /// The address the rank's pair server listens on and its peers connect to
        /// (`--fleet-addr`): it must be the address the coordinator sees the rank's connection
        /// come from, which is also what it uses without one.
        #[serde(default)]
        addr: Option<String>,
        readiness: Readiness,
    },
    /// The serving side of a pair is done (`Err`: why it could not serve, or did not finish in
    /// time).
    Served {
        round: u32,
        result: Result<(), String>,
    },
    /// The connecting side of a pair is done (`Err`: it did not finish in time).
    Measured {
        round: u32,
        outcome: Result<PairOutcome, String>,
    },
}

/// What a rank does in one round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "task", rename_all = "snake_case")]
pub enum Task {
    /// Not paired this round (a bye, a peer that is not ready or was lost).
    Sit,
    /// Serve the rank `peer` on `bind:port` (one client, then stop).
    Serve { peer: u32, bind: String, port: u16 },
    /// Connect to the rank `peer` at `host:port` and run the tests.
    Connect { peer: u32, host: String, port: u16 },
}

/// From the coordinator to a rank.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum ToRank {
    /// The answer to a hello: the coordinator's nonce and, with a token, its proof of it
    /// ([`crate::auth::coordinator_proof`]).
    Challenge {
        proto: u32,
        nonce: Nonce,
        #[serde(default)]
        proof: Option<Vec<u8>>,
    },
    /// Too many joins in progress: try again shortly.
    Busy {
        why: String,
    },
    Welcome {
        rounds: u32,
    },
    Refused {
        why: String,
    },
    Order {
        round: u32,
        task: Task,
    },
    /// The run is over; `status` is the fleet's verdict, as its exit status (rank 0 writes the
    /// report; a status no command exits with is refused).
    Finish {
        status: Verdict,
    },
}

/// Why a rank name is refused, if it is: 1 to [`MAX_NAME`] bytes of ASCII letters, digits and
/// `. _ - : @ +` (a host name, a Kubernetes pod name, a Slurm node name), so that what the report
/// and the terminal show of a node is what it is called and nothing else.
pub fn name_refusal(name: &str) -> Option<String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || ".-_:@+".contains(c);
    if name.is_empty() {
        Some("the rank name is empty".into())
    } else if name.len() > MAX_NAME {
        Some(format!(
            "the rank name {} is longer than {MAX_NAME} bytes",
            printable(name)
        ))
    } else if !name.chars().all(ok) {
        Some(format!(
            "the rank name {} has characters other than ASCII letters, digits and . _ - : @ + \
             (--node-name)",
            printable(name)
        ))
    } else {
        None
    }
}

/// Whether a character would steer a terminal or reorder the text around it: the C0 and C1
/// controls (escape sequences start with ESC or CSI) and Unicode's bidirectional controls.
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` as the coordinator keeps it: every control character written out as `\u{..}`, and
/// cut to [`MAX_TEXT`] characters.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_TEXT));
    for (i, c) in text.chars().enumerate() {
        if i == MAX_TEXT {
            out.push_str("...");
            break;
        }
        if unsafe_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// A rank's doctor verdict as the coordinator keeps it: its texts printable, at most
/// [`MAX_ITEMS`] causes.
pub fn printable_readiness(r: Readiness) -> Readiness {
    Readiness {
        ready: r.ready,
        verdict: printable(&r.verdict),
        causes: r
            .causes
            .into_iter()
            .take(MAX_ITEMS)
            .map(|c| crate::readiness::RootCause {
                check: printable(&c.check),
                summary: printable(&c.summary),
                fix: c.fix.as_deref().map(printable),
            })
            .collect(),
    }
}

/// A client's measurements as the coordinator keeps them: their texts printable, at most
/// [`MAX_ITEMS`].
pub fn printable_outcome(o: PairOutcome) -> PairOutcome {
    PairOutcome {
        measurements: o
            .measurements
            .into_iter()
            .take(MAX_ITEMS)
            .map(|m| crate::runner::Measurement {
                test: printable(&m.test),
                detail: printable(&m.detail),
                ..m
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_stable_json() {
        let m = ToRank::Order {
            round: 2,
            task: Task::Connect {
                peer: 3,
                host: "10.0.0.4".into(),
                port: 18518,
            },
        };
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"msg":"order","round":2,"task":{"task":"connect","peer":3,"host":"10.0.0.4","port":18518}}"#
        );
        let j: ToCoordinator = serde_json::from_str(
            r#"{"msg":"join","rank":1,"world":4,"name":"n1",
                "readiness":{"ready":true,"verdict":"ready","causes":[]}}"#,
        )
        .unwrap();
        assert!(matches!(
            j,
            ToCoordinator::Join {
                proof: None,
                addr: None,
                rank: 1,
                ..
            }
        ));
        // A nonce is exactly 32 bytes.
        let hello = |n: usize| {
            let nonce = vec!["7"; n].join(",");
            serde_json::from_str::<ToCoordinator>(&format!(
                r#"{{"msg":"hello","proto":2,"nonce":[{nonce}]}}"#
            ))
        };
        assert!(matches!(
            hello(32).unwrap(),
            ToCoordinator::Hello { proto: 2, nonce } if nonce == [7; 32]
        ));
        assert!(hello(31).is_err() && hello(33).is_err());
        // A rank of protocol 1 opened with its join: its version is read all the same.
        let o: Opening =
            serde_json::from_str(r#"{"msg":"join","proto":1,"token":"t","rank":0}"#).unwrap();
        assert_eq!((o.msg.as_str(), o.proto, o.nonce), ("join", Some(1), None));
        let s: ToCoordinator =
            serde_json::from_str(r#"{"msg":"served","round":0,"result":{"Err":"no device"}}"#)
                .unwrap();
        assert!(matches!(s, ToCoordinator::Served { result: Err(e), .. } if e == "no device"));
        assert!(serde_json::from_str::<ToRank>(r#"{"msg":"reboot"}"#).is_err());
    }

    #[test]
    fn names_are_plain_and_texts_printable() {
        for ok in [
            "n1",
            "gpu-node-07.cluster",
            "worker_3",
            "rank@host:2",
            "a+b",
        ] {
            assert_eq!(name_refusal(ok), None, "{ok}");
        }
        for bad in [
            "",
            "n1\u{1b}[2J",
            "n 1",
            "n1\n",
            "nöde",
            "a\u{202e}b",
            &"x".repeat(65),
        ] {
            let why = name_refusal(bad).unwrap();
            assert!(!why.chars().any(unsafe_char), "{why:?}");
        }
        assert_eq!(printable("a\u{1b}[31mb\u{7}"), "a\\u{1b}[31mb\\u{7}");
        assert_eq!(printable("12 µs"), "12 µs");
        assert_eq!(printable("\u{9b}2J\u{202e}"), "\\u{9b}2J\\u{202e}");
        let long = printable(&"y".repeat(10 * MAX_TEXT));
        assert_eq!(long.len(), MAX_TEXT + 3);
    }
}
