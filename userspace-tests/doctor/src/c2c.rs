//! Coherently attached GPUs (NVLink-C2C: Grace Hopper GH200, Grace Blackwell GB200) and the dma-buf
//! mapping a NIC needs to reach their memory (issue 37, item 4).
//!
//! On such a node a GPU's memory has two bus addresses: the coherent window the CPU reaches over C2C
//! (what `cuMemGetHandleForAddressRange` exports by default) and BAR1 on the GPU's PCIe link (what it
//! exports with `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`, CUDA 12.8 / driver 570). A NIC whose
//! DMA crosses the CPU and then C2C needs the default; a NIC that shares a PCIe switch with the GPU
//! needs the PCIe mapping. NCCL decides the same way (`ncclTopoCheckGdr`, src/graph/paths.cc: the
//! PCI mode when the GPU's path to its CPU is C2C and the NIC's path is not P2C); a wrong choice
//! either fails registration (`ibv_reg_dmabuf_mr` errno 524 on GB200, openucx/ucx#11571) or
//! registers against the wrong address and fails only when data moves (ofiwg/libfabric#12864).

use crate::pci::{classify, PathClass, PciDev};
use crate::root::SysRoot;
use serde::Serialize;

/// GPU device ids of the Grace superchips: the id table of Linux's nvgrace-gpu vfio driver
/// (drivers/vfio/pci/nvgrace-gpu/main.c, `nvgrace_gpu_vfio_pci_table`).
pub const SUPERCHIP_DEVICE_IDS: [(u32, &str); 4] = [
    (0x2342, "GH200 120GB"),
    (0x2345, "GH200 480GB"),
    (0x2348, "GH200"),
    (0x2941, "GB200"),
];

/// One fact that says a GPU is coherently attached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum Evidence {
    /// NVML: `NVML_FI_DEV_C2C_LINK_COUNT` links, link 0 active or not (NCCL's and UCX's test).
    Nvml {
        /// Links present.
        links: u32,
        /// `NVML_FI_DEV_C2C_LINK_GET_STATUS` of link 0 is 1.
        active: bool,
    },
    /// `/proc/driver/nvidia/gpus/<bdf>/numa_status` exists: the driver creates it only when it runs
    /// the GPU's memory as a NUMA node, which it does on coherent platforms
    /// (NVIDIA/open-gpu-kernel-modules, kernel-open/nvidia/nv-procfs.c, `nv_procfs_add_gpu`).
    NumaStatus {
        /// `Node:` line: the NUMA node of the GPU's memory.
        node: Option<i64>,
        /// `Status:` line (`online`, `offline`, ...).
        status: Option<String>,
    },
    /// The PCI device id is a Grace superchip GPU's ([`SUPERCHIP_DEVICE_IDS`]).
    DeviceId {
        /// `0x2342`, ...
        device: String,
        /// `GH200 120GB`, ...
        model: &'static str,
    },
}

/// Who decided whether a GPU is coherent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decider {
    /// NVML answered the C2C fields (live runs): its answer stands, as it does for NCCL.
    Nvml,
    /// No NVML answer (fixture trees, `--no-probes`, a driver without the fields): sysfs/procfs.
    Sysfs,
}

/// How one GPU is attached to its CPU.
#[derive(Debug, Clone, Serialize)]
pub struct Attachment {
    /// The GPU's BDF.
    pub gpu: String,
    /// PCI device id, `0x2342`.
    pub device: String,
    /// NUMA node of the GPU's PCI function (the CPU it hangs off).
    pub numa_node: Option<i64>,
    /// Coherently attached over C2C.
    pub coherent: bool,
    /// Who decided.
    pub decided_by: Decider,
    /// Every fact found, whoever decided.
    pub evidence: Vec<Evidence>,
    /// NVML's answer when it did not report an active link (`no C2C links`, `not supported`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvml: Option<String>,
}

/// `Node:` and `Status:` of a `numa_status` file.
fn parse_numa_status(text: &str) -> (Option<i64>, Option<String>) {
    let mut node = None;
    let mut status = None;
    for line in text.lines() {
        if let Some((k, v)) = line.split_once(':') {
            match k.trim() {
                "Node" => node = v.trim().parse().ok(),
                "Status" => status = Some(v.trim().to_string()).filter(|s| !s.is_empty()),
                _ => {}
            }
        }
    }
    (node, status)
}

/// How `gpu` is attached, from NVML's C2C fields (when the live probe ran) and what the filesystem
/// shows.
pub fn attachment(root: &SysRoot, gpu: &PciDev, nvml: &[crate::nvml::NvmlC2c]) -> Attachment {
    let mut evidence = Vec::new();
    let nv = nvml.iter().find(|c| c.bdf == gpu.bdf);
    if let Some(c) = nv {
        if let Ok(links) = c.links {
            if links > 0 {
                evidence.push(Evidence::Nvml {
                    links,
                    active: c.active(),
                });
            }
        }
    }
    let numa_status = format!("/proc/driver/nvidia/gpus/{}/numa_status", gpu.bdf);
    if root.exists(&numa_status) {
        let (node, status) = parse_numa_status(&root.read(&numa_status).unwrap_or_default());
        evidence.push(Evidence::NumaStatus { node, status });
    }
    if gpu.vendor == 0x10de {
        if let Some((id, model)) = SUPERCHIP_DEVICE_IDS
            .iter()
            .find(|(id, _)| *id == gpu.device)
        {
            evidence.push(Evidence::DeviceId {
                device: format!("{id:#06x}"),
                model,
            });
        }
    }
    let (coherent, decided_by, nvml_says) = match nv.map(|c| (&c.links, c.active())) {
        Some((Ok(_), true)) => (true, Decider::Nvml, None),
        Some((Ok(0), false)) => (false, Decider::Nvml, Some("no C2C links".to_string())),
        Some((Ok(n), false)) => (
            false,
            Decider::Nvml,
            Some(format!("{n} C2C link(s), link 0 inactive")),
        ),
        Some((Err(e), _)) => (!evidence.is_empty(), Decider::Sysfs, Some(e.clone())),
        None => (!evidence.is_empty(), Decider::Sysfs, None),
    };
    Attachment {
        gpu: gpu.bdf.clone(),
        device: format!("{:#06x}", gpu.device),
        numa_node: gpu.numa,
        coherent,
        decided_by,
        evidence,
        nvml: nvml_says,
    }
}

/// The path class of a GPU↔NIC pair: the PCIe class ([`classify`]) unless the GPU is coherent and
/// the two share no PCIe switch; then the NIC is reached over C2C through the CPU ([`PathClass::C2C`],
/// NCCL's P2C: `mergePathType` turns C2C + PHB into P2C) when both are on one NUMA node, and across
/// sockets ([`PathClass::SYS`]) when the nodes differ.
pub fn pair_class(gpu: &PciDev, coherent: bool, nic: &PciDev) -> PathClass {
    let pcie = classify(gpu, nic);
    if !coherent || pcie <= PathClass::PXB {
        return pcie;
    }
    match (gpu.numa, nic.numa) {
        (Some(a), Some(b)) if a != b => PathClass::SYS,
        _ => PathClass::C2C,
    }
}

/// The dma-buf mapping a GPU's memory must be exported with for one NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DmabufMapping {
    /// `cuMemGetHandleForAddressRange(..., flags = 0)`: what every exporter does unless told.
    Default,
    /// `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`: BAR1 on the GPU's own PCIe link.
    Pcie,
}

impl DmabufMapping {
    /// The flag, as the CUDA driver API names it.
    pub fn flag(self) -> &'static str {
        match self {
            DmabufMapping::Default => "flags 0",
            DmabufMapping::Pcie => "CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE",
        }
    }
}

/// The mapping a pair needs: PCIe where a coherent GPU and the NIC share a PCIe switch (the NIC's
/// DMA never reaches the CPU, so it must target BAR1), the default everywhere else (through the CPU
/// and C2C to the coherent address; on a GPU without C2C both mappings are BAR1).
pub fn mapping(coherent: bool, class: PathClass) -> DmabufMapping {
    if coherent && class <= PathClass::PXB {
        DmabufMapping::Pcie
    } else {
        DmabufMapping::Default
    }
}

/// What the node as a whole needs, over each GPU's closest NICs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeMapping {
    /// Every closest pair takes the default mapping.
    Default,
    /// Every closest pair needs the PCIe mapping.
    Pcie,
    /// Some need one, some the other: the exporter must pick per NIC.
    PerNic,
}

impl NodeMapping {
    /// The node's answer from the mappings of its closest pairs (`Default` when there are none).
    pub fn of(mappings: impl IntoIterator<Item = DmabufMapping>) -> Self {
        let (mut default, mut pcie) = (false, false);
        for m in mappings {
            match m {
                DmabufMapping::Default => default = true,
                DmabufMapping::Pcie => pcie = true,
            }
        }
        match (default, pcie) {
            (_, false) => NodeMapping::Default,
            (false, true) => NodeMapping::Pcie,
            (true, true) => NodeMapping::PerNic,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numa_status_lines() {
        assert_eq!(
            parse_numa_status("Node:      4\nStatus:    online\nAddress:   400000000000\n"),
            (Some(4), Some("online".to_string()))
        );
        assert_eq!(parse_numa_status(""), (None, None));
        assert_eq!(parse_numa_status("Node: x\nStatus:\n"), (None, None));
    }

    #[test]
    fn node_mapping() {
        use DmabufMapping::*;
        assert_eq!(NodeMapping::of([]), NodeMapping::Default);
        assert_eq!(NodeMapping::of([Default, Default]), NodeMapping::Default);
        assert_eq!(NodeMapping::of([Pcie]), NodeMapping::Pcie);
        assert_eq!(NodeMapping::of([Pcie, Default]), NodeMapping::PerNic);
        assert_eq!(mapping(false, PathClass::PIX), Default);
        assert_eq!(mapping(true, PathClass::PXB), Pcie);
        assert_eq!(mapping(true, PathClass::C2C), Default);
        assert_eq!(mapping(true, PathClass::SYS), Default);
    }
}
