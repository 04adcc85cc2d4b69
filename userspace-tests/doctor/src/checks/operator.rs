//! `gpu_operator.driver`: a node whose NVIDIA driver comes from the GPU Operator's driver
//! container. The operator loads nvidia-peermem from that container's module tree
//! (`chroot /run/nvidia/driver modprobe nvidia-peermem` in its `nvidia-peermem-ctr` sidecar, after
//! the Network Operator's DOCA driver container wrote `/run/mellanox/drivers/.driver-ready`, or
//! with `useHostMofed` once `mlx5_core` is loaded: NVIDIA/gpu-operator, transformPeerMemoryContainer),
//! never from the host's DKMS: what decides whether nvpeer serves `nv_mem` there is which
//! `nvidia-peermem.ko` the container's tree holds, and whether nvpeer's driver-container extension
//! (packaging/gpu-operator) is in the image.

use super::data::{OperatorData, PeermemKo};
use super::Ctx;
use crate::report::{Check, Status};
use nvpeer_uapi::module::is_nvpeer_ko;

/// The driver container's root as the host sees it (the driver pod's `_mount_rootfs`).
pub const DRIVER_ROOT: &str = "/run/nvidia/driver";
/// The Network Operator's DOCA driver container's root, and the file it writes when its modules
/// are loaded.
pub const DOCA_ROOT: &str = "/run/mellanox/drivers";
pub const DOCA_READY: &str = "/run/mellanox/drivers/.driver-ready";
/// nvpeer's modprobe hook in the driver image (packaging/gpu-operator/Containerfile).
pub const NVPEER_HOOK: &str = "/etc/modprobe.d/nvpeer-driver-container.conf";
/// Where the operator's validator and the driver container leave their marks.
const OPERATOR_MARKS: [&str; 2] = [
    "/run/nvidia/validations",
    "/run/nvidia/driver/usr/bin/nvidia-smi",
];

/// The largest module file read to tell whose it is.
const KO_MAX: usize = 64 << 20;

/// The GPU Operator's driver container on this node, as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverContainer {
    /// `nvidia-peermem.ko` files in the container's tree for the running kernel (container paths),
    /// each with whether it is nvpeer's build.
    pub peermem_kos: Vec<(String, bool)>,
    /// nvpeer's modprobe hook is in the image.
    pub hook: bool,
    /// The Network Operator's DOCA container is present, and whether it says it is ready.
    pub doca: Option<bool>,
}

/// Whether the node's driver comes from the GPU Operator: its driver container's root is mounted
/// at [`DRIVER_ROOT`] (or the operator's marks are there).
pub fn detect(ctx: &Ctx) -> Option<DriverContainer> {
    let mounted = ctx.root.is_dir(&format!("{DRIVER_ROOT}/lib/modules"))
        || ctx.root.is_dir(&format!("{DRIVER_ROOT}/usr/lib/modules"));
    if !mounted && !OPERATOR_MARKS.iter().any(|m| ctx.root.exists(m)) {
        return None;
    }
    let mut kos = Vec::new();
    if let Some(rel) = ctx.release.as_deref() {
        let top = format!("{DRIVER_ROOT}/lib/modules/{rel}");
        find_kos(ctx, &top, 0, &mut kos);
    }
    let peermem_kos = kos
        .into_iter()
        .map(|abs| {
            let ours = ctx
                .root
                .read_bytes(&abs, KO_MAX)
                .is_some_and(|b| is_nvpeer_ko(&b));
            (abs.trim_start_matches(DRIVER_ROOT).to_string(), ours)
        })
        .collect();
    Some(DriverContainer {
        peermem_kos,
        hook: ctx.root.exists(&format!("{DRIVER_ROOT}{NVPEER_HOOK}")),
        doca: ctx
            .root
            .is_dir(DOCA_ROOT)
            .then(|| ctx.root.exists(DOCA_READY)),
    })
}

/// `nvidia-peermem.ko` files under `dir`, a few levels down (kernel/, updates/, extra/, video/).
fn find_kos(ctx: &Ctx, dir: &str, depth: usize, out: &mut Vec<String>) {
    if depth > 4 {
        return;
    }
    for name in ctx.root.list(dir) {
        let p = format!("{dir}/{name}");
        if name == "nvidia-peermem.ko" {
            out.push(p);
        } else if ctx.root.is_dir(&p) && name != "build" && name != "source" {
            find_kos(ctx, &p, depth + 1, out);
        }
    }
}

/// What the admin changes, in the operator's terms.
const IMAGE_FIX: &str = "Build the driver image with nvpeer (packaging/gpu-operator/Containerfile on NVIDIA's \
     driver image; docs/install.md, \"GPU Operator\"), point the ClusterPolicy's driver.repository, \
     driver.image and driver.version at it, and keep driver.rdma.enabled=true (with \
     driver.rdma.useHostMofed=true where DOCA-OFED is installed on the host instead of by the \
     Network Operator).";

/// `gpu_operator.driver`: on a GPU Operator node, whether its driver container loads nvpeer.
pub fn driver(ctx: &Ctx) -> Check {
    const ID: &str = "gpu_operator.driver";
    const T: &str = "GPU Operator driver container";
    let Some(dc) = detect(ctx) else {
        return Check::new(
            ID,
            T,
            false,
            Status::Skip,
            format!("not a GPU Operator node (no driver container at {DRIVER_ROOT})"),
        )
        .data(OperatorData::None {
            driver_container: false,
        });
    };
    let rel = ctx.release.as_deref().unwrap_or("?");
    let ours: Vec<&str> = dc
        .peermem_kos
        .iter()
        .filter(|(_, o)| *o)
        .map(|(p, _)| p.as_str())
        .collect();
    let nvidias: Vec<&str> = dc
        .peermem_kos
        .iter()
        .filter(|(_, o)| !*o)
        .map(|(p, _)| p.as_str())
        .collect();
    let doca = match dc.doca {
        Some(true) => format!("the Network Operator's DOCA driver is ready ({DOCA_READY})"),
        Some(false) => format!(
            "the Network Operator's DOCA driver is not ready ({DOCA_READY} missing): nvidia-peermem-ctr waits for it"
        ),
        None => format!(
            "no DOCA driver container ({DOCA_ROOT}): the operator waits for mlx5_core instead (driver.rdma.useHostMofed=true), {}",
            if ctx.module_loaded("mlx5_core") { "which is loaded" } else { "which is not loaded" }
        ),
    };
    let mut details = vec![doca.clone()];
    details.extend(dc.peermem_kos.iter().map(|(p, o)| {
        format!(
            "{DRIVER_ROOT} {p}: {}",
            if *o {
                "nvpeer's build"
            } else {
                "NVIDIA's nvidia-peermem"
            }
        )
    }));
    let data = OperatorData::Container {
        driver_container: true,
        nvpeer_hook: dc.hook,
        peermem_kos: dc
            .peermem_kos
            .iter()
            .map(|(p, o)| PeermemKo {
                path: p.clone(),
                nvpeer: *o,
            })
            .collect(),
        doca_container_ready: dc.doca,
    };
    let (status, summary, fix) = if !ours.is_empty() || dc.hook {
        let how = if !ours.is_empty() {
            format!("nvpeer's nvidia-peermem.ko is installed for {rel}")
        } else {
            format!("nvpeer's driver-container hook is in the image ({NVPEER_HOOK}); it builds nvpeer at the first modprobe")
        };
        match dc.doca {
            Some(false) => (
                Status::Warn,
                format!("the driver container loads nvpeer ({how}), once DOCA is ready"),
                Some(format!(
                    "Wait for the Network Operator's DOCA driver pod (its {DOCA_READY}), or set driver.rdma.useHostMofed=true if DOCA-OFED is the host's."
                )),
            ),
            _ => (Status::Pass, format!("the driver container loads nvpeer as nvidia-peermem ({how})"), None),
        }
    } else if !nvidias.is_empty() {
        // nvpeer may serve now (loaded by hand or from the host); the driver pod's next start
        // loads NVIDIA's module all the same.
        let serving = super::rdma::nvpeer_name(ctx);
        (
            if serving.is_some() { Status::Warn } else { Status::Fail },
            format!(
                "the driver container's nvidia-peermem for {rel} is NVIDIA's: driver.rdma.enabled=true loads it, not nvpeer{}",
                if serving.is_some() { " (nvpeer serves now; the driver pod's next start replaces it)" } else { "" }
            ),
            Some(IMAGE_FIX.to_string()),
        )
    } else {
        (
            Status::Fail,
            format!(
                "no nvidia-peermem.ko in the driver container's tree for {rel} (a userspace-only driver install or another kernel: NVIDIA/gpu-operator#2619)"
            ),
            Some(IMAGE_FIX.to_string()),
        )
    };
    let mut c = Check::new(ID, T, true, status, summary)
        .details(details)
        .data(data);
    if let Some(f) = fix {
        c = c.fix(f);
    }
    c
}
