//! Proofs that a side holds a shared secret, without sending it: HMAC-SHA256 keyed by the secret
//! over a protocol's domain, a label naming the side, and fresh nonces of both sides. The
//! two-node channel's handshake (the server's challenge, the client's answer: [`crate::server`])
//! and the fleet's rendezvous (nvpeer-fleet's `auth`) are both built on these.
//!
//! The label keeps one side's proof from serving as the other's, fresh nonces keep a recorded
//! proof from serving again, and every check is the `hmac` crate's constant-time comparison,
//! which refuses any length but 32 bytes. An eavesdropper learns nonces and proofs: nothing that
//! answers another challenge, unless it guesses the secret (a guessable secret can be tested
//! offline against a recorded proof: use a random one).

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// A fresh random value of one handshake.
pub type Nonce = [u8; 32];

type HmacSha256 = Hmac<Sha256>;

/// Why no nonce could be drawn.
#[derive(Debug, thiserror::Error)]
#[error("no random nonce from the OS: {0}")]
pub struct NoRandom(String);

/// A fresh nonce from the OS's random source.
pub fn nonce() -> Result<Nonce, NoRandom> {
    let mut n = [0u8; 32];
    getrandom::fill(&mut n).map_err(|e| NoRandom(e.to_string()))?;
    Ok(n)
}

/// The MAC keyed by `key` over `domain`, `label` and then `parts`, each part preceded by its
/// length (so that no two different inputs read the same).
/// (`None` never happens: HMAC takes a key of any length, a long one hashed first.)
fn keyed(key: &[u8], domain: &[u8], label: &[u8], parts: &[&[u8]]) -> Option<HmacSha256> {
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(key).ok()?;
    m.update(domain);
    m.update(label);
    for p in parts {
        m.update(&(p.len() as u64).to_be_bytes());
        m.update(p);
    }
    Some(m)
}

/// The proof (32 bytes) of `key` for `domain`, `label` and `parts`.
pub fn proof(key: &[u8], domain: &[u8], label: &[u8], parts: &[&[u8]]) -> Option<Vec<u8>> {
    Some(
        keyed(key, domain, label, parts)?
            .finalize()
            .into_bytes()
            .to_vec(),
    )
}

/// Whether `got` is [`proof`] of `key` for these inputs (constant time; any other length is
/// refused).
pub fn proved(key: &[u8], domain: &[u8], label: &[u8], parts: &[&[u8]], got: &[u8]) -> bool {
    keyed(key, domain, label, parts).is_some_and(|m| m.verify_slice(got).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_checks_out_only_with_its_key_domain_label_and_parts() {
        let (a, b) = (nonce().unwrap(), nonce().unwrap());
        assert_ne!(a, b);
        let p = proof(b"k", b"d ", b"server", &[&a, &b]).unwrap();
        assert_eq!(p.len(), 32);
        assert!(proved(b"k", b"d ", b"server", &[&a, &b], &p));
        assert!(!proved(b"k2", b"d ", b"server", &[&a, &b], &p));
        assert!(!proved(b"k", b"e ", b"server", &[&a, &b], &p));
        assert!(!proved(b"k", b"d ", b"client", &[&a, &b], &p));
        assert!(!proved(b"k", b"d ", b"server", &[&b, &a], &p));
        // The lengths are part of the input: one part split in two is another input.
        let joined = [a.as_slice(), b.as_slice()].concat();
        assert!(!proved(b"k", b"d ", b"server", &[&joined], &p));
    }

    #[test]
    fn a_proof_of_the_wrong_length_is_refused() {
        let p = proof(b"k", b"d ", b"l", &[b"x"]).unwrap();
        for bad in [&p[..31], &p[..0], &[p.as_slice(), &[0]].concat()[..]] {
            assert!(!proved(b"k", b"d ", b"l", &[b"x"], bad), "{}", bad.len());
        }
    }
}
