//! Peer-memory counters under `/sys/kernel/mm/memory_peers/<client>/` (contracts.md §1.8).

use crate::error::{EmuError, Result};
use std::collections::BTreeMap;

/// Root of the per-client directories.
pub const ROOT: &str = "/sys/kernel/mm/memory_peers";

/// Counter files, in the order the core documents them.
pub const COUNTERS: [&str; 8] = [
    "num_alloc_mrs",
    "num_dealloc_mrs",
    "num_reg_pages",
    "num_dereg_pages",
    "num_reg_bytes",
    "num_dereg_bytes",
    "num_free_callbacks",
    "version",
];

/// Reads every counter of `client` (`version` as a string, the rest as numbers).
pub fn read(client: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for name in COUNTERS {
        let path = format!("{ROOT}/{client}/{name}");
        let text =
            std::fs::read_to_string(&path).map_err(|source| EmuError::File { path, source })?;
        out.insert(name.to_string(), text.trim_end().to_string());
    }
    Ok(out)
}

/// One numeric counter of `client`.
pub fn counter(client: &str, name: &str) -> Result<u64> {
    let path = format!("{ROOT}/{client}/{name}");
    let text = std::fs::read_to_string(&path).map_err(|source| EmuError::File {
        path: path.clone(),
        source,
    })?;
    text.trim()
        .parse()
        .map_err(|_| EmuError::Invalid(format!("{path}: not a number: {:?}", text.trim())))
}
