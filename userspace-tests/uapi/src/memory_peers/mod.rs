//! `/sys/kernel/mm/memory_peers/<client>/`: the peer-memory core's files for each registered
//! client (uapi/interfaces.md). Created by the core (MLNX_OFED / DOCA-OFED `ib_core`), not by
//! nvpeer, and only where the core keeps them: OFED 24.04+ needs a kernel that exports `mm_kobj`.

mod counters;

pub use counters::{main_client, peer_clients, PeerCounters};

use crate::root::{read_text, read_u64};
use crate::Error;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The directory of the clients.
pub const DIR: &str = "/sys/kernel/mm/memory_peers";

/// The client's version string (nvpeer's module version for its clients).
pub const VERSION: &str = "version";

/// The numeric counters of a client, in the order the core creates them.
pub const COUNTERS: [&str; 7] = [
    "num_alloc_mrs",
    "num_dealloc_mrs",
    "num_reg_pages",
    "num_dereg_pages",
    "num_reg_bytes",
    "num_dereg_bytes",
    "num_free_callbacks",
];

/// Every file of a client directory: [`VERSION`], then the [`COUNTERS`] (built from them, so the
/// two lists cannot drift apart).
pub const FILES: [&str; COUNTERS.len() + 1] = {
    let mut files = [VERSION; COUNTERS.len() + 1];
    let mut i = 0;
    while i < COUNTERS.len() {
        files[i + 1] = COUNTERS[i];
        i += 1;
    }
    files
};

/// nvpeer's client: persistent by default, invalidating with `persistent_api_support=0`; the
/// name NCCL, NVSHMEM and UCC probe for.
pub const NV_MEM: &str = "nv_mem";
/// nvpeer's persistent second client with `persistent_api_support=0`.
pub const NV_MEM_NC: &str = "nv_mem_nc";

/// Whether the core keeps the client list under `root` at all.
pub fn listed(root: &Path) -> bool {
    crate::at(root, DIR).is_dir()
}

/// The directory of `client` under `root`.
pub fn client_dir(root: &Path, client: &str) -> PathBuf {
    crate::at(root, DIR).join(client)
}

/// The names of the registered clients (directories of [`DIR`]), sorted; empty when the core
/// keeps no list.
pub fn clients(root: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(crate::at(root, DIR)) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// One file of `client`, trimmed.
pub fn read_file(root: &Path, client: &str, file: &str) -> Result<String, Error> {
    read_text(&client_dir(root, client).join(file)).map(|t| t.trim().to_string())
}

/// One numeric counter of `client`.
pub fn read_counter(root: &Path, client: &str, counter: &str) -> Result<u64, Error> {
    read_u64(&client_dir(root, client).join(counter))
}

/// The text of every one of [`FILES`] that `client` has and that can be read, trimmed, by file
/// name; what is missing is left out.
pub fn client_files(root: &Path, client: &str) -> BTreeMap<String, String> {
    FILES
        .iter()
        .filter_map(|f| Some((f.to_string(), read_file(root, client, f).ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;

    /// A core with nvpeer's two clients (`persistent_api_support=0`), one counter unreadable.
    fn two_clients() -> FakeRoot {
        let r = FakeRoot::new();
        for c in [NV_MEM, NV_MEM_NC] {
            for f in FILES {
                r.file(&format!("{DIR}/{c}/{f}"), "0\n");
            }
            r.file(&format!("{DIR}/{c}/version"), "0.1.0\n");
        }
        r.file(&format!("{DIR}/nv_mem/num_alloc_mrs"), "12\n");
        r.file(&format!("{DIR}/nv_mem/num_reg_bytes"), "many\n");
        r.file(&format!("{DIR}/not_a_client"), "x\n");
        r
    }

    #[test]
    fn names_and_files() {
        let r = two_clients();
        assert!(listed(r.path()));
        assert_eq!(clients(r.path()), [NV_MEM, NV_MEM_NC]);
        let files = client_files(r.path(), NV_MEM);
        assert_eq!(files.len(), FILES.len());
        assert_eq!(files.get("version").map(String::as_str), Some("0.1.0"));
        assert_eq!(files.get("num_reg_bytes").map(String::as_str), Some("many"));
        assert!(client_files(r.path(), "gone").is_empty());
    }

    #[test]
    fn counters_and_their_errors() {
        let r = two_clients();
        assert_eq!(
            read_counter(r.path(), NV_MEM, "num_alloc_mrs").ok(),
            Some(12)
        );
        let e = read_counter(r.path(), NV_MEM, "num_reg_bytes");
        assert!(matches!(e, Err(Error::NotANumber { .. })));
        let e = read_file(r.path(), "gone", VERSION);
        assert!(matches!(e, Err(Error::Read { .. })));
        let msg = e.map_err(|e| e.to_string()).unwrap_err();
        assert!(msg.contains("memory_peers/gone/version: "), "{msg}");
    }

    #[test]
    fn a_core_without_the_list() {
        let r = FakeRoot::new();
        assert!(!listed(r.path()));
        assert!(clients(r.path()).is_empty());
    }

    #[test]
    fn files_are_the_version_and_the_counters() {
        assert_eq!(FILES[0], VERSION);
        assert_eq!(FILES[1..], COUNTERS);
    }
}
