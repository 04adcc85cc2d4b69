//! `nvidia.peermem`: NVIDIA's own nvidia-peermem, the other peer-memory path.

use super::nv_mem_owner::{dropin, nvpeer_name, Dropin, Owner, LOAD_DROPIN};
use crate::checks::data::NvidiaPeermemData;
use crate::checks::Ctx;
use crate::report::{Check, Status};

/// `nvidia.peermem`: NVIDIA's own nvidia-peermem, the other peer-memory path. Not in use (skip)
/// when nvpeer holds its place.
pub fn nvidia_peermem(ctx: &Ctx) -> Check {
    const ID: &str = "nvidia.peermem";
    const T: &str = "NVIDIA's nvidia-peermem";
    let drop = dropin(ctx);
    let data = NvidiaPeermemData {
        nvidia_peermem: drop.as_ref().map(Dropin::data),
        nvpeer: nvpeer_name(ctx).map(str::to_string),
    };
    match (&drop, nvpeer_name(ctx)) {
        (Some(d), _) if d.owner == Owner::Nvidia => {
            Check::new(ID, T, true, Status::Pass, format!("loaded, {}; it serves nv_mem", d.version.as_deref().unwrap_or("?"))).data(data)
        }
        (Some(d), _) if d.owner == Owner::Unknown => Check::new(ID, T, true, Status::Pass, format!("nvidia_peermem loaded, not identified ({})", d.why)).data(data),
        (_, Some(n)) => Check::new(ID, T, true, Status::Skip, format!("not in use: nvpeer (loaded as {n}) serves nv_mem")).data(data),
        _ => Check::new(ID, T, true, Status::Fail, "not loaded")
            .fix(format!("For NVIDIA's module: `{LOAD_DROPIN}` where the driver's nvidia-peermem.ko is installed (on an nvpeer install that name loads nvpeer)."))
            .data(data),
    }
}
