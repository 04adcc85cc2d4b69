//! `rdma.devices`: the RDMA devices and their ports' state.

use crate::checks::data::{DevicesData, PortRow};
use crate::checks::Ctx;
use crate::report::{Check, Status};

/// `rdma.devices`: at least one RDMA device, and its ports' state.
pub fn devices(ctx: &Ctx) -> Check {
    const ID: &str = "rdma.devices";
    const T: &str = "RDMA devices";
    if ctx.rdma_devices.is_empty() {
        let unbound: Vec<&str> = ctx.nics.iter().map(|n| n.name.as_str()).collect();
        let fix = if unbound.is_empty() {
            "Install an RDMA NIC (ConnectX, ...) and its driver; for tests, `rdma link add rxe0 type rxe netdev eth0`."
        } else {
            "Load the NIC's RDMA driver (e.g. `modprobe mlx5_ib`)."
        };
        return Check::new(
            ID,
            T,
            true,
            Status::Fail,
            "no RDMA device in /sys/class/infiniband",
        )
        .fix(fix)
        .data(DevicesData::None {
            devices: Vec::new(),
            unbound_nics: unbound.iter().map(|n| n.to_string()).collect(),
        });
    }
    let mut details = Vec::new();
    let mut rows = Vec::new();
    let mut active = 0;
    for dev in &ctx.rdma_devices {
        for port in ctx.root.list(&format!("/sys/class/infiniband/{dev}/ports")) {
            let base = format!("/sys/class/infiniband/{dev}/ports/{port}");
            let state = ctx
                .root
                .read_trim(&format!("{base}/state"))
                .unwrap_or_default();
            let layer = ctx
                .root
                .read_trim(&format!("{base}/link_layer"))
                .unwrap_or_default();
            let rate = ctx
                .root
                .read_trim(&format!("{base}/rate"))
                .unwrap_or_default();
            if state.contains("ACTIVE") {
                active += 1;
            }
            details.push(format!("{dev} port {port}: {state}, {layer}, {rate}"));
            rows.push(PortRow {
                device: dev.clone(),
                port,
                state,
                link_layer: layer,
                rate,
            });
        }
    }
    let data = DevicesData::Found {
        devices: ctx.rdma_devices.clone(),
        ports: rows,
    };
    if active == 0 {
        Check::new(
            ID,
            T,
            false,
            Status::Warn,
            format!("{} device(s), no ACTIVE port", ctx.rdma_devices.len()),
        )
        .details(details)
        .fix("Bring a port up (cable, subnet manager for InfiniBand, `ip link set up` for RoCE).")
        .data(data)
    } else {
        Check::new(
            ID,
            T,
            true,
            Status::Pass,
            format!(
                "{} device(s), {active} active port(s)",
                ctx.rdma_devices.len()
            ),
        )
        .details(details)
        .data(data)
    }
}
