//! Which ranks meet in which round. Each node is in at most one pair per round, so a pair's
//! measurement never shares a NIC with another of the same round.
//!
//! * [`Pairing::All`]: a round-robin tournament by the circle method: every pair of N nodes
//!   exactly once, in N-1 rounds (N odd: N rounds, each with one node sitting out, a "bye").
//! * [`Pairing::Ring`]: each node with its two neighbours in rank order (`i` and `i+1 mod N`):
//!   N links, in 2 rounds (3 when N is odd), for fleets too large for N-1 rounds.

use serde::Serialize;

/// `--pairs`: which links are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Pairing {
    /// Every pair of nodes (round-robin tournament, N-1 rounds).
    #[default]
    All,
    /// Each node with its neighbours in rank order (N links, 2 or 3 rounds).
    Ring,
}

/// Two ranks of one round: `server` runs the two-node server, `client` connects to it and
/// measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Pair {
    pub server: u32,
    pub client: u32,
}

impl Pair {
    /// The pair as (smaller rank, larger rank): the link it measures, whoever serves.
    pub fn link(self) -> (u32, u32) {
        (self.server.min(self.client), self.server.max(self.client))
    }

    /// Whether `rank` is one of the two.
    pub fn has(self, rank: u32) -> bool {
        self.server == rank || self.client == rank
    }
}

/// One round: its pairs, and the ranks that sit it out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Round {
    pub index: u32,
    pub pairs: Vec<Pair>,
    pub idle: Vec<u32>,
}

/// The rounds of `pairing` over `n` ranks.
pub fn rounds(pairing: Pairing, n: u32) -> Vec<Round> {
    let raw = match pairing {
        Pairing::All => round_robin(n),
        Pairing::Ring => ring(n),
    };
    raw.into_iter()
        .enumerate()
        .map(|(i, pairs)| {
            let idle = (0..n)
                .filter(|r| !pairs.iter().any(|p| p.has(*r)))
                .collect();
            Round {
                index: i as u32,
                pairs,
                idle,
            }
        })
        .collect()
}

/// The circle method: rank 0 stays put, the others turn one place per round, and position `i`
/// meets position `m-1-i`. For odd `n` a phantom rank `n` makes `m` even; whoever meets it sits
/// out. Who serves: [`oriented`].
fn round_robin(n: u32) -> Vec<Vec<Pair>> {
    if n < 2 {
        return Vec::new();
    }
    let m = n + n % 2;
    let others: Vec<u32> = (1..m).collect();
    (0..m - 1)
        .map(|r| {
            let mut at = Vec::with_capacity(m as usize);
            at.push(0);
            let k = others.len();
            at.extend((0..k).map(|i| others[(i + r as usize) % k]));
            (0..(m / 2) as usize)
                .filter_map(|i| {
                    let (a, b) = (at[i], at[m as usize - 1 - i]);
                    if a >= n || b >= n {
                        return None;
                    }
                    Some(oriented(a, b))
                })
                .collect()
        })
        .collect()
}

/// Who serves in the pair of `a` and `b`: the smaller rank when their sum is odd, the larger
/// when it is even, so that each rank serves in about half of its pairs whatever the schedule.
fn oriented(a: u32, b: u32) -> Pair {
    let (lo, hi) = (a.min(b), a.max(b));
    if (lo + hi) % 2 == 1 {
        Pair {
            server: lo,
            client: hi,
        }
    } else {
        Pair {
            server: hi,
            client: lo,
        }
    }
}

/// The ring's links `(i, i+1 mod n)`: alternate links in rounds 0 and 1; for odd `n` the closing
/// link `(n-1, 0)` gets a round of its own.
fn ring(n: u32) -> Vec<Vec<Pair>> {
    if n < 2 {
        return Vec::new();
    }
    if n == 2 {
        return vec![vec![Pair {
            server: 0,
            client: 1,
        }]];
    }
    let mut out = vec![Vec::new(), Vec::new()];
    for i in 0..n {
        let p = Pair {
            server: i,
            client: (i + 1) % n,
        };
        if n % 2 == 1 && i == n - 1 {
            out.push(vec![p]);
        } else {
            out[(i % 2) as usize].push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// No rank is in two pairs of a round, and idle lists whoever is not paired.
    fn check_rounds(n: u32, rs: &[Round]) -> Result<(), String> {
        for r in rs {
            let mut seen = HashSet::new();
            for p in &r.pairs {
                if p.server == p.client || p.server >= n || p.client >= n {
                    return Err(format!("round {}: bad pair {p:?}", r.index));
                }
                for x in [p.server, p.client] {
                    if !seen.insert(x) {
                        return Err(format!("round {}: rank {x} twice", r.index));
                    }
                }
            }
            for x in &r.idle {
                if !seen.insert(*x) {
                    return Err(format!("round {}: idle rank {x} is paired", r.index));
                }
            }
            if seen.len() != n as usize {
                return Err(format!(
                    "round {}: {} ranks accounted for",
                    r.index,
                    seen.len()
                ));
            }
        }
        Ok(())
    }

    #[test]
    fn small_fleets() {
        assert!(rounds(Pairing::All, 1).is_empty());
        let r = rounds(Pairing::All, 2);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].pairs.len(), 1);
        let r = rounds(Pairing::All, 3);
        assert_eq!(r.len(), 3);
        assert!(r.iter().all(|r| r.pairs.len() == 1 && r.idle.len() == 1));
        let r = rounds(Pairing::All, 4);
        assert_eq!(r.len(), 3);
        assert!(r.iter().all(|r| r.pairs.len() == 2 && r.idle.is_empty()));
        assert_eq!(rounds(Pairing::Ring, 2).len(), 1);
        assert_eq!(rounds(Pairing::Ring, 4).len(), 2);
        assert_eq!(rounds(Pairing::Ring, 5).len(), 3);
    }

    #[test]
    fn servers_alternate() {
        // Over a tournament of 8, each rank serves in 3 or 4 of its 7 pairs.
        let r = rounds(Pairing::All, 8);
        for x in 0..8 {
            let served = r
                .iter()
                .flat_map(|r| &r.pairs)
                .filter(|p| p.server == x)
                .count();
            assert!((2..=5).contains(&served), "rank {x} serves {served}");
        }
    }

    proptest::proptest! {
        /// Every pair of ranks meets exactly once, in N-1 rounds (N when N is odd), and no rank
        /// is in two pairs of one round.
        #[test]
        fn round_robin_meets_every_pair_once(n in 2u32..64) {
            let rs = rounds(Pairing::All, n);
            proptest::prop_assert_eq!(rs.len() as u32, if n % 2 == 0 { n - 1 } else { n });
            check_rounds(n, &rs).map_err(proptest::test_runner::TestCaseError::fail)?;
            let mut links = HashSet::new();
            for p in rs.iter().flat_map(|r| &r.pairs) {
                proptest::prop_assert!(links.insert(p.link()), "{:?} twice", p.link());
            }
            proptest::prop_assert_eq!(links.len() as u32, n * (n - 1) / 2);
        }

        /// The ring measures each neighbour link once, in 2 or 3 rounds.
        #[test]
        fn ring_meets_each_neighbour_once(n in 2u32..200) {
            let rs = rounds(Pairing::Ring, n);
            check_rounds(n, &rs).map_err(proptest::test_runner::TestCaseError::fail)?;
            proptest::prop_assert!(rs.len() <= 3);
            let links: Vec<_> = rs.iter().flat_map(|r| &r.pairs).map(|p| p.link()).collect();
            let unique: HashSet<_> = links.iter().copied().collect();
            proptest::prop_assert_eq!(unique.len(), links.len());
            let want = if n == 2 { 1 } else { n as usize };
            proptest::prop_assert_eq!(links.len(), want);
            for i in 0..n {
                let j = (i + 1) % n;
                proptest::prop_assert!(unique.contains(&(i.min(j), i.max(j))));
            }
        }
    }
}
