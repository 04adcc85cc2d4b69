//! Which module serves `nv_mem` (nvpeer under its drop-in name or its own, NVIDIA's
//! `nvidia_peermem`, Mellanox's `nv_peer_mem`) and how nvpeer is installed for the running kernel:
//! what several checks ask.

use crate::checks::data::{DropinData, ServedBy};
use crate::checks::Ctx;
use nvpeer_uapi::{debugfs, module};

/// The module name nvpeer is installed and loaded under by default (DKMS, `make install`):
/// NVIDIA's name, which NCCL, UCX and NVSHMEM probe in `/sys/module` (file `nvidia-peermem.ko`).
pub const DROPIN: &str = "nvidia_peermem";
/// nvpeer's own module name, kept for side-by-side tests.
pub const OWN_NAME: &str = "nvpeer";
/// Mellanox's classic peer-memory module; it registers an `nv_mem` client too.
pub(super) const NV_PEER_MEM: &str = "nv_peer_mem";
/// nvpeer's debugfs directory, created under either module name (uapi/debugfs.md).
const DEBUGFS_DIR: &str = nvpeer_uapi::debugfs::DIR;
/// The command that loads nvpeer under the name the libraries probe.
pub(super) const LOAD_DROPIN: &str = "modprobe nvidia-peermem";
/// The fix whenever nvpeer is loaded, or only installed, under its own name.
pub(super) const INSTALL_DROPIN: &str =
    "install nvpeer as nvidia-peermem (DKMS does: docs/install.md)";

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
    /// What the report says of it.
    pub(super) fn data(&self) -> DropinData {
        DropinData {
            owner: self.owner.as_str().to_string(),
            version: self.version.clone(),
            why: self.why.clone(),
        }
    }
}

/// Whose `nvidia_peermem` is loaded, if one is. nvpeer's creates debugfs `nvpeer/` (evidence only
/// while no module named `nvpeer` is loaded, which would create it too) and reports nvpeer's own
/// version; NVIDIA's reports the driver's version, the string in `/sys/module/nvidia/version`.
pub fn dropin(ctx: &Ctx) -> Option<Dropin> {
    if !ctx.module_loaded(DROPIN) {
        return None;
    }
    let version = module::version(ctx.root.base(), DROPIN);
    let driver = module::version(ctx.root.base(), "nvidia");
    let (owner, why) = if !ctx.module_loaded(OWN_NAME) && debugfs::present(ctx.root.base()) {
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
pub(super) fn serving(ctx: &Ctx) -> Vec<(&'static str, &'static str, String)> {
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

/// A loaded module that registers an `nv_mem` peer-memory client (what `peer.clients` reports as
/// `served_by`), with its version: for the metrics and labels that say who serves `nv_mem`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvMemProvider {
    /// The module's name in `/sys/module` (`nvidia_peermem`, `nvpeer`, `nv_peer_mem`).
    pub module: &'static str,
    /// Whose it is: `nvpeer`, `nvidia`, `mellanox` or `unknown` (`served_by[].owner` in the JSON).
    pub owner: &'static str,
    /// `/sys/module/<module>/version`, when the module has one.
    pub version: Option<String>,
}

/// Every loaded module that serves `nv_mem`, in the order `peer.clients` lists them.
pub fn nv_mem_providers(ctx: &Ctx) -> Vec<NvMemProvider> {
    serving(ctx)
        .into_iter()
        .map(|(module, owner, _)| NvMemProvider {
            module,
            owner,
            version: module::version(ctx.root.base(), module),
        })
        .collect()
}

/// [`serving`]'s modules as the report lists them (`served_by`).
pub(super) fn served_by(s: &[(&str, &str, String)]) -> Vec<ServedBy> {
    s.iter()
        .map(|(m, o, _)| ServedBy {
            module: m.to_string(),
            owner: o.to_string(),
        })
        .collect()
}

/// How nvpeer is installed for the running kernel.
pub(super) struct Installed {
    /// `nvidia-peermem.ko` as modules.dep lists it (nvpeer's or NVIDIA's: the file alone does not say).
    pub(super) dropin: Option<String>,
    /// `nvpeer.ko` (the side-by-side name).
    pub(super) own: Option<String>,
    /// DKMS built nvpeer for this kernel (`/var/lib/dkms/nvpeer/<version>/<kernel>`).
    pub(super) dkms: bool,
}

pub(super) fn installed(ctx: &Ctx) -> Installed {
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
