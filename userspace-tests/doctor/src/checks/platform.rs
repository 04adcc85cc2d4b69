//! PCIe platform: GPU↔NIC path class (C2C included) and the dma-buf mapping it needs, ACS on the
//! bridges between them, IOMMU mode, link training, relaxed ordering, virtualisation.

use super::data::{
    AcsBridge, AcsData, BestRow, IommuData, IommuDomain, LinkData, LinkRow, PairRow,
    RelaxedOrderingData, TopologyData, VirtualizationData,
};
use super::{Ctx, Nic};
use crate::c2c::{
    attachment, mapping, pair_class, Attachment, Decider, DmabufMapping, Evidence, NodeMapping,
};
use crate::pci::{acs_flags, acs_redirects, bridges_between, classify, Link, PathClass, PciDev};
use crate::report::{Check, Status};

fn pairs<'c>(ctx: &'c Ctx) -> Vec<(&'c PciDev, &'c Nic)> {
    ctx.gpus
        .iter()
        .flat_map(|g| ctx.nics.iter().map(move |n| (g, n)))
        .collect()
}

fn no_pairs(ctx: &Ctx, id: &'static str, title: &'static str) -> Option<Check> {
    let what = match (ctx.gpus.is_empty(), ctx.nics.is_empty()) {
        (true, true) => "no NVIDIA GPU and no PCI RDMA NIC",
        (true, false) => "no NVIDIA GPU on the PCI bus",
        (false, true) => "no PCI RDMA NIC",
        (false, false) => return None,
    };
    Some(Check::new(
        id,
        title,
        false,
        Status::Skip,
        format!("{what}: no GPU↔NIC pair"),
    ))
}

fn attachment_line(a: &Attachment) -> String {
    let how = if a.coherent {
        "coherently attached over C2C"
    } else {
        "PCIe only"
    };
    let facts: Vec<String> = a
        .evidence
        .iter()
        .map(|e| match e {
            Evidence::Nvml { links, active } => format!(
                "NVML: {links} C2C link(s), link 0 {}",
                if *active { "active" } else { "inactive" }
            ),
            Evidence::NumaStatus { node, status } => format!(
                "driver NUMA memory node {} ({})",
                node.map_or("?".to_string(), |n| n.to_string()),
                status.as_deref().unwrap_or("?")
            ),
            Evidence::DeviceId { device, model } => format!("device {device} ({model})"),
        })
        .chain(a.nvml.iter().map(|w| format!("NVML: {w}")))
        .collect();
    let decided = match a.decided_by {
        Decider::Nvml => "NVML",
        Decider::Sysfs => "sysfs",
    };
    if facts.is_empty() {
        format!("GPU {}: {how} (by {decided})", a.gpu)
    } else {
        format!("GPU {}: {how} (by {decided}; {})", a.gpu, facts.join("; "))
    }
}

/// `pci.topology`: each GPU↔NIC pair's path class (PIX/PXB/C2C/PHB/NODE/SYS), each GPU's best
/// NIC, and the dma-buf mapping each pair needs (C2C nodes: crate::c2c).
pub fn topology(ctx: &Ctx) -> Check {
    const ID: &str = "pci.topology";
    const T: &str = "GPU↔NIC PCIe path";
    let gpus: Vec<Attachment> = ctx
        .gpus
        .iter()
        .map(|g| attachment(ctx.root, g, &ctx.probes.c2c))
        .collect();
    let coherent: Vec<&str> = gpus
        .iter()
        .filter(|a| a.coherent)
        .map(|a| a.gpu.as_str())
        .collect();
    if let Some(mut c) = no_pairs(ctx, ID, T) {
        if !coherent.is_empty() {
            c.summary = format!(
                "{}; coherently attached (C2C): {}",
                c.summary,
                coherent.join(", ")
            );
        }
        c.details = gpus.iter().map(attachment_line).collect();
        let data = TopologyData {
            pairs: Vec::new(),
            best: Vec::new(),
            gpus: gpus.clone(),
            c2c: !coherent.is_empty(),
            dmabuf_mapping: NodeMapping::Default,
        };
        return c.data(data);
    }
    let coherent_gpu = |bdf: &str| gpus.iter().any(|a| a.gpu == bdf && a.coherent);
    let mut details: Vec<String> = gpus.iter().map(attachment_line).collect();
    let rows = pair_rows(ctx, &coherent_gpu, &mut details);
    let Best {
        best,
        far,
        need_pcie,
    } = best_nics(ctx, &coherent_gpu, &rows, &mut details);
    // A coherent GPU's NICs reached through the CPU take the default mapping.
    let via_cpu: Vec<String> = rows
        .iter()
        .filter(|r| {
            r.dmabuf_mapping == DmabufMapping::Default && coherent.contains(&r.gpu.as_str())
        })
        .map(|r| format!("GPU {} on {}", r.gpu, r.nic))
        .collect();
    let node = NodeMapping::of(best.iter().map(|b| b.dmabuf_mapping));
    // GPUs with a NIC that are not coherently attached (a mixed node has both kinds).
    let others = best
        .iter()
        .filter(|b| !coherent.contains(&b.gpu.as_str()))
        .count();
    mapping_details(&rows, &coherent, node, &mut details);
    let data = TopologyData {
        pairs: rows,
        best,
        gpus: gpus.clone(),
        c2c: !coherent.is_empty(),
        dmabuf_mapping: node,
    };
    let c2c_note = if coherent.is_empty() {
        String::new()
    } else {
        format!("C2C node ({} coherently attached); ", coherent.join(", "))
    };
    let mapping_fix = (!need_pcie.is_empty()).then(|| {
        format!(
            "Export dma-buf with CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE (CUDA 12.8, driver 570) for {}{}: the wrong mapping fails registration (ibv_reg_dmabuf_mr errno 524, openucx/ucx#11571) or registers and fails once data moves (ofiwg/libfabric#12864); NCCL picks the mapping itself (ncclTopoCheckGdr), perftest needs --use_cuda_pcie_mapping.",
            need_pcie.join(", "),
            if via_cpu.is_empty() {
                String::new()
            } else {
                format!(", and keep the default (flags 0) for {}", via_cpu.join(", "))
            }
        )
    });
    if !far.is_empty() {
        let mut fix = "Put GPU and NIC under the same PCIe switch/socket; beyond PXB (P2C on C2C nodes) NCCL disables GDR by default (NCCL_NET_GDR_LEVEL) and bandwidth drops.".to_string();
        if let Some(m) = mapping_fix {
            fix = format!("{fix} {m}");
        }
        Check::new(
            ID,
            T,
            false,
            Status::Warn,
            format!(
                "{c2c_note}paths beyond {}: {}",
                if coherent.is_empty() {
                    "PXB"
                } else {
                    "PXB/C2C"
                },
                far.join(", ")
            ),
        )
        .details(details)
        .fix(fix)
        .data(data)
    } else if let Some(fix) = mapping_fix {
        Check::new(
            ID,
            T,
            false,
            Status::Warn,
            format!(
                "{c2c_note}dma-buf needs the PCIe mapping for {}",
                need_pcie.join(", ")
            ),
        )
        .details(details)
        .fix(fix)
        .data(data)
    } else if !coherent.is_empty() {
        // (here every coherent GPU's best NIC is through its CPU, every other GPU's within PXB)
        let summary = if others == 0 {
            format!("{c2c_note}every GPU reaches a NIC through its CPU (NCCL's P2C); dma-buf takes the default mapping")
        } else {
            format!(
                "{c2c_note}the coherent GPUs reach a NIC through their CPU (NCCL's P2C; dma-buf takes the default mapping), the {others} other GPU(s) within PXB (NCCL's default GDR cutoff)"
            )
        };
        Check::new(ID, T, false, Status::Pass, summary)
            .details(details)
            .data(data)
    } else {
        Check::new(
            ID,
            T,
            false,
            Status::Pass,
            "every GPU has a NIC within PXB (NCCL's default GDR cutoff)",
        )
        .details(details)
        .data(data)
    }
}

/// The detail lines of the dma-buf mapping the node needs (C2C nodes), and the note on NICs across
/// sockets from a coherent GPU.
fn mapping_details(
    rows: &[PairRow],
    coherent: &[&str],
    node: NodeMapping,
    details: &mut Vec<String>,
) {
    if coherent.is_empty() {
        details.push(
            "dma-buf mapping: the default for every pair (no GPU is coherently attached)".into(),
        );
    } else {
        details.push(format!(
            "dma-buf mapping the node needs: {}",
            match node {
                NodeMapping::Default => "the default (flags 0)",
                NodeMapping::Pcie => "CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE",
                NodeMapping::PerNic =>
                    "per NIC (PCIe under the GPU's switch, the default through the CPU)",
            }
        ));
    }
    if rows
        .iter()
        .any(|r| r.class == PathClass::SYS && coherent.contains(&r.gpu.as_str()))
    {
        details.push("across sockets from a C2C GPU: NCCL uses no GDR there by default; libfabric#12864 calls such a NIC CPU-mediated (default mapping), NCCL with NCCL_NET_GDR_LEVEL=SYS asks for the PCIe one".into());
    }
}

/// Each GPU-NIC pair's path class and the dma-buf mapping it needs, one detail line each.
fn pair_rows(
    ctx: &Ctx,
    coherent_gpu: &dyn Fn(&str) -> bool,
    details: &mut Vec<String>,
) -> Vec<PairRow> {
    let mut rows = Vec::new();
    for (g, n) in pairs(ctx) {
        let coh = coherent_gpu(&g.bdf);
        let class = pair_class(g, coh, &n.pci);
        let m = mapping(coh, class);
        details.push(format!(
            "GPU {} ↔ {} ({}): {:?}{}",
            g.bdf,
            n.name,
            n.pci.bdf,
            class,
            if coh {
                format!(", dma-buf {}", m.flag())
            } else {
                String::new()
            }
        ));
        rows.push(PairRow {
            gpu: g.bdf.clone(),
            nic: n.name.clone(),
            nic_bdf: n.pci.bdf.clone(),
            class,
            pcie_class: classify(g, &n.pci),
            dmabuf_mapping: m,
        });
    }
    rows
}

/// Each GPU's best NICs, the GPUs whose best is beyond NCCL's default GDR cutoff (`far`), and
/// those whose best needs the PCIe dma-buf mapping (`need_pcie`).
struct Best {
    best: Vec<BestRow>,
    far: Vec<String>,
    need_pcie: Vec<String>,
}

/// The best NIC per GPU: the closest path class (NCCL pairs each GPU with its closest NIC);
/// several at the same distance are all named. A GPU is fine when its best is within NCCL's
/// default GDR level: PXB, or P2C (our C2C) on C2C platforms (NCCL_NET_GDR_C2C=1, paths.cc).
fn best_nics(
    ctx: &Ctx,
    coherent_gpu: &dyn Fn(&str) -> bool,
    rows: &[PairRow],
    details: &mut Vec<String>,
) -> Best {
    let mut best = Vec::new();
    let mut far = Vec::new();
    let mut need_pcie: Vec<String> = Vec::new();
    for g in &ctx.gpus {
        let coh = coherent_gpu(&g.bdf);
        let Some(min) = rows
            .iter()
            .filter(|r| r.gpu == g.bdf)
            .map(|r| r.class)
            .min()
        else {
            continue;
        };
        let names: Vec<&str> = rows
            .iter()
            .filter(|r| r.gpu == g.bdf && r.class == min)
            .map(|r| r.nic.as_str())
            .collect();
        let m = mapping(coh, min);
        details.push(format!(
            "best NIC for GPU {}: {} ({min:?}), dma-buf {}",
            g.bdf,
            names.join(", "),
            m.flag()
        ));
        let cutoff = if coh { PathClass::C2C } else { PathClass::PXB };
        if min > cutoff {
            far.push(format!("{}↔{}", g.bdf, names.join("/")));
        }
        if m == DmabufMapping::Pcie {
            need_pcie.push(format!("GPU {} on {}", g.bdf, names.join("/")));
        }
        best.push(BestRow {
            gpu: g.bdf.clone(),
            nics: names.iter().map(|n| n.to_string()).collect(),
            class: min,
            dmabuf_mapping: m,
        });
    }
    Best {
        best,
        far,
        need_pcie,
    }
}

/// `pci.acs`: ACS redirection on bridges between GPU and NIC sends P2P through the root complex.
pub fn acs(ctx: &Ctx) -> Check {
    const ID: &str = "pci.acs";
    const T: &str = "ACS on GPU↔NIC bridges";
    if let Some(c) = no_pairs(ctx, ID, T) {
        return c;
    }
    let mut checked: Vec<String> = Vec::new();
    let mut redirecting = Vec::new();
    let mut unreadable = Vec::new();
    let mut details = Vec::new();
    let mut rows = Vec::new();
    for (g, n) in pairs(ctx) {
        for b in bridges_between(g, &n.pci) {
            if checked.contains(&b) {
                continue;
            }
            checked.push(b.clone());
            let Some(dev) = PciDev::load(ctx.root, &b) else {
                continue;
            };
            match dev.config(ctx.root).map(|c| c.acs_control()) {
                Some(Ok(Some(ctl))) => {
                    let flags = acs_flags(ctl);
                    details.push(format!("{b}: ACSCtl {:#06x} [{}]", ctl, flags.join(" ")));
                    if acs_redirects(ctl) {
                        redirecting.push(b.clone());
                    }
                    rows.push(AcsBridge::Capable {
                        bridge: b.clone(),
                        acs_ctl: ctl,
                        flags: flags.iter().map(|f| f.to_string()).collect(),
                        redirects: acs_redirects(ctl),
                    });
                }
                Some(Ok(None)) => {
                    details.push(format!("{b}: no ACS capability"));
                    rows.push(AcsBridge::NoCapability {
                        bridge: b.clone(),
                        acs_ctl: None,
                    });
                }
                _ => {
                    unreadable.push(b.clone());
                    rows.push(AcsBridge::Unreadable {
                        bridge: b.clone(),
                        unreadable: true,
                    });
                }
            }
        }
    }
    let data = AcsData { bridges: rows };
    if !redirecting.is_empty() {
        Check::new(ID, T, true, Status::Fail, format!("ACS redirects peer traffic on {}", redirecting.join(", ")))
            .details(details)
            .fix("Disable ACS on these bridges (BIOS option, or `setpci -s <bdf> ECAP_ACS+6.w=0000` at boot) on bare metal; RDMA to GPU memory otherwise hangs or fails.")
            .data(data)
    } else if !unreadable.is_empty() {
        Check::new(
            ID,
            T,
            false,
            Status::Unknown,
            format!(
                "extended config space unreadable on {}",
                unreadable.join(", ")
            ),
        )
        .details(details)
        .fix("Run `sudo nvpeer doctor`: only root can read PCIe config space beyond 64 bytes.")
        .data(data)
    } else if checked.is_empty() {
        Check::new(
            ID,
            T,
            false,
            Status::Pass,
            "no shared PCIe switch: the path crosses the host bridge, ACS does not apply",
        )
        .data(data)
    } else {
        Check::new(
            ID,
            T,
            false,
            Status::Pass,
            format!("no redirection on {} bridge(s)", checked.len()),
        )
        .details(details)
        .data(data)
    }
}

/// `platform.iommu`: IOMMU off or passthrough keeps P2P addresses untranslated.
pub fn iommu(ctx: &Ctx) -> Check {
    const ID: &str = "platform.iommu";
    const T: &str = "IOMMU mode";
    let units = ctx.root.list("/sys/class/iommu");
    let cmdline = ctx.root.read_trim("/proc/cmdline").unwrap_or_default();
    let iommu_args: Vec<&str> = cmdline
        .split_whitespace()
        .filter(|w| w.contains("iommu"))
        .collect();
    let mut types: Vec<(String, String)> = Vec::new();
    for d in ctx.gpus.iter().chain(ctx.nics.iter().map(|n| &n.pci)) {
        if let Some(t) = ctx
            .root
            .read_trim(&format!("{}/iommu_group/type", d.sysfs()))
        {
            types.push((d.bdf.clone(), t));
        }
    }
    if types.is_empty() {
        for g in ctx.root.list("/sys/kernel/iommu_groups") {
            if let Some(t) = ctx
                .root
                .read_trim(&format!("/sys/kernel/iommu_groups/{g}/type"))
            {
                types.push((format!("group {g}"), t));
            }
        }
    }
    let translated: Vec<String> = types
        .iter()
        .filter(|(_, t)| t.starts_with("DMA"))
        .map(|(d, t)| format!("{d} ({t})"))
        .collect();
    let data = IommuData {
        units: units.clone(),
        cmdline: iommu_args.iter().map(|a| a.to_string()).collect(),
        domains: types
            .iter()
            .map(|(d, t)| IommuDomain {
                device: d.clone(),
                kind: t.clone(),
            })
            .collect(),
    };
    let mut details = vec![format!(
        "kernel command line: {}",
        if iommu_args.is_empty() {
            "(no iommu option)".to_string()
        } else {
            iommu_args.join(" ")
        }
    )];
    details.extend(types.iter().map(|(d, t)| format!("{d}: {t}")));
    if units.is_empty() {
        Check::new(ID, T, false, Status::Pass, "no IOMMU active")
            .details(details)
            .data(data)
    } else if !translated.is_empty() {
        Check::new(ID, T, false, Status::Warn, format!("IOMMU translates DMA for {}", translated.join(", ")))
            .details(details)
            .fix("On bare metal boot with `iommu=pt` (or intel_iommu=off / amd_iommu=off): translated mode routes P2P through the root complex.")
            .data(data)
    } else {
        Check::new(
            ID,
            T,
            false,
            Status::Pass,
            format!("IOMMU on ({}), passthrough domains", units.join(", ")),
        )
        .details(details)
        .data(data)
    }
}

/// `pci.link`: negotiated link vs capability for GPUs and NICs.
pub fn link(ctx: &Ctx) -> Check {
    const ID: &str = "pci.link";
    const T: &str = "PCIe link width/speed";
    let mut details = Vec::new();
    let mut degraded = Vec::new();
    let mut rows = Vec::new();
    let devs: Vec<(&PciDev, bool)> = ctx
        .gpus
        .iter()
        .map(|g| (g, true))
        .chain(ctx.nics.iter().map(|n| (&n.pci, false)))
        .collect();
    if devs.is_empty() {
        return Check::new(
            ID,
            T,
            false,
            Status::Skip,
            "no GPU or RDMA NIC on the PCI bus",
        );
    }
    for (d, is_gpu) in devs {
        let Some(l) = d.link(ctx.root) else {
            details.push(format!("{}: link not reported", d.bdf));
            continue;
        };
        let width_low = l.max_width > 0 && l.cur_width < l.max_width;
        let speed_low = Link::gts(&l.cur_speed) < Link::gts(&l.max_speed);
        let note = if speed_low && is_gpu {
            " (GPUs lower link speed when idle; re-check under load)"
        } else {
            ""
        };
        details.push(format!(
            "{}: x{}/x{} {} / {}{note}",
            d.bdf, l.cur_width, l.max_width, l.cur_speed, l.max_speed
        ));
        if width_low || (speed_low && !is_gpu) {
            degraded.push(d.bdf.clone());
        }
        rows.push(LinkRow {
            bdf: d.bdf.clone(),
            gpu: is_gpu,
            degraded: width_low || (speed_low && !is_gpu),
            link: l,
        });
    }
    let data = LinkData { devices: rows };
    if degraded.is_empty() {
        Check::new(ID, T, false, Status::Pass, "links trained at full width")
            .details(details)
            .data(data)
    } else {
        Check::new(
            ID,
            T,
            false,
            Status::Warn,
            format!("degraded link on {}", degraded.join(", ")),
        )
        .details(details)
        .fix(
            "Reseat the card or move it to a full-width slot; check BIOS PCIe generation settings.",
        )
        .data(data)
    }
}

/// `pci.relaxed_ordering`: DevCtl "Enable Relaxed Ordering" (bit 4) on the NICs.
pub fn relaxed_ordering(ctx: &Ctx) -> Check {
    const ID: &str = "pci.relaxed_ordering";
    const T: &str = "NIC relaxed ordering";
    if ctx.nics.is_empty() {
        return Check::new(ID, T, false, Status::Skip, "no PCI RDMA NIC");
    }
    let mut details = Vec::new();
    let mut off = Vec::new();
    let mut unknown = Vec::new();
    for n in &ctx.nics {
        match n.pci.config(ctx.root).map(|c| c.devctl()) {
            Some(Ok(Some(v))) => {
                let on = v & 0x10 != 0;
                details.push(format!(
                    "{} ({}): DevCtl {:#06x}, RlxdOrd{}",
                    n.name,
                    n.pci.bdf,
                    v,
                    if on { "+" } else { "-" }
                ));
                if !on {
                    off.push(n.name.clone());
                }
            }
            Some(Ok(None)) => details.push(format!("{}: not a PCIe function", n.name)),
            _ => unknown.push(n.name.clone()),
        }
    }
    let data = RelaxedOrderingData {
        disabled: off.clone(),
        unreadable: unknown.clone(),
    };
    if !off.is_empty() {
        Check::new(ID, T, false, Status::Warn, format!("relaxed ordering disabled on {}", off.join(", ")))
            .details(details)
            .fix("Enable PCIe relaxed ordering for the NIC (firmware `PCI_WR_ORDERING`/BIOS); without it GPU writes can lose up to half the bandwidth on some CPUs.")
            .data(data)
    } else if !unknown.is_empty() {
        Check::new(
            ID,
            T,
            false,
            Status::Unknown,
            format!("config space unreadable for {}", unknown.join(", ")),
        )
        .fix("Run `sudo nvpeer doctor` to read the PCIe capability.")
        .data(data)
    } else {
        Check::new(ID, T, false, Status::Pass, "enabled")
            .details(details)
            .data(data)
    }
}

/// `platform.virtualization`: inside a VM the PCIe settings that matter are the host's.
pub fn virtualization(ctx: &Ctx) -> Check {
    const ID: &str = "platform.virtualization";
    const T: &str = "bare metal";
    let cpuinfo = ctx.root.read("/proc/cpuinfo").unwrap_or_default();
    let hv = cpuinfo
        .lines()
        .any(|l| l.starts_with("flags") && l.split_whitespace().any(|w| w == "hypervisor"));
    let product = ctx
        .root
        .read_trim("/sys/class/dmi/id/product_name")
        .unwrap_or_default();
    if hv {
        Check::new(ID, T, false, Status::Warn, format!("running in a virtual machine{}", if product.is_empty() { String::new() } else { format!(" ({product})") }))
            .fix("ACS, ATS and IOMMU mode must be set on the hypervisor host; the guest's view of the PCIe tree may be synthetic.")
            .data(VirtualizationData {
                hypervisor: true,
                product,
            })
    } else {
        Check::new(ID, T, false, Status::Pass, "no hypervisor flag").data(VirtualizationData {
            hypervisor: false,
            product,
        })
    }
}
