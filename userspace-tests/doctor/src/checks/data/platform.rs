//! Data of the platform checks: `pci.topology`, `pci.acs`, `platform.iommu`, `pci.link`,
//! `pci.relaxed_ordering`, `platform.virtualization`.

use crate::c2c::{Attachment, DmabufMapping, NodeMapping};
use crate::pci::{Link, PathClass};
use serde::Serialize;

/// `pci.topology`: every GPU↔NIC pair's path, each GPU's closest NICs, the C2C attachment.
#[derive(Debug, Clone, Serialize)]
pub struct TopologyData {
    /// One row per GPU↔NIC pair.
    pub pairs: Vec<PairRow>,
    /// One row per GPU: its closest NICs.
    pub best: Vec<BestRow>,
    /// How each GPU is attached to its CPU.
    pub gpus: Vec<Attachment>,
    /// Some GPU is coherently attached (C2C).
    pub c2c: bool,
    /// The mapping the node's closest pairs need.
    pub dmabuf_mapping: NodeMapping,
}

/// One GPU↔NIC pair in `pci.topology`.
#[derive(Debug, Clone, Serialize)]
pub struct PairRow {
    /// The GPU's PCI address.
    pub gpu: String,
    /// The NIC's RDMA device name (or PCI address when no RDMA driver is bound).
    pub nic: String,
    /// The NIC's PCI address.
    pub nic_bdf: String,
    /// The path class, C2C included.
    pub class: PathClass,
    /// The class of the PCIe tree alone (what `nvidia-smi topo -m` derives from it).
    pub pcie_class: PathClass,
    /// The dma-buf mapping this NIC needs for this GPU's memory.
    pub dmabuf_mapping: DmabufMapping,
}

/// The closest NICs of one GPU.
#[derive(Debug, Clone, Serialize)]
pub struct BestRow {
    /// The GPU's PCI address.
    pub gpu: String,
    /// The NICs at the closest path class.
    pub nics: Vec<String>,
    /// That class.
    pub class: PathClass,
    /// The dma-buf mapping they need for this GPU's memory.
    pub dmabuf_mapping: DmabufMapping,
}

/// `pci.acs`: ACS on the bridges between GPUs and NICs.
#[derive(Debug, Clone, Serialize)]
pub struct AcsData {
    /// Every bridge on a GPU↔NIC path, once.
    pub bridges: Vec<AcsBridge>,
}

/// One bridge's ACS state.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum AcsBridge {
    /// The bridge has an ACS capability.
    Capable {
        /// The bridge's PCI address.
        bridge: String,
        /// The ACS Control register.
        acs_ctl: u16,
        /// The control bits set, by name (`SrcValid`, `ReqRedir`, ...).
        flags: Vec<String>,
        /// Whether they redirect peer traffic through the root complex.
        redirects: bool,
    },
    /// The bridge has no ACS capability.
    NoCapability {
        /// The bridge's PCI address.
        bridge: String,
        /// Always null here.
        acs_ctl: Option<u16>,
    },
    /// Its config space could not be read (root only beyond the header).
    Unreadable {
        /// The bridge's PCI address.
        bridge: String,
        /// Always true here.
        unreadable: bool,
    },
}

/// `platform.iommu`: IOMMU units, the kernel's arguments and the DMA domains.
#[derive(Debug, Clone, Serialize)]
pub struct IommuData {
    /// The IOMMU units (`/sys/class/iommu`).
    pub units: Vec<String>,
    /// The kernel command line's words that mention iommu.
    pub cmdline: Vec<String>,
    /// The domain type of each GPU's and NIC's IOMMU group (or of every group).
    pub domains: Vec<IommuDomain>,
}

/// One device's (or group's) IOMMU domain.
#[derive(Debug, Clone, Serialize)]
pub struct IommuDomain {
    /// The device's PCI address, or `group <n>`.
    pub device: String,
    /// `identity`, `DMA`, `DMA-FQ`, ...
    #[serde(rename = "type")]
    pub kind: String,
}

/// `pci.link`: link training of each GPU and NIC.
#[derive(Debug, Clone, Serialize)]
pub struct LinkData {
    /// One row per device whose link is reported.
    pub devices: Vec<LinkRow>,
}

/// One device's link.
#[derive(Debug, Clone, Serialize)]
pub struct LinkRow {
    /// The device's PCI address.
    pub bdf: String,
    /// Whether it is a GPU (else a NIC).
    pub gpu: bool,
    /// Its link's speed and width, current and maximum.
    pub link: Link,
    /// Whether the link trained below its width (or, for a NIC, its speed).
    pub degraded: bool,
}

/// `pci.relaxed_ordering`: the NICs without relaxed ordering.
#[derive(Debug, Clone, Serialize)]
pub struct RelaxedOrderingData {
    /// NICs with relaxed ordering disabled.
    pub disabled: Vec<String>,
    /// NICs whose config space could not be read.
    pub unreadable: Vec<String>,
}

/// `platform.virtualization`: whether the node is a virtual machine.
#[derive(Debug, Clone, Serialize)]
pub struct VirtualizationData {
    /// Whether the CPU flags have `hypervisor`.
    pub hypervisor: bool,
    /// DMI's product name (empty when unreadable).
    pub product: String,
}
