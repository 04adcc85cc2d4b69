//! Data of the RDMA checks: `rdma.peer_api`, `rdma.devices`, `nvpeer.module`, `nvidia.peermem`,
//! `peer.clients`, `peer.conflicts`, `peer.consumers`, `rdma.dmabuf`, `peer.gpu_initiated`, `rdma.nic_paths`.

use crate::probes::VerbsProbe;
use serde::Serialize;
use std::collections::BTreeMap;

/// `rdma.peer_api`: who exports the OFED peer-memory API, or why nobody does.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum PeerApiData {
    /// The API is exported.
    Exported {
        /// Always true here.
        loaded: bool,
        /// The module exporting `ib_register_peer_memory_client` (kallsyms).
        owner: String,
        /// OFED's version (`mlx_compat` or `mlx5_core`), when it says.
        ofed_version: Option<String>,
    },
    /// /proc/kallsyms is not readable: only the OFED Module.symvers files that export it.
    KallsymsUnreadable {
        /// OFED Module.symvers files of this kernel that export the API.
        symvers: Vec<String>,
    },
    /// Built (an OFED Module.symvers exports it) but not loaded.
    NotLoaded {
        /// Always false here.
        loaded: bool,
        /// OFED Module.symvers files of this kernel that export the API.
        symvers: Vec<String>,
    },
    /// No RDMA core with the API.
    Absent {
        /// Always false here.
        loaded: bool,
        /// Whether an RDMA core (ib_core) is loaded.
        ib_core: bool,
        /// Whether ib_uverbs is loaded.
        ib_uverbs: bool,
        /// An Ubuntu generic kernel from 6.8 on, which has no inbox peer-memory API.
        ubuntu_generic_no_inbox_api: bool,
    },
}

/// `rdma.devices`: the RDMA devices and their ports.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum DevicesData {
    /// No RDMA device.
    None {
        /// Always empty here.
        devices: Vec<String>,
        /// RDMA-class PCI functions without an RDMA driver bound.
        unbound_nics: Vec<String>,
    },
    /// RDMA devices, a row per port.
    Found {
        /// The names in /sys/class/infiniband.
        devices: Vec<String>,
        /// Every port of every device.
        ports: Vec<PortRow>,
    },
}

/// One port of an RDMA device, as sysfs gives it (empty when unreadable).
#[derive(Debug, Clone, Serialize)]
pub struct PortRow {
    /// The RDMA device (`mlx5_0`).
    pub device: String,
    /// The port number.
    pub port: String,
    /// `4: ACTIVE`, ...
    pub state: String,
    /// `InfiniBand` or `Ethernet`.
    pub link_layer: String,
    /// `200 Gb/sec (4X HDR)`, ...
    pub rate: String,
}

/// The loaded `nvidia_peermem` module: whose it is and why the doctor thinks so.
#[derive(Debug, Clone, Serialize)]
pub struct DropinData {
    /// `nvpeer`, `nvidia` or `unknown`.
    pub owner: String,
    /// `/sys/module/nvidia_peermem/version`.
    pub version: Option<String>,
    /// The evidence.
    pub why: String,
}

/// A loaded module serving `nv_mem`.
#[derive(Debug, Clone, Serialize)]
pub struct ServedBy {
    /// Its name as loaded (`nvidia_peermem`, `nvpeer`, `nv_peer_mem`).
    pub module: String,
    /// Whose it is (`nvpeer`, `nvidia`, `mellanox`, `unknown`).
    pub owner: String,
}

/// `nvpeer.module`: nvpeer loaded or not, under which name, how it is installed.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum NvpeerModuleData {
    /// nvpeer is not loaded.
    NotLoaded {
        /// Always false here.
        loaded: bool,
        /// `nvidia_peermem` when a rival module holds that name, else null.
        module_name: Option<String>,
        /// Whose that `nvidia_peermem` is, else null.
        owner: Option<String>,
        /// The loaded `nvidia_peermem`, if any.
        nvidia_peermem: Option<DropinData>,
        /// Whether nvpeer is installed for this kernel in any form.
        installed: bool,
        /// How it is installed.
        install: InstallData,
    },
    /// nvpeer is loaded.
    Loaded {
        /// Always true here.
        loaded: bool,
        /// The name it is loaded under (`nvidia_peermem` or `nvpeer`).
        module_name: String,
        /// Always `nvpeer` here.
        owner: String,
        /// The loaded `nvidia_peermem`, if any (nvpeer itself or a rival).
        nvidia_peermem: Option<DropinData>,
        /// nvpeer's version, when it says.
        version: Option<String>,
        /// The parameters in effect, by name (`(unreadable)` when a sysfs file is).
        parameters: BTreeMap<String, String>,
        /// Where the parameters were read (sysfs `parameters` or debugfs `config`), null when
        /// none were.
        parameters_source: Option<String>,
        /// The registered clients (`nv_mem persistent`, ...), from debugfs `config`.
        clients: Vec<String>,
        /// The module's taint flags (`OE`, ...).
        taint: String,
    },
}

/// How nvpeer is installed for the running kernel.
#[derive(Debug, Clone, Serialize)]
pub struct InstallData {
    /// `nvidia-peermem.ko` as modules.dep lists it (nvpeer's or NVIDIA's).
    pub dropin: Option<String>,
    /// `nvpeer.ko` as modules.dep lists it.
    pub nvpeer: Option<String>,
    /// Whether DKMS built nvpeer for this kernel.
    pub dkms: bool,
}

/// `nvidia.peermem`: whose `nvidia_peermem` is loaded and what serves `nv_mem`.
#[derive(Debug, Clone, Serialize)]
pub struct NvidiaPeermemData {
    /// The loaded `nvidia_peermem`, if any.
    pub nvidia_peermem: Option<DropinData>,
    /// The name nvpeer is loaded under, if loaded.
    pub nvpeer: Option<String>,
}

/// `peer.clients`: the registered peer-memory clients, or who serves `nv_mem`.
#[derive(Debug, Clone, Serialize)]
pub struct PeerClientsData {
    /// The peer-memory core's client list (empty when it keeps none).
    pub clients: Vec<PeerClient>,
    /// Whether the core keeps a client list (`/sys/kernel/mm/memory_peers`).
    pub sysfs: bool,
    /// The loaded modules that serve `nv_mem`.
    pub served_by: Vec<ServedBy>,
}

/// One registered peer-memory client.
#[derive(Debug, Clone, Serialize)]
pub struct PeerClient {
    /// Its name (`nv_mem`).
    pub name: String,
    /// Its files that could be read (`version` and the counters, `num_alloc_mrs`, ...), as text.
    #[serde(flatten)]
    pub files: BTreeMap<String, String>,
}

/// `peer.conflicts`: rival peer-memory modules and modprobe.d's rules.
#[derive(Debug, Clone, Serialize)]
pub struct ConflictsData {
    /// Rival modules loaded (`nvidia_peermem` not nvpeer's, `nv_peer_mem`).
    pub loaded: Vec<String>,
    /// Rivals modprobe.d does not keep out.
    pub not_blocked: Vec<String>,
    /// The loaded `nvidia_peermem`, if any.
    pub nvidia_peermem: Option<DropinData>,
    /// Whether modprobe.d blocks `nvidia_peermem`, the name nvpeer is installed under.
    pub dropin_blocked: bool,
}

/// `peer.consumers`: what each communication library will detect.
#[derive(Debug, Clone, Serialize)]
pub struct ConsumersData {
    /// A row per library probe.
    pub libraries: Vec<LibraryRow>,
    /// Whether the peer-memory core keeps a client list (`/sys/kernel/mm/memory_peers`).
    pub memory_peers: bool,
    /// Whether some library cannot see peer memory on this core whatever the module name.
    pub structural: bool,
    /// Those libraries.
    pub structural_blind: Vec<String>,
    /// Libraries that do not see peer memory, but would with nvpeer loaded as `nvidia_peermem`.
    pub fixable_blind: Vec<String>,
    /// The loaded modules that serve `nv_mem`.
    pub served_by: Vec<ServedBy>,
    /// The name nvpeer is loaded under, if loaded.
    pub nvpeer_module_name: Option<String>,
    /// Whether /proc/modules lists `nvidia_peermem` (what tools that grep it find).
    pub proc_modules_nvidia_peermem: bool,
}

/// One library's peer-memory probe, evaluated here.
#[derive(Debug, Clone, Serialize)]
pub struct LibraryRow {
    /// Library (and release range).
    pub library: String,
    /// Repository, file and function the probe is in.
    pub source: String,
    /// Whether it sees peer memory here.
    pub detected: bool,
    /// The file through which it does, else null.
    pub via: Option<String>,
    /// The files it tests.
    pub paths: Vec<String>,
    /// Whether no module name can make it see peer memory on this core.
    pub structural: bool,
    /// Why it does not see peer memory, else null.
    pub why: Option<String>,
    /// The release that also probes /sys/module, for the memory_peers-only probes.
    pub newer: Option<String>,
}

/// `rdma.nic_paths`: each RDMA device's driver family and the ways GPU memory reaches it.
#[derive(Debug, Clone, Serialize)]
pub struct NicPathsData {
    /// A row per device in /sys/class/infiniband.
    pub devices: Vec<NicPathRow>,
    /// PCI functions of ConnectX-8's Data Direct DMA engine (15b3:2100).
    pub data_direct: Vec<String>,
}

/// One RDMA device's GPU memory paths (null: a driver family the doctor does not know).
#[derive(Debug, Clone, Serialize)]
pub struct NicPathRow {
    /// The RDMA device (`mlx5_0`, `efa_0`).
    pub device: String,
    /// Its driver family.
    pub family: Option<&'static str>,
    /// Whether OFED's peer-memory core, hence nvpeer, serves its registrations.
    pub peer_memory: Option<bool>,
    /// Whether its driver imports dma-buf.
    pub dmabuf: Option<bool>,
    /// A P2P path of its driver's own (AWS EFA), else null.
    pub own_p2p: Option<&'static str>,
    /// Whether that path reports an NVIDIA provider (EFA's `device/p2p` or `device/gdr`), null
    /// when it has none or says nothing.
    pub own_p2p_ready: Option<bool>,
    /// What was read for it.
    pub evidence: Vec<String>,
    /// Where the family's facts are read.
    pub source: Option<&'static str>,
}

/// `rdma.dmabuf`: the dma-buf path's three parts.
#[derive(Debug, Clone, Serialize)]
pub struct DmabufData {
    /// Whether the kernel imports dma-buf (`ib_umem_dmabuf_get`), null when unknown.
    pub kernel: Option<bool>,
    /// Whether every GPU exports dma-buf (CUDA), null when not probed.
    pub gpu: Option<bool>,
    /// The verbs probe (`ibv_reg_dmabuf_mr`) as it ran.
    pub verbs: VerbsProbe,
}

/// `peer.gpu_initiated`: what GPU-initiated networking needs, per library backend.
#[derive(Debug, Clone, Serialize)]
pub struct GpuInitiatedData {
    /// The mlx5 RDMA devices (GDAKI, IBGDA and `rc_gda` use no other).
    pub mlx5_devices: Vec<String>,
    /// Whether GPU memory registers through dma-buf (`rdma.dmabuf`), null when undetermined.
    pub dmabuf: Option<bool>,
    /// The driver's `PeerMappingOverride`.
    pub peer_mapping_override: PeerMappingState,
    /// GDRCopy as installed.
    pub gdrcopy: GdrcopyState,
    /// One row per backend.
    pub backends: Vec<GpuInitiatedRow>,
}

/// `PeerMappingOverride` as `/proc/driver/nvidia/params` shows it (crate::nvreg); the default is
/// the file not read.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PeerMappingState {
    /// Whether the params file was read.
    pub read: bool,
    /// Its value in `RegistryDwords` (every GPU).
    pub global: Option<u64>,
    /// `[bdf, value]` pairs of `RegistryDwordsPerDevice`.
    pub per_device: Vec<(String, u64)>,
    /// The GPUs it is nonzero for.
    pub gpus_with: Vec<String>,
    /// Whether it is nonzero for every GPU, null when the file was not read.
    pub every_gpu: Option<bool>,
}

/// GDRCopy's kernel module and library.
#[derive(Debug, Clone, Serialize)]
pub struct GdrcopyState {
    /// `/sys/module/gdrdrv/version`, when loaded.
    pub gdrdrv: Option<String>,
    /// Whether `/dev/gdrdrv` exists.
    pub dev_gdrdrv: bool,
    /// The newest `libgdrapi.so.2.<minor>` found in the usual library directories.
    pub library: Option<String>,
    /// Its version (`2.6`).
    pub version: Option<String>,
    /// Whether its dma-buf mmap backend (GDRCopy ≥ 2.6, CUDA driver ≥ 13.3) can stand in for
    /// gdrdrv, null when undetermined.
    pub dmabuf_backend: Option<bool>,
}

/// One GPU-initiated backend on this node.
#[derive(Debug, Clone, Serialize)]
pub struct GpuInitiatedRow {
    /// Library and backend.
    pub backend: &'static str,
    /// Where its prerequisites are read.
    pub source: &'static str,
    /// Whether it can run, null when undetermined.
    pub ready: Option<bool>,
    /// What it lacks.
    pub missing: Vec<String>,
    /// How it registers GPU memory: `peer memory (<file>)` or `dma-buf`; null: neither found.
    pub memory: Option<String>,
    /// Who rings the NIC's doorbell.
    pub doorbell: String,
    /// The setting of the doctor's environment that selects it, when one does.
    pub requested: Option<String>,
}
