//! The node checks (docs/doctor.md, "The checks"), grouped by area. Each function reads through [`Ctx`] and returns
//! one [`Check`]; none of them panics on missing or malformed files.

mod build;
pub mod data;
pub mod defs;
mod host;
mod loader;
mod mlopart;
pub(crate) mod nvidia;
mod operator;
mod platform;
mod rdma;

pub use nvidia::parse_bar1;
pub use rdma::{nv_mem_providers, nvpeer_name, NvMemProvider, CONSUMERS};

use crate::kernel::{Kallsyms, KernelConfig};
use crate::pci::PciDev;
use crate::probes::Probes;
use crate::report::Check;
use crate::root::SysRoot;

/// An RDMA-capable NIC: an RDMA device with a PCI parent, or a PCI function of an RDMA class.
#[derive(Debug, Clone)]
pub struct Nic {
    /// RDMA device name (`mlx5_0`), or the BDF when no RDMA driver is bound.
    pub name: String,
    /// Its PCI function.
    pub pci: PciDev,
}

/// Everything the checks share, read once.
pub struct Ctx<'a> {
    /// Where files are read from.
    pub root: &'a SysRoot,
    /// `uname -r`.
    pub release: Option<String>,
    /// Symbol table, when readable.
    pub kallsyms: Option<Kallsyms>,
    /// Kernel configuration, when found.
    pub config: Option<KernelConfig>,
    /// NVIDIA GPUs.
    pub gpus: Vec<PciDev>,
    /// RDMA NICs with a PCI function.
    pub nics: Vec<Nic>,
    /// RDMA device names (PCI or not, e.g. rxe).
    pub rdma_devices: Vec<String>,
    /// Live probe results.
    pub probes: Probes,
    /// NCCL/UCX settings in effect (environment and NCCL's configuration files).
    pub settings: crate::settings::Settings,
    /// The distribution (os-release), for the package names fix lines give.
    pub distro: Option<crate::distro::Distro>,
    /// The node profile `--profile` named (its file as given, and what it says).
    pub profile: Option<(String, crate::profile::Profile)>,
}

impl<'a> Ctx<'a> {
    /// Reads the shared facts.
    pub fn load(root: &'a SysRoot, probes: Probes) -> Self {
        let release = crate::kernel::release(root);
        let kallsyms = Kallsyms::load(root);
        let config = KernelConfig::load(root, release.as_deref());
        let all = PciDev::all(root);
        let gpus: Vec<PciDev> = all.iter().filter(|d| d.is_nvidia_gpu()).cloned().collect();
        let rdma_devices = root.list("/sys/class/infiniband");
        let mut nics = Vec::new();
        for name in &rdma_devices {
            let Some(path) = root.resolve(&format!("/sys/class/infiniband/{name}/device")) else {
                continue;
            };
            let last = path.rsplit('/').next().unwrap_or("");
            if crate::pci::is_bdf(last) {
                if let Some(pci) = PciDev::load(root, last) {
                    nics.push(Nic {
                        name: name.clone(),
                        pci,
                    });
                }
            }
        }
        for d in &all {
            let rdma_class =
                d.class >> 8 == 0x0207 || (d.vendor == 0x15b3 && d.class >> 8 == 0x0200);
            let bound = nics.iter().any(|n| n.pci.bdf == d.bdf);
            if rdma_class && !bound {
                nics.push(Nic {
                    name: d.bdf.clone(),
                    pci: d.clone(),
                });
            }
        }
        let home = probes
            .env
            .iter()
            .find(|(k, _)| k == "HOME")
            .map(|(_, v)| v.clone());
        let settings = crate::settings::effective(root, &probes.env, home.as_deref());
        Self {
            root,
            release,
            kallsyms,
            config,
            gpus,
            nics,
            rdma_devices,
            probes,
            settings,
            distro: crate::distro::Distro::load(root),
            profile: None,
        }
    }

    /// Whether a kernel module is loaded (built-in modules with parameters also show up).
    pub fn module_loaded(&self, name: &str) -> bool {
        self.root.exists(&format!("/sys/module/{name}/initstate"))
            || self.root.exists(&format!("/sys/module/{name}/refcnt"))
            || self
                .root
                .read("/proc/modules")
                .is_some_and(|m| m.lines().any(|l| l.split_whitespace().next() == Some(name)))
    }
}

/// Every `nvidia_p2p_*` function the doctor looks for (for fixtures and docs).
pub fn nvidia_symbols() -> Vec<&'static str> {
    nvidia::P2P_REQUIRED
        .iter()
        .chain(nvidia::P2P_PERSISTENT.iter())
        .copied()
        .collect()
}

/// Kernel build-tree files needed to build a Rust module.
pub fn rust_artifacts() -> &'static [&'static str] {
    &build::RUST_ARTIFACTS
}

/// Number of checks [`run_all`] returns.
pub fn run_all_count() -> usize {
    defs::CHECKS.len()
}

/// Runs every check in display order ([`defs::CHECKS`]): causes before what follows from them
/// (crate::paths), so the first failing check of a path is normally its root cause.
pub fn run_all(ctx: &Ctx) -> Vec<Check> {
    defs::CHECKS.iter().map(|d| (d.run)(ctx)).collect()
}
