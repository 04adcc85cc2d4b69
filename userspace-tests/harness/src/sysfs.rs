//! Facts read from sysfs/procfs: peer-memory clients and their counters, loaded modules,
//! kernel symbols. Every reader takes a root path so tests can point it at a fake tree.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Directory of peer-memory clients created by the (MOFED or emulated) core.
pub const MEMORY_PEERS: &str = "/sys/kernel/mm/memory_peers";

/// The counters of one peer client (contracts §1.8).
pub const COUNTERS: [&str; 7] = [
    "num_alloc_mrs",
    "num_dealloc_mrs",
    "num_reg_pages",
    "num_dereg_pages",
    "num_reg_bytes",
    "num_dereg_bytes",
    "num_free_callbacks",
];

/// A snapshot of one client's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerCounters {
    pub client: String,
    pub version: String,
    pub values: BTreeMap<String, u64>,
}

impl PeerCounters {
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

/// Reads every client under `root` (normally [`MEMORY_PEERS`]).
pub fn peer_clients(root: &Path) -> Vec<PeerCounters> {
    let mut v = Vec::new();
    let Ok(rd) = std::fs::read_dir(root) else {
        return v;
    };
    for e in rd.flatten() {
        let p = e.path();
        if !p.is_dir() {
            continue;
        }
        let mut c = PeerCounters {
            client: e.file_name().to_string_lossy().into_owned(),
            version: std::fs::read_to_string(p.join("version"))
                .unwrap_or_default()
                .trim()
                .to_string(),
            values: BTreeMap::new(),
        };
        for k in COUNTERS {
            if let Some(n) = std::fs::read_to_string(p.join(k))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
            {
                c.values.insert(k.to_string(), n);
            }
        }
        v.push(c);
    }
    v.sort_by(|a, b| a.client.cmp(&b.client));
    v
}

/// The client a GPU registration should go through: `nv_mem` if present, else the only one.
pub fn main_client(root: &Path) -> Option<PeerCounters> {
    let all = peer_clients(root);
    if let Some(c) = all.iter().find(|c| c.client == "nv_mem") {
        return Some(c.clone());
    }
    if all.len() == 1 {
        return all.into_iter().next();
    }
    None
}

/// Node facts relevant to failure causes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeFacts {
    /// Modules of interest that are loaded.
    pub modules: Vec<String>,
    /// `ib_register_peer_memory_client` is exported by the running kernel (MOFED ib_core or emulator).
    pub peer_api: bool,
    /// `ib_umem_dmabuf_get` exists (kernel RDMA dma-buf import).
    pub dmabuf_kernel: bool,
    /// Peer clients registered.
    pub peer_clients: Vec<String>,
    /// The core lists its clients in `/sys/kernel/mm/memory_peers` (DOCA-OFED on a kernel without
    /// the `mm_kobj` export does not: an empty `peer_clients` then says nothing).
    pub peer_sysfs: bool,
    /// NVIDIA kernel module flavour (`Open Kernel Module` present in the version string).
    pub nvidia_open: Option<bool>,
    /// IOMMU groups exist.
    pub iommu: bool,
    /// The loaded peer module registers only a persistent (non-invalidating) `nv_mem` client.
    pub persistent: Option<bool>,
}

/// Whether the loaded peer module runs in persistent mode (`persistent_api_support=1`, the
/// default of nvpeer and of nvidia-peermem >= 560): its pins outlive `cudaFree` until dereg,
/// so freeing GPU memory under a live MR revokes nothing, by design. `None` when unknown.
///
/// Read from what each module publishes: nvpeer's debugfs `config` (a Rust module has no
/// `parameters/` directory in sysfs, uapi/interfaces.md; needs debugfs mounted and readable), the
/// C modules' `parameters/persistent_api_support`, then the clients the core lists (an invalidating
/// `nv_mem` always comes with a persistent `nv_mem_nc`), then nv_peer_mem (invalidating only).
pub fn persistent_mode(root: &Path) -> Option<bool> {
    let parse = |v: &str| match v.trim() {
        "1" | "Y" | "y" => Some(true),
        "0" | "N" | "n" => Some(false),
        _ => None,
    };
    if let Ok(cfg) = std::fs::read_to_string(root.join("sys/kernel/debug/nvpeer/config")) {
        if let Some(v) = cfg
            .lines()
            .find_map(|l| l.strip_prefix("persistent_api_support "))
        {
            return parse(v);
        }
    }
    for m in ["nvpeer", "nvidia_peermem"] {
        let f = root.join(format!("sys/module/{m}/parameters/persistent_api_support"));
        if let Ok(v) = std::fs::read_to_string(f) {
            return parse(&v);
        }
    }
    let peers = root.join(MEMORY_PEERS.trim_start_matches('/'));
    if peers.join("nv_mem").is_dir() {
        return Some(!peers.join("nv_mem_nc").is_dir());
    }
    // nv_peer_mem registers an invalidating nv_mem (plus nv_mem_nc).
    root.join("sys/module/nv_peer_mem")
        .exists()
        .then_some(false)
}

/// Modules the harness looks for (the bench's emulators in its build only).
pub const MODULES: &[&str] = &[
    "nvpeer",
    "nvidia_peermem",
    "nv_peer_mem",
    "nvidia",
    "ib_core",
    "ib_uverbs",
    "rdma_rxe",
    #[cfg(feature = "bench")]
    "nvp2p_emu",
    #[cfg(feature = "bench")]
    "peer_mem_emu",
];

/// Collects facts from a root (normally `/`).
pub fn node_facts(root: &Path) -> NodeFacts {
    let p = |s: &str| -> PathBuf { root.join(s.trim_start_matches('/')) };
    let modules = MODULES
        .iter()
        .filter(|m| p(&format!("/sys/module/{m}")).exists())
        .map(|m| m.to_string())
        .collect();
    let syms = std::fs::read_to_string(p("/proc/kallsyms")).unwrap_or_default();
    let has_sym = |name: &str| {
        syms.lines()
            .any(|l| l.split_whitespace().nth(2) == Some(name))
    };
    let nvidia_open = std::fs::read_to_string(p("/proc/driver/nvidia/version"))
        .ok()
        .map(|v| v.contains("Open Kernel Module"));
    NodeFacts {
        modules,
        peer_api: has_sym("ib_register_peer_memory_client"),
        dmabuf_kernel: has_sym("ib_umem_dmabuf_get"),
        peer_clients: peer_clients(&p(MEMORY_PEERS))
            .into_iter()
            .map(|c| c.client)
            .collect(),
        peer_sysfs: p(MEMORY_PEERS).is_dir(),
        nvidia_open,
        iommu: std::fs::read_dir(p("/sys/class/iommu"))
            .map(|mut d| d.next().is_some())
            .unwrap_or(false),
        persistent: persistent_mode(root),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempdir::Dir {
        tempdir::Dir::new()
    }

    /// Minimal temp dir helper (no extra crate).
    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Self {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "nvpeer-harness-test-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn write(root: &Path, rel: &str, s: &str) {
        let f = root.join(rel);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, s).unwrap();
    }

    #[test]
    fn counters_and_deltas() {
        let d = tree();
        let r = d.0.join("sys/kernel/mm/memory_peers");
        write(&r, "nv_mem/version", "0.1.0\n");
        write(&r, "nv_mem/num_alloc_mrs", "3\n");
        write(&r, "nv_mem/num_free_callbacks", "0\n");
        write(&r, "other/version", "x\n");
        let before = main_client(&r).unwrap();
        assert_eq!(before.client, "nv_mem");
        assert_eq!(before.get("num_alloc_mrs"), 3);
        write(&r, "nv_mem/num_alloc_mrs", "5\n");
        write(&r, "nv_mem/num_free_callbacks", "1\n");
        let after = main_client(&r).unwrap();
        let dl = after.delta(&before);
        assert_eq!(dl.get("num_alloc_mrs"), Some(&2));
        assert_eq!(dl.get("num_free_callbacks"), Some(&1));
        assert_eq!(dl.get("num_reg_bytes"), None);
        assert_eq!(peer_clients(&r).len(), 2);
        assert!(peer_clients(&d.0.join("nope")).is_empty());
    }

    #[test]
    fn facts_from_fake_root() {
        let d = tree();
        write(&d.0, "sys/module/nvpeer/refcnt", "0\n");
        write(&d.0, "sys/module/ib_core/refcnt", "0\n");
        write(
            &d.0,
            "proc/kallsyms",
            "ffff t foo\nffff T ib_register_peer_memory_client\t[peer_mem_emu]\n",
        );
        write(
            &d.0,
            "proc/driver/nvidia/version",
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.1\n",
        );
        let f = node_facts(&d.0);
        assert_eq!(f.modules, vec!["nvpeer".to_string(), "ib_core".to_string()]);
        assert!(f.peer_api);
        assert!(!f.dmabuf_kernel);
        assert_eq!(f.nvidia_open, Some(true));
        assert!(!f.iommu);
        assert_eq!(f.persistent, None);
        write(
            &d.0,
            "sys/module/nvidia_peermem/parameters/persistent_api_support",
            "0\n",
        );
        assert_eq!(persistent_mode(&d.0), Some(false));
        write(
            &d.0,
            "sys/module/nvidia_peermem/parameters/persistent_api_support",
            "1\n",
        );
        assert_eq!(persistent_mode(&d.0), Some(true));
    }

    #[test]
    fn persistent_mode_of_a_rust_module_comes_from_debugfs() {
        // nvpeer (a Rust module) has no parameters/ directory: before, this read as "unknown".
        let d = tree();
        write(&d.0, "sys/module/nvpeer/refcnt", "0\n");
        assert_eq!(persistent_mode(&d.0), None);
        let cfg = "version 0.1.0\npersistent_api_support 1\npeerdirect_support 0\nclient nv_mem persistent\n";
        write(&d.0, "sys/kernel/debug/nvpeer/config", cfg);
        assert_eq!(persistent_mode(&d.0), Some(true));
        write(
            &d.0,
            "sys/kernel/debug/nvpeer/config",
            &cfg.replace("support 1", "support 0"),
        );
        assert_eq!(persistent_mode(&d.0), Some(false));
    }

    #[test]
    fn persistent_mode_from_the_core_clients() {
        let d = tree();
        write(&d.0, "sys/kernel/mm/memory_peers/nv_mem/version", "1.0\n");
        assert_eq!(persistent_mode(&d.0), Some(true));
        write(
            &d.0,
            "sys/kernel/mm/memory_peers/nv_mem_nc/version",
            "1.0\n",
        );
        assert_eq!(persistent_mode(&d.0), Some(false));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Whatever the kernel (or a crafted tree) puts in these files, the readers answer.
        #[test]
        fn crafted_files_never_panic(
            counter in "\\PC{0,40}",
            config in "\\PC{0,80}",
            syms in "\\PC{0,120}",
        ) {
            let d = tree();
            write(&d.0, "sys/kernel/mm/memory_peers/nv_mem/num_alloc_mrs", &counter);
            write(&d.0, "sys/kernel/mm/memory_peers/nv_mem/version", &counter);
            write(&d.0, "sys/kernel/debug/nvpeer/config", &config);
            write(&d.0, "sys/module/nvidia_peermem/parameters/persistent_api_support", &counter);
            write(&d.0, "proc/kallsyms", &syms);
            write(&d.0, "proc/driver/nvidia/version", &syms);
            let _ = node_facts(&d.0);
            let c = main_client(&d.0.join("sys/kernel/mm/memory_peers"));
            let n = counter.trim().parse::<u64>().ok();
            proptest::prop_assert_eq!(c.map(|c| c.values.get("num_alloc_mrs").copied()), Some(n));
        }
    }
}
