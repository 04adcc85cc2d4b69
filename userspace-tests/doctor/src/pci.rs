//! The sysfs PCI tree: devices, their bridge chains, PCIe path classes and config-space capabilities.

use crate::root::SysRoot;
use serde::{Deserialize, Serialize};

/// PCI class code of a PCI-to-PCI bridge (base 0x06, sub 0x04).
const CLASS_BRIDGE: u32 = 0x0604;
/// Extended capability id of Access Control Services.
pub const EXT_CAP_ACS: u16 = 0x000d;
/// Capability id of the PCI Express capability.
pub const CAP_PCIE: u8 = 0x10;

/// One PCI function as sysfs shows it.
#[derive(Debug, Clone)]
pub struct PciDev {
    /// `DDDD:BB:DD.F`.
    pub bdf: String,
    /// Resolved sysfs path (`/sys/devices/pci0000:00/.../<bdf>`).
    pub path: String,
    /// Vendor id.
    pub vendor: u32,
    /// Device id (0 when sysfs has no `device` file).
    pub device: u32,
    /// 24-bit class code.
    pub class: u32,
    /// NUMA node, `None` when the platform reports -1.
    pub numa: Option<i64>,
}

/// Whether `s` looks like `DDDD:BB:DD.F`.
pub fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.chars().filter(|c| c.is_ascii_hexdigit()).count() == 9
}

impl PciDev {
    /// Loads one device by BDF from `/sys/bus/pci/devices`.
    pub fn load(root: &SysRoot, bdf: &str) -> Option<Self> {
        let link = format!("/sys/bus/pci/devices/{bdf}");
        let path = root.resolve(&link)?;
        let vendor = root.read_num(&format!("{link}/vendor")).unwrap_or(0) as u32;
        let device = root.read_num(&format!("{link}/device")).unwrap_or(0) as u32;
        let class = root.read_num(&format!("{link}/class")).unwrap_or(0) as u32;
        let numa = root
            .read_trim(&format!("{link}/numa_node"))
            .and_then(|s| s.parse::<i64>().ok())
            .filter(|n| *n >= 0);
        Some(Self {
            bdf: bdf.to_string(),
            path,
            vendor,
            device,
            class,
            numa,
        })
    }

    /// Every PCI function of the system.
    pub fn all(root: &SysRoot) -> Vec<Self> {
        root.list("/sys/bus/pci/devices")
            .iter()
            .filter_map(|b| Self::load(root, b))
            .collect()
    }

    /// `/sys/bus/pci/devices/<bdf>` (the link, which is what per-device files hang off).
    pub fn sysfs(&self) -> String {
        format!("/sys/bus/pci/devices/{}", self.bdf)
    }

    /// Whether this is a PCI-to-PCI bridge (root port, switch port).
    pub fn is_bridge(&self) -> bool {
        self.class >> 8 == CLASS_BRIDGE
    }

    /// NVIDIA display or 3D controller.
    pub fn is_nvidia_gpu(&self) -> bool {
        self.vendor == 0x10de && matches!(self.class >> 8, 0x0300 | 0x0302)
    }

    /// The host bridge component (`pciDDDD:BB`) and the BDF chain from the root port down to this
    /// device (the device itself is the last element).
    pub fn chain(&self) -> (String, Vec<String>) {
        let mut host = String::new();
        let mut chain = Vec::new();
        for comp in self.path.split('/') {
            if comp.starts_with("pci") && comp.len() > 3 && !is_bdf(comp) {
                host = comp.to_string();
                chain.clear();
            } else if is_bdf(comp) {
                chain.push(comp.to_string());
            }
        }
        (host, chain)
    }

    /// Reads up to 4096 bytes of config space. Unprivileged readers get only the first 64.
    pub fn config(&self, root: &SysRoot) -> Option<ConfigSpace> {
        root.read_bytes(&format!("{}/config", self.sysfs()), 4096)
            .map(ConfigSpace)
    }

    /// Link speed/width as sysfs reports them: (current speed, max speed, current width, max width).
    pub fn link(&self, root: &SysRoot) -> Option<Link> {
        let rd = |f: &str| root.read_trim(&format!("{}/{f}", self.sysfs()));
        let cur_speed = rd("current_link_speed")?;
        Some(Link {
            cur_speed,
            max_speed: rd("max_link_speed").unwrap_or_default(),
            cur_width: rd("current_link_width")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            max_width: rd("max_link_width")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
        })
    }
}

/// Link state of one device.
#[derive(Debug, Clone, Serialize)]
pub struct Link {
    /// e.g. `32.0 GT/s PCIe`.
    pub cur_speed: String,
    /// e.g. `32.0 GT/s PCIe`.
    pub max_speed: String,
    /// Lanes in use.
    pub cur_width: u32,
    /// Lanes supported.
    pub max_width: u32,
}

impl Link {
    /// GT/s as a number (0 when unknown).
    pub fn gts(s: &str) -> f64 {
        s.split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }
}

/// Raw config space bytes.
#[derive(Debug, Clone)]
pub struct ConfigSpace(pub Vec<u8>);

/// The config-space bytes a walk needed were not readable (non-root reads stop at 64 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("config space not readable that far")]
pub struct Unreadable;

impl ConfigSpace {
    fn u16_at(&self, off: usize) -> Option<u16> {
        Some(u16::from_le_bytes([
            *self.0.get(off)?,
            *self.0.get(off + 1)?,
        ]))
    }

    fn u32_at(&self, off: usize) -> Option<u32> {
        Some(u32::from_le_bytes([
            *self.0.get(off)?,
            *self.0.get(off + 1)?,
            *self.0.get(off + 2)?,
            *self.0.get(off + 3)?,
        ]))
    }

    /// Whether the extended space (offset 0x100 on) was readable.
    pub fn has_extended(&self) -> bool {
        self.0.len() > 0x100
    }

    /// Offset of a classic capability, walking the list from 0x34. `Err(Unreadable)` when the bytes
    /// needed were not readable.
    pub fn cap(&self, id: u8) -> Result<Option<usize>, Unreadable> {
        let status = self.u16_at(0x06).ok_or(Unreadable)?;
        if status & 0x10 == 0 {
            return Ok(None);
        }
        let mut ptr = (*self.0.get(0x34).ok_or(Unreadable)? & 0xfc) as usize;
        let mut hops = 0;
        while ptr >= 0x40 && hops < 48 {
            let cid = *self.0.get(ptr).ok_or(Unreadable)?;
            if cid == id {
                return Ok(Some(ptr));
            }
            ptr = (*self.0.get(ptr + 1).ok_or(Unreadable)? & 0xfc) as usize;
            hops += 1;
        }
        Ok(None)
    }

    /// Offset of an extended capability; `Err(Unreadable)` when the extended space was not readable.
    pub fn ext_cap(&self, id: u16) -> Result<Option<usize>, Unreadable> {
        if !self.has_extended() {
            return Err(Unreadable);
        }
        let mut off = 0x100usize;
        let mut hops = 0;
        while off >= 0x100 && hops < 512 {
            let hdr = self.u32_at(off).ok_or(Unreadable)?;
            if hdr == 0 || hdr == 0xffff_ffff {
                return Ok(None);
            }
            if (hdr & 0xffff) as u16 == id {
                return Ok(Some(off));
            }
            off = ((hdr >> 20) & 0xffc) as usize;
            hops += 1;
        }
        Ok(None)
    }

    /// ACS control word, `Ok(None)` when the device has no ACS capability.
    pub fn acs_control(&self) -> Result<Option<u16>, Unreadable> {
        match self.ext_cap(EXT_CAP_ACS)? {
            Some(off) => self.u16_at(off + 6).map(Some).ok_or(Unreadable),
            None => Ok(None),
        }
    }

    /// PCIe Device Control register, `Ok(None)` when not a PCIe device.
    pub fn devctl(&self) -> Result<Option<u16>, Unreadable> {
        match self.cap(CAP_PCIE)? {
            Some(off) => self.u16_at(off + 8).map(Some).ok_or(Unreadable),
            None => Ok(None),
        }
    }
}

/// ACS control bits that matter for peer-to-peer (PCIe spec names).
pub fn acs_flags(ctl: u16) -> Vec<&'static str> {
    const NAMES: [&str; 7] = [
        "SrcValid",
        "TransBlk",
        "ReqRedir",
        "CmpltRedir",
        "UpstreamFwd",
        "EgressCtrl",
        "DirectTrans",
    ];
    NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| ctl & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect()
}

/// Whether ACS redirects peer-to-peer requests or completions upstream (ReqRedir/CmpltRedir/EgressCtrl).
pub fn acs_redirects(ctl: u16) -> bool {
    ctl & ((1 << 2) | (1 << 3) | (1 << 5)) != 0
}

/// GPU↔NIC distance, as `nvidia-smi topo -m` and NCCL name it (best to worst).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PathClass {
    /// Through at most one PCIe switch.
    PIX,
    /// Through several PCIe switches, not through the host bridge.
    PXB,
    /// From a GPU coherently attached to its CPU (NVLink-C2C: Grace Hopper, Grace Blackwell) over
    /// C2C to that CPU, then PCIe to a NIC on the same NUMA node. NCCL calls this path `P2C`
    /// (src/graph/topo.h) and ranks it between PXB and PHB; [`classify`] never returns it, the
    /// topology check does when the GPU is coherent (crate::c2c).
    C2C,
    /// Through the PCIe host bridge (same root complex).
    PHB,
    /// Between host bridges inside one NUMA node.
    NODE,
    /// Across the inter-socket interconnect.
    SYS,
}

/// NCCL's view of a device's ancestors: it skips every other level of the sysfs path, so one
/// switch (upstream + downstream port) becomes one node and a root port folds into the CPU.
fn switch_nodes(chain: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = chain.len() as isize - 3;
    while i >= 0 {
        out.push(chain[..=i as usize].join("/"));
        i -= 2;
    }
    out
}

/// Path class between two devices.
pub fn classify(a: &PciDev, b: &PciDev) -> PathClass {
    let (ha, ca) = a.chain();
    let (hb, cb) = b.chain();
    if ha != hb {
        return match (a.numa, b.numa) {
            (Some(x), Some(y)) if x != y => PathClass::SYS,
            _ => PathClass::NODE,
        };
    }
    let sa = switch_nodes(&ca);
    let sb = switch_nodes(&cb);
    for (ia, na) in sa.iter().enumerate() {
        if let Some(ib) = sb.iter().position(|nb| nb == na) {
            return if ia == 0 && ib == 0 {
                PathClass::PIX
            } else {
                PathClass::PXB
            };
        }
    }
    PathClass::PHB
}

/// BDFs of the bridges where ACS could redirect peer traffic between `a` and `b`: each side's
/// ancestors below the deepest common one, plus that one. Empty when the two share no bridge: the
/// path then crosses the host bridge anyway, and root-port ACS changes nothing about it.
pub fn bridges_between(a: &PciDev, b: &PciDev) -> Vec<String> {
    let (ha, ca) = a.chain();
    let (hb, cb) = b.chain();
    let pa = &ca[..ca.len().saturating_sub(1)];
    let pb = &cb[..cb.len().saturating_sub(1)];
    let common = if ha == hb {
        pa.iter().zip(pb.iter()).take_while(|(x, y)| x == y).count()
    } else {
        0
    };
    let mut out: Vec<String> = Vec::new();
    if common == 0 {
        return out;
    }
    out.push(pa[common - 1].clone());
    for x in pa[common..].iter().chain(pb[common..].iter()) {
        if !out.contains(x) {
            out.push(x.clone());
        }
    }
    out
}
