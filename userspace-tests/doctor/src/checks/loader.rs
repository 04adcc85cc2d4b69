//! Why a peer-memory module does not load: symbol-version errors in the kernel log, and DKMS's
//! state for the running kernel.

use super::data::{DkmsBuild, DkmsData, LogData};
use super::Ctx;
use crate::kmsg::SymbolErrorKind;
use crate::report::{Check, Status};

/// Modules whose loader errors block a peer-memory path.
const PEER_MODULES: [&str; 3] = ["nvidia_peermem", "nvpeer", "nv_peer_mem"];

/// `kernel.log`: "disagrees about version of symbol" and "Unknown symbol" lines.
pub fn log(ctx: &Ctx) -> Check {
    const ID: &str = "kernel.log";
    const T: &str = "module symbol errors";
    let text = match crate::kmsg::read(ctx.root) {
        Ok(t) => t,
        Err(e) => {
            // Not gating: non-root users cannot read the log where dmesg_restrict is set.
            return Check::new(ID, T, false, Status::Unknown, format!("kernel log not readable ({e})"))
                .fix("Run as root (kernel.dmesg_restrict hides the log from other users), or look at `dmesg | grep -e 'disagrees about' -e 'Unknown symbol'`.");
        }
    };
    let errors = crate::kmsg::symbol_errors(&text);
    let details: Vec<String> = errors
        .iter()
        .map(|e| match e.kind {
            SymbolErrorKind::VersionMismatch => format!(
                "{}: disagrees about version of symbol {}",
                e.module, e.symbol
            ),
            SymbolErrorKind::Unknown => format!("{}: Unknown symbol {}", e.module, e.symbol),
        })
        .collect();
    let data = LogData {
        errors: errors.clone(),
    };
    if errors.is_empty() {
        return Check::new(ID, T, true, Status::Pass, "none in the kernel log").data(data);
    }
    // Once a peer-memory module is loaded, earlier failures of this boot are history.
    let serving = PEER_MODULES.iter().any(|m| ctx.module_loaded(m));
    let peer: Vec<&crate::kmsg::SymbolError> = errors
        .iter()
        .filter(|e| !serving && PEER_MODULES.contains(&e.module.as_str()))
        .collect();
    if peer.is_empty() {
        let mods: Vec<&str> = errors.iter().map(|e| e.module.as_str()).collect();
        return Check::new(ID, T, false, Status::Warn, format!("loader errors for {}", dedup(mods).join(", ")))
            .details(details)
            .fix("Those modules were built against other kernel or OFED symbols: rebuild them for the running kernel (DKMS: `dkms autoinstall`).")
            .data(data);
    }
    let mismatch = peer
        .iter()
        .any(|e| e.kind == SymbolErrorKind::VersionMismatch);
    let mods = dedup(peer.iter().map(|e| e.module.as_str()).collect());
    let summary = format!(
        "{} failed to load: {}",
        mods.join(", "),
        if mismatch {
            "built against another OFED core (ib_uverbs/ib_core) or nvidia.ko (symbol CRC mismatch)"
        } else {
            "symbols the running kernel does not export"
        }
    );
    Check::new(ID, T, true, Status::Fail, summary)
        .details(details)
        .fix("Rebuild the module against the running OFED and NVIDIA driver: DKMS does (`dkms autoinstall`; after an OFED upgrade that changed the CRCs, `dkms remove nvpeer/<ver> --all` first so it rebuilds; the CRCs come from OFED's Module.symvers, or from the installed ib_uverbs.ko/ib_core.ko that exports the API, docs/install.md); `Unknown symbol ib_register_peer_memory_client` means an inbox RDMA core without the peer-memory API.")
        .data(data)
}

fn dedup(mut v: Vec<&str>) -> Vec<&str> {
    let mut seen = Vec::new();
    v.retain(|m| {
        let new = !seen.contains(m);
        seen.push(*m);
        new
    });
    v
}

/// DKMS's tree for nvpeer.
const DKMS_TREE: &str = "/var/lib/dkms/nvpeer";

/// `kernel.dkms`: nvpeer's DKMS build for the running kernel.
pub fn dkms(ctx: &Ctx) -> Check {
    const ID: &str = "kernel.dkms";
    const T: &str = "DKMS build for this kernel";
    let versions: Vec<String> = ctx
        .root
        .list(DKMS_TREE)
        .into_iter()
        .filter(|v| {
            ctx.root.is_dir(&format!("{DKMS_TREE}/{v}/source"))
                || ctx.root.exists(&format!("{DKMS_TREE}/{v}/source"))
        })
        .collect();
    let Some(rel) = ctx.release.as_deref() else {
        return Check::new(ID, T, false, Status::Unknown, "kernel release unknown");
    };
    if versions.is_empty() {
        return Check::new(
            ID,
            T,
            false,
            Status::Skip,
            "nvpeer is not registered with DKMS",
        )
        .data(DkmsData::Unregistered {
            versions: Vec::new(),
        });
    }
    let mut rows = Vec::new();
    let mut details = Vec::new();
    let mut built_here = false;
    let mut other_kernels: Vec<String> = Vec::new();
    let mut failed_log = None;
    for v in &versions {
        for k in ctx.root.list(&format!("{DKMS_TREE}/{v}")) {
            if k == "source" || k == "build" {
                continue;
            }
            let kos: Vec<String> = ctx
                .root
                .list(&format!("{DKMS_TREE}/{v}/{k}"))
                .into_iter()
                .flat_map(|arch| {
                    ctx.root
                        .list(&format!("{DKMS_TREE}/{v}/{k}/{arch}/module"))
                        .into_iter()
                        .filter(|f| f.contains(".ko"))
                        .map(move |f| format!("{arch}/module/{f}"))
                })
                .collect();
            details.push(format!(
                "nvpeer/{v} for {k}: {}",
                if kos.is_empty() {
                    "no module built".to_string()
                } else {
                    kos.join(", ")
                }
            ));
            if k == rel && !kos.is_empty() {
                built_here = true;
            } else if k != rel {
                other_kernels.push(k.clone());
            }
            rows.push(DkmsBuild {
                version: v.clone(),
                kernel: k,
                modules: kos,
            });
        }
        let log = format!("{DKMS_TREE}/{v}/build/make.log");
        if ctx.root.exists(&log) {
            failed_log = Some(log);
        }
    }
    let data = DkmsData::Registered {
        versions: versions.clone(),
        builds: rows,
        running: rel.to_string(),
        make_log: failed_log.clone(),
    };
    let loaded = super::rdma::nvpeer_name(ctx).is_some();
    if built_here || loaded {
        let s = if built_here {
            format!("built for {rel}")
        } else {
            format!("nvpeer loaded (no DKMS build recorded for {rel})")
        };
        return Check::new(ID, T, true, Status::Pass, s)
            .details(details)
            .data(data);
    }
    let summary = match (&failed_log, other_kernels.is_empty()) {
        (Some(l), _) => format!("no build for {rel}; the last build failed (see {l})"),
        (None, false) => format!(
            "built for {} but not for the running {rel}",
            other_kernels.join(", ")
        ),
        (None, true) => format!(
            "registered ({}) but not built for {rel}",
            versions.join(", ")
        ),
    };
    Check::new(ID, T, true, Status::Fail, summary)
        .details(details)
        .fix(format!("Install this kernel's headers and Rust artifacts (kernel.rust), then `dkms autoinstall -k {rel}`; its make.log says why a build failed."))
        .data(data)
}
