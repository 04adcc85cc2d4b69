//! `nvpeer.module`: whether nvpeer is loaded, under which name, its version and parameters.

use super::nv_mem_owner::{
    dropin, installed, nvpeer_name, Dropin, Owner, DROPIN, INSTALL_DROPIN, LOAD_DROPIN,
};
use crate::checks::data::{InstallData, NvpeerModuleData};
use crate::checks::Ctx;
use crate::report::{Check, Status};
use nvpeer_uapi::{debugfs, module};

/// `nvpeer.module`: nvpeer is loaded (as `nvidia_peermem` or as `nvpeer`), whose `nvidia_peermem`
/// is loaded, nvpeer's version and parameters.
pub fn nvpeer_module(ctx: &Ctx) -> Check {
    const ID: &str = "nvpeer.module";
    const T: &str = "nvpeer loaded";
    let drop = dropin(ctx);
    let drop_data = drop.as_ref().map(Dropin::data);
    let Some(name) = nvpeer_name(ctx) else {
        let inst = installed(ctx);
        let installed_any = inst.dkms || inst.dropin.is_some() || inst.own.is_some();
        let install = InstallData {
            dropin: inst.dropin.clone(),
            nvpeer: inst.own.clone(),
            dkms: inst.dkms,
        };
        if let Some(d) = &drop {
            let who = if d.owner == Owner::Nvidia {
                "NVIDIA's"
            } else {
                "an unidentified"
            };
            return Check::new(ID, T, true, Status::Fail, format!("not loaded: {who} nvidia_peermem is ({})", d.why))
                .fix(format!(
                    "It serves nv_mem and nvpeer refuses to load beside it: `modprobe -r nvidia_peermem`, {INSTALL_DROPIN} so that `modinfo nvidia-peermem` names nvpeer, then `{LOAD_DROPIN}`."
                ))
                .data(NvpeerModuleData::NotLoaded {
                    loaded: false,
                    module_name: Some(DROPIN.to_string()),
                    owner: Some(d.owner.as_str().to_string()),
                    nvidia_peermem: drop_data,
                    installed: installed_any,
                    install,
                });
        }
        let (summary, fix) = if inst.dkms && inst.dropin.is_some() {
            (
                "installed (DKMS, as nvidia-peermem) but not loaded".to_string(),
                format!("Run `{LOAD_DROPIN}` (and enable nvpeer.service to load it at boot)."),
            )
        } else if let Some(p) = &inst.dropin {
            (
                format!("not loaded; {p} is installed (nvpeer's if `modinfo nvidia-peermem` names nvpeer, else NVIDIA's)"),
                format!("If `modinfo nvidia-peermem` names nvpeer, run `{LOAD_DROPIN}`; otherwise {INSTALL_DROPIN}, then `{LOAD_DROPIN}`."),
            )
        } else if inst.own.is_some() {
            (
                "installed as nvpeer only (the side-by-side name), not loaded".to_string(),
                format!("Install nvpeer as nvidia-peermem (`make dkms-install` or `make install`: docs/install.md), then `{LOAD_DROPIN}`: under the name nvpeer NCCL, UCX and NVSHMEM do not find it."),
            )
        } else {
            (
                "not installed for this kernel".to_string(),
                format!("Install nvpeer for this kernel (`make dkms-install`: DKMS builds it as nvidia-peermem, docs/install.md), then `{LOAD_DROPIN}`."),
            )
        };
        return Check::new(ID, T, true, Status::Fail, summary)
            .fix(fix)
            .data(NvpeerModuleData::NotLoaded {
                loaded: false,
                module_name: None,
                owner: None,
                nvidia_peermem: drop_data,
                installed: installed_any,
                install,
            });
    };
    let base = format!("{}/{name}", module::DIR);
    let version = module::version(ctx.root.base(), name);
    let mut params = std::collections::BTreeMap::new();
    let mut source = format!("{base}/parameters");
    for (p, v) in module::parameters(ctx.root.base(), name) {
        params.insert(p, v.unwrap_or_else(|| "(unreadable)".into()));
    }
    // Rust `module!` parameters (Linux 7.2) do not appear in sysfs; nvpeer reports the values in
    // effect in debugfs `config` (`<name> <value>` lines; root only), under either module name.
    let config = debugfs::read_config(ctx.root.base()).unwrap_or_default();
    let clients: Vec<String> = config.clients.iter().map(ToString::to_string).collect();
    if params.is_empty() && !config.settings.is_empty() {
        source = debugfs::CONFIG.to_string();
        for (k, v) in config.settings {
            params.insert(k, v);
        }
    }
    let taint = ctx
        .root
        .read_trim(&format!("{base}/taint"))
        .unwrap_or_default();
    let mut details: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let how = if name == DROPIN {
        "as nvidia_peermem (drop-in)"
    } else {
        details.push("loaded under its own name: the libraries that probe /sys/module/nvidia_peermem do not find it (peer.consumers)".into());
        "as nvpeer (side-by-side name)"
    };
    if let Some(d) = drop.as_ref().filter(|d| d.owner != Owner::Nvpeer) {
        details.push(format!(
            "also loaded: nvidia_peermem, {} (peer.conflicts)",
            d.why
        ));
    }
    let v = version.clone().unwrap_or_else(|| "no version".into());
    let shown: Vec<&String> = details.iter().filter(|d| d.contains('=')).collect();
    let params_text = if shown.is_empty() {
        String::new()
    } else {
        format!(
            ", {}",
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        )
    };
    Check::new(
        ID,
        T,
        true,
        Status::Pass,
        format!("loaded {how}, {v}{params_text}"),
    )
    .details(details)
    .data(NvpeerModuleData::Loaded {
        loaded: true,
        module_name: name.to_string(),
        owner: "nvpeer".to_string(),
        nvidia_peermem: drop_data,
        version,
        parameters_source: if params.is_empty() {
            None
        } else {
            Some(source)
        },
        parameters: params,
        clients,
        taint,
    })
}
