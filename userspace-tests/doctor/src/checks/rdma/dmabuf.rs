//! `rdma.dmabuf`: the dma-buf alternative (kernel import, GPU export, provider support).

use super::consumers::CONSUMERS;
use crate::checks::data::DmabufData;
use crate::checks::Ctx;
use crate::paths::DmabufUse;
use crate::probes::{CudaProbe, VerbsProbe};
use crate::report::{Check, Status};

/// Whether the kernel imports dma-buf for RDMA (`ib_umem_dmabuf_get`); `None` without kallsyms.
fn kernel_imports(ctx: &Ctx) -> Option<bool> {
    ctx.kallsyms.as_ref().map(|k| k.has("ib_umem_dmabuf_get"))
}

/// Whether every GPU exports dma-buf (CUDA's attribute); `None` when CUDA was not probed.
fn gpus_export(ctx: &Ctx) -> Option<bool> {
    match &ctx.probes.cuda {
        CudaProbe::Ok { gpus, .. } if !gpus.is_empty() => {
            Some(gpus.iter().all(|g| g.dmabuf_supported.unwrap_or(0) != 0))
        }
        _ => None,
    }
}

/// Whether an RDMA provider imports dma-buf (the verbs probe); `None` when it did not decide.
fn provider_imports(ctx: &Ctx) -> Option<bool> {
    match &ctx.probes.verbs {
        VerbsProbe::Probed { results } => Some(results.iter().any(|r| r.verdict == "supported")),
        _ => None,
    }
}

/// Whether GPU memory can be registered through dma-buf here, as `rdma.dmabuf` decides it:
/// `Some(false)` when any of its three parts is missing; `Some(true)` when the GPUs export and a
/// provider imports (the probe's success shows the kernel's import too, kallsyms or not); `None`
/// otherwise.
pub fn usable(ctx: &Ctx) -> Option<bool> {
    let (kernel, gpu, verbs) = (kernel_imports(ctx), gpus_export(ctx), provider_imports(ctx));
    if [kernel, gpu, verbs].contains(&Some(false)) {
        Some(false)
    } else if gpu == Some(true) && verbs == Some(true) {
        Some(true)
    } else {
        None
    }
}

/// `rdma.dmabuf`: the dma-buf alternative (kernel import, GPU export, provider support).
pub fn dmabuf(ctx: &Ctx) -> Check {
    const ID: &str = "rdma.dmabuf";
    const T: &str = "dma-buf path";
    let (kernel, gpu) = (kernel_imports(ctx), gpus_export(ctx));
    let mut details = vec![format!(
        "kernel dma-buf import (ib_umem_dmabuf_get): {}",
        match kernel {
            Some(true) => "present",
            Some(false) => "absent",
            None => "unknown",
        }
    )];
    details.push(format!(
        "GPU DMA_BUF_SUPPORTED: {}",
        match (&ctx.probes.cuda, gpu) {
            (_, Some(true)) => "yes on every GPU".to_string(),
            (_, Some(false)) => "no (proprietary driver flavour or old driver)".to_string(),
            (CudaProbe::LibraryMissing, _) => "unknown: libcuda.so not found".to_string(),
            (CudaProbe::Failed { error }, _) => format!("unknown: {error}"),
            _ => "not probed".to_string(),
        }
    ));
    match &ctx.probes.verbs {
        VerbsProbe::Probed { results } => {
            for r in results {
                details.push(format!(
                    "ibv_reg_dmabuf_mr(fd=-1) on {}: errno {:?} → {}",
                    r.device, r.errno, r.verdict
                ));
            }
        }
        VerbsProbe::NoDevices => {
            details.push("ibv_reg_dmabuf_mr probe: no RDMA device to probe".into())
        }
        VerbsProbe::Unavailable { error } => {
            details.push(format!("ibv_reg_dmabuf_mr probe: {error}"))
        }
        VerbsProbe::NotRun => {}
    }
    let verbs = provider_imports(ctx);
    let data = DmabufData {
        kernel,
        gpu,
        verbs: ctx.probes.verbs.clone(),
    };
    let usable = usable(ctx) == Some(true);
    let prefer: Vec<&str> = CONSUMERS
        .iter()
        .filter(|p| p.dmabuf == DmabufUse::Prefers)
        .map(|p| p.library)
        .collect();
    if usable {
        Check::new(ID, T, true, Status::Pass, format!("available: {} register GPU memory through it ahead of peer memory", prefer.join(", ")))
            .details(details)
            .fix("To exercise nvpeer with NCCL set NCCL_DMABUF_ENABLE=0 (UCX: UCX_CUDA_COPY_DMABUF=no); with perftest omit --use_cuda_dmabuf.")
            .data(data)
    } else if kernel == Some(false) || gpu == Some(false) || verbs == Some(false) {
        let mut no = Vec::new();
        if kernel == Some(false) {
            no.push("the kernel has no dma-buf import (ib_umem_dmabuf_get)");
        }
        if gpu == Some(false) {
            no.push("the GPU driver exports no dma-buf");
        }
        if verbs == Some(false) {
            no.push("no RDMA provider imports dma-buf");
        }
        Check::new(ID, T, true, Status::Fail, format!("not available: {}", no.join("; ")))
            .details(details)
            .fix("dma-buf needs Linux ≥ 5.12 with an RDMA provider that imports it (mlx5, rdma-core ≥ 34) and the open NVIDIA modules (proprietary ones export none); otherwise use a peer-memory path.")
            .data(data)
    } else if kernel == Some(true)
        && gpu == Some(true)
        && matches!(ctx.probes.verbs, VerbsProbe::NoDevices)
    {
        Check::new(
            ID,
            T,
            true,
            Status::Skip,
            "kernel and GPUs support dma-buf; no RDMA provider to probe",
        )
        .details(details)
        .data(data)
    } else {
        Check::new(ID, T, true, Status::Unknown, "not fully determined (see details)")
            .details(details)
            .fix("Run `nvpeer doctor` on the node itself (the live CUDA and verbs probes decide it; not with --root or --no-probes).")
            .data(data)
    }
}
