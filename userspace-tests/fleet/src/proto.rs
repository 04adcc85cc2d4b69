//! The messages between the ranks and rank 0's coordinator: JSON lines over the harness's
//! out-of-band [`nvpeer_harness::oob::Channel`], one connection per rank for the whole run.
//!
//! A rank joins (its token, rank, world size, name and doctor verdict); the coordinator welcomes
//! or refuses it. Then, every round, every live rank gets one order (serve, connect, or sit this
//! round out), and each rank of a pair answers once (the server whether it served, the client
//! its measurements). The run ends with `finish` and the fleet's exit status.

use crate::readiness::Readiness;
use crate::runner::PairOutcome;
use serde::{Deserialize, Serialize};

/// Version of these messages; a rank of another version is refused at the join.
pub const FLEET_PROTO: u32 = 1;

/// From a rank to the coordinator.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum ToCoordinator {
    Join {
        proto: u32,
        #[serde(default)]
        token: Option<String>,
        rank: u32,
        world: u32,
        name: String,
        /// The address the rank's pair server listens on and its peers connect to (`--fleet-addr`);
        /// without it, the address the coordinator sees the rank's connection come from.
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
    /// The run is over; `status` is the fleet's exit status (rank 0 writes the report).
    Finish {
        status: u8,
    },
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
            r#"{"msg":"join","proto":1,"rank":1,"world":4,"name":"n1",
                "readiness":{"ready":true,"verdict":"ready","causes":[]}}"#,
        )
        .unwrap();
        assert!(matches!(
            j,
            ToCoordinator::Join {
                token: None,
                addr: None,
                rank: 1,
                ..
            }
        ));
        let s: ToCoordinator =
            serde_json::from_str(r#"{"msg":"served","round":0,"result":{"Err":"no device"}}"#)
                .unwrap();
        assert!(matches!(s, ToCoordinator::Served { result: Err(e), .. } if e == "no device"));
        assert!(serde_json::from_str::<ToRank>(r#"{"msg":"reboot"}"#).is_err());
    }
}
