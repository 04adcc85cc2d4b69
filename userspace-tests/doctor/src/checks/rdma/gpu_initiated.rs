//! `peer.gpu_initiated`: what GPU-initiated networking needs, per library and backend: NCCL's GIN
//! (its GDAKI and proxy backends), NVSHMEM's IBGDA (its GPU and CPU NIC handlers) and UCX's
//! `rc_gda`. Each needs GPU memory registered with the NIC (peer memory or dma-buf, each library
//! with its own probe), most need an mlx5 device, and the ones whose GPU rings the NIC's doorbell
//! need the NIC's doorbell page mapped into the GPU, which NVIDIA's driver refuses to a process
//! without `CAP_SYS_ADMIN` unless `PeerMappingOverride` is set (crate::nvreg).
//!
//! Sources (read in each project's tree):
//! - NCCL ≥ 2.28.7, src/transport/net_ib/gin.cc: GDAKI counts mlx5 devices only
//!   (`ncclGinIbGdakiInitOnce`) and takes peer memory from `/sys/module/nvidia_peermem` alone
//!   (`ncclIbPeerMemSupport`, via `ncclGinIbGdrSupport`), else dma-buf; the proxy backend takes any
//!   verbs device and `ncclIbGdrSupport`'s files. GDAKI's doorbell falls back to a CPU proxy when
//!   the driver refuses the mapping, without a log line (its bundled DOCA GPUNetIO,
//!   `doca_gpu_verbs_can_gpu_register_uar`). `NCCL_GIN_TYPE`: 2 proxy, 3 GDAKI, -1 automatic.
//! - NVSHMEM, src/modules/transport/ibgda/ibgda.cpp `nvshmemt_init`: `NVSHMEM_IB_ENABLE_IBGDA=1`;
//!   `NVSHMEM_IBGDA_NIC_HANDLER` auto/gpu/cpu/cpu_host_memory; devices named `NVSHMEM_HCA_PREFIX`
//!   (mlx5); the CPU handler since 3.0.6 (with GDRCopy), without GDRCopy or the option since 3.4.5
//!   (NVIDIA/nvshmem#23, #34); peer memory by `nvshmemt_ib_common_nv_peer_mem_available` when it
//!   has no dma-buf.
//! - UCX ≥ 1.20, src/uct/ib/mlx5/gdaki/gdaki.c `uct_gdaki_check_cuda_ctx_dependent_features`: the
//!   doorbell mapping must succeed ("please add NVreg_RegistryDwords=\"PeerMappingOverride=1;\""),
//!   then dma-buf or peer memory.
//! - NVIDIA open modules, src/nvidia/arch/nvalloc/unix/src/osmemdesc.c
//!   `osCreateOsDescriptorFromIoMemory`: mapping I/O memory (the NIC's doorbell) into the GPU is
//!   refused unless the override is set or the caller is `CAP_SYS_ADMIN`.
//! - GDRCopy, src/gdrapi.c `gdr_open`: `/dev/gdrdrv`, or since 2.6 the dma-buf mmap backend (CUDA
//!   driver ≥ 13.3, `GDR_CUDA_DMABUF_MMAP_MIN_VERSION`).

use super::dmabuf;
use crate::checks::data::{GdrcopyState, GpuInitiatedData, GpuInitiatedRow, PeerMappingState};
use crate::checks::Ctx;
use crate::nvreg;
use crate::probes::CudaProbe;
use crate::report::{Check, Status};

/// The driver key that lets any process map a NIC's doorbell into the GPU.
const PEER_MAPPING_OVERRIDE: &str = "PeerMappingOverride";
/// The modprobe line that sets it.
const OPTION_LINE: &str = "options nvidia NVreg_RegistryDwords=\"PeerMappingOverride=1;\"";
/// The `peer.consumers` row whose probe a backend's memory registration uses (one list of the
/// libraries' peer-memory files: crate::checks::CONSUMERS).
fn peer_files(library: &str) -> &'static [&'static str] {
    super::CONSUMERS
        .iter()
        .find(|p| p.library == library)
        .map_or(&[], |p| p.paths)
}

/// Where a GDRCopy library is looked for (its real file is `libgdrapi.so.2.<minor>`).
const LIB_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/local/lib64",
];
/// The CUDA driver API GDRCopy's dma-buf backend needs.
const GDRCOPY_DMABUF_CUDA: i32 = 13030;

/// What a backend needs and which library it is.
struct Backend {
    /// `NCCL GIN, GDAKI backend (≥ 2.28.7)`.
    name: &'static str,
    /// Where its prerequisites are read.
    source: &'static str,
    /// Needs an mlx5 device (else any verbs device).
    mlx5: bool,
    /// The `peer.consumers` library whose probe finds its peer memory (any file found).
    peer: &'static str,
    /// The GPU rings the doorbell: without the override (or CAP_SYS_ADMIN) it `falls_back`, or fails.
    gpu_doorbell: Option<Doorbell>,
    /// Whether the environment selects it (its variable and value), from the doctor's own.
    requested: fn(&Ctx) -> Option<String>,
}

/// What happens to a GPU doorbell the driver refuses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Doorbell {
    /// The library rings it from a CPU thread instead (slower, works).
    FallsBack(&'static str),
    /// The backend cannot run (NVSHMEM's `auto` handler then takes the CPU one, the next row).
    Fails,
}

/// A setting's value from the effective NCCL/UCX settings or the doctor's environment.
fn setting(ctx: &Ctx, key: &str) -> Option<String> {
    ctx.settings.get(key).map(|s| s.value.clone()).or_else(|| {
        ctx.probes
            .env
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    })
}

fn nccl_gdaki(ctx: &Ctx) -> Option<String> {
    setting(ctx, "NCCL_GIN_TYPE")
        .filter(|v| v.trim() == "3")
        .map(|v| format!("NCCL_GIN_TYPE={v}"))
}

fn nccl_proxy(ctx: &Ctx) -> Option<String> {
    setting(ctx, "NCCL_GIN_TYPE")
        .filter(|v| v.trim() == "2")
        .map(|v| format!("NCCL_GIN_TYPE={v}"))
}

fn ibgda_on(ctx: &Ctx) -> bool {
    setting(ctx, "NVSHMEM_IB_ENABLE_IBGDA").is_some_and(|v| {
        let v = v.trim().to_ascii_lowercase();
        matches!(v.as_str(), "1" | "y" | "yes" | "true" | "on")
    })
}

fn nvshmem_handler(ctx: &Ctx) -> String {
    setting(ctx, "NVSHMEM_IBGDA_NIC_HANDLER")
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_else(|| "auto".into())
}

fn nvshmem_gpu(ctx: &Ctx) -> Option<String> {
    (ibgda_on(ctx) && nvshmem_handler(ctx) == "gpu")
        .then(|| "NVSHMEM_IB_ENABLE_IBGDA, NVSHMEM_IBGDA_NIC_HANDLER=gpu".to_string())
}

fn nvshmem_cpu(ctx: &Ctx) -> Option<String> {
    let h = nvshmem_handler(ctx);
    (ibgda_on(ctx) && h != "gpu").then(|| format!("NVSHMEM_IB_ENABLE_IBGDA (handler {h})"))
}

fn ucx_gda(ctx: &Ctx) -> Option<String> {
    setting(ctx, "UCX_TLS")
        .filter(|v| v.split(',').any(|t| t.trim() == "rc_gda"))
        .map(|v| format!("UCX_TLS={v}"))
}

/// The backends, in the order shown.
const BACKENDS: &[Backend] = &[
    Backend {
        name: "NCCL GIN, GDAKI backend (≥ 2.28.7)",
        source: "NVIDIA/nccl src/transport/net_ib/gin.cc ncclGinIbGdakiInitOnce, ncclGinIbGdrSupport",
        mlx5: true,
        peer: "NCCL GIN/GDAKI",
        gpu_doorbell: Some(Doorbell::FallsBack("NCCL rings it from a CPU proxy thread, silently")),
        requested: nccl_gdaki,
    },
    Backend {
        name: "NCCL GIN, proxy backend",
        source: "NVIDIA/nccl src/transport/net_ib/gin.cc (NCCL_GIN_TYPE_PROXY), gdr.cc ncclIbGdrSupport",
        mlx5: false,
        peer: "NCCL",
        gpu_doorbell: None,
        requested: nccl_proxy,
    },
    Backend {
        name: "NVSHMEM IBGDA, GPU NIC handler",
        source: "NVIDIA/nvshmem src/modules/transport/ibgda/ibgda.cpp nvshmemt_init (NVSHMEM_IBGDA_NIC_HANDLER=gpu)",
        mlx5: true,
        peer: "NVSHMEM",
        gpu_doorbell: Some(Doorbell::Fails),
        requested: nvshmem_gpu,
    },
    Backend {
        name: "NVSHMEM IBGDA, CPU NIC handler (≥ 3.4.5; 3.0.6-3.4.4 with GDRCopy)",
        source: "NVIDIA/nvshmem src/modules/transport/ibgda/ibgda.cpp nvshmemt_init (NVIDIA/nvshmem#23, #34)",
        mlx5: true,
        peer: "NVSHMEM",
        gpu_doorbell: None,
        requested: nvshmem_cpu,
    },
    Backend {
        name: "UCX rc_gda (≥ 1.20)",
        source: "openucx/ucx src/uct/ib/mlx5/gdaki/gdaki.c uct_gdaki_check_cuda_ctx_dependent_features",
        mlx5: true,
        peer: "UCX ≥ 1.18",
        gpu_doorbell: Some(Doorbell::Fails),
        requested: ucx_gda,
    },
];

/// `PeerMappingOverride` as the driver's params file shows it.
fn peer_mapping(ctx: &Ctx) -> PeerMappingState {
    // Unread: no file, or none of the registry lines in it.
    let Some(v) = ctx
        .root
        .read(nvreg::PARAMS)
        .and_then(|text| nvreg::key(&text, PEER_MAPPING_OVERRIDE))
    else {
        return PeerMappingState::default();
    };
    let gpus_with: Vec<String> = ctx
        .gpus
        .iter()
        .filter(|g| v.nonzero_for(&g.bdf))
        .map(|g| g.bdf.clone())
        .collect();
    let every_gpu = if ctx.gpus.is_empty() {
        Some(v.global.is_some_and(|n| n != 0))
    } else {
        Some(gpus_with.len() == ctx.gpus.len())
    };
    PeerMappingState {
        read: true,
        global: v.global,
        per_device: v.per_device,
        gpus_with,
        every_gpu,
    }
}

/// GDRCopy's kernel module and library, as installed.
fn gdrcopy(ctx: &Ctx) -> GdrcopyState {
    let library = LIB_DIRS.iter().find_map(|d| {
        ctx.root
            .list(d)
            .into_iter()
            .filter_map(|f| f.strip_prefix("libgdrapi.so.").map(str::to_string))
            .filter(|v| {
                v.starts_with("2.") && v[2..].chars().all(|c| c.is_ascii_digit() || c == '.')
            })
            .max_by_key(|v| {
                v.split('.')
                    .map(|p| p.parse::<u32>().unwrap_or(0))
                    .collect::<Vec<_>>()
            })
            .map(|v| (format!("{d}/libgdrapi.so.{v}"), v))
    });
    let minor = library
        .as_ref()
        .and_then(|(_, v)| v.split('.').nth(1)?.parse::<u32>().ok());
    let cuda = match &ctx.probes.cuda {
        CudaProbe::Ok { driver_api, .. } => *driver_api,
        _ => None,
    };
    GdrcopyState {
        gdrdrv: ctx.root.read_trim("/sys/module/gdrdrv/version"),
        dev_gdrdrv: ctx.root.exists("/dev/gdrdrv"),
        library: library.as_ref().map(|(p, _)| p.clone()),
        version: library.map(|(_, v)| v),
        dmabuf_backend: match (minor, cuda) {
            (Some(m), Some(c)) => Some(m >= 6 && c >= GDRCOPY_DMABUF_CUDA),
            (Some(m), None) if m < 6 => Some(false),
            _ => None,
        },
    }
}

/// `peer.gpu_initiated`: GIN, IBGDA and `rc_gda` prerequisites, per backend.
pub fn gpu_initiated(ctx: &Ctx) -> Check {
    const ID: &str = "peer.gpu_initiated";
    const T: &str = "GPU-initiated networking";
    let mlx5: Vec<String> = ctx
        .rdma_devices
        .iter()
        .filter(|d| {
            d.starts_with("mlx5_")
                || ctx
                    .nics
                    .iter()
                    .any(|n| &n.name == *d && n.pci.vendor == 0x15b3)
        })
        .cloned()
        .collect();
    let dmabuf = dmabuf::usable(ctx);
    let mapping = peer_mapping(ctx);
    let gdr = gdrcopy(ctx);
    let empty = || GpuInitiatedData {
        mlx5_devices: mlx5.clone(),
        dmabuf,
        peer_mapping_override: mapping.clone(),
        gdrcopy: gdr.clone(),
        backends: Vec::new(),
    };
    if ctx.gpus.is_empty() || ctx.rdma_devices.is_empty() {
        let what = if ctx.gpus.is_empty() {
            "no NVIDIA GPU"
        } else {
            "no RDMA device"
        };
        return Check::new(ID, T, false, Status::Skip, what).data(empty());
    }
    let mut rows = Vec::new();
    let mut details = Vec::new();
    let mut blocked_requested = Vec::new();
    let mut fixes: Vec<String> = Vec::new();
    for b in BACKENDS {
        let requested = (b.requested)(ctx);
        let files = peer_files(b.peer);
        let peer = files.iter().find(|f| ctx.root.exists(f)).copied();
        let memory = match (peer, dmabuf) {
            (Some(f), _) => Some(format!("peer memory ({f})")),
            (None, Some(true)) => Some("dma-buf".to_string()),
            _ => None,
        };
        let mut missing = Vec::new();
        if b.mlx5 && mlx5.is_empty() {
            missing.push("an mlx5 device (ConnectX or BlueField)".to_string());
        }
        // Without a peer-memory file, dma-buf decides; undetermined (no live probe) stays so.
        let memory_unknown = memory.is_none() && dmabuf.is_none();
        if memory.is_none() && dmabuf == Some(false) {
            missing.push(format!(
                "GPU memory registration: none of {} exists and dma-buf is not available (rdma.dmabuf)",
                files.join(", ")
            ));
        }
        let doorbell = match b.gpu_doorbell {
            None => "CPU".to_string(),
            Some(fallback) => {
                match mapping.every_gpu {
                    Some(true) => "GPU".to_string(),
                    _ => {
                        let why = if mapping.read {
                            format!("{PEER_MAPPING_OVERRIDE} is not set for every GPU")
                        } else {
                            format!(
                                "whether {PEER_MAPPING_OVERRIDE} is set is unknown: {} not read",
                                nvreg::PARAMS
                            )
                        };
                        match fallback {
                            Doorbell::FallsBack(how) => format!(
                            "GPU for processes with CAP_SYS_ADMIN; otherwise CPU ({why}: {how})"
                        ),
                            Doorbell::Fails => {
                                if mapping.read {
                                    missing.push(format!("{PEER_MAPPING_OVERRIDE}=1 for processes without CAP_SYS_ADMIN"));
                                }
                                format!("GPU, only for processes with CAP_SYS_ADMIN ({why})")
                            }
                        }
                    }
                }
            }
        };
        let ready = if !missing.is_empty() {
            Some(false)
        } else if !memory_unknown && (b.gpu_doorbell != Some(Doorbell::Fails) || mapping.read) {
            Some(true)
        } else {
            None
        };
        details.push(format!(
            "{}: {}; memory: {}; doorbell: {}{}",
            b.name,
            match ready {
                Some(true) => "ready".to_string(),
                Some(false) => format!("not ready: needs {}", missing.join("; ")),
                None => "undetermined".to_string(),
            },
            memory.as_deref().unwrap_or(if memory_unknown {
                "no peer-memory file; dma-buf undetermined (no live probe)"
            } else {
                "none"
            }),
            doorbell,
            requested
                .as_ref()
                .map(|r| format!(" [selected: {r}]"))
                .unwrap_or_default()
        ));
        if ready == Some(false) && requested.is_some() {
            blocked_requested.push(b.name);
        }
        rows.push(GpuInitiatedRow {
            backend: b.name,
            source: b.source,
            ready,
            missing: missing.clone(),
            memory,
            doorbell,
            requested,
        });
    }
    details.push(match (&mapping.read, mapping.every_gpu) {
        (false, _) => format!("{PEER_MAPPING_OVERRIDE}: {} not readable", nvreg::PARAMS),
        (true, Some(true)) => format!(
            "{PEER_MAPPING_OVERRIDE}: set for every GPU ({})",
            nvreg::PARAMS
        ),
        (true, _) if !mapping.gpus_with.is_empty() => format!(
            "{PEER_MAPPING_OVERRIDE}: set for {} only (RegistryDwordsPerDevice)",
            mapping.gpus_with.join(", ")
        ),
        (true, _) => format!(
            "{PEER_MAPPING_OVERRIDE}: not set (RegistryDwords in {})",
            nvreg::PARAMS
        ),
    });
    details.push(format!(
        "GDRCopy: gdrdrv {}, /dev/gdrdrv {}, library {}{}",
        gdr.gdrdrv.as_deref().unwrap_or("not loaded"),
        if gdr.dev_gdrdrv { "present" } else { "absent" },
        gdr.library.as_deref().unwrap_or("not found"),
        match gdr.dmabuf_backend {
            Some(true) => " (its dma-buf backend usable without gdrdrv)",
            Some(false) => " (no dma-buf backend: needs GDRCopy ≥ 2.6 and CUDA driver ≥ 13.3)",
            None => "",
        }
    ));
    let not_every_gpu = mapping.read && mapping.every_gpu != Some(true);
    if not_every_gpu {
        fixes.push(format!("For GPU-rung doorbells (UCX rc_gda and NVSHMEM's GPU handler need them; NCCL GDAKI and NVSHMEM's `auto` handler fall back to the CPU) set the driver option: `{OPTION_LINE}` in /etc/modprobe.d/, then reload nvidia (rebuild the initramfs where it loads nvidia); with the GPU Operator, put `NVreg_RegistryDwords=\"PeerMappingOverride=1;\"` in the nvidia.conf of the ConfigMap named by driver.kernelModuleConfig.name."));
    }
    let gdaki_memory = rows
        .iter()
        .find(|r| r.backend == BACKENDS[0].name)
        .is_some_and(|r| r.memory.is_none());
    if gdaki_memory && !mlx5.is_empty() {
        fixes.push("NCCL's GDAKI takes peer memory only from /sys/module/nvidia_peermem (nvpeer under its own name, nv_peer_mem or a memory_peers listing do not count): install nvpeer as nvidia-peermem (`modprobe nvidia_peermem`), or use dma-buf (rdma.dmabuf).".into());
    }
    let data = GpuInitiatedData {
        mlx5_devices: mlx5.clone(),
        dmabuf,
        peer_mapping_override: mapping,
        gdrcopy: gdr,
        backends: rows,
    };
    let ready: Vec<&str> = data
        .backends
        .iter()
        .filter(|r| r.ready == Some(true))
        .map(|r| r.backend)
        .collect();
    let status = if !blocked_requested.is_empty()
        || (gdaki_memory && !mlx5.is_empty() && dmabuf == Some(false))
    {
        Status::Warn
    } else {
        Status::Pass
    };
    let undetermined_requested: Vec<&str> = data
        .backends
        .iter()
        .filter(|r| r.ready.is_none() && r.requested.is_some())
        .map(|r| r.backend)
        .collect();
    let mut summary = if !blocked_requested.is_empty() {
        format!("selected but not ready: {}", blocked_requested.join(", "))
    } else if mlx5.is_empty() {
        let proxy = data.backends.iter().find(|r| r.backend == BACKENDS[1].name);
        format!(
            "no mlx5 device: GDAKI, IBGDA and rc_gda need one; NCCL's proxy backend: {}",
            match proxy.and_then(|r| r.ready) {
                Some(true) => "ready",
                Some(false) => "not ready",
                None => "undetermined",
            }
        )
    } else if status == Status::Warn {
        "NCCL GIN's GDAKI backend has neither /sys/module/nvidia_peermem nor dma-buf".to_string()
    } else if ready.is_empty() {
        "no GPU-initiated backend is ready (see details)".to_string()
    } else {
        format!("ready: {}", ready.join(", "))
    };
    if !undetermined_requested.is_empty() {
        summary.push_str(&format!(
            "; selected, undetermined: {}",
            undetermined_requested.join(", ")
        ));
    }
    let mut c = Check::new(ID, T, false, status, summary)
        .details(details)
        .data(data);
    if !fixes.is_empty() {
        c = c.fix(fixes.join(" "));
    }
    c
}
