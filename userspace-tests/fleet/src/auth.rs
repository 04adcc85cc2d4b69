//! The rendezvous handshake's proofs: each side shows it holds the shared token (`--token`,
//! NVPEER_TOKEN) without sending it. The rank opens with a fresh nonce, the coordinator answers
//! with its own and HMAC-SHA256(token, "coordinator" ‖ rank nonce ‖ coordinator nonce); the rank
//! checks that before it says anything more and joins with HMAC-SHA256(token, "rank" ‖
//! coordinator nonce ‖ rank nonce ‖ rank ‖ world size). The labels keep one side's proof from
//! serving as the other's, the fresh nonces keep a recorded proof from serving again, and both
//! checks are the `hmac` crate's constant-time comparison (which takes any length and refuses
//! every length but 32 bytes). An eavesdropper or an impostor learns the nonces and proofs only:
//! nothing that lets it join, unless it can guess the token (a guessable token can be tested
//! offline against one proof: use a random one, docs/validation.md, "Fleet").

pub use nvpeer_harness::auth::{nonce, NoRandom, Nonce};
use nvpeer_harness::auth::{proof, proved};

/// The domain of every proof of this protocol (protocol 2 of the rendezvous).
const DOMAIN: &[u8] = b"nvpeer-fleet-2 ";

/// The coordinator's proof that it holds `token`, for the rank that sent `rank_nonce`.
pub fn coordinator_proof(token: &str, rank_nonce: &Nonce, coord_nonce: &Nonce) -> Option<Vec<u8>> {
    proof(
        token.as_bytes(),
        DOMAIN,
        b"coordinator",
        &[rank_nonce, coord_nonce],
    )
}

/// Whether `got` is the coordinator's proof of `token` for these nonces (constant time).
pub fn coordinator_proved(
    token: &str,
    rank_nonce: &Nonce,
    coord_nonce: &Nonce,
    got: &[u8],
) -> bool {
    proved(
        token.as_bytes(),
        DOMAIN,
        b"coordinator",
        &[rank_nonce, coord_nonce],
        got,
    )
}

/// The rank's proof that it holds `token`, for the coordinator that sent `coord_nonce`.
pub fn rank_proof(
    token: &str,
    coord_nonce: &Nonce,
    rank_nonce: &Nonce,
    rank: u32,
    world: u32,
) -> Option<Vec<u8>> {
    proof(
        token.as_bytes(),
        DOMAIN,
        b"rank",
        &[
            coord_nonce,
            rank_nonce,
            &rank.to_be_bytes(),
            &world.to_be_bytes(),
        ],
    )
}

/// Whether `got` is rank `rank`'s proof of `token` for these nonces (constant time).
pub fn rank_proved(
    token: &str,
    coord_nonce: &Nonce,
    rank_nonce: &Nonce,
    rank: u32,
    world: u32,
    got: &[u8],
) -> bool {
    proved(
        token.as_bytes(),
        DOMAIN,
        b"rank",
        &[
            coord_nonce,
            rank_nonce,
            &rank.to_be_bytes(),
            &world.to_be_bytes(),
        ],
        got,
    )
}

/// The key of one connection's frames ([`crate::seal`]): HMAC-SHA256 of the token over both
/// handshake nonces, so that it differs for every connection and is known to the two ends only.
pub struct SessionKey([u8; 32]);

/// The session key of the connection whose handshake had these nonces.
pub fn session_key(token: &str, rank_nonce: &Nonce, coord_nonce: &Nonce) -> Option<SessionKey> {
    let k = proof(
        token.as_bytes(),
        DOMAIN,
        b"session",
        &[rank_nonce, coord_nonce],
    )?;
    Some(SessionKey(k.try_into().ok()?))
}

/// The MAC of frame `seq` of `direction` carrying `body`.
pub fn frame_mac(key: &SessionKey, direction: &[u8], seq: u64, body: &[u8]) -> Vec<u8> {
    proof(
        &key.0,
        DOMAIN,
        b"frame",
        &[direction, &seq.to_be_bytes(), body],
    )
    .unwrap_or_default()
}

/// Whether `mac` is that MAC (constant time; any other length is refused).
pub fn frame_mac_checks(
    key: &SessionKey,
    direction: &[u8],
    seq: u64,
    body: &[u8],
    mac: &[u8],
) -> bool {
    proved(
        &key.0,
        DOMAIN,
        b"frame",
        &[direction, &seq.to_be_bytes(), body],
        mac,
    )
}

/// The token of one pair's two-node run (round `round`, the server at `server:port`), as hex:
/// the pair's server and client prove it to each other in the harness's handshake instead of
/// the fleet token ([`nvpeer_harness::auth`]); it opens no other pair's server.
pub fn pair_token(token: &str, round: u32, server: &str, port: u16) -> Option<String> {
    let p = proof(
        token.as_bytes(),
        DOMAIN,
        b"pair",
        &[&round.to_be_bytes(), server.as_bytes(), &port.to_be_bytes()],
    )?;
    Some(p.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_check_out_only_with_the_token_and_the_nonces() {
        let (rn, cn) = (nonce().unwrap(), nonce().unwrap());
        assert_ne!(rn, cn);
        let c = coordinator_proof("tok", &rn, &cn).unwrap();
        assert_eq!(c.len(), 32);
        assert!(coordinator_proved("tok", &rn, &cn, &c));
        assert!(!coordinator_proved("tok2", &rn, &cn, &c));
        assert!(!coordinator_proved("tok", &cn, &rn, &c));
        let r = rank_proof("tok", &cn, &rn, 3, 8).unwrap();
        assert!(rank_proved("tok", &cn, &rn, 3, 8, &r));
        assert!(!rank_proved("tok", &cn, &rn, 4, 8, &r));
        // One side's proof is never the other's.
        assert!(!rank_proved("tok", &rn, &cn, 3, 8, &c));
        assert_ne!(c, r);
    }

    #[test]
    fn a_proof_of_the_wrong_length_is_refused() {
        let (rn, cn) = ([1; 32], [2; 32]);
        let r = rank_proof("tok", &cn, &rn, 1, 2).unwrap();
        for bad in [
            &r[..31],
            &r[..0],
            &[r.as_slice(), &[0]].concat()[..],
            &r[..16],
        ] {
            assert!(!rank_proved("tok", &cn, &rn, 1, 2, bad), "{}", bad.len());
            assert!(!coordinator_proved("tok", &rn, &cn, bad));
        }
    }

    #[test]
    fn a_frame_mac_binds_the_connection_the_direction_the_number_and_the_bytes() {
        let (rn, cn) = ([1; 32], [2; 32]);
        let k = session_key("tok", &rn, &cn).unwrap();
        let mac = frame_mac(&k, b"to-rank", 3, b"{}");
        assert_eq!(mac.len(), 32);
        assert!(frame_mac_checks(&k, b"to-rank", 3, b"{}", &mac));
        assert!(!frame_mac_checks(&k, b"to-coordinator", 3, b"{}", &mac));
        assert!(!frame_mac_checks(&k, b"to-rank", 4, b"{}", &mac));
        assert!(!frame_mac_checks(&k, b"to-rank", 3, b"{ }", &mac));
        assert!(!frame_mac_checks(&k, b"to-rank", 3, b"{}", &mac[..31]));
        for other in [
            session_key("tok2", &rn, &cn).unwrap(),
            session_key("tok", &cn, &rn).unwrap(),
            session_key("tok", &rn, &[3; 32]).unwrap(),
        ] {
            assert!(!frame_mac_checks(&other, b"to-rank", 3, b"{}", &mac));
        }
    }

    #[test]
    fn each_pair_has_its_own_token() {
        let t = pair_token("fleet-secret", 2, "10.0.0.4", 18518).unwrap();
        assert_eq!(t.len(), 64);
        assert!(!t.contains("fleet-secret"));
        assert_eq!(
            Some(&t),
            pair_token("fleet-secret", 2, "10.0.0.4", 18518).as_ref()
        );
        for other in [
            pair_token("fleet-secret", 3, "10.0.0.4", 18518),
            pair_token("fleet-secret", 2, "10.0.0.5", 18518),
            pair_token("fleet-secret", 2, "10.0.0.4", 18519),
            pair_token("other", 2, "10.0.0.4", 18518),
        ] {
            assert_ne!(other.as_ref(), Some(&t));
        }
    }
}
