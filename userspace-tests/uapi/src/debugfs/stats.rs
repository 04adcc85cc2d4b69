//! `stats`: the module's global counters, one `<key> <decimal u64>` line each.

use super::lines::pairs;
use crate::root::read_text;
use crate::Error;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The keys of `stats` in file order (uapi/debugfs.md, `NVPEER_STATS_KEYS` in uapi/nvpeer.h,
/// `counters!` in src/stats.rs). A newer module may append more.
pub const STATS_KEYS: [&str; 44] = [
    "acquire_calls",
    "acquire_claimed",
    "acquire_declined",
    "get_pages_calls",
    "dma_map_calls",
    "dma_unmap_calls",
    "put_pages_calls",
    "get_page_size_calls",
    "release_calls",
    "registrations",
    "live_mrs",
    "pinned_bytes",
    "pinned_bytes_total",
    "repins",
    "callbacks",
    "invalidations",
    "callbacks_unmapped",
    "callbacks_stale",
    "orphaned_pins",
    "provider_get_pages",
    "provider_get_pages_persistent",
    "provider_put_pages",
    "provider_put_pages_persistent",
    "provider_dma_map_pages",
    "provider_dma_unmap_pages",
    "provider_free_page_table",
    "provider_free_dma_mapping",
    "err_pin",
    "err_range",
    "err_page_table_version",
    "err_page_size",
    "err_entries",
    "err_not_pci",
    "err_dma_map",
    "err_dma_mapping_version",
    "err_nomem",
    "err_sgl",
    "err_put",
    "err_unmap",
    "err_revoked",
    "err_order",
    "err_sg_mismatch",
    "overtaken_calls",
    "pin_waits",
];

/// The keys of [`STATS_KEYS`] that are gauges (they go down as well as up); every other counter
/// only grows from 0 at module load.
pub const GAUGES: [&str; 2] = ["live_mrs", "pinned_bytes"];

/// One read of `stats`. Not a snapshot: each counter is exact, the set is not consistent across
/// lines.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Every counter read, documented or not, by key.
    pub values: BTreeMap<String, u64>,
    /// Lines that are not `<key> <u64>` (none from a sound module).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<String>,
}

impl Stats {
    /// Parses the text of `stats`; a malformed line is set aside in [`Stats::rejected`].
    pub fn parse(text: &str) -> Stats {
        let mut s = Stats::default();
        for pair in pairs(text) {
            match pair {
                Ok((k, v)) => match v.parse::<u64>() {
                    Ok(n) => {
                        s.values.insert(k.to_string(), n);
                    }
                    Err(_) => s.rejected.push(format!("{k} {v}")),
                },
                Err(line) => s.rejected.push(line.to_string()),
            }
        }
        s
    }

    /// The counter `key`, when the module printed it.
    pub fn get(&self, key: &str) -> Option<u64> {
        self.values.get(key).copied()
    }

    /// The documented keys this read lacks (an older module, or a truncated read).
    pub fn missing(&self) -> Vec<&'static str> {
        STATS_KEYS
            .into_iter()
            .filter(|k| !self.values.contains_key(*k))
            .collect()
    }

    /// Differences `self - before` of the counters that grew (gauges included when they rose).
    pub fn delta(&self, before: &Stats) -> BTreeMap<String, u64> {
        self.values
            .iter()
            .filter_map(|(k, v)| {
                let d = v.saturating_sub(before.get(k).unwrap_or(0));
                (d > 0).then(|| (k.clone(), d))
            })
            .collect()
    }
}

/// Reads `stats` under `root`.
pub fn read_stats(root: &Path) -> Result<Stats, Error> {
    read_text(&crate::at(root, super::STATS)).map(|t| Stats::parse(&t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;
    use crate::repo_sources::{header_list, repo_file};

    /// What a module with two live registrations prints (first lines, then one unknown key).
    const FIXTURE: &str = "acquire_calls 5\nacquire_claimed 3\nacquire_declined 2\n\
        live_mrs 2\npinned_bytes 131072\npinned_bytes_total 196608\nfuture_key 7\n";

    #[test]
    fn parses_counters_and_keeps_unknown_keys() {
        let s = Stats::parse(FIXTURE);
        assert_eq!(s.get("acquire_claimed"), Some(3));
        assert_eq!(s.get("pinned_bytes"), Some(131072));
        assert_eq!(s.get("future_key"), Some(7));
        assert_eq!(s.get("callbacks"), None);
        assert!(s.rejected.is_empty());
        assert_eq!(s.missing().len(), STATS_KEYS.len() - 6);
        assert!(s.missing().contains(&"pin_waits"));
    }

    #[test]
    fn malformed_lines_are_set_aside() {
        let s = Stats::parse("live_mrs -1\npinned_bytes\nrepins 4\n# out of memory\n");
        assert_eq!(s.get("repins"), Some(4));
        assert_eq!(s.get("live_mrs"), None);
        assert_eq!(s.rejected, vec!["live_mrs -1", "pinned_bytes"]);
    }

    #[test]
    fn deltas_of_what_grew() {
        let before = Stats::parse("acquire_calls 5\nlive_mrs 2\n");
        let after = Stats::parse("acquire_calls 8\nlive_mrs 1\nrepins 1\n");
        let d = after.delta(&before);
        assert_eq!(d.get("acquire_calls"), Some(&3));
        assert_eq!(d.get("repins"), Some(&1));
        assert_eq!(d.get("live_mrs"), None);
    }

    #[test]
    fn read_from_a_tree() {
        let r = FakeRoot::new();
        assert!(matches!(read_stats(r.path()), Err(Error::Read { .. })));
        r.file(super::super::STATS, FIXTURE);
        assert_eq!(
            read_stats(r.path()).map(|s| s.get("live_mrs")).ok(),
            Some(Some(2))
        );
    }

    /// The list is the module's: the header's `NVPEER_STATS_KEYS`, the `counters!` of
    /// src/stats.rs and the table of uapi/debugfs.md, all in file order.
    #[test]
    fn keys_match_the_module() {
        assert_eq!(header_list("NVPEER_STATS_KEYS"), STATS_KEYS);
        {
            let src = repo_file("src/stats.rs");
            let body = src.split("counters! {").nth(1).unwrap_or("");
            let names: Vec<&str> = body
                .lines()
                .map(str::trim)
                .filter(|l| !l.starts_with("///") && l.ends_with(','))
                .map(|l| l.trim_end_matches(','))
                .collect();
            assert_eq!(names, STATS_KEYS);
        }
        {
            let md = repo_file("uapi/debugfs.md");
            let table = md.split("## `stats`").nth(1).unwrap_or("");
            let table = table.split("## ").next().unwrap_or("");
            let keys: Vec<&str> = table
                .lines()
                .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
                .collect();
            assert_eq!(keys, STATS_KEYS);
        }
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses(text in "\\PC{0,200}") {
            let s = Stats::parse(&text);
            proptest::prop_assert!(s.values.len() + s.rejected.len() <= text.lines().count());
        }
    }
}
