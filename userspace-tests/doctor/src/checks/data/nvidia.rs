//! Data of the NVIDIA checks: `nvidia.driver`, `nvidia.flavour`, `nvidia.p2p_symbols`,
//! `gpu.cuda` (the CUDA probe itself, [`crate::probes::CudaProbe`]), `gpu.bar1`, `gpu.mig`.

use crate::nvml::NvmlGpu;
use serde::Serialize;

/// `nvidia.driver`: whether nvidia.ko is loaded, and what provides the P2P API when it is not.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum DriverData {
    /// nvidia.ko is loaded.
    Loaded {
        /// Always true here.
        loaded: bool,
        /// The driver's version (`/sys/module/nvidia/version` or `/proc/driver/nvidia/version`),
        /// null when neither says.
        version: Option<String>,
    },
    /// nvidia.ko is not loaded, but another module exports `nvidia_p2p_get_pages` (an emulator).
    Provider {
        /// Always false here.
        loaded: bool,
        /// The module exporting the P2P API (kallsyms).
        p2p_provider: String,
    },
    /// nvidia.ko is not loaded and nothing provides its P2P API.
    Absent {
        /// Always false here.
        loaded: bool,
    },
}

/// `nvidia.flavour`: open or proprietary kernel modules, and what told.
#[derive(Debug, Clone, Serialize)]
pub struct FlavourData {
    /// True for the open kernel modules, false for the proprietary ones, null when unknown.
    pub open: Option<bool>,
    /// `/sys/module/nvidia/taint`, when readable.
    pub taint: Option<String>,
    /// The module's license as modinfo gives it, when probed.
    pub license: Option<String>,
}

/// `nvidia.p2p_symbols`: the `nvidia_p2p_*` functions in the running kernel's symbol table.
#[derive(Debug, Clone, Serialize)]
pub struct P2pSymbolsData {
    /// The module exporting `nvidia_p2p_get_pages` (normally `nvidia`), null when absent.
    pub owner: Option<String>,
    /// Functions nvpeer needs in every mode that are missing.
    pub missing: Vec<String>,
    /// Functions of the persistent API (driver ≥ 535) that are missing.
    pub missing_persistent: Vec<String>,
    /// Whether /proc/kallsyms hides the addresses (names are still read).
    pub addresses_hidden: bool,
}

/// `gpu.bar1`: BAR1 per GPU and nvpeer's pins against it.
#[derive(Debug, Clone, Serialize)]
pub struct Bar1Data {
    /// One row per NVIDIA GPU on the PCI bus.
    pub gpus: Vec<GpuBar1Row>,
    /// Bytes nvpeer has pinned over all GPUs (debugfs `stats`, root only), null when unreadable.
    pub nvpeer_pinned_bytes: Option<u64>,
    /// The pins set against BAR1, null when unreadable or some GPU's BAR1 size is unknown.
    pub nvpeer_pinned: Option<PinnedShareData>,
    /// Pins above this percentage of BAR1 are a warning.
    pub pinned_warn_percent: u64,
    /// Where the figures come from (NVML, or sysfs and why NVML is not used).
    pub source: String,
}

/// One GPU's row in `gpu.bar1`; sizes in bytes, null when unknown.
#[derive(Debug, Clone, Serialize)]
pub struct GpuBar1Row {
    /// The GPU's PCI address.
    pub bdf: String,
    /// BAR1 size (NVML, or the sysfs resource file).
    pub bar1_bytes: Option<u64>,
    /// BAR1 mapped now (NVML only).
    pub bar1_used: Option<u64>,
    /// BAR1 free now (NVML only).
    pub bar1_free: Option<u64>,
    /// Framebuffer (GPU memory) size (the CUDA probe).
    pub fb_bytes: Option<u64>,
}

/// nvpeer's pinned bytes set against BAR1 ([`crate::checks::PinnedShare`]).
#[derive(Debug, Clone, Serialize)]
pub struct PinnedShareData {
    /// The GPU the pins belong to when there is only one, else null.
    pub gpu: Option<String>,
    /// BAR1 bytes the pins are compared with: that GPU's, or all GPUs' together.
    pub compared_with_bar1_bytes: u64,
    /// Pinned bytes as a percentage of that BAR1, one decimal.
    pub percent_of_bar1: f64,
    /// Pinned bytes as a percentage of the BAR1 in use (one GPU, NVML only), else null.
    pub percent_of_used: Option<f64>,
    /// Free BAR1 bytes (NVML) of that GPU or all GPUs together, else null.
    pub free_bar1_bytes: Option<u64>,
    /// Whether the pins are attributed to one GPU (`gpu` is set).
    pub attributed: bool,
}

/// `gpu.mig`: MIG mode per GPU (NVML).
#[derive(Debug, Clone, Serialize)]
pub struct MigData {
    /// GPUs with MIG on.
    pub enabled: Vec<String>,
    /// GPUs whose MIG mode changes at the next GPU reset.
    pub pending_change: Vec<String>,
    /// Every GPU NVML lists, with its BAR1 and MIG mode.
    pub gpus: Vec<NvmlGpu>,
}

/// `gpu.mlopart`: CUDA devices that are MLOPart partitions, and NCCL's setting for them.
#[derive(Debug, Clone, Serialize)]
pub struct MloPartData {
    /// `name (bdf, CUDA ordinal)` of each MLOPart device.
    pub partitions: Vec<String>,
    /// `NCCL_NET_GDR_MLOPART` as NCCL would read it, null when unset.
    pub setting: Option<String>,
}
