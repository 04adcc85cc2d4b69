//! `peer.conflicts`: a rival `nv_mem` provider loaded, and the modprobe.d rules that keep one out.

use super::nv_mem_owner::{
    dropin, nvpeer_name, Dropin, Owner, DROPIN, INSTALL_DROPIN, LOAD_DROPIN, NV_PEER_MEM, OWN_NAME,
};
use crate::checks::data::ConflictsData;
use crate::checks::Ctx;
use crate::report::{Check, Status};

/// Whether an `/etc/modprobe.d` rule stops `module` from loading.
fn blocked(ctx: &Ctx, module: &str) -> bool {
    let dash = module.replace('_', "-");
    [
        "/etc/modprobe.d",
        "/usr/lib/modprobe.d",
        "/lib/modprobe.d",
        "/run/modprobe.d",
    ]
    .iter()
    .any(|dir| {
        ctx.root
            .list(dir)
            .iter()
            .filter(|f| f.ends_with(".conf"))
            .any(|f| {
                ctx.root.read(&format!("{dir}/{f}")).is_some_and(|t| {
                    t.lines().any(|l| {
                        let w: Vec<&str> = l.split_whitespace().collect();
                        w.len() >= 3
                            && w[0] == "install"
                            && (w[1] == module || w[1] == dash)
                            && (w[2].ends_with("/false") || w[2] == "false")
                    })
                })
            })
    })
}

/// `peer.conflicts`: another `nv_mem` provider loaded: NVIDIA's `nvidia_peermem` (nvpeer's drop-in
/// under that name is no rival) or `nv_peer_mem`. Whether modprobe.d keeps nv_peer_mem out, and
/// does not block the drop-in name.
pub fn conflicts(ctx: &Ctx) -> Check {
    const ID: &str = "peer.conflicts";
    const T: &str = "no rival peer module";
    let drop = dropin(ctx);
    let mut rivals: Vec<&str> = Vec::new();
    if drop.as_ref().is_some_and(|d| d.owner != Owner::Nvpeer) {
        rivals.push(DROPIN);
    }
    if ctx.module_loaded(NV_PEER_MEM) {
        rivals.push(NV_PEER_MEM);
    }
    let nv_peer_mem_blocked = blocked(ctx, NV_PEER_MEM);
    let dropin_blocked = blocked(ctx, DROPIN);
    let data = ConflictsData {
        loaded: rivals.iter().map(|r| r.to_string()).collect(),
        not_blocked: if nv_peer_mem_blocked {
            vec![]
        } else {
            vec![NV_PEER_MEM.to_string()]
        },
        nvidia_peermem: drop.as_ref().map(Dropin::data),
        dropin_blocked,
    };
    if !rivals.is_empty() {
        let what: Vec<String> = rivals
            .iter()
            .map(|r| match (*r, &drop) {
                (DROPIN, Some(d)) if d.owner == Owner::Nvidia => {
                    format!("NVIDIA's nvidia_peermem ({})", d.why)
                }
                (DROPIN, Some(d)) => {
                    format!("nvidia_peermem, not identified as nvpeer ({})", d.why)
                }
                (r, _) => r.to_string(),
            })
            .collect();
        let summary = match nvpeer_name(ctx) {
            Some(n) => format!(
                "{} loaded beside nvpeer (as {n}): both serve nv_mem, and a core without a client list gives every registration to whichever registered first",
                what.join(", ")
            ),
            None => format!("{} loaded: it serves nv_mem, and nvpeer refuses to load beside it", what.join(", ")),
        };
        let mut unload = rivals.clone();
        if ctx.module_loaded(OWN_NAME) {
            unload.push(OWN_NAME);
        }
        let mut fix = format!("Run `modprobe -r {}`", unload.join(" "));
        if rivals.contains(&DROPIN) {
            fix.push_str(&format!(
                ", {INSTALL_DROPIN} so that `modinfo nvidia-peermem` names nvpeer"
            ));
        }
        if rivals.contains(&NV_PEER_MEM) {
            fix.push_str(", install packaging/modprobe.d/nvpeer.conf so nv_peer_mem stays out");
        }
        fix.push_str(&format!(", then `{LOAD_DROPIN}`."));
        return Check::new(ID, T, true, Status::Fail, summary)
            .fix(fix)
            .data(data);
    }
    if dropin_blocked {
        return Check::new(ID, T, false, Status::Warn, "modprobe.d blocks nvidia_peermem, the name nvpeer is installed under")
            .fix(format!(
                "Remove the `install nvidia_peermem /bin/false` rule (an nvpeer.conf from before the drop-in name; today's blocks only nv_peer_mem): `{LOAD_DROPIN}` fails while it is there."
            ))
            .data(data);
    }
    if !nv_peer_mem_blocked {
        return Check::new(ID, T, false, Status::Warn, "none loaded, but nothing stops nv_peer_mem from loading")
            .fix("Install packaging/modprobe.d/nvpeer.conf (`make install` and `make dkms-install` do) so Mellanox's nv_peer_mem cannot take nv_mem later.")
            .data(data);
    }
    let ours = if drop.is_some() {
        " (nvidia_peermem is nvpeer)"
    } else {
        ""
    };
    Check::new(
        ID,
        T,
        true,
        Status::Pass,
        format!("none loaded{ours}; nv_peer_mem blocked in modprobe.d"),
    )
    .data(data)
}
