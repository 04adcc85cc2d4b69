//! `peer.clients`: the registered peer-memory clients and their counters, or the module that serves
//! `nv_mem` where the core keeps no client list.

use super::nv_mem_owner::{served_by, serving, LOAD_DROPIN};
use super::PEERS;
use crate::checks::data::{PeerClient, PeerClientsData};
use crate::checks::Ctx;
use crate::report::{Check, Status};
use nvpeer_uapi::{debugfs, memory_peers};

/// One registered peer-memory client and its files (version and counters, as text).
fn client(ctx: &Ctx, name: &str) -> PeerClient {
    PeerClient {
        name: name.to_string(),
        files: memory_peers::client_files(ctx.root.base(), name),
    }
}

/// `peer.clients`: who serves `nv_mem`. Where the core keeps a client list
/// (`/sys/kernel/mm/memory_peers`, MLNX_OFED before 24.04, or a kernel that exports `mm_kobj`),
/// its entries and counters; where it keeps none (DOCA-OFED / OFED ≥ 24.04 on a kernel without
/// the `mm_kobj` export), the loaded module that serves it.
pub fn peer_clients(ctx: &Ctx) -> Check {
    const ID: &str = "peer.clients";
    const T: &str = "registered peer clients";
    let sysfs = memory_peers::listed(ctx.root.base());
    let names = memory_peers::clients(ctx.root.base());
    let clients: Vec<PeerClient> = names.iter().map(|n| client(ctx, n)).collect();
    let mut details: Vec<String> = clients
        .iter()
        .map(|c| {
            let file = |f: &str| c.files.get(f).map(String::as_str).unwrap_or("?");
            format!(
                "{} version {} (mrs {}/{} alloc/dealloc, {} invalidations)",
                c.name,
                file("version"),
                file("num_alloc_mrs"),
                file("num_dealloc_mrs"),
                file("num_free_callbacks")
            )
        })
        .collect();
    let serve = serving(ctx);
    let modules: Vec<&str> = serve.iter().map(|(_, _, d)| d.as_str()).collect();
    let data = PeerClientsData {
        clients,
        sysfs,
        served_by: served_by(&serve),
    };
    let load = format!("Load nvpeer: `{LOAD_DROPIN}` (DKMS installs it under that name: docs/install.md); it registers the `nv_mem` client.");
    if sysfs {
        if names.iter().any(|n| n == "nv_mem" || n == "nv_mem_nc") {
            return Check::new(ID, T, true, Status::Pass, names.join(", "))
                .details(details)
                .data(data);
        }
        if !modules.is_empty() {
            return Check::new(ID, T, true, Status::Fail, format!("{} loaded, but no nv_mem client in {PEERS}", modules.join(", ")))
                .details(details)
                .fix("The module did not register with this core: see `dmesg | grep -i -e nvpeer -e peer`.")
                .data(data);
        }
        let summary = if names.is_empty() {
            "no peer-memory client registered".to_string()
        } else {
            format!("only {}", names.join(", "))
        };
        return Check::new(ID, T, true, Status::Fail, summary)
            .details(details)
            .fix(load)
            .data(data);
    }
    details.push(format!(
        "no {PEERS}: DOCA-OFED (OFED ≥ 24.04) creates it only on kernels that export mm_kobj, which mainline stopped doing in 2023 (\"mm: no need to export mm_kobj\")"
    ));
    if modules.is_empty() {
        return Check::new(
            ID,
            T,
            true,
            Status::Fail,
            "no peer-memory module loaded (and this core keeps no client list in sysfs)",
        )
        .details(details)
        .fix(load)
        .data(data);
    }
    if let Ok(cfg) = debugfs::read_config(ctx.root.base()) {
        details.extend(
            cfg.clients
                .iter()
                .map(|c| format!("nvpeer registered client {c} (debugfs config)")),
        );
    }
    Check::new(
        ID,
        T,
        true,
        Status::Pass,
        format!(
            "this core keeps no client list in sysfs; nv_mem served by {}",
            modules.join(", ")
        ),
    )
    .details(details)
    .data(data)
}
