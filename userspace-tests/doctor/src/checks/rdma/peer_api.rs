//! `rdma.peer_api`: whether the running kernel exports the peer-memory client API (MLNX_OFED /
//! DOCA-OFED: from ib_uverbs in OFED 24.07 and later, DOCA-OFED 3.x included, from ib_core before).

use crate::checks::data::PeerApiData;
use crate::checks::Ctx;
use crate::report::{Check, Status};

const REGISTER: &str = "ib_register_peer_memory_client";

/// Module.symvers files that may carry OFED's exports for `release`.
fn ofed_symvers(release: &str) -> Vec<String> {
    vec![
        format!("/lib/modules/{release}/build/Module.symvers"),
        format!("/usr/src/ofa_kernel/x86_64/{release}/Module.symvers"),
        format!("/usr/src/ofa_kernel/aarch64/{release}/Module.symvers"),
        format!("/usr/src/ofa_kernel/{release}/Module.symvers"),
        "/usr/src/ofa_kernel/default/Module.symvers".to_string(),
    ]
}

/// `rdma.peer_api`: the OFED peer-memory client API is exported (MLNX_OFED / DOCA-OFED only).
pub fn peer_api(ctx: &Ctx) -> Check {
    const ID: &str = "rdma.peer_api";
    const T: &str = "OFED peer-memory API";
    let owner = ctx.kallsyms.as_ref().and_then(|k| k.owner(REGISTER));
    if let Some(o) = &owner {
        let ofed = ctx
            .root
            .read_trim("/sys/module/mlx_compat/version")
            .or_else(|| ctx.root.read_trim("/sys/module/mlx5_core/version"));
        let extra = ofed
            .as_deref()
            .map(|v| format!(", OFED {v}"))
            .unwrap_or_default();
        return Check::new(
            ID,
            T,
            true,
            Status::Pass,
            format!("{REGISTER} exported by `{o}`{extra}"),
        )
        .data(PeerApiData::Exported {
            loaded: true,
            owner: o.clone(),
            ofed_version: ofed,
        });
    }
    let in_symvers: Vec<String> = ctx
        .release
        .as_deref()
        .map(ofed_symvers)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| {
            ctx.root.read(p).is_some_and(|t| {
                t.lines()
                    .any(|l| l.split_whitespace().nth(1) == Some(REGISTER))
            })
        })
        .collect();
    if ctx.kallsyms.is_none() {
        return Check::new(
            ID,
            T,
            true,
            Status::Unknown,
            "/proc/kallsyms is not readable",
        )
        .fix("Run on a kernel with a readable /proc/kallsyms.")
        .data(PeerApiData::KallsymsUnreadable {
            symvers: in_symvers,
        });
    }
    if !in_symvers.is_empty() {
        return Check::new(ID, T, true, Status::Fail, format!("built in {} but not exported by the running kernel", in_symvers[0]))
            .fix("Load OFED's modules instead of the inbox ones: `modprobe ib_uverbs` (DOCA-OFED exports the API from ib_uverbs, older OFED from ib_core), or `/etc/init.d/openibd restart`, or reboot after installing DOCA-OFED.")
            .data(PeerApiData::NotLoaded { loaded: false, symvers: in_symvers });
    }
    let ib_core = ctx.module_loaded("ib_core")
        || ctx
            .kallsyms
            .as_ref()
            .is_some_and(|k| k.has("ib_register_device"));
    let ib_uverbs = ctx.module_loaded("ib_uverbs");
    let release = ctx.release.as_deref().unwrap_or("");
    let distro = ctx.distro.as_ref();
    let ubuntu_gone = crate::distro::ubuntu_generic_without_inbox_peer_api(distro, release);
    let why = if ubuntu_gone {
        format!("Ubuntu's generic kernels from 6.8 on ({release}) carry no inbox peer-memory API, and no DOCA-OFED is loaded")
    } else if ib_core {
        format!(
            "the running RDMA core has no peer-memory API (inbox RDMA stack; ib_uverbs {})",
            if ib_uverbs { "loaded" } else { "not loaded" }
        )
    } else {
        "no RDMA core is loaded (ib_core, ib_uverbs)".to_string()
    };
    let install = crate::distro::ofed_install(distro, ctx.release.as_deref());
    let fix = if ubuntu_gone {
        format!("Canonical keeps the inbox interface only in the 5.4, 5.15 and linux-nvidia kernels: {install}, then `modprobe ib_uverbs` (DOCA-OFED exports the API from ib_uverbs); or use dma-buf, which needs no peer-memory client (`nvpeer doctor --require dmabuf`).")
    } else {
        format!("{install} (kernel.org RDMA has no peer-memory API), then `modprobe ib_uverbs` (DOCA-OFED and OFED ≥ 24.07 export it from ib_uverbs, older OFED from ib_core).")
    };
    Check::new(ID, T, true, Status::Fail, why)
        .fix(fix)
        .data(PeerApiData::Absent {
            loaded: false,
            ib_core,
            ib_uverbs,
            ubuntu_generic_no_inbox_api: ubuntu_gone,
        })
}
