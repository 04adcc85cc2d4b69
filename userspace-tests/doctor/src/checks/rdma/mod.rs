//! RDMA stack: peer-memory API, devices, nvpeer itself (under its drop-in name `nvidia_peermem` or
//! its own), who serves `nv_mem`, conflicts, what the communication libraries will detect, dma-buf.

use super::Ctx;
use crate::paths::DmabufUse;
use crate::probes::{CudaProbe, VerbsProbe};
use crate::report::{Check, Status};
use serde_json::json;

const PEERS: &str = "/sys/kernel/mm/memory_peers";
const REGISTER: &str = "ib_register_peer_memory_client";
/// nvpeer's debugfs summary (uapi/debugfs.md).
const DEBUGFS_CONFIG: &str = "/sys/kernel/debug/nvpeer/config";

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
        .data(json!({"devices": [], "unbound_nics": unbound}));
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
            rows.push(json!({"device": dev, "port": port, "state": state, "link_layer": layer, "rate": rate}));
        }
    }
    let data = json!({"devices": ctx.rdma_devices, "ports": rows});
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

// ---------------------------------------------------------------- which module serves nv_mem

/// The module name nvpeer is installed and loaded under by default (DKMS, `make install`):
/// NVIDIA's name, which NCCL, UCX and NVSHMEM probe in `/sys/module` (file `nvidia-peermem.ko`).
pub const DROPIN: &str = "nvidia_peermem";
/// nvpeer's own module name, kept for side-by-side tests.
pub const OWN_NAME: &str = "nvpeer";
/// Mellanox's classic peer-memory module; it registers an `nv_mem` client too.
const NV_PEER_MEM: &str = "nv_peer_mem";
/// nvpeer's debugfs directory, created under either module name (uapi/debugfs.md).
const DEBUGFS_DIR: &str = "/sys/kernel/debug/nvpeer";
/// The command that loads nvpeer under the name the libraries probe.
const LOAD_DROPIN: &str = "modprobe nvidia-peermem";
/// The fix whenever nvpeer is loaded, or only installed, under its own name.
const INSTALL_DROPIN: &str = "install nvpeer as nvidia-peermem (DKMS does: docs/install.md)";

/// Who built a loaded `nvidia_peermem`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// nvpeer's drop-in build.
    Nvpeer,
    /// The module the NVIDIA driver ships.
    Nvidia,
    /// No version to tell them apart.
    Unknown,
}

impl Owner {
    /// The `owner` value in the JSON report.
    pub fn as_str(self) -> &'static str {
        match self {
            Owner::Nvpeer => "nvpeer",
            Owner::Nvidia => "nvidia",
            Owner::Unknown => "unknown",
        }
    }
}

/// The loaded `nvidia_peermem` module: whose it is, and why the doctor thinks so.
#[derive(Debug, Clone)]
pub struct Dropin {
    /// Whose module it is.
    pub owner: Owner,
    /// `/sys/module/nvidia_peermem/version`.
    pub version: Option<String>,
    /// The evidence, for the report.
    pub why: String,
}

impl Dropin {
    fn json(&self) -> serde_json::Value {
        json!({"owner": self.owner.as_str(), "version": self.version, "why": self.why})
    }
}

/// Whose `nvidia_peermem` is loaded, if one is. nvpeer's creates debugfs `nvpeer/` (evidence only
/// while no module named `nvpeer` is loaded, which would create it too) and reports nvpeer's own
/// version; NVIDIA's reports the driver's version, the string in `/sys/module/nvidia/version`.
pub fn dropin(ctx: &Ctx) -> Option<Dropin> {
    if !ctx.module_loaded(DROPIN) {
        return None;
    }
    let version = ctx.root.read_trim("/sys/module/nvidia_peermem/version");
    let driver = ctx.root.read_trim("/sys/module/nvidia/version");
    let (owner, why) = if !ctx.module_loaded(OWN_NAME) && ctx.root.is_dir(DEBUGFS_DIR) {
        (Owner::Nvpeer, format!("debugfs {DEBUGFS_DIR}/ exists"))
    } else {
        match (&version, &driver) {
            (Some(v), Some(d)) if v == d => {
                (Owner::Nvidia, format!("version {v} is the NVIDIA driver's"))
            }
            (Some(v), Some(d)) => (
                Owner::Nvpeer,
                format!("version {v}, not the NVIDIA driver's {d}"),
            ),
            (Some(v), None) => (
                Owner::Nvpeer,
                format!("version {v}, and no NVIDIA driver loaded to have shipped it"),
            ),
            (None, _) => (
                Owner::Unknown,
                "no /sys/module/nvidia_peermem/version to tell".to_string(),
            ),
        }
    };
    Some(Dropin {
        owner,
        version,
        why,
    })
}

/// The module name nvpeer is loaded under, if it is loaded.
pub fn nvpeer_name(ctx: &Ctx) -> Option<&'static str> {
    if dropin(ctx).is_some_and(|d| d.owner == Owner::Nvpeer) {
        Some(DROPIN)
    } else if ctx.module_loaded(OWN_NAME) {
        Some(OWN_NAME)
    } else {
        None
    }
}

/// Every loaded module that registers an `nv_mem` client, described for the report.
fn serving(ctx: &Ctx) -> Vec<(&'static str, &'static str, String)> {
    let mut v = Vec::new();
    if let Some(d) = dropin(ctx) {
        let who = match d.owner {
            Owner::Nvpeer => "nvidia_peermem (nvpeer)".to_string(),
            Owner::Nvidia => format!(
                "nvidia_peermem (NVIDIA's, {})",
                d.version.as_deref().unwrap_or("?")
            ),
            Owner::Unknown => "nvidia_peermem (not identified)".to_string(),
        };
        v.push((DROPIN, d.owner.as_str(), who));
    }
    if ctx.module_loaded(OWN_NAME) {
        v.push((OWN_NAME, "nvpeer", "nvpeer".to_string()));
    }
    if ctx.module_loaded(NV_PEER_MEM) {
        v.push((
            NV_PEER_MEM,
            "mellanox",
            "nv_peer_mem (Mellanox's)".to_string(),
        ));
    }
    v
}

fn serving_json(s: &[(&str, &str, String)]) -> serde_json::Value {
    s.iter()
        .map(|(m, o, _)| json!({"module": m, "owner": o}))
        .collect()
}

/// How nvpeer is installed for the running kernel.
struct Installed {
    /// `nvidia-peermem.ko` as modules.dep lists it (nvpeer's or NVIDIA's: the file alone does not say).
    dropin: Option<String>,
    /// `nvpeer.ko` (the side-by-side name).
    own: Option<String>,
    /// DKMS built nvpeer for this kernel (`/var/lib/dkms/nvpeer/<version>/<kernel>`).
    dkms: bool,
}

fn installed(ctx: &Ctx) -> Installed {
    let release = ctx.release.as_deref();
    let dep = release
        .and_then(|r| ctx.root.read(&format!("/lib/modules/{r}/modules.dep")))
        .unwrap_or_default();
    let find = |stem: &str| {
        let ko = format!("{stem}.ko");
        dep.lines()
            .filter_map(|l| l.split(':').next())
            .find(|p| {
                let file = p.rsplit('/').next().unwrap_or("");
                file == ko
                    || file
                        .strip_prefix(ko.as_str())
                        .is_some_and(|z| z.starts_with('.'))
            })
            .map(str::to_string)
    };
    let dkms = release.is_some_and(|r| {
        ctx.root
            .list("/var/lib/dkms/nvpeer")
            .iter()
            .any(|v| ctx.root.is_dir(&format!("/var/lib/dkms/nvpeer/{v}/{r}")))
    });
    Installed {
        dropin: find("nvidia-peermem"),
        own: find("nvpeer"),
        dkms,
    }
}

/// `nvpeer.module`: nvpeer is loaded (as `nvidia_peermem` or as `nvpeer`), whose `nvidia_peermem`
/// is loaded, nvpeer's version and parameters.
pub fn nvpeer_module(ctx: &Ctx) -> Check {
    const ID: &str = "nvpeer.module";
    const T: &str = "nvpeer loaded";
    let drop = dropin(ctx);
    let drop_json = drop.as_ref().map(Dropin::json);
    let Some(name) = nvpeer_name(ctx) else {
        let inst = installed(ctx);
        let inst_json = json!({"dropin": inst.dropin, "nvpeer": inst.own, "dkms": inst.dkms});
        let installed_any = inst.dkms || inst.dropin.is_some() || inst.own.is_some();
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
                .data(json!({"loaded": false, "module_name": DROPIN, "owner": d.owner.as_str(), "nvidia_peermem": drop_json, "installed": installed_any, "install": inst_json}));
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
            .data(json!({"loaded": false, "module_name": null, "owner": null, "nvidia_peermem": drop_json, "installed": installed_any, "install": inst_json}));
    };
    let base = format!("/sys/module/{name}");
    let version = ctx.root.read_trim(&format!("{base}/version"));
    let mut params = serde_json::Map::new();
    let sysfs_params = format!("{base}/parameters");
    let mut source = sysfs_params.clone();
    for p in ctx.root.list(&sysfs_params) {
        let v = ctx
            .root
            .read_trim(&format!("{sysfs_params}/{p}"))
            .unwrap_or_else(|| "(unreadable)".into());
        params.insert(p, json!(v));
    }
    // Rust `module!` parameters (Linux 7.2) do not appear in sysfs; nvpeer reports the values in
    // effect in debugfs `config` (`<name> <value>` lines; root only), under either module name.
    let mut clients = Vec::new();
    if let Some(cfg) = ctx.root.read(DEBUGFS_CONFIG) {
        for line in cfg.lines() {
            match line.split_once(' ') {
                Some(("client", rest)) => clients.push(rest.to_string()),
                Some(("version", _)) | None => {}
                Some((k, v)) if params.is_empty() || source == DEBUGFS_CONFIG => {
                    source = DEBUGFS_CONFIG.to_string();
                    params.insert(k.to_string(), json!(v.trim()));
                }
                Some(_) => {}
            }
        }
    }
    let taint = ctx
        .root
        .read_trim(&format!("{base}/taint"))
        .unwrap_or_default();
    let mut details: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
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
    .data(json!({
        "loaded": true, "module_name": name, "owner": "nvpeer", "nvidia_peermem": drop_json,
        "version": version, "parameters": params,
        "parameters_source": if params.is_empty() { None } else { Some(source) },
        "clients": clients, "taint": taint
    }))
}

/// `nvidia.peermem`: NVIDIA's own nvidia-peermem, the other peer-memory path. Not in use (skip)
/// when nvpeer holds its place.
pub fn nvidia_peermem(ctx: &Ctx) -> Check {
    const ID: &str = "nvidia.peermem";
    const T: &str = "NVIDIA's nvidia-peermem";
    let drop = dropin(ctx);
    let data =
        json!({"nvidia_peermem": drop.as_ref().map(Dropin::json), "nvpeer": nvpeer_name(ctx)});
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

/// One registered peer-memory client and its counters.
fn client_json(ctx: &Ctx, name: &str) -> serde_json::Value {
    let base = format!("{PEERS}/{name}");
    let mut m = serde_json::Map::new();
    m.insert("name".into(), json!(name));
    for f in ctx.root.list(&base) {
        if let Some(v) = ctx.root.read_trim(&format!("{base}/{f}")) {
            m.insert(f, json!(v));
        }
    }
    serde_json::Value::Object(m)
}

/// `peer.clients`: who serves `nv_mem`. Where the core keeps a client list
/// (`/sys/kernel/mm/memory_peers`, MLNX_OFED before 24.04, or a kernel that exports `mm_kobj`),
/// its entries and counters; where it keeps none (DOCA-OFED / OFED ≥ 24.04 on a kernel without
/// the `mm_kobj` export), the loaded module that serves it.
pub fn peer_clients(ctx: &Ctx) -> Check {
    const ID: &str = "peer.clients";
    const T: &str = "registered peer clients";
    let sysfs = ctx.root.is_dir(PEERS);
    let names = ctx.root.list(PEERS);
    let clients: Vec<serde_json::Value> = names.iter().map(|n| client_json(ctx, n)).collect();
    let mut details: Vec<String> = clients
        .iter()
        .map(|c| {
            format!(
                "{} version {} (mrs {}/{} alloc/dealloc, {} invalidations)",
                c["name"].as_str().unwrap_or(""),
                c["version"].as_str().unwrap_or("?"),
                c["num_alloc_mrs"].as_str().unwrap_or("?"),
                c["num_dealloc_mrs"].as_str().unwrap_or("?"),
                c["num_free_callbacks"].as_str().unwrap_or("?")
            )
        })
        .collect();
    let serve = serving(ctx);
    let modules: Vec<&str> = serve.iter().map(|(_, _, d)| d.as_str()).collect();
    let data = json!({"clients": clients, "sysfs": sysfs, "served_by": serving_json(&serve)});
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
    if let Some(cfg) = ctx.root.read(DEBUGFS_CONFIG) {
        details.extend(
            cfg.lines()
                .filter_map(|l| l.strip_prefix("client "))
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
    let data = json!({
        "loaded": rivals,
        "not_blocked": if nv_peer_mem_blocked { vec![] } else { vec![NV_PEER_MEM] },
        "nvidia_peermem": drop.as_ref().map(Dropin::json),
        "dropin_blocked": dropin_blocked,
    });
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

// ---------------------------------------------------------------- what the libraries conclude

const NV_MEM: &str = "/sys/kernel/mm/memory_peers/nv_mem/version";
const NV_MEM_NC: &str = "/sys/kernel/mm/memory_peers/nv_mem_nc/version";
const PEERS_NVIDIA_PEERMEM: &str = "/sys/kernel/mm/memory_peers/nvidia-peermem/version";
const SYS_NVIDIA_PEERMEM: &str = "/sys/module/nvidia_peermem/version";
const SYS_NV_PEER_MEM: &str = "/sys/module/nv_peer_mem/version";

/// How one library decides that GPUDirect RDMA through a peer-memory client is available: it
/// tests the existence of `paths` in this order and the first hit wins.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    /// Library (and release range, where the probe changed).
    pub library: &'static str,
    /// Repository, file and function the probe is in.
    pub source: &'static str,
    /// Files tested (`access(F_OK)` or equivalent).
    pub paths: &'static [&'static str],
    /// What the library does when the probe fails (only what its source shows).
    pub otherwise: &'static str,
    /// The release that also probes /sys/module, for the memory_peers-only probes.
    pub newer: Option<&'static str>,
    /// How it weighs dma-buf against peer memory (for "which path each library takes").
    pub dmabuf: DmabufUse,
}

/// Every probe the doctor evaluates, read in the libraries' sources (docs/compatibility.md,
/// "Which library sees which path").
pub const CONSUMERS: [Probe; 9] = [
    // NVIDIA/nccl src/transport/net_ib/gdr.cc, ncclIbGdrSupport() (ibGdrSupportInitOnce): sets
    // NCCL_PTR_CUDA in ncclIbGetPhysProperties; NCCL_PTR_DMABUF is a separate bit
    // (ncclIbDmaBufSupport: ibv_reg_dmabuf_mr with fd -1).
    Probe {
        library: "NCCL",
        source: "NVIDIA/nccl src/transport/net_ib/gdr.cc ncclIbGdrSupport",
        paths: &[NV_MEM, NV_MEM_NC, SYS_NVIDIA_PEERMEM],
        otherwise:
            "no GPUDirect RDMA through peer memory (\"GPU Direct RDMA Disabled\"); NCCL still registers through dma-buf where ncclIbDmaBufSupport passes",
        newer: None,
        dmabuf: DmabufUse::Prefers,
    },
    // NVIDIA/nccl src/transport/net_ib/gdr.cc, ncclIbPeerMemSupport() ("does not check legacy
    // implementations of nv_peer_mem (e.g. nv_mem, nv_mem_nc)"), called for GDAKI by
    // src/transport/net_ib/gin.cc ncclGinIbGdrSupport() and ncclGinIbGdrGpuSupport() ("GDAKI does
    // not support nv_peer_mem"); the GIN proxy backend uses ncclIbGdrSupport instead.
    Probe {
        library: "NCCL GIN/GDAKI",
        source: "NVIDIA/nccl src/transport/net_ib/gdr.cc ncclIbPeerMemSupport (gin.cc ncclGinIbGdrSupport)",
        paths: &[SYS_NVIDIA_PEERMEM],
        otherwise: "falls back to DMA-BUF (ncclIbDmaBufSupport at init, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED at connect); with neither, GIN is off",
        newer: None,
        dmabuf: DmabufUse::Fallback,
    },
    // NVIDIA/nccl v2.22.3-1 src/transport/net_ib.cc, ncclIbGdrSupport(): memory_peers only; v2.23.4
    // added /sys/module/nvidia_peermem (NVIDIA/nccl#1676).
    Probe {
        library: "NCCL ≤ 2.22.3",
        source: "NVIDIA/nccl v2.22.3-1 src/transport/net_ib.cc ncclIbGdrSupport (NVIDIA/nccl#1676)",
        paths: &[NV_MEM, NV_MEM_NC],
        otherwise: "no GPUDirect RDMA through peer memory; dma-buf where ncclIbDmaBufSupport passes",
        newer: Some("NCCL ≥ 2.23.4"),
        dmabuf: DmabufUse::Prefers,
    },
    // openucx/ucx src/uct/ib/base/ib_md.c, uct_ib_md_open_common() → uct_ib_check_gpudirect_driver()
    // per file, when UCX_IB_GPU_DIRECT_RDMA is not `no`; the two /sys/module files came with
    // openucx/ucx#10123 (UCX 1.18). The GDA transport (src/uct/ib/mlx5/gdaki/gdaki.c) reuses
    // this result when it has no dma-buf. dma-buf first: src/uct/cuda/cuda_copy/cuda_copy_md.c
    // exports a dma-buf fd for CUDA memory (UCX_CUDA_COPY_DMABUF, default "try"), and the IB MD
    // registers with it when uct_ib_md_check_dmabuf passed.
    Probe {
        library: "UCX ≥ 1.18",
        source: "openucx/ucx src/uct/ib/base/ib_md.c uct_ib_md_open_common (openucx/ucx#10123)",
        paths: &[NV_MEM, SYS_NVIDIA_PEERMEM, SYS_NV_PEER_MEM],
        otherwise: "no CUDA memory registration on IB unless uct_ib_md_check_dmabuf finds dma-buf; with UCX_IB_GPU_DIRECT_RDMA=yes and neither it fails",
        newer: None,
        dmabuf: DmabufUse::Prefers,
    },
    // openucx/ucx src/uct/ib/base/ib_md.c before openucx/ucx#10123: memory_peers/nv_mem only.
    Probe {
        library: "UCX < 1.18",
        source: "openucx/ucx src/uct/ib/base/ib_md.c uct_ib_md_open_common (before openucx/ucx#10123)",
        paths: &[NV_MEM],
        otherwise: "no CUDA memory registration on IB unless uct_ib_md_check_dmabuf finds dma-buf",
        newer: Some("UCX ≥ 1.18"),
        dmabuf: DmabufUse::Prefers,
    },
    // openucx/ucc src/components/tl/mlx5/tl_mlx5_context.c, ucc_tl_mlx5_check_gpudirect_driver_cuda()
    // (openucx/ucc#1102): sets CUDA in supported_mem_types, which TL/MLX5 alltoall and
    // mcast/tl_mlx5_mcast_team.c ucc_tl_mlx5_mcast_team_init() (cuda_mem_enabled) check.
    Probe {
        library: "UCC TL/MLX5 (mcast, alltoall)",
        source: "openucx/ucc src/components/tl/mlx5/tl_mlx5_context.c ucc_tl_mlx5_check_gpudirect_driver_cuda (openucx/ucc#1102)",
        paths: &[NV_MEM, SYS_NVIDIA_PEERMEM, SYS_NV_PEER_MEM],
        otherwise: "TL/MLX5 takes host memory only; a CUDA-aware mcast team fails to init (\"gpu direct is not ready\")",
        newer: None,
        dmabuf: DmabufUse::Never,
    },
    // openucx/ucc src/components/tl/mlx5/mcast/tl_mlx5_mcast_team.c before openucx/ucc#1102:
    // its own ucc_tl_mlx5_check_gpudirect_driver() tests memory_peers/nv_mem only.
    Probe {
        library: "UCC mcast before #1102",
        source: "openucx/ucc src/components/tl/mlx5/mcast/tl_mlx5_mcast_team.c ucc_tl_mlx5_check_gpudirect_driver",
        paths: &[NV_MEM],
        otherwise: "a CUDA-aware mcast team fails to init (UCC_ERR_NO_RESOURCE)",
        newer: Some("a UCC with openucx/ucc#1102"),
        dmabuf: DmabufUse::Never,
    },
    // NVIDIA/nvshmem src/modules/transport/common/transport_ib_common.cpp,
    // nvshmemt_ib_common_nv_peer_mem_available(); the IBRC transport tests it only when dma-buf is
    // not supported ("neither nv_peer_mem, or nvidia_peermem detected. Skipping transport.").
    // Older releases lack the /sys/module file.
    Probe {
        library: "NVSHMEM",
        source: "NVIDIA/nvshmem src/modules/transport/common/transport_ib_common.cpp nvshmemt_ib_common_nv_peer_mem_available",
        paths: &[NV_MEM, PEERS_NVIDIA_PEERMEM, SYS_NVIDIA_PEERMEM],
        otherwise: "the IBRC transport is skipped unless dma-buf is supported (then it registers through dma-buf)",
        newer: None,
        dmabuf: DmabufUse::Prefers,
    },
    // open-mpi/ompi opal/mca/btl/openib/btl_openib_mca.c, btl_openib_register_mca_params():
    // driver_have_gdr (MCA btl_openib_have_driver_gdr); with btl_openib_want_cuda_gdr=1 and no
    // driver GDR the component refuses to start (driver_no_gdr_support).
    Probe {
        library: "Open MPI btl_openib",
        source: "open-mpi/ompi opal/mca/btl/openib/btl_openib_mca.c btl_openib_register_mca_params",
        paths: &[NV_MEM],
        otherwise: "btl_openib_have_driver_gdr is false; with btl_openib_want_cuda_gdr=1 btl_openib refuses to start",
        newer: Some("Open MPI's UCX PML with UCX ≥ 1.18"),
        dmabuf: DmabufUse::Never,
    },
];

/// `peer.consumers`: what each library's probe concludes on this node, and why not.
pub fn consumers(ctx: &Ctx) -> Check {
    const ID: &str = "peer.consumers";
    const T: &str = "library detection";
    let core_lists = ctx.root.is_dir(PEERS);
    let nvpeer = nvpeer_name(ctx);
    let serve = serving(ctx);
    let mut rows = Vec::new();
    let mut details = Vec::new();
    let (mut seen, mut fixable, mut structural) = (Vec::new(), Vec::new(), Vec::new());
    for p in &CONSUMERS {
        let hit = p.paths.iter().find(|f| ctx.root.exists(f));
        let memory_peers_only = p.paths.iter().all(|f| f.starts_with(PEERS));
        let is_structural = hit.is_none() && memory_peers_only && !core_lists;
        let why = match hit {
            Some(_) => None,
            None if is_structural => Some(format!("it checks only {PEERS}, which this core does not create: no module name can fix that; {}", p.otherwise)),
            None if nvpeer == Some(OWN_NAME) => Some(format!("nvpeer is loaded as `nvpeer` and none of {} exists; {}", p.paths.join(", "), p.otherwise)),
            None if serve.is_empty() => Some(format!("no peer-memory module is loaded; {}", p.otherwise)),
            None => Some(format!("none of {} exists; {}", p.paths.join(", "), p.otherwise)),
        };
        match (&hit, &why) {
            (Some(f), _) => {
                details.push(format!("{}: sees peer memory via {f}", p.library));
                seen.push(p.library);
            }
            (None, Some(w)) => {
                let upgrade = p
                    .newer
                    .map(|n| format!(" (fix: {n}, which probes /sys/module)"))
                    .unwrap_or_default();
                details.push(format!("{}: does NOT see it: {w}{upgrade}", p.library));
                if is_structural {
                    structural.push(p);
                } else {
                    fixable.push(p.library);
                }
            }
            (None, None) => {}
        }
        rows.push(json!({
            "library": p.library, "source": p.source, "detected": hit.is_some(), "via": hit,
            "paths": p.paths, "structural": is_structural, "why": why, "newer": p.newer,
        }));
    }
    let grep = ctx.root.read("/proc/modules").is_some_and(|m| {
        m.lines()
            .any(|l| l.split_whitespace().next() == Some(DROPIN))
    });
    details.push(format!(
        "tools that grep /proc/modules for nvidia_peermem: {}",
        if grep { "find it" } else { "do not find it" }
    ));
    let structural_names: Vec<&str> = structural.iter().map(|p| p.library).collect();
    let data = json!({
        "libraries": rows,
        "memory_peers": core_lists,
        "structural": !structural.is_empty(),
        "structural_blind": structural_names,
        "fixable_blind": fixable,
        "served_by": serving_json(&serve),
        "nvpeer_module_name": nvpeer,
        "proc_modules_nvidia_peermem": grep,
    });
    if !fixable.is_empty() {
        let (summary, fix) = if nvpeer == Some(OWN_NAME) && !ctx.module_loaded(DROPIN) {
            (
                format!("nvpeer is loaded as `nvpeer`: {} do not see it", fixable.join(", ")),
                format!("Those probes look for /sys/module/nvidia_peermem: {INSTALL_DROPIN}, then `modprobe -r nvpeer && {LOAD_DROPIN}`."),
            )
        } else if serve.is_empty() {
            (
                if seen.is_empty() {
                    "no library will see GPUDirect RDMA through peer memory".to_string()
                } else {
                    format!("not seen by {}", fixable.join(", "))
                },
                format!(
                    "Load nvpeer: `{LOAD_DROPIN}` ({INSTALL_DROPIN} first if it is not installed)."
                ),
            )
        } else {
            (format!("not seen by {}", fixable.join(", ")), format!("Serve nv_mem with nvpeer as nvidia_peermem: {INSTALL_DROPIN}, then `{LOAD_DROPIN}`."))
        };
        return Check::new(ID, T, true, Status::Fail, summary)
            .details(details)
            .fix(fix)
            .data(data);
    }
    if !structural.is_empty() {
        let newer: Vec<&str> = structural.iter().filter_map(|p| p.newer).collect();
        let fix = if newer.is_empty() {
            "Nothing a module can change: these probes read only /sys/kernel/mm/memory_peers."
                .to_string()
        } else {
            format!(
                "No module name can fix these probes; use {} instead.",
                newer.join(", ")
            )
        };
        return Check::new(
            ID,
            T,
            false,
            Status::Warn,
            format!(
                "seen by {}; structurally blind: {} (they read only {PEERS}, which this core does not create)",
                seen.join(", "),
                structural_names.join(", ")
            ),
        )
        .details(details)
        .fix(fix)
        .data(data);
    }
    Check::new(
        ID,
        T,
        true,
        Status::Pass,
        format!("seen by every probed library ({})", seen.join(", ")),
    )
    .details(details)
    .data(data)
}

/// `rdma.dmabuf`: the dma-buf alternative (kernel import, GPU export, provider support).
pub fn dmabuf(ctx: &Ctx) -> Check {
    const ID: &str = "rdma.dmabuf";
    const T: &str = "dma-buf path";
    let kernel = ctx.kallsyms.as_ref().map(|k| k.has("ib_umem_dmabuf_get"));
    let gpu: Option<bool> = match &ctx.probes.cuda {
        CudaProbe::Ok { gpus, .. } if !gpus.is_empty() => {
            Some(gpus.iter().all(|g| g.dmabuf_supported.unwrap_or(0) != 0))
        }
        _ => None,
    };
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
    let verbs: Option<bool> = match &ctx.probes.verbs {
        VerbsProbe::Probed { results } => {
            for r in results {
                details.push(format!(
                    "ibv_reg_dmabuf_mr(fd=-1) on {}: errno {:?} → {}",
                    r.device, r.errno, r.verdict
                ));
            }
            Some(results.iter().any(|r| r.verdict == "supported"))
        }
        VerbsProbe::NoDevices => {
            details.push("ibv_reg_dmabuf_mr probe: no RDMA device to probe".into());
            None
        }
        VerbsProbe::Unavailable { error } => {
            details.push(format!("ibv_reg_dmabuf_mr probe: {error}"));
            None
        }
        VerbsProbe::NotRun => None,
    };
    let data = json!({"kernel": kernel, "gpu": gpu, "verbs": serde_json::to_value(&ctx.probes.verbs).unwrap_or_default()});
    let usable = kernel != Some(false) && gpu == Some(true) && verbs == Some(true);
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
