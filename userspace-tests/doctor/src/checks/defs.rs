//! Every check of the doctor as one definition: its id, the paths its failure blocks, the earlier
//! checks whose failure explains its own, and the function that runs it. The order of [`CHECKS`]
//! is the report's (causes before what follows from them), its length the number of checks, and
//! crate::paths reads the gates and dependencies from it: adding a check is one row here.

use super::{build, host, loader, mlopart, nvidia, operator, platform, rdma, Ctx};
use crate::paths::Path::{self, Dmabuf, NvidiaPeermem, Nvpeer};
use crate::report::Check;

/// One check.
pub struct CheckDef {
    /// Its id, stable across versions: the JSON's `id`, the metrics' `check` label, what
    /// `because_of` and the fix lines name.
    pub id: &'static str,
    /// The paths a failed (or unreadable) gating result of it blocks.
    pub gates: &'static [Path],
    /// Earlier checks whose failure explains this one's failure (its fix is theirs).
    pub depends_on: &'static [&'static str],
    /// Runs it; the [`Check`] it returns carries `id`.
    pub run: fn(&Ctx) -> Check,
}

/// Every path: the node itself (GPU driver, RDMA devices, ACS, the kernel).
const EVERY_PATH: &[Path] = &[Nvpeer, NvidiaPeermem, Dmabuf];
/// Both peer-memory paths (the P2P API, the core's peer-memory API, the clients).
const PEER_MEMORY: &[Path] = &[Nvpeer, NvidiaPeermem];

/// Every check, in display order.
pub static CHECKS: &[CheckDef] = &[
    CheckDef {
        id: "nvidia.driver",
        gates: EVERY_PATH,
        depends_on: &[],
        run: nvidia::driver,
    },
    CheckDef {
        id: "nvidia.flavour",
        gates: &[Nvpeer, Dmabuf],
        depends_on: &["nvidia.driver"],
        run: nvidia::flavour,
    },
    CheckDef {
        id: "nvidia.nouveau",
        gates: EVERY_PATH,
        depends_on: &[],
        run: nvidia::nouveau,
    },
    CheckDef {
        id: "nvidia.p2p_symbols",
        gates: PEER_MEMORY,
        depends_on: &["nvidia.driver"],
        run: nvidia::p2p_symbols,
    },
    CheckDef {
        id: "gpu.cuda",
        gates: EVERY_PATH,
        depends_on: &["nvidia.driver"],
        run: nvidia::cuda_attrs,
    },
    CheckDef {
        id: "gpu.bar1",
        gates: &[],
        depends_on: &[],
        run: nvidia::bar1,
    },
    CheckDef {
        id: "gpu.mig",
        gates: &[],
        depends_on: &["nvidia.driver"],
        run: nvidia::mig,
    },
    CheckDef {
        id: "gpu.mlopart",
        gates: &[],
        depends_on: &["gpu.cuda"],
        run: mlopart::mlopart,
    },
    CheckDef {
        id: "rdma.peer_api",
        gates: PEER_MEMORY,
        depends_on: &[],
        run: rdma::peer_api,
    },
    CheckDef {
        id: "rdma.devices",
        gates: EVERY_PATH,
        depends_on: &[],
        run: rdma::devices,
    },
    CheckDef {
        id: "rdma.uverbs",
        gates: EVERY_PATH,
        depends_on: &["rdma.devices"],
        run: host::uverbs,
    },
    CheckDef {
        id: "kernel.log",
        gates: PEER_MEMORY,
        depends_on: &[],
        run: loader::log,
    },
    CheckDef {
        id: "kernel.rust",
        gates: &[Nvpeer],
        depends_on: &[],
        run: build::rust,
    },
    CheckDef {
        id: "kernel.dkms",
        gates: &[Nvpeer],
        depends_on: &["kernel.rust"],
        run: loader::dkms,
    },
    CheckDef {
        id: "gpu_operator.driver",
        gates: &[Nvpeer],
        depends_on: &["nvidia.driver"],
        run: operator::driver,
    },
    CheckDef {
        id: "nvpeer.module",
        gates: &[Nvpeer],
        depends_on: &[
            "rdma.peer_api",
            "nvidia.p2p_symbols",
            "kernel.log",
            "kernel.rust",
            "kernel.dkms",
            "kernel.signing",
            "gpu_operator.driver",
        ],
        run: rdma::nvpeer_module,
    },
    CheckDef {
        id: "nvidia.peermem",
        gates: &[NvidiaPeermem],
        depends_on: &["rdma.peer_api", "nvidia.p2p_symbols", "kernel.log"],
        run: rdma::nvidia_peermem,
    },
    CheckDef {
        id: "peer.clients",
        gates: PEER_MEMORY,
        depends_on: &["rdma.peer_api", "nvpeer.module", "nvidia.peermem"],
        run: rdma::peer_clients,
    },
    CheckDef {
        id: "peer.conflicts",
        gates: &[Nvpeer],
        depends_on: &[],
        run: rdma::conflicts,
    },
    CheckDef {
        id: "peer.consumers",
        gates: PEER_MEMORY,
        depends_on: &[
            "rdma.peer_api",
            "nvpeer.module",
            "nvidia.peermem",
            "peer.clients",
        ],
        run: rdma::consumers,
    },
    CheckDef {
        id: "rdma.dmabuf",
        gates: &[Dmabuf],
        depends_on: &[
            "nvidia.driver",
            "nvidia.flavour",
            "gpu.cuda",
            "rdma.devices",
        ],
        run: rdma::dmabuf,
    },
    CheckDef {
        id: "peer.gpu_initiated",
        gates: &[],
        depends_on: &["rdma.devices", "rdma.dmabuf"],
        run: rdma::gpu_initiated,
    },
    CheckDef {
        id: "rdma.nic_paths",
        gates: &[],
        depends_on: &["rdma.devices"],
        run: rdma::nic_paths,
    },
    CheckDef {
        id: "pci.topology",
        gates: &[],
        depends_on: &[],
        run: platform::topology,
    },
    CheckDef {
        id: "pci.acs",
        gates: EVERY_PATH,
        depends_on: &[],
        run: platform::acs,
    },
    CheckDef {
        id: "platform.iommu",
        gates: &[],
        depends_on: &[],
        run: platform::iommu,
    },
    CheckDef {
        id: "pci.link",
        gates: &[],
        depends_on: &[],
        run: platform::link,
    },
    CheckDef {
        id: "pci.relaxed_ordering",
        gates: &[],
        depends_on: &[],
        run: platform::relaxed_ordering,
    },
    CheckDef {
        id: "platform.virtualization",
        gates: &[],
        depends_on: &[],
        run: platform::virtualization,
    },
    CheckDef {
        id: "platform.memlock",
        gates: &[],
        depends_on: &[],
        run: host::memlock,
    },
    CheckDef {
        id: "libs.settings",
        gates: &[],
        depends_on: &[],
        run: host::settings,
    },
    CheckDef {
        id: "kernel.config",
        gates: EVERY_PATH,
        depends_on: &[],
        run: build::kernel_config,
    },
    CheckDef {
        id: "kernel.signing",
        gates: &[Nvpeer],
        depends_on: &[],
        run: build::signing,
    },
    CheckDef {
        id: "node.profile",
        gates: EVERY_PATH,
        depends_on: &[],
        run: crate::profile::check,
    },
];

/// The definition of the check `id`.
pub fn def(id: &str) -> Option<&'static CheckDef> {
    CHECKS.iter().find(|d| d.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_dependencies_are_checks() {
        for d in CHECKS {
            assert_eq!(
                CHECKS.iter().filter(|o| o.id == d.id).count(),
                1,
                "{} twice",
                d.id
            );
            for dep in d.depends_on {
                assert!(
                    def(dep).is_some(),
                    "{} depends on {dep}, which is no check",
                    d.id
                );
            }
        }
    }

    #[test]
    fn every_function_returns_its_definitions_id() {
        let dir = tempfile::tempdir().unwrap();
        let root = crate::root::SysRoot::new(dir.path());
        let ctx = Ctx::load(&root, crate::probes::Probes::none());
        for d in CHECKS {
            assert_eq!((d.run)(&ctx).id, d.id);
        }
    }
}
