//! `rdma.peer_api`: whether ib_core exports the peer-memory client API (MLNX_OFED / DOCA-OFED).

use crate::checks::Ctx;
use crate::report::{Check, Status};
use serde_json::json;

const REGISTER: &str = "ib_register_peer_memory_client";

/// Module.symvers files that may carry the OFED ib_core exports for `release`.
fn ofed_symvers(release: &str) -> Vec<String> {
    vec![
        format!("/lib/modules/{release}/build/Module.symvers"),
        format!("/usr/src/ofa_kernel/x86_64/{release}/Module.symvers"),
        format!("/usr/src/ofa_kernel/aarch64/{release}/Module.symvers"),
        format!("/usr/src/ofa_kernel/{release}/Module.symvers"),
        "/usr/src/ofa_kernel/default/Module.symvers".to_string(),
    ]
}

/// `rdma.peer_api`: ib_core exports the peer-memory client API (MLNX_OFED / DOCA-OFED only).
pub fn peer_api(ctx: &Ctx) -> Check {
    const ID: &str = "rdma.peer_api";
    const T: &str = "ib_core peer-memory API";
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
        .data(json!({"loaded": true, "owner": o, "ofed_version": ofed}));
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
        .data(json!({"symvers": in_symvers}));
    }
    if !in_symvers.is_empty() {
        return Check::new(ID, T, true, Status::Fail, format!("built in {} but not in the running ib_core", in_symvers[0]))
            .fix("Load the OFED ib_core instead of the inbox one (`/etc/init.d/openibd restart` or reboot after installing DOCA-OFED).")
            .data(json!({"loaded": false, "symvers": in_symvers}));
    }
    let ib_core = ctx.module_loaded("ib_core")
        || ctx
            .kallsyms
            .as_ref()
            .is_some_and(|k| k.has("ib_register_device"));
    let why = if ib_core {
        "the running ib_core has no peer-memory API (inbox RDMA stack)"
    } else {
        "ib_core is not loaded"
    };
    Check::new(ID, T, true, Status::Fail, why)
        .fix("Install MLNX_OFED or DOCA-OFED (its ib_core carries the peer-memory API; kernel.org RDMA does not), then `modprobe ib_core`.")
        .data(json!({"loaded": false, "ib_core": ib_core}))
}
