//! `nvpeer doctor --topology`: the node's GPU↔NIC matrix as `nvidia-smi topo -m` lays it out
//! (one row per GPU, one column per RDMA device, the path class in each cell; C2C where the GPU
//! is coherently attached), with each device's NUMA node, CPU affinity and IOMMU group; each
//! GPU's best NIC (the closest, as NCCL pairs them); the pairs on which NCCL would not use
//! GPUDirect RDMA by default and why (beyond `NCCL_NET_GDR_LEVEL`'s default PXB, P2C for a
//! coherent GPU: NCCL's paths.cc); and what else on a pair's path makes peer traffic detour or
//! translate (ACS redirection on a bridge, an IOMMU group that translates DMA). Built from the
//! `pci.topology` check's own data, so the matrix and the check cannot disagree.

use crate::checks::data::CheckData;
use crate::pci::{acs_redirects, bridges_between, PathClass, PciDev};
use crate::report::Report;
use crate::root::SysRoot;
use serde::Serialize;

/// One GPU or RDMA device of the matrix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Device {
    /// `GPU0` (by PCI address, as `nvidia-smi` numbers them), or the RDMA device's name.
    pub name: String,
    /// The PCI address (`None` for an RDMA device without one: rxe, siw).
    pub bdf: Option<String>,
    /// NUMA node of the PCI function (`None` where the platform reports none).
    pub numa: Option<i64>,
    /// The CPUs local to it (`local_cpulist`).
    pub cpus: Option<String>,
    /// Its IOMMU group and the group's domain type (`12 (identity)`, `40 (DMA-FQ)`).
    pub iommu: Option<String>,
}

/// One GPU's best NICs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Best {
    pub gpu: String,
    pub nics: Vec<String>,
    pub class: PathClass,
}

/// A pair and why it is named.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairNote {
    pub gpu: String,
    pub nic: String,
    pub why: Vec<String>,
}

/// The matrix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Matrix {
    pub gpus: Vec<Device>,
    pub nics: Vec<Device>,
    /// `cells[g][n]`: GPU g to NIC n (`None`: the NIC has no PCI function to place it by).
    pub cells: Vec<Vec<Option<PathClass>>>,
    pub best: Vec<Best>,
    /// Each GPU's best pairs on which NCCL would not use GPUDirect RDMA by default.
    pub refused: Vec<PairNote>,
    /// Best pairs whose peer traffic detours or is translated on the way.
    pub hazards: Vec<PairNote>,
}

fn device(root: &SysRoot, name: String, bdf: Option<&str>) -> Device {
    let Some(bdf) = bdf else {
        return Device {
            name,
            bdf: None,
            numa: None,
            cpus: None,
            iommu: None,
        };
    };
    let at = |f: &str| format!("/sys/bus/pci/devices/{bdf}/{f}");
    let numa = root
        .read_trim(&at("numa_node"))
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|n| *n >= 0);
    let iommu = root.resolve(&at("iommu_group")).and_then(|g| {
        let id = g.rsplit('/').next()?.to_string();
        Some(
            match root.read_trim(&format!("/sys/kernel/iommu_groups/{id}/type")) {
                Some(t) => format!("{id} ({t})"),
                None => id,
            },
        )
    });
    Device {
        name,
        bdf: Some(bdf.to_string()),
        numa,
        cpus: root.read_trim(&at("local_cpulist")),
        iommu,
    }
}

/// Whether an IOMMU group type translates DMA (`DMA`, `DMA-FQ`; `identity` passes it through).
fn translates(iommu: &Option<String>) -> bool {
    iommu
        .as_deref()
        .is_some_and(|g| g.ends_with("(DMA)") || g.ends_with("(DMA-FQ)"))
}

impl Matrix {
    /// The matrix of the node under `root` that `report` is about.
    pub fn of(root: &SysRoot, report: &Report) -> Matrix {
        let data = report.checks.iter().find_map(|c| match &c.data {
            Some(CheckData::Topology(t)) if c.id == "pci.topology" => Some(t),
            _ => None,
        });
        let mut gpu_bdfs: Vec<String> = match data {
            Some(t) => t.gpus.iter().map(|a| a.gpu.clone()).collect(),
            None => PciDev::all(root)
                .into_iter()
                .filter(|d| d.is_nvidia_gpu())
                .map(|d| d.bdf)
                .collect(),
        };
        gpu_bdfs.sort();
        gpu_bdfs.dedup();
        let coherent =
            |bdf: &str| data.is_some_and(|t| t.gpus.iter().any(|a| a.gpu == bdf && a.coherent));
        let mut nic_names = root.list("/sys/class/infiniband");
        // mlx5_2 before mlx5_10, as a person counts them
        nic_names.sort_by_key(|n| {
            let digits = n.len() - n.trim_end_matches(|c: char| c.is_ascii_digit()).len();
            let (stem, num) = n.split_at(n.len() - digits);
            (stem.to_string(), num.parse::<u64>().unwrap_or(0), n.clone())
        });
        let nic_bdf = |n: &str| {
            root.resolve(&format!("/sys/class/infiniband/{n}/device"))
                .and_then(|p| p.rsplit('/').next().map(str::to_string))
                .filter(|b| crate::pci::is_bdf(b))
        };
        let gpus: Vec<Device> = gpu_bdfs
            .iter()
            .enumerate()
            .map(|(i, b)| device(root, format!("GPU{i}"), Some(b)))
            .collect();
        let nics: Vec<Device> = nic_names
            .iter()
            .map(|n| device(root, n.clone(), nic_bdf(n).as_deref()))
            .collect();
        let cells: Vec<Vec<Option<PathClass>>> = gpu_bdfs
            .iter()
            .map(|g| {
                nic_names
                    .iter()
                    .map(|n| {
                        data.and_then(|t| {
                            t.pairs
                                .iter()
                                .find(|p| &p.gpu == g && &p.nic == n)
                                .map(|p| p.class)
                        })
                    })
                    .collect()
            })
            .collect();
        let mut best = Vec::new();
        let mut refused = Vec::new();
        let mut hazards = Vec::new();
        for (gi, g) in gpu_bdfs.iter().enumerate() {
            let Some(min) = cells[gi].iter().flatten().min().copied() else {
                continue;
            };
            let names: Vec<String> = nic_names
                .iter()
                .zip(&cells[gi])
                .filter(|(_, c)| **c == Some(min))
                .map(|(n, _)| n.clone())
                .collect();
            let gname = gpus[gi].name.clone();
            let cutoff = if coherent(g) {
                PathClass::C2C
            } else {
                PathClass::PXB
            };
            for n in &names {
                if min > cutoff {
                    refused.push(PairNote {
                        gpu: gname.clone(),
                        nic: n.clone(),
                        why: vec![format!(
                            "{min:?}: beyond NCCL_NET_GDR_LEVEL's default ({})",
                            if cutoff == PathClass::C2C {
                                "P2C on a coherent GPU"
                            } else {
                                "PXB"
                            }
                        )],
                    });
                }
                let mut why = Vec::new();
                let ni = nic_names.iter().position(|m| m == n).unwrap_or(0);
                if let (Some(gd), Some(nb)) = (
                    PciDev::load(root, g),
                    nics[ni].bdf.as_deref().and_then(|b| PciDev::load(root, b)),
                ) {
                    for b in bridges_between(&gd, &nb) {
                        let ctl = PciDev::load(root, &b)
                            .and_then(|d| d.config(root))
                            .and_then(|c| c.acs_control().ok().flatten());
                        if ctl.is_some_and(acs_redirects) {
                            why.push(format!(
                                "ACS on bridge {b} redirects peer traffic through the root complex"
                            ));
                        }
                    }
                }
                for d in [&gpus[gi], &nics[ni]] {
                    if translates(&d.iommu) {
                        why.push(format!(
                            "{}'s IOMMU group {} translates its DMA",
                            d.name,
                            d.iommu.as_deref().unwrap_or("?")
                        ));
                    }
                }
                if !why.is_empty() {
                    hazards.push(PairNote {
                        gpu: gname.clone(),
                        nic: n.clone(),
                        why,
                    });
                }
            }
            best.push(Best {
                gpu: gname,
                nics: names,
                class: min,
            });
        }
        Matrix {
            gpus,
            nics,
            cells,
            best,
            refused,
            hazards,
        }
    }

    /// The matrix as text: the table, a legend, each GPU's best NIC, the refused pairs and the
    /// hazards.
    pub fn render(&self) -> String {
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        let mut header: Vec<String> = vec![String::new()];
        header.extend(self.nics.iter().map(|n| n.name.clone()));
        header.extend(["NUMA", "CPU affinity", "IOMMU group", "PCI"].map(String::from));
        let mut rows: Vec<Vec<String>> = vec![header];
        let facts = |d: &Device| {
            vec![
                d.numa.map_or("-".into(), |n| n.to_string()),
                opt(&d.cpus),
                opt(&d.iommu),
                opt(&d.bdf),
            ]
        };
        for (gi, g) in self.gpus.iter().enumerate() {
            let mut r = vec![g.name.clone()];
            r.extend(
                self.cells[gi]
                    .iter()
                    .map(|c| c.map_or("-".into(), |c| format!("{c:?}"))),
            );
            r.extend(facts(g));
            rows.push(r);
        }
        for n in &self.nics {
            let mut r = vec![n.name.clone()];
            r.extend(self.nics.iter().map(|_| String::new()));
            r.extend(facts(n));
            rows.push(r);
        }
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::from("GPU↔NIC topology (nvpeer doctor --topology)\n\n");
        for r in rows.iter().filter(|_| rows.len() > 1) {
            let line: Vec<String> = r
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            out.push_str(line.join("  ").trim_end());
            out.push('\n');
        }
        if rows.len() > 1 {
            out.push('\n');
        }
        out.push_str(
            "PIX: one PCIe switch between them; PXB: several, not the host bridge; C2C: a \
             coherent GPU over its CPU (NCCL's P2C); PHB: through the host bridge; NODE: between \
             host bridges of one NUMA node; SYS: across NUMA nodes (nvidia-smi topo -m, NCCL)\n",
        );
        if self.gpus.is_empty() {
            out.push_str("\nno NVIDIA GPU on the PCI bus\n");
        } else if self.nics.is_empty() {
            out.push_str("\nno RDMA device: no GPU↔NIC pair to place\n");
        }
        if !self.best.is_empty() {
            out.push('\n');
        }
        for b in &self.best {
            out.push_str(&format!(
                "best NIC for {}: {} ({:?})\n",
                b.gpu,
                b.nics.join(", "),
                b.class
            ));
        }
        if !self.refused.is_empty() {
            out.push_str("\nNCCL would not use GPUDirect RDMA by default on:\n");
            for p in &self.refused {
                out.push_str(&format!("  {}↔{}: {}\n", p.gpu, p.nic, p.why.join("; ")));
            }
        }
        if !self.hazards.is_empty() {
            out.push_str("\npeer traffic detours or is translated on:\n");
            for p in &self.hazards {
                out.push_str(&format!("  {}↔{}: {}\n", p.gpu, p.nic, p.why.join("; ")));
            }
        }
        out
    }
}
