//! NCCL and UCX settings that switch GPUDirect RDMA off: from the environment the doctor runs in
//! and from NCCL's configuration files, with NCCL's precedence (NVIDIA/nccl src/misc/param.cc
//! initEnv: the environment wins, then `$NCCL_CONF_FILE` or else `~/.nccl.conf`, then
//! `/etc/nccl.conf`; a file never overrides a variable already set).

use crate::root::SysRoot;
use serde::Serialize;
use std::collections::BTreeMap;

/// One effective setting and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Setting {
    /// Its value as the library reads it.
    pub value: String,
    /// `environment` or the file it came from.
    pub source: String,
}

/// The effective NCCL_* and UCX_* settings.
pub type Settings = BTreeMap<String, Setting>;

/// Parses an `nccl.conf` the way NCCL does: lines starting with `#` are skipped, the key is what
/// precedes the first `=`, the value everything after it (nothing is trimmed); lines without `=`
/// are ignored.
pub fn parse_conf(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Keys the doctor looks at.
fn relevant(key: &str) -> bool {
    key.starts_with("NCCL_") || key.starts_with("UCX_")
}

/// The settings in effect for a process started from `env`, whose home directory is `home`.
pub fn effective(root: &SysRoot, env: &[(String, String)], home: Option<&str>) -> Settings {
    let mut out = Settings::new();
    for (k, v) in env.iter().filter(|(k, _)| relevant(k)) {
        out.insert(
            k.clone(),
            Setting {
                value: v.clone(),
                source: "environment".into(),
            },
        );
    }
    let user_file = match env
        .iter()
        .find(|(k, _)| k == "NCCL_CONF_FILE")
        .map(|(_, v)| v.as_str())
    {
        Some(f) if !f.is_empty() => Some(f.to_string()),
        _ => home.map(|h| format!("{}/.nccl.conf", h.trim_end_matches('/'))),
    };
    for file in user_file
        .into_iter()
        .chain(std::iter::once("/etc/nccl.conf".to_string()))
    {
        let Some(text) = root.read(&file) else {
            continue;
        };
        for (k, v) in parse_conf(&text)
            .into_iter()
            .filter(|(k, _)| k.starts_with("NCCL_"))
        {
            out.entry(k).or_insert(Setting {
                value: v,
                source: file.clone(),
            });
        }
    }
    out
}

/// What a setting does to GPUDirect RDMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// The library's network transport over RDMA is off altogether.
    RdmaOff,
    /// GPUDirect RDMA is off (peer memory and dma-buf): GPU data is staged through host memory.
    GdrOff,
    /// The library does not register GPU memory through dma-buf (peer memory only).
    DmabufOff,
    /// GPUDirect RDMA reads are off (the send side stages through host memory).
    ReadOff,
    /// GPUDirect RDMA only for NICs closer than the default cutoff.
    Narrowed,
    /// The library fails instead of falling back when GPUDirect RDMA is unavailable.
    Required,
}

/// One setting that changes what the library does with GPU memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// `NCCL` or `UCX`.
    pub library: &'static str,
    /// The variable.
    pub key: String,
    /// Its value.
    pub value: String,
    /// Where it was set.
    pub source: String,
    /// What it does.
    pub effect: Effect,
    /// One sentence for the report.
    pub why: String,
}

fn is_off(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "0" | "n" | "no" | "off" | "false"
    )
}

/// NCCL_IB_HCA's device list (`[^][=]dev[:port],...`): which of `devices` NCCL would use. Without
/// `=` a name matches every device it is a prefix of; `^` excludes the listed ones instead.
pub fn ib_hca_selects<'a>(spec: &str, devices: &'a [String]) -> Vec<&'a String> {
    let mut s = spec.trim();
    let exclude = s.starts_with('^');
    s = s.trim_start_matches('^');
    let exact = s.starts_with('=');
    s = s.trim_start_matches('=');
    let names: Vec<&str> = s
        .split(',')
        .map(|e| e.split(':').next().unwrap_or("").trim())
        .filter(|n| !n.is_empty())
        .collect();
    let listed = |d: &str| {
        names
            .iter()
            .any(|n| if exact { d == *n } else { d.starts_with(n) })
    };
    devices.iter().filter(|d| listed(d) != exclude).collect()
}

/// Every setting in `s` that turns GPUDirect RDMA (or the RDMA transport it rides on) off or
/// narrows it, for a node with these RDMA devices.
pub fn findings(s: &Settings, rdma_devices: &[String]) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut add = |library: &'static str, key: &str, effect: Effect, why: String| {
        if let Some(set) = s.get(key) {
            out.push(Finding {
                library,
                key: key.into(),
                value: set.value.clone(),
                source: set.source.clone(),
                effect,
                why,
            });
        }
    };
    let get = |k: &str| s.get(k).map(|x| x.value.trim().to_string());
    if get("NCCL_IB_DISABLE").is_some_and(|v| v != "0" && !v.is_empty()) {
        add(
            "NCCL",
            "NCCL_IB_DISABLE",
            Effect::RdmaOff,
            "NCCL does not use InfiniBand/RoCE at all".into(),
        );
    }
    if let Some(net) = get("NCCL_NET").filter(|v| !v.is_empty() && !v.eq_ignore_ascii_case("IB")) {
        add(
            "NCCL",
            "NCCL_NET",
            Effect::RdmaOff,
            format!("NCCL uses the `{net}` network, not its IB transport"),
        );
    }
    if let Some(spec) = get("NCCL_IB_HCA").filter(|v| !v.is_empty()) {
        if !rdma_devices.is_empty() && ib_hca_selects(&spec, rdma_devices).is_empty() {
            add(
                "NCCL",
                "NCCL_IB_HCA",
                Effect::RdmaOff,
                format!(
                    "selects none of this node's RDMA devices ({})",
                    rdma_devices.join(", ")
                ),
            );
        }
    }
    for key in ["NCCL_NET_GDR_LEVEL", "NCCL_IB_GDR_LEVEL"] {
        if let Some(v) = get(key) {
            match v.to_ascii_uppercase().as_str() {
                "LOC" | "0" => add(
                    "NCCL",
                    key,
                    Effect::GdrOff,
                    "GPUDirect RDMA is never used (LOC)".into(),
                ),
                "PIX" | "1" => add(
                    "NCCL",
                    key,
                    Effect::Narrowed,
                    "GPUDirect RDMA only for a NIC under the GPU's own PCIe switch".into(),
                ),
                _ => {}
            }
            break;
        }
    }
    if get("NCCL_NET_GDR_READ").is_some_and(|v| v == "0") {
        add(
            "NCCL",
            "NCCL_NET_GDR_READ",
            Effect::ReadOff,
            "sends read GPU memory through host staging buffers".into(),
        );
    }
    if get("NCCL_DMABUF_ENABLE").is_some_and(|v| v == "0") {
        add(
            "NCCL",
            "NCCL_DMABUF_ENABLE",
            Effect::DmabufOff,
            "NCCL registers GPU memory through peer memory only, never dma-buf".into(),
        );
    }
    if get("UCX_CUDA_COPY_DMABUF").is_some_and(|v| is_off(&v)) {
        add(
            "UCX",
            "UCX_CUDA_COPY_DMABUF",
            Effect::DmabufOff,
            "UCX registers GPU memory through peer memory only, never dma-buf".into(),
        );
    }
    match get("UCX_IB_GPU_DIRECT_RDMA") {
        Some(v) if is_off(&v) => add(
            "UCX",
            "UCX_IB_GPU_DIRECT_RDMA",
            Effect::GdrOff,
            "UCX's IB transports do not register GPU memory".into(),
        ),
        Some(v)
            if matches!(
                v.to_ascii_lowercase().as_str(),
                "y" | "yes" | "1" | "on" | "true"
            ) =>
        {
            add(
                "UCX",
                "UCX_IB_GPU_DIRECT_RDMA",
                Effect::Required,
                "UCX fails to open the IB transport when no GPUDirect path exists".into(),
            )
        }
        _ => {}
    }
    out
}
