//! `gpu.mlopart`: CUDA devices that are MLOPart partitions of a GPU (CUDA MPS). NCCL ≥ 2.30.7
//! turns GPUDirect RDMA off for them unless `NCCL_NET_GDR_MLOPART=1` (NVIDIA/nccl
//! src/graph/paths.cc `ncclTopoCheckGdr`, default 0), and GIN off for a communicator holding one
//! (`comm->hasMloPart`); it knows such a device by `MLOPart<N>` in its CUDA name (src/init.cc
//! `fillInfo`). NCCL logs the GDR decision at TRACE level only, so nothing in an INFO log says why
//! those GPUs went through the host.

use super::data::MloPartData;
use super::Ctx;
use crate::probes::CudaProbe;
use crate::report::{Check, Status};

/// The setting that keeps GDR on MLOPart devices.
const SETTING: &str = "NCCL_NET_GDR_MLOPART";

/// `gpu.mlopart`: MLOPart devices and NCCL's setting for them.
pub fn mlopart(ctx: &Ctx) -> Check {
    const ID: &str = "gpu.mlopart";
    const T: &str = "MLOPart partitions";
    let setting = ctx.settings.get(SETTING).cloned();
    let CudaProbe::Ok { gpus, .. } = &ctx.probes.cuda else {
        return Check::new(ID, T, false, Status::Skip, "CUDA not probed").data(MloPartData {
            partitions: Vec::new(),
            setting: setting.map(|s| s.value),
        });
    };
    let parts: Vec<String> = gpus
        .iter()
        .filter(|g| g.name.contains("MLOPart"))
        .map(|g| format!("{} ({}, CUDA {})", g.name, g.bdf, g.ordinal))
        .collect();
    let on = setting
        .as_ref()
        .is_some_and(|s| s.value.trim().parse::<i64>().is_ok_and(|v| v != 0));
    let data = MloPartData {
        partitions: parts.clone(),
        setting: setting.as_ref().map(|s| s.value.clone()),
    };
    if parts.is_empty() {
        return Check::new(
            ID,
            T,
            false,
            Status::Pass,
            format!("no MLOPart device among {} CUDA device(s)", gpus.len()),
        )
        .data(data);
    }
    let details = vec![
        format!("MLOPart devices: {}", parts.join(", ")),
        format!(
            "{SETTING}: {}",
            setting
                .as_ref()
                .map(|s| format!("{} ({})", s.value, s.source))
                .unwrap_or_else(|| "not set (NCCL's default 0)".into())
        ),
        "NCCL turns GIN off for any communicator holding an MLOPart device, whatever the setting"
            .into(),
    ];
    if on {
        return Check::new(
            ID,
            T,
            false,
            Status::Pass,
            format!(
                "{} MLOPart device(s); {SETTING} keeps GPUDirect RDMA on",
                parts.len()
            ),
        )
        .details(details)
        .data(data);
    }
    Check::new(
        ID,
        T,
        false,
        Status::Warn,
        format!(
            "{} MLOPart device(s): NCCL ≥ 2.30.7 stages their network traffic through host memory",
            parts.len()
        ),
    )
    .details(details)
    .fix(format!("Set {SETTING}=1 for the jobs (environment, or /etc/nccl.conf) to keep GPUDirect RDMA on MLOPart devices."))
    .data(data)
}
