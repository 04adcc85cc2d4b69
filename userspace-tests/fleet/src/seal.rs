//! Every message after the challenge, sealed: the join, the welcome or refusal, the orders, the
//! answers and the finish each travel as a [`Frame`] that carries its sequence number in its
//! direction and, where the fleet has a token, HMAC-SHA256 under a key of this connection
//! ([`crate::auth::session_key`]: the token over both handshake nonces) over the direction, the
//! number and the message's bytes. The receiver takes frames in order only, each number once, and
//! checks the MAC (constant time) before it reads the message: a frame altered, dropped, replayed
//! from this or another connection, reordered, or sent the other way on the way is refused, and
//! the connection with it. The messages are not hidden (the fleet's results are no secret); the
//! orders and results that steer the ranks and make the report are the joined peers' own.
//!
//! Without a token (loopback, or `--allow-any-peer`) frames carry their numbers only: nothing is
//! authenticated, as the handshake said.

use crate::auth::{self, Nonce, SessionKey};
use nvpeer_harness::oob::{Channel, OobError};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One sealed message on the wire (a JSON line of the harness's channel).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Frame {
    /// The frame's number in its direction, from 0.
    pub seq: u64,
    /// The message, as the JSON text the MAC covers.
    pub body: String,
    /// The MAC ([`crate::auth::frame_mac`]); none without a token.
    #[serde(default)]
    pub mac: Option<Vec<u8>>,
}

/// Which end of the connection this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Rank,
    Coordinator,
}

impl End {
    /// The label of what this end sends.
    fn sends(self) -> &'static [u8] {
        match self {
            End::Rank => b"to-coordinator",
            End::Coordinator => b"to-rank",
        }
    }

    /// The label of what this end receives.
    fn receives(self) -> &'static [u8] {
        match self {
            End::Rank => End::Coordinator.sends(),
            End::Coordinator => End::Rank.sends(),
        }
    }
}

/// A connection of the fleet after its challenge.
pub struct Sealed {
    ch: Channel,
    end: End,
    key: Option<SessionKey>,
    sent: u64,
    received: u64,
}

impl Sealed {
    /// Seals `ch` for `end`, with the key of `token` over the handshake's nonces (none without a
    /// token).
    pub fn new(
        ch: Channel,
        end: End,
        token: Option<&str>,
        rank_nonce: &Nonce,
        coord_nonce: &Nonce,
    ) -> Result<Self, OobError> {
        let key = match token {
            Some(t) => Some(
                auth::session_key(t, rank_nonce, coord_nonce)
                    .ok_or_else(|| OobError::Bad("no session key from the token".into()))?,
            ),
            None => None,
        };
        Ok(Sealed {
            ch,
            end,
            key,
            sent: 0,
            received: 0,
        })
    }

    /// Sends `m` as the next frame of this direction.
    pub fn send<T: Serialize>(&mut self, m: &T) -> Result<(), OobError> {
        let body = serde_json::to_string(m).map_err(|e| OobError::Bad(e.to_string()))?;
        let seq = self.sent;
        let mac = self
            .key
            .as_ref()
            .map(|k| auth::frame_mac(k, self.end.sends(), seq, body.as_bytes()));
        self.ch.send(&Frame { seq, body, mac })?;
        self.sent += 1;
        Ok(())
    }

    /// The next message, within `limit` ([`Channel::recv_within`]); a frame out of order or
    /// whose MAC does not check is `Forged`, its message unread.
    pub fn recv_within<T: DeserializeOwned>(&mut self, limit: Duration) -> Result<T, OobError> {
        let f = self.ch.recv_within::<Frame>(limit)?;
        self.open(f)
    }

    /// The next message, with no deadline of its own (the stream's read timeout).
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<T, OobError> {
        let f = self.ch.recv::<Frame>()?;
        self.open(f)
    }

    fn open<T: DeserializeOwned>(&mut self, f: Frame) -> Result<T, OobError> {
        if f.seq != self.received {
            return Err(OobError::Forged(format!(
                "frame {} where frame {} was due: dropped, replayed or injected on the way",
                f.seq, self.received
            )));
        }
        match (&self.key, &f.mac) {
            (Some(k), Some(mac))
                if auth::frame_mac_checks(
                    k,
                    self.end.receives(),
                    f.seq,
                    f.body.as_bytes(),
                    mac,
                ) => {}
            (Some(_), _) => {
                return Err(OobError::Forged(format!(
                    "frame {} fails its MAC: altered on the way, or not from the peer that proved \
                     the token",
                    f.seq
                )))
            }
            (None, Some(_)) => {
                return Err(OobError::Forged(format!(
                    "frame {} carries a MAC and this side has no token",
                    f.seq
                )))
            }
            (None, None) => {}
        }
        self.received += 1;
        serde_json::from_str(&f.body).map_err(|e| OobError::Bad(e.to_string()))
    }
}
