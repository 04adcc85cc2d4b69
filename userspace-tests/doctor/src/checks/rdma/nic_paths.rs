//! `rdma.nic_paths`: which way GPU memory reaches each RDMA device, by its driver. nvpeer and
//! NVIDIA's nvidia-peermem serve the peer-memory core of OFED / DOCA-OFED, whose drivers are
//! NVIDIA's (mlx5); other vendors' NICs take GPU memory through dma-buf, or through a P2P path of
//! their driver's own (AWS EFA). Such a NIC is recognised and named as what it is: nvpeer does not
//! serve it, and a node of them needs no peer-memory module for it.

use crate::checks::data::{NicPathRow, NicPathsData};
use crate::checks::Ctx;
use crate::report::{Check, Status};

/// A family of RDMA drivers: how its devices are named and what their driver offers.
struct Family {
    /// What it is.
    name: &'static str,
    /// The prefix of its devices' names in /sys/class/infiniband.
    prefix: &'static str,
    /// Its PCI vendor, where the device has a PCI function.
    vendor: Option<u32>,
    /// Whether OFED's peer-memory core (hence nvpeer, nvidia-peermem) serves its registrations.
    peer_memory: bool,
    /// Whether its driver imports dma-buf (`reg_user_mr_dmabuf` in its `ib_device_ops`).
    dmabuf: bool,
    /// A P2P path of the driver's own, else `None`.
    own: Option<&'static str>,
    /// Where that is read.
    source: &'static str,
}

/// The families the doctor knows, by name prefix and PCI vendor.
const FAMILIES: &[Family] = &[
    Family {
        name: "NVIDIA ConnectX / BlueField (mlx5)",
        prefix: "mlx5_",
        vendor: Some(0x15b3),
        peer_memory: true,
        dmabuf: true,
        own: None,
        source: "OFED's peer-memory core (ib_register_peer_memory_client); linux drivers/infiniband/hw/mlx5 mlx5_ib_reg_user_mr_dmabuf",
    },
    Family {
        name: "AWS EFA (efa)",
        prefix: "efa_",
        vendor: Some(0x1d0f),
        peer_memory: false,
        dmabuf: true,
        own: Some("the EFA driver calls NVIDIA's P2P API itself (efa_nv_peermem on the open driver, EFA 2.6 and later)"),
        source: "amzn/amzn-drivers kernel/linux/efa/src/efa_nvmem_impl.h, efa_sysfs.c (device/p2p; device/gdr before 2.6); dma-buf since EFA 1.16",
    },
    Family {
        name: "Broadcom NetXtreme (bnxt_re)",
        prefix: "bnxt_re",
        vendor: Some(0x14e4),
        peer_memory: false,
        dmabuf: true,
        own: None,
        source: "linux drivers/infiniband/hw/bnxt_re/main.c bnxt_re_reg_user_mr_dmabuf",
    },
    Family {
        name: "AMD Pensando (ionic_rdma)",
        prefix: "ionic_",
        vendor: Some(0x1dd8),
        peer_memory: false,
        dmabuf: true,
        own: None,
        source: "linux drivers/infiniband/hw/ionic ionic_reg_user_mr_dmabuf",
    },
    Family {
        name: "Intel E800 (irdma)",
        prefix: "irdma",
        vendor: Some(0x8086),
        peer_memory: false,
        dmabuf: true,
        own: None,
        source: "linux drivers/infiniband/hw/irdma/verbs.c irdma_reg_user_mr_dmabuf",
    },
    Family {
        name: "Microsoft MANA (mana_ib)",
        prefix: "mana_",
        vendor: Some(0x1414),
        peer_memory: false,
        dmabuf: true,
        own: None,
        source: "linux drivers/infiniband/hw/mana mana_ib_reg_user_mr_dmabuf",
    },
    Family {
        name: "software RDMA (rxe)",
        prefix: "rxe",
        vendor: None,
        peer_memory: true,
        dmabuf: false,
        own: None,
        source: "linux drivers/infiniband/sw/rxe (no reg_user_mr_dmabuf; user memory through ib_umem, which OFED's core hands to peer clients)",
    },
    Family {
        name: "software iWARP (siw)",
        prefix: "siw",
        vendor: None,
        peer_memory: false,
        dmabuf: false,
        own: None,
        source: "linux drivers/infiniband/sw/siw (host memory only)",
    },
];

/// The PCI id of ConnectX-8's Data Direct DMA function (Linux drivers/infiniband/hw/mlx5/
/// data_direct.c, `mlx5_data_direct_pci_tbl`). Which mlx5 device it serves is matched by a VUID
/// through a uverbs ioctl (`MLX5_IB_METHOD_GET_DATA_DIRECT_SYSFS_PATH`), not shown in sysfs.
const DATA_DIRECT: (u32, u32) = (0x15b3, 0x2100);

/// The family of device `name` (PCI vendor `vendor`, where it has a PCI function): its name
/// prefix first, then the vendor.
fn family(name: &str, vendor: Option<u32>) -> Option<&'static Family> {
    FAMILIES
        .iter()
        .find(|f| name.starts_with(f.prefix))
        .or_else(|| {
            FAMILIES
                .iter()
                .find(|f| f.vendor.is_some() && f.vendor == vendor)
        })
}

/// What EFA device `dev` says of its P2P provider: `device/p2p` (EFA 2.6 and later: `NVIDIA`,
/// `NVIDIA peermem`, `NEURON` or empty), else `device/gdr` (before: 1 or 0). `None`: neither.
fn efa_p2p(ctx: &Ctx, dev: &str) -> Option<(String, bool)> {
    let base = format!("/sys/class/infiniband/{dev}/device");
    if let Some(p) = ctx.root.read_trim(&format!("{base}/p2p")) {
        let nvidia = p.contains("NVIDIA");
        return Some((
            format!("device/p2p: {}", if p.is_empty() { "(empty)" } else { &p }),
            nvidia,
        ));
    }
    let g = ctx.root.read_trim(&format!("{base}/gdr"))?;
    Some((format!("device/gdr: {g}"), g == "1"))
}

/// `rdma.nic_paths`: each RDMA device's family and the ways GPU memory reaches it.
pub fn nic_paths(ctx: &Ctx) -> Check {
    const ID: &str = "rdma.nic_paths";
    const T: &str = "GPU memory paths per NIC";
    if ctx.rdma_devices.is_empty() {
        return Check::new(ID, T, false, Status::Skip, "no RDMA device").data(NicPathsData {
            devices: Vec::new(),
            data_direct: Vec::new(),
        });
    }
    let efa_module = ctx.root.read_trim("/sys/module/efa_nv_peermem/version");
    let mut rows = Vec::new();
    let mut details = Vec::new();
    let mut warn = Vec::new();
    let mut elsewhere = Vec::new();
    for dev in &ctx.rdma_devices {
        let vendor = ctx
            .nics
            .iter()
            .find(|n| &n.name == dev)
            .map(|n| n.pci.vendor);
        let f = family(dev, vendor);
        let mut evidence = Vec::new();
        let mut own_ready = None;
        if f.is_some_and(|f| f.prefix == "efa_") {
            match efa_p2p(ctx, dev) {
                Some((what, nvidia)) => {
                    evidence.push(what);
                    own_ready = Some(nvidia);
                }
                None => {
                    evidence.push("no device/p2p or device/gdr (an EFA driver before 1.6?)".into())
                }
            }
            if let Some(v) = &efa_module {
                evidence.push(format!("efa_nv_peermem {v} loaded"));
            }
            if own_ready != Some(true) {
                warn.push(dev.clone());
            }
        }
        let mut ways = Vec::new();
        if let Some(f) = f {
            if f.peer_memory {
                ways.push("peer memory (nvpeer, nvidia-peermem)".to_string());
            }
            if let Some(o) = f.own {
                ways.push(match own_ready {
                    Some(true) => format!("its own P2P ({o}): ready"),
                    Some(false) => format!("its own P2P ({o}): not ready"),
                    None => format!("its own P2P ({o})"),
                });
            }
            if f.dmabuf {
                ways.push("dma-buf (rdma.dmabuf)".to_string());
            }
            if !f.peer_memory {
                elsewhere.push(dev.clone());
            }
        }
        details.push(format!(
            "{dev}: {}: {}{}",
            f.map_or("unknown driver family", |f| f.name),
            if ways.is_empty() {
                "no GPU memory path known to the doctor".to_string()
            } else {
                ways.join("; ")
            },
            if evidence.is_empty() {
                String::new()
            } else {
                format!(" [{}]", evidence.join(", "))
            }
        ));
        rows.push(NicPathRow {
            device: dev.clone(),
            family: f.map(|f| f.name),
            peer_memory: f.map(|f| f.peer_memory),
            dmabuf: f.map(|f| f.dmabuf),
            own_p2p: f.and_then(|f| f.own),
            own_p2p_ready: own_ready,
            evidence,
            source: f.map(|f| f.source),
        });
    }
    let data_direct: Vec<String> = crate::pci::PciDev::all(ctx.root)
        .into_iter()
        .filter(|d| (d.vendor, d.device) == DATA_DIRECT)
        .map(|d| d.bdf)
        .collect();
    if !data_direct.is_empty() {
        details.push(format!(
            "Data Direct DMA functions (ConnectX-8, 15b3:2100): {}. NCCL ≥ 2.27.3 (NCCL_IB_DATA_DIRECT=1, its default) exposes an mlx5 device that has one through it: it registers GPU memory with mlx5dv_reg_dmabuf_mr's DATA_DIRECT access (dma-buf, never peer memory) and places the NIC at the function's PCI position, not the device's own (pci.topology classifies the device's own function; which device a function serves is not in sysfs)",
            data_direct.join(", ")
        ));
    }
    let data = NicPathsData {
        devices: rows,
        data_direct,
    };
    let served = ctx.rdma_devices.len() - elsewhere.len();
    let summary = if elsewhere.is_empty() {
        format!(
            "{} device(s), each served by peer memory and dma-buf where its driver has it",
            served
        )
    } else {
        format!(
            "{}: not served by peer memory (nvpeer does not serve them; their GPU memory goes through their own path or dma-buf)",
            elsewhere.join(", ")
        )
    };
    if !warn.is_empty() {
        return Check::new(
            ID,
            T,
            false,
            Status::Warn,
            format!("{}: the EFA driver reports no NVIDIA P2P provider", warn.join(", ")),
        )
        .details(details)
        .fix("On NVIDIA's open driver, load efa_nv_peermem (`modprobe efa_nv_peermem`, EFA 2.6 and later) after nvidia; or register through dma-buf (EFA 1.16 and later; libfabric 2.5 and later try it first). nvpeer does not serve EFA.")
        .data(data);
    }
    Check::new(ID, T, false, Status::Pass, summary)
        .details(details)
        .data(data)
}
