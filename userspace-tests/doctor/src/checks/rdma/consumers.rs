//! `peer.consumers`: what each communication library concludes from its own probe for peer memory, and
//! the probes themselves (files tested, in order, read in the libraries' sources).

use super::nv_mem_owner::{
    nvpeer_name, served_by, serving, DROPIN, INSTALL_DROPIN, LOAD_DROPIN, OWN_NAME,
};
use super::PEERS;
use crate::checks::data::{ConsumersData, LibraryRow};
use crate::checks::Ctx;
use crate::paths::DmabufUse;
use crate::report::{Check, Status};

const NV_MEM: &str = "/sys/kernel/mm/memory_peers/nv_mem/version";
const NV_MEM_NC: &str = "/sys/kernel/mm/memory_peers/nv_mem_nc/version";
const PEERS_NVIDIA_PEERMEM: &str = "/sys/kernel/mm/memory_peers/nvidia-peermem/version";
const SYS_NVIDIA_PEERMEM: &str = "/sys/module/nvidia_peermem/version";
const SYS_NV_PEER_MEM: &str = "/sys/module/nv_peer_mem/version";

/// How one library decides that GPUDirect RDMA through a peer-memory client is available: it
/// tests the existence of `paths` in this order and the first hit wins.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    /// Library (and release range, where the probe changed).
    pub library: &'static str,
    /// Repository, file and function the probe is in.
    pub source: &'static str,
    /// Files tested (`access(F_OK)` or equivalent).
    pub paths: &'static [&'static str],
    /// What the library does when the probe fails (only what its source shows).
    pub otherwise: &'static str,
    /// The release that also probes /sys/module, for the memory_peers-only probes.
    pub newer: Option<&'static str>,
    /// How it weighs dma-buf against peer memory (for "which path each library takes").
    pub dmabuf: DmabufUse,
}

/// Every probe the doctor evaluates, read in the libraries' sources (docs/compatibility.md,
/// "Which library sees which path").
pub const CONSUMERS: [Probe; 9] = [
    // NVIDIA/nccl src/transport/net_ib/gdr.cc, ncclIbGdrSupport() (ibGdrSupportInitOnce): sets
    // NCCL_PTR_CUDA in ncclIbGetPhysProperties; NCCL_PTR_DMABUF is a separate bit
    // (ncclIbDmaBufSupport: ibv_reg_dmabuf_mr with fd -1).
    Probe {
        library: "NCCL",
        source: "NVIDIA/nccl src/transport/net_ib/gdr.cc ncclIbGdrSupport",
        paths: &[NV_MEM, NV_MEM_NC, SYS_NVIDIA_PEERMEM],
        otherwise:
            "no GPUDirect RDMA through peer memory (\"GPU Direct RDMA Disabled\"); NCCL still registers through dma-buf where ncclIbDmaBufSupport passes",
        newer: None,
        dmabuf: DmabufUse::Prefers,
    },
    // NVIDIA/nccl src/transport/net_ib/gdr.cc, ncclIbPeerMemSupport() ("does not check legacy
    // implementations of nv_peer_mem (e.g. nv_mem, nv_mem_nc)"), called for GDAKI by
    // src/transport/net_ib/gin.cc ncclGinIbGdrSupport() and ncclGinIbGdrGpuSupport() ("GDAKI does
    // not support nv_peer_mem"); the GIN proxy backend uses ncclIbGdrSupport instead.
    Probe {
        library: "NCCL GIN/GDAKI",
        source: "NVIDIA/nccl src/transport/net_ib/gdr.cc ncclIbPeerMemSupport (gin.cc ncclGinIbGdrSupport)",
        paths: &[SYS_NVIDIA_PEERMEM],
        otherwise: "falls back to DMA-BUF (ncclIbDmaBufSupport at init, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED at connect); with neither, GIN is off",
        newer: None,
        dmabuf: DmabufUse::Fallback,
    },
    // NVIDIA/nccl v2.22.3-1 src/transport/net_ib.cc, ncclIbGdrSupport(): memory_peers only; v2.23.4
    // added /sys/module/nvidia_peermem (NVIDIA/nccl#1676).
    Probe {
        library: "NCCL ≤ 2.22.3",
        source: "NVIDIA/nccl v2.22.3-1 src/transport/net_ib.cc ncclIbGdrSupport (NVIDIA/nccl#1676)",
        paths: &[NV_MEM, NV_MEM_NC],
        otherwise: "no GPUDirect RDMA through peer memory; dma-buf where ncclIbDmaBufSupport passes",
        newer: Some("NCCL ≥ 2.23.4"),
        dmabuf: DmabufUse::Prefers,
    },
    // openucx/ucx src/uct/ib/base/ib_md.c, uct_ib_md_open_common() → uct_ib_check_gpudirect_driver()
    // per file, when UCX_IB_GPU_DIRECT_RDMA is not `no`; the two /sys/module files came with
    // openucx/ucx#10123 (UCX 1.18). The GDA transport (src/uct/ib/mlx5/gdaki/gdaki.c) reuses
    // this result when it has no dma-buf. dma-buf first: src/uct/cuda/cuda_copy/cuda_copy_md.c
    // exports a dma-buf fd for CUDA memory (UCX_CUDA_COPY_DMABUF, default "try"), and the IB MD
    // registers with it when uct_ib_md_check_dmabuf passed.
    Probe {
        library: "UCX ≥ 1.18",
        source: "openucx/ucx src/uct/ib/base/ib_md.c uct_ib_md_open_common (openucx/ucx#10123)",
        paths: &[NV_MEM, SYS_NVIDIA_PEERMEM, SYS_NV_PEER_MEM],
        otherwise: "no CUDA memory registration on IB unless uct_ib_md_check_dmabuf finds dma-buf; with UCX_IB_GPU_DIRECT_RDMA=yes and neither it fails",
        newer: None,
        dmabuf: DmabufUse::Prefers,
    },
    // openucx/ucx src/uct/ib/base/ib_md.c before openucx/ucx#10123: memory_peers/nv_mem only.
    Probe {
        library: "UCX < 1.18",
        source: "openucx/ucx src/uct/ib/base/ib_md.c uct_ib_md_open_common (before openucx/ucx#10123)",
        paths: &[NV_MEM],
        otherwise: "no CUDA memory registration on IB unless uct_ib_md_check_dmabuf finds dma-buf",
        newer: Some("UCX ≥ 1.18"),
        dmabuf: DmabufUse::Prefers,
    },
    // openucx/ucc src/components/tl/mlx5/tl_mlx5_context.c, ucc_tl_mlx5_check_gpudirect_driver_cuda()
    // (openucx/ucc#1102): sets CUDA in supported_mem_types, which TL/MLX5 alltoall and
    // mcast/tl_mlx5_mcast_team.c ucc_tl_mlx5_mcast_team_init() (cuda_mem_enabled) check.
    Probe {
        library: "UCC TL/MLX5 (mcast, alltoall)",
        source: "openucx/ucc src/components/tl/mlx5/tl_mlx5_context.c ucc_tl_mlx5_check_gpudirect_driver_cuda (openucx/ucc#1102)",
        paths: &[NV_MEM, SYS_NVIDIA_PEERMEM, SYS_NV_PEER_MEM],
        otherwise: "TL/MLX5 takes host memory only; a CUDA-aware mcast team fails to init (\"gpu direct is not ready\")",
        newer: None,
        dmabuf: DmabufUse::Never,
    },
    // openucx/ucc src/components/tl/mlx5/mcast/tl_mlx5_mcast_team.c before openucx/ucc#1102:
    // its own ucc_tl_mlx5_check_gpudirect_driver() tests memory_peers/nv_mem only.
    Probe {
        library: "UCC mcast before #1102",
        source: "openucx/ucc src/components/tl/mlx5/mcast/tl_mlx5_mcast_team.c ucc_tl_mlx5_check_gpudirect_driver",
        paths: &[NV_MEM],
        otherwise: "a CUDA-aware mcast team fails to init (UCC_ERR_NO_RESOURCE)",
        newer: Some("a UCC with openucx/ucc#1102"),
        dmabuf: DmabufUse::Never,
    },
    // NVIDIA/nvshmem src/modules/transport/common/transport_ib_common.cpp,
    // nvshmemt_ib_common_nv_peer_mem_available(); the IBRC transport tests it only when dma-buf is
    // not supported ("neither nv_peer_mem, or nvidia_peermem detected. Skipping transport.").
    // Older releases lack the /sys/module file.
    Probe {
        library: "NVSHMEM",
        source: "NVIDIA/nvshmem src/modules/transport/common/transport_ib_common.cpp nvshmemt_ib_common_nv_peer_mem_available",
        paths: &[NV_MEM, PEERS_NVIDIA_PEERMEM, SYS_NVIDIA_PEERMEM],
        otherwise: "the IBRC transport is skipped unless dma-buf is supported (then it registers through dma-buf)",
        newer: None,
        dmabuf: DmabufUse::Prefers,
    },
    // open-mpi/ompi opal/mca/btl/openib/btl_openib_mca.c, btl_openib_register_mca_params():
    // driver_have_gdr (MCA btl_openib_have_driver_gdr); with btl_openib_want_cuda_gdr=1 and no
    // driver GDR the component refuses to start (driver_no_gdr_support).
    Probe {
        library: "Open MPI btl_openib",
        source: "open-mpi/ompi opal/mca/btl/openib/btl_openib_mca.c btl_openib_register_mca_params",
        paths: &[NV_MEM],
        otherwise: "btl_openib_have_driver_gdr is false; with btl_openib_want_cuda_gdr=1 btl_openib refuses to start",
        newer: Some("Open MPI's UCX PML with UCX ≥ 1.18"),
        dmabuf: DmabufUse::Never,
    },
];

/// `peer.consumers`: what each library's probe concludes on this node, and why not.
pub fn consumers(ctx: &Ctx) -> Check {
    const ID: &str = "peer.consumers";
    const T: &str = "library detection";
    let core_lists = ctx.root.is_dir(PEERS);
    let nvpeer = nvpeer_name(ctx);
    let serve = serving(ctx);
    let mut rows = Vec::new();
    let mut details = Vec::new();
    let (mut seen, mut fixable, mut structural) = (Vec::new(), Vec::new(), Vec::new());
    for p in &CONSUMERS {
        let hit = p.paths.iter().find(|f| ctx.root.exists(f));
        let memory_peers_only = p.paths.iter().all(|f| f.starts_with(PEERS));
        let is_structural = hit.is_none() && memory_peers_only && !core_lists;
        let why = match hit {
            Some(_) => None,
            None if is_structural => Some(format!("it checks only {PEERS}, which this core does not create: no module name can fix that; {}", p.otherwise)),
            None if nvpeer == Some(OWN_NAME) => Some(format!("nvpeer is loaded as `nvpeer` and none of {} exists; {}", p.paths.join(", "), p.otherwise)),
            None if serve.is_empty() => Some(format!("no peer-memory module is loaded; {}", p.otherwise)),
            None => Some(format!("none of {} exists; {}", p.paths.join(", "), p.otherwise)),
        };
        match (&hit, &why) {
            (Some(f), _) => {
                details.push(format!("{}: sees peer memory via {f}", p.library));
                seen.push(p.library);
            }
            (None, Some(w)) => {
                let upgrade = p
                    .newer
                    .map(|n| format!(" (fix: {n}, which probes /sys/module)"))
                    .unwrap_or_default();
                details.push(format!("{}: does NOT see it: {w}{upgrade}", p.library));
                if is_structural {
                    structural.push(p);
                } else {
                    fixable.push(p.library);
                }
            }
            (None, None) => {}
        }
        rows.push(LibraryRow {
            library: p.library.to_string(),
            source: p.source.to_string(),
            detected: hit.is_some(),
            via: hit.map(|h| h.to_string()),
            paths: p.paths.iter().map(|f| f.to_string()).collect(),
            structural: is_structural,
            why,
            newer: p.newer.map(str::to_string),
        });
    }
    let grep = ctx.root.read("/proc/modules").is_some_and(|m| {
        m.lines()
            .any(|l| l.split_whitespace().next() == Some(DROPIN))
    });
    details.push(format!(
        "tools that grep /proc/modules for nvidia_peermem: {}",
        if grep { "find it" } else { "do not find it" }
    ));
    let structural_names: Vec<&str> = structural.iter().map(|p| p.library).collect();
    let data = ConsumersData {
        libraries: rows,
        memory_peers: core_lists,
        structural: !structural.is_empty(),
        structural_blind: structural_names.iter().map(|l| l.to_string()).collect(),
        fixable_blind: fixable.iter().map(|l| l.to_string()).collect(),
        served_by: served_by(&serve),
        nvpeer_module_name: nvpeer.map(str::to_string),
        proc_modules_nvidia_peermem: grep,
    };
    if !fixable.is_empty() {
        let (summary, fix) = if nvpeer == Some(OWN_NAME) && !ctx.module_loaded(DROPIN) {
            (
                format!("nvpeer is loaded as `nvpeer`: {} do not see it", fixable.join(", ")),
                format!("Those probes look for /sys/module/nvidia_peermem: {INSTALL_DROPIN}, then `modprobe -r nvpeer && {LOAD_DROPIN}`."),
            )
        } else if serve.is_empty() {
            (
                if seen.is_empty() {
                    "no library will see GPUDirect RDMA through peer memory".to_string()
                } else {
                    format!("not seen by {}", fixable.join(", "))
                },
                format!(
                    "Load nvpeer: `{LOAD_DROPIN}` ({INSTALL_DROPIN} first if it is not installed)."
                ),
            )
        } else {
            (format!("not seen by {}", fixable.join(", ")), format!("Serve nv_mem with nvpeer as nvidia_peermem: {INSTALL_DROPIN}, then `{LOAD_DROPIN}`."))
        };
        return Check::new(ID, T, true, Status::Fail, summary)
            .details(details)
            .fix(fix)
            .data(data);
    }
    if !structural.is_empty() {
        let newer: Vec<&str> = structural.iter().filter_map(|p| p.newer).collect();
        let fix = if newer.is_empty() {
            "Nothing a module can change: these probes read only /sys/kernel/mm/memory_peers."
                .to_string()
        } else {
            format!(
                "No module name can fix these probes; use {} instead.",
                newer.join(", ")
            )
        };
        return Check::new(
            ID,
            T,
            false,
            Status::Warn,
            format!(
                "seen by {}; structurally blind: {} (they read only {PEERS}, which this core does not create)",
                seen.join(", "),
                structural_names.join(", ")
            ),
        )
        .details(details)
        .fix(fix)
        .data(data);
    }
    Check::new(
        ID,
        T,
        true,
        Status::Pass,
        format!("seen by every probed library ({})", seen.join(", ")),
    )
    .details(details)
    .data(data)
}
