//! Peer-memory counters under `/sys/kernel/mm/memory_peers/<client>/` (docs/emulators.md, the core emulator's sysfs), read
//! through `nvpeer_uapi::memory_peers` (the list of files is the one that crate documents).

use crate::error::Result;
use nvpeer_uapi::memory_peers;
use std::collections::BTreeMap;
use std::path::Path;

/// Root of the per-client directories.
pub const ROOT: &str = memory_peers::DIR;

/// Reads every file of `client` (`version` as a string, the counters as decimal text); fails on
/// the first one that cannot be read.
pub fn read(client: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for name in memory_peers::FILES {
        let text = memory_peers::read_file(Path::new("/"), client, name)?;
        out.insert(name.to_string(), text);
    }
    Ok(out)
}

/// One numeric counter of `client`.
pub fn counter(client: &str, name: &str) -> Result<u64> {
    Ok(memory_peers::read_counter(Path::new("/"), client, name)?)
}
