//! The machine-readable facts behind each check (`data` in `nvpeer doctor --json`): one typed
//! document per check kind, by area. The JSON keeps the keys users' tools and
//! testbench/suites/40-doctor.sh read; [`crate::report::Check`] prints every object's keys in
//! alphabetical order.

mod build;
mod host;
mod nvidia;
mod platform;
mod rdma;

pub use build::{ConfigData, OperatorData, PeermemKo, RustData, SigningData};
pub use host::{DkmsBuild, DkmsData, LogData, MemlockData, SettingsData, UverbsData};
pub use nvidia::{
    Bar1Data, DriverData, FlavourData, GpuBar1Row, MigData, MloPartData, P2pSymbolsData,
    PinnedShareData,
};
pub use platform::{
    AcsBridge, AcsData, BestRow, IommuData, IommuDomain, LinkData, LinkRow, PairRow,
    RelaxedOrderingData, TopologyData, VirtualizationData,
};
pub use rdma::{
    ConflictsData, ConsumersData, DevicesData, DmabufData, DropinData, GdrcopyState,
    GpuInitiatedData, GpuInitiatedRow, InstallData, LibraryRow, NicPathRow, NicPathsData,
    NvidiaPeermemData, NvpeerModuleData, PeerApiData, PeerClient, PeerClientsData,
    PeerMappingState, PortRow, ServedBy,
};

use serde::Serialize;

/// Declares [`CheckData`], one variant per document, and `From` each document into it.
macro_rules! check_data {
    ($($(#[$doc:meta])* $variant:ident($ty:ty),)*) => {
        /// The data of one check: which document depends on the check (`id`). Untagged: the
        /// JSON is the document itself.
        #[derive(Debug, Clone, Serialize)]
        #[serde(untagged)]
        pub enum CheckData {
            $($(#[$doc])* $variant($ty),)*
        }
        $(impl From<$ty> for CheckData {
            fn from(d: $ty) -> Self {
                CheckData::$variant(d)
            }
        })*
    };
}

check_data! {
    /// `nvidia.driver`.
    Driver(DriverData),
    /// `nvidia.flavour`.
    Flavour(FlavourData),
    /// `nvidia.p2p_symbols`.
    P2pSymbols(P2pSymbolsData),
    /// `gpu.cuda`: the CUDA probe as it ran.
    Cuda(crate::probes::CudaProbe),
    /// `gpu.bar1`.
    Bar1(Bar1Data),
    /// `gpu.mig`.
    Mig(MigData),
    /// `gpu.mlopart`.
    MloPart(MloPartData),
    /// `rdma.peer_api`.
    PeerApi(PeerApiData),
    /// `rdma.devices`.
    Devices(DevicesData),
    /// `rdma.nic_paths`.
    NicPaths(NicPathsData),
    /// `nvpeer.module`.
    NvpeerModule(NvpeerModuleData),
    /// `nvidia.peermem`.
    NvidiaPeermem(NvidiaPeermemData),
    /// `peer.clients`.
    PeerClients(PeerClientsData),
    /// `peer.conflicts`.
    Conflicts(ConflictsData),
    /// `peer.consumers`.
    Consumers(ConsumersData),
    /// `rdma.dmabuf`.
    Dmabuf(DmabufData),
    /// `peer.gpu_initiated`.
    GpuInitiated(GpuInitiatedData),
    /// `kernel.log`.
    Log(LogData),
    /// `kernel.dkms`.
    Dkms(DkmsData),
    /// `platform.memlock`.
    Memlock(MemlockData),
    /// `rdma.uverbs`.
    Uverbs(UverbsData),
    /// `libs.settings`.
    Settings(SettingsData),
    /// `kernel.rust`.
    Rust(RustData),
    /// `kernel.config`.
    Config(ConfigData),
    /// `kernel.signing`.
    Signing(SigningData),
    /// `gpu_operator.driver`.
    Operator(OperatorData),
    /// `pci.topology`.
    Topology(TopologyData),
    /// `pci.acs`.
    Acs(AcsData),
    /// `platform.iommu`.
    Iommu(IommuData),
    /// `pci.link`.
    Link(LinkData),
    /// `pci.relaxed_ordering`.
    RelaxedOrdering(RelaxedOrderingData),
    /// `platform.virtualization`.
    Virtualization(VirtualizationData),
}
