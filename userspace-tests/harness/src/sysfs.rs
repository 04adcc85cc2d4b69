//! Facts read from sysfs/procfs: the peer-memory clients, loaded modules, kernel symbols, the
//! peer client's mode. Every reader takes a root path so tests can point it at a fake tree; what
//! the module and the peer-memory core publish is parsed by `nvpeer_uapi` (the clients' counters:
//! `nvpeer_uapi::memory_peers::main_client`).

use nvpeer_uapi::memory_peers::{self, NV_MEM, NV_MEM_NC};
use nvpeer_uapi::{debugfs, module};
use serde::Serialize;
use std::path::{Path, PathBuf};

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

/// The root ports whose relaxed-ordering writes the kernel's PCI quirks disable
/// (drivers/pci/quirks.c, `quirk_relaxedordering_disable`): Intel's Haswell and Broadwell Xeon
/// root ports and AMD's A1100 (ARM). perftest warns only for the Intel ones, and only 0x2f01 of
/// the Haswell range (perftest_parameters.c, `check_pcie_relaxed_ordering_compliant`).
const RO_QUIRKED: &[(u16, std::ops::RangeInclusive<u16>)] = &[
    (0x8086, 0x2f01..=0x2f0e),
    (0x8086, 0x6f01..=0x6f0e),
    (0x1022, 0x1a00..=0x1a02),
];

/// Whether no PCI function under `root` is one of the root ports that mishandle relaxed ordering
/// ([`RO_QUIRKED`]); a node whose PCI tree cannot be read counts as compliant, as perftest's
/// does without libpci's view.
pub fn relaxed_ordering_compliant(root: &Path) -> bool {
    let Ok(dir) = std::fs::read_dir(root.join("sys/bus/pci/devices")) else {
        return true;
    };
    let id = |p: &Path, f: &str| {
        let t = std::fs::read_to_string(p.join(f)).ok()?;
        u16::from_str_radix(t.trim().trim_start_matches("0x"), 16).ok()
    };
    !dir.flatten().any(|e| {
        let p = e.path();
        match (id(&p, "vendor"), id(&p, "device")) {
            (Some(v), Some(d)) => RO_QUIRKED.iter().any(|(qv, r)| *qv == v && r.contains(&d)),
            _ => false,
        }
    })
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
    if let Ok(cfg) = debugfs::read_config(root) {
        if let Some(v) = cfg.setting("persistent_api_support") {
            return module::parse_flag(v);
        }
    }
    for m in ["nvpeer", "nvidia_peermem"] {
        if let Some(v) = module::parameter(root, m, "persistent_api_support") {
            return module::parse_flag(&v);
        }
    }
    if memory_peers::client_dir(root, NV_MEM).is_dir() {
        return Some(!memory_peers::client_dir(root, NV_MEM_NC).is_dir());
    }
    // nv_peer_mem registers an invalidating nv_mem (plus nv_mem_nc).
    module::loaded(root, "nv_peer_mem").then_some(false)
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
        .filter(|m| module::loaded(root, m))
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
        peer_clients: memory_peers::clients(root),
        peer_sysfs: memory_peers::listed(root),
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
            let c = memory_peers::main_client(&d.0);
            let n = counter.trim().parse::<u64>().ok();
            proptest::prop_assert_eq!(c.map(|c| c.values.get("num_alloc_mrs").copied()), Some(n));
        }
    }

    /// perftest's relaxed-ordering warning, by the kernel's list of root ports that mishandle it.
    #[test]
    fn root_ports_that_mishandle_relaxed_ordering() {
        let d = tree();
        assert!(relaxed_ordering_compliant(&d.0), "no PCI tree: compliant");
        write(&d.0, "sys/bus/pci/devices/0000:00:00.0/vendor", "0x8086\n");
        write(&d.0, "sys/bus/pci/devices/0000:00:00.0/device", "0x2020\n");
        write(&d.0, "sys/bus/pci/devices/0000:03:00.0/vendor", "0x10de\n");
        write(&d.0, "sys/bus/pci/devices/0000:03:00.0/device", "0x6f03\n");
        assert!(
            relaxed_ordering_compliant(&d.0),
            "NVIDIA's 0x6f03 is not Intel's"
        );
        write(&d.0, "sys/bus/pci/devices/0000:00:02.0/vendor", "0x8086\n");
        write(&d.0, "sys/bus/pci/devices/0000:00:02.0/device", "0x2f08\n");
        assert!(!relaxed_ordering_compliant(&d.0), "a Haswell-EP root port");
    }
}
