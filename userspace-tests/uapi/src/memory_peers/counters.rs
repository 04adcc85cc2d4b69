//! A snapshot of one client's numeric counters, and the client a GPU registration goes through.

use super::{clients, read_counter, read_file, COUNTERS, NV_MEM, VERSION};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// One client's version and counters (the counters that are there and hold a number).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerCounters {
    /// The client's name.
    pub client: String,
    /// Its version string; empty when unreadable.
    pub version: String,
    /// The [`COUNTERS`](super::COUNTERS) read, by name.
    pub values: BTreeMap<String, u64>,
}

impl PeerCounters {
    /// Reads `client` under `root`; what is missing or not a number is left out.
    pub fn read(root: &Path, client: &str) -> PeerCounters {
        PeerCounters {
            client: client.to_string(),
            version: read_file(root, client, VERSION).unwrap_or_default(),
            values: COUNTERS
                .iter()
                .filter_map(|k| Some((k.to_string(), read_counter(root, client, k).ok()?)))
                .collect(),
        }
    }

    /// The counter `k`, 0 when it was not read.
    pub fn get(&self, k: &str) -> u64 {
        self.values.get(k).copied().unwrap_or(0)
    }

    /// Counter differences `self - before` (saturating), only those that moved.
    pub fn delta(&self, before: &PeerCounters) -> BTreeMap<String, u64> {
        self.values
            .iter()
            .filter_map(|(k, v)| {
                let d = v.saturating_sub(before.get(k));
                (d > 0).then(|| (k.clone(), d))
            })
            .collect()
    }
}

/// Every registered client under `root`, sorted by name.
pub fn peer_clients(root: &Path) -> Vec<PeerCounters> {
    clients(root)
        .iter()
        .map(|c| PeerCounters::read(root, c))
        .collect()
}

/// The client a GPU registration should go through: `nv_mem` if present, else the only one.
pub fn main_client(root: &Path) -> Option<PeerCounters> {
    let names = clients(root);
    match names.iter().find(|c| *c == NV_MEM) {
        Some(c) => Some(PeerCounters::read(root, c)),
        None if names.len() == 1 => names.first().map(|c| PeerCounters::read(root, c)),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::DIR;
    use super::*;
    use crate::fake_root::FakeRoot;

    #[test]
    fn counters_and_deltas() {
        let r = FakeRoot::new();
        r.file(&format!("{DIR}/nv_mem/version"), "0.1.0\n")
            .file(&format!("{DIR}/nv_mem/num_alloc_mrs"), "3\n")
            .file(&format!("{DIR}/nv_mem/num_free_callbacks"), "0\n")
            .file(&format!("{DIR}/other/version"), "x\n");
        let before = main_client(r.path());
        assert_eq!(before.as_ref().map(|c| c.client.as_str()), Some("nv_mem"));
        assert_eq!(before.as_ref().map(|c| c.version.as_str()), Some("0.1.0"));
        assert_eq!(before.as_ref().map(|c| c.get("num_alloc_mrs")), Some(3));
        r.file(&format!("{DIR}/nv_mem/num_alloc_mrs"), "5\n")
            .file(&format!("{DIR}/nv_mem/num_free_callbacks"), "1\n");
        let after = main_client(r.path()).unwrap_or_default();
        let dl = after.delta(&before.unwrap_or_default());
        assert_eq!(dl.get("num_alloc_mrs"), Some(&2));
        assert_eq!(dl.get("num_free_callbacks"), Some(&1));
        assert_eq!(dl.get("num_reg_bytes"), None);
        assert_eq!(peer_clients(r.path()).len(), 2);
        assert!(peer_clients(&r.at("/nope")).is_empty());
    }

    #[test]
    fn the_main_client() {
        let r = FakeRoot::new();
        assert_eq!(main_client(r.path()), None);
        r.file(&format!("{DIR}/nv_mem_nc/version"), "0.1.0\n");
        // The only client, whatever its name.
        assert_eq!(
            main_client(r.path()).map(|c| c.client),
            Some("nv_mem_nc".into())
        );
        r.file(&format!("{DIR}/other/version"), "1\n");
        // Two, neither nv_mem: none is the main one.
        assert_eq!(main_client(r.path()), None);
        r.file(&format!("{DIR}/nv_mem/num_alloc_mrs"), "junk\n");
        let c = main_client(r.path()).unwrap_or_default();
        assert_eq!((c.client.as_str(), c.version.as_str()), ("nv_mem", ""));
        assert!(c.values.is_empty());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Whatever a crafted tree holds, the counter is its number or absent.
        #[test]
        fn crafted_counters(counter in "\\PC{0,40}") {
            let r = FakeRoot::new();
            r.file(&format!("{DIR}/nv_mem/num_alloc_mrs"), &counter);
            r.file(&format!("{DIR}/nv_mem/version"), &counter);
            let c = main_client(r.path());
            let n = counter.trim().parse::<u64>().ok();
            proptest::prop_assert_eq!(c.map(|c| c.values.get("num_alloc_mrs").copied()), Some(n));
        }
    }
}
