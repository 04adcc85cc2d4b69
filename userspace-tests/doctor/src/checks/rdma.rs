//! RDMA stack: peer-memory API, devices, nvpeer itself, registered clients, conflicts, what the
//! communication libraries will detect, dma-buf.

use super::Ctx;
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
        let ofed = ctx.root.read_trim("/sys/module/mlx_compat/version").or_else(|| ctx.root.read_trim("/sys/module/mlx5_core/version"));
        let extra = ofed.as_deref().map(|v| format!(", OFED {v}")).unwrap_or_default();
        return Check::new(ID, T, true, Status::Pass, format!("{REGISTER} exported by `{o}`{extra}"))
            .data(json!({"loaded": true, "owner": o, "ofed_version": ofed}));
    }
    let in_symvers: Vec<String> = ctx
        .release
        .as_deref()
        .map(ofed_symvers)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| ctx.root.read(p).is_some_and(|t| t.lines().any(|l| l.split_whitespace().nth(1) == Some(REGISTER))))
        .collect();
    if ctx.kallsyms.is_none() {
        return Check::new(ID, T, true, Status::Unknown, "/proc/kallsyms is not readable")
            .fix("Run on a kernel with a readable /proc/kallsyms.")
            .data(json!({"symvers": in_symvers}));
    }
    if !in_symvers.is_empty() {
        return Check::new(ID, T, true, Status::Fail, format!("built in {} but not in the running ib_core", in_symvers[0]))
            .fix("Load the OFED ib_core instead of the inbox one (`/etc/init.d/openibd restart` or reboot after installing DOCA-OFED).")
            .data(json!({"loaded": false, "symvers": in_symvers}));
    }
    let ib_core = ctx.module_loaded("ib_core") || ctx.kallsyms.as_ref().is_some_and(|k| k.has("ib_register_device"));
    let why = if ib_core { "the running ib_core has no peer-memory API (inbox RDMA stack)" } else { "ib_core is not loaded" };
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
        return Check::new(ID, T, true, Status::Fail, "no RDMA device in /sys/class/infiniband").fix(fix).data(json!({"devices": [], "unbound_nics": unbound}));
    }
    let mut details = Vec::new();
    let mut rows = Vec::new();
    let mut active = 0;
    for dev in &ctx.rdma_devices {
        for port in ctx.root.list(&format!("/sys/class/infiniband/{dev}/ports")) {
            let base = format!("/sys/class/infiniband/{dev}/ports/{port}");
            let state = ctx.root.read_trim(&format!("{base}/state")).unwrap_or_default();
            let layer = ctx.root.read_trim(&format!("{base}/link_layer")).unwrap_or_default();
            let rate = ctx.root.read_trim(&format!("{base}/rate")).unwrap_or_default();
            if state.contains("ACTIVE") {
                active += 1;
            }
            details.push(format!("{dev} port {port}: {state}, {layer}, {rate}"));
            rows.push(json!({"device": dev, "port": port, "state": state, "link_layer": layer, "rate": rate}));
        }
    }
    let data = json!({"devices": ctx.rdma_devices, "ports": rows});
    if active == 0 {
        Check::new(ID, T, false, Status::Warn, format!("{} device(s), no ACTIVE port", ctx.rdma_devices.len()))
            .details(details)
            .fix("Bring a port up (cable, subnet manager for InfiniBand, `ip link set up` for RoCE).")
            .data(data)
    } else {
        Check::new(ID, T, true, Status::Pass, format!("{} device(s), {active} active port(s)", ctx.rdma_devices.len())).details(details).data(data)
    }
}

/// `nvpeer.module`: nvpeer is loaded; its version and parameters.
pub fn nvpeer_module(ctx: &Ctx) -> Check {
    const ID: &str = "nvpeer.module";
    const T: &str = "nvpeer loaded";
    if !ctx.module_loaded("nvpeer") {
        let installed = ctx
            .release
            .as_deref()
            .and_then(|r| ctx.root.read(&format!("/lib/modules/{r}/modules.dep")))
            .is_some_and(|d| d.lines().any(|l| l.split(':').next().is_some_and(|p| p.ends_with("/nvpeer.ko") || p.contains("/nvpeer.ko."))));
        let fix = if installed {
            "Run `modprobe nvpeer` (and enable nvpeer.service to load it at boot)."
        } else {
            "Install nvpeer for this kernel (`dkms install nvpeer/<version>` or `make install`), then `modprobe nvpeer`."
        };
        return Check::new(ID, T, true, Status::Fail, if installed { "installed but not loaded" } else { "not installed for this kernel" })
            .fix(fix)
            .data(json!({"loaded": false, "installed": installed}));
    }
    let version = ctx.root.read_trim("/sys/module/nvpeer/version");
    let mut params = serde_json::Map::new();
    let mut source = "/sys/module/nvpeer/parameters";
    for p in ctx.root.list("/sys/module/nvpeer/parameters") {
        let v = ctx.root.read_trim(&format!("/sys/module/nvpeer/parameters/{p}")).unwrap_or_else(|| "(unreadable)".into());
        params.insert(p, json!(v));
    }
    // Rust `module!` parameters (Linux 7.2) do not appear in sysfs; nvpeer reports the values in
    // effect in debugfs `config` (`<name> <value>` lines; root only).
    let mut clients = Vec::new();
    if let Some(cfg) = ctx.root.read(DEBUGFS_CONFIG) {
        for line in cfg.lines() {
            match line.split_once(' ') {
                Some(("client", rest)) => clients.push(rest.to_string()),
                Some(("version", _)) | None => {}
                Some((k, v)) if params.is_empty() || source == DEBUGFS_CONFIG => {
                    source = DEBUGFS_CONFIG;
                    params.insert(k.to_string(), json!(v.trim()));
                }
                Some(_) => {}
            }
        }
    }
    let taint = ctx.root.read_trim("/sys/module/nvpeer/taint").unwrap_or_default();
    let details: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect();
    let v = version.clone().unwrap_or_else(|| "no version".into());
    Check::new(ID, T, true, Status::Pass, format!("loaded, {v}{}", if details.is_empty() { String::new() } else { format!(", {}", details.join(" ")) }))
        .details(details)
        .data(json!({"loaded": true, "version": version, "parameters": params, "parameters_source": if params.is_empty() { None } else { Some(source) }, "clients": clients, "taint": taint}))
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

/// `peer.clients`: `/sys/kernel/mm/memory_peers/*` — who is registered with ib_core.
pub fn peer_clients(ctx: &Ctx) -> Check {
    const ID: &str = "peer.clients";
    const T: &str = "registered peer clients";
    let names = ctx.root.list(PEERS);
    let clients: Vec<serde_json::Value> = names.iter().map(|n| client_json(ctx, n)).collect();
    let details: Vec<String> = clients
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
    let data = json!({"clients": clients, "sysfs": ctx.root.is_dir(PEERS)});
    if names.iter().any(|n| n == "nv_mem" || n == "nv_mem_nc") {
        return Check::new(ID, T, true, Status::Pass, names.join(", ")).details(details).data(data);
    }
    if ctx.module_loaded("nvpeer") && ctx.kallsyms.as_ref().is_some_and(|k| k.has(REGISTER)) {
        return Check::new(ID, T, true, Status::Fail, "nvpeer is loaded but no nv_mem client appears in sysfs")
            .details(details)
            .fix("This OFED builds peer sysfs only when the kernel exports mm_kobj (OFED ≥ 24.04): check `dmesg | grep nvpeer`; NCCL/UCX will not see GPUDirect RDMA without it.")
            .data(data);
    }
    Check::new(ID, T, true, Status::Fail, if names.is_empty() { "no peer-memory client registered".to_string() } else { format!("only {}", names.join(", ")) })
        .details(details)
        .fix("Load nvpeer (`modprobe nvpeer`): it registers the `nv_mem` client that NCCL, UCX and Open MPI look for.")
        .data(data)
}

/// Stock peer-memory modules that also claim the `nv_mem` name.
const RIVALS: [&str; 2] = ["nvidia_peermem", "nv_peer_mem"];

/// Whether an `/etc/modprobe.d` rule stops `module` from loading.
fn blocked(ctx: &Ctx, module: &str) -> bool {
    let dash = module.replace('_', "-");
    ["/etc/modprobe.d", "/usr/lib/modprobe.d", "/lib/modprobe.d", "/run/modprobe.d"].iter().any(|dir| {
        ctx.root.list(dir).iter().filter(|f| f.ends_with(".conf")).any(|f| {
            ctx.root.read(&format!("{dir}/{f}")).is_some_and(|t| {
                t.lines().any(|l| {
                    let w: Vec<&str> = l.split_whitespace().collect();
                    w.len() >= 3 && w[0] == "install" && (w[1] == module || w[1] == dash) && (w[2].ends_with("/false") || w[2] == "false")
                })
            })
        })
    })
}

/// `peer.conflicts`: nv_peer_mem / nvidia-peermem loaded (only one `nv_mem` can exist).
pub fn conflicts(ctx: &Ctx) -> Check {
    const ID: &str = "peer.conflicts";
    const T: &str = "no rival peer module";
    let loaded: Vec<&str> = RIVALS.iter().copied().filter(|m| ctx.module_loaded(m)).collect();
    let unblocked: Vec<&str> = RIVALS.iter().copied().filter(|m| !blocked(ctx, m)).collect();
    let data = json!({"loaded": loaded, "not_blocked": unblocked});
    if !loaded.is_empty() {
        return Check::new(ID, T, true, Status::Fail, format!("{} loaded: it owns the nv_mem client name", loaded.join(", ")))
            .fix(format!("Run `modprobe -r {}` and install packaging/modprobe.d/nvpeer.conf so it stays out; then `modprobe nvpeer`.", loaded[0]))
            .data(data);
    }
    if !unblocked.is_empty() {
        return Check::new(ID, T, false, Status::Warn, format!("none loaded, but nothing stops {} from loading", unblocked.join(", ")))
            .fix("Install packaging/modprobe.d/nvpeer.conf (`make install` does) so the stock module cannot take nv_mem later.")
            .data(data);
    }
    Check::new(ID, T, true, Status::Pass, "none loaded, stock modules blocked in modprobe.d").data(data)
}

/// The exact files each library tests to decide that GPUDirect RDMA (peer memory) is available.
pub const CONSUMERS: [(&str, &[&str]); 6] = [
    ("NCCL", &["/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/kernel/mm/memory_peers/nv_mem_nc/version", "/sys/module/nvidia_peermem/version"]),
    ("UCX", &["/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/module/nvidia_peermem/version", "/sys/module/nv_peer_mem/version"]),
    ("UCC", &["/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/module/nvidia_peermem/version", "/sys/module/nv_peer_mem/version"]),
    ("Open MPI (btl_openib)", &["/sys/kernel/mm/memory_peers/nv_mem/version"]),
    ("NVSHMEM", &["/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/kernel/mm/memory_peers/nvidia-peermem/version"]),
    ("NCCL ≤ 2.22.3", &["/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/kernel/mm/memory_peers/nv_mem_nc/version"]),
];

/// `peer.consumers`: what NCCL / UCX / UCC / Open MPI / NVSHMEM will conclude from those files.
pub fn consumers(ctx: &Ctx) -> Check {
    const ID: &str = "peer.consumers";
    const T: &str = "library detection";
    let mut rows = Vec::new();
    let mut details = Vec::new();
    let mut blind = Vec::new();
    for (lib, paths) in CONSUMERS {
        let hit = paths.iter().find(|p| ctx.root.exists(p));
        match hit {
            Some(p) => details.push(format!("{lib}: detects peer memory via {p}")),
            None => {
                details.push(format!("{lib}: does NOT detect peer memory (checks {})", paths.join(", ")));
                blind.push(lib);
            }
        }
        rows.push(json!({"library": lib, "detected": hit.is_some(), "via": hit, "paths": paths}));
    }
    let grep = ctx.root.read("/proc/modules").is_some_and(|m| m.contains("nvidia_peermem"));
    details.push(format!(
        "tools that grep /proc/modules for nvidia_peermem: {}",
        if grep { "detect it" } else { "do not detect it (nvpeer is named nvpeer)" }
    ));
    let data = json!({"libraries": rows, "proc_modules_nvidia_peermem": grep});
    if blind.len() == CONSUMERS.len() {
        Check::new(ID, T, false, Status::Fail, "no library will use the peer-memory path")
            .details(details)
            .fix("Load nvpeer so /sys/kernel/mm/memory_peers/nv_mem/version exists.")
            .data(data)
    } else if !blind.is_empty() {
        Check::new(ID, T, false, Status::Warn, format!("not detected by {}", blind.join(", ")))
            .details(details)
            .fix("Make the nv_mem client visible (nvpeer registers it; an OFED without peer sysfs hides it).")
            .data(data)
    } else {
        Check::new(ID, T, false, Status::Pass, "NCCL, UCX, UCC, Open MPI and NVSHMEM all detect peer memory").details(details).data(data)
    }
}

/// `rdma.dmabuf`: the dma-buf alternative (kernel import, GPU export, provider support).
pub fn dmabuf(ctx: &Ctx) -> Check {
    const ID: &str = "rdma.dmabuf";
    const T: &str = "dma-buf path";
    let kernel = ctx.kallsyms.as_ref().map(|k| k.has("ib_umem_dmabuf_get"));
    let gpu: Option<bool> = match &ctx.probes.cuda {
        CudaProbe::Ok { gpus, .. } if !gpus.is_empty() => Some(gpus.iter().all(|g| g.dmabuf_supported.unwrap_or(0) != 0)),
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
                details.push(format!("ibv_reg_dmabuf_mr(fd=-1) on {}: errno {:?} → {}", r.device, r.errno, r.verdict));
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
    if usable {
        Check::new(ID, T, false, Status::Pass, "available: NCCL and UCX will prefer it over nvpeer")
            .details(details)
            .fix("To exercise nvpeer with NCCL set NCCL_DMABUF_ENABLE=0; with perftest omit --use_cuda_dmabuf.")
            .data(data)
    } else if kernel == Some(false) || gpu == Some(false) || verbs == Some(false) {
        Check::new(ID, T, false, Status::Pass, "not available: libraries will use the peer-memory path (nvpeer)").details(details).data(data)
    } else if kernel == Some(true) && gpu == Some(true) {
        Check::new(ID, T, false, Status::Skip, "kernel and GPUs support dma-buf; no RDMA provider to probe")
            .details(details)
            .data(data)
    } else {
        Check::new(ID, T, false, Status::Skip, "not fully determined (see details)").details(details).data(data)
    }
}
