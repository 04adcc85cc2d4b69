//! Kernel build side: can this kernel build and load a Rust module, relevant config options,
//! Secure Boot and module signing.

use super::data::{ConfigData, RustData, SigningData};
use super::Ctx;
use crate::report::{Check, Status};

/// Files an out-of-tree Rust module build needs in the kernel build tree (x86_64, 7.x); the same
/// list as the build preflight (scripts/preflight.sh).
pub const RUST_ARTIFACTS: [&str; 8] = [
    "rust/libcore.rmeta",
    "rust/libkernel.rmeta",
    "rust/libbindings.rmeta",
    "rust/libpin_init.rmeta",
    "rust/libcompiler_builtins.rmeta",
    "rust/libffi.rmeta",
    "rust/libmacros.so",
    "scripts/target.json",
];

/// `kernel.rust`: CONFIG_RUST and the Rust artifacts in `/lib/modules/$(uname -r)/build`.
pub fn rust(ctx: &Ctx) -> Check {
    const ID: &str = "kernel.rust";
    const T: &str = "kernel can build Rust modules";
    let Some(rel) = ctx.release.as_deref() else {
        return Check::new(
            ID,
            T,
            false,
            Status::Unknown,
            "kernel release unknown (/proc/sys/kernel/osrelease unreadable)",
        );
    };
    let Some(cfg) = &ctx.config else {
        return Check::new(
            ID,
            T,
            false,
            Status::Unknown,
            format!("no kernel config for {rel}"),
        )
        .fix(format!(
            "Install /boot/config-{rel} (kernel headers package) or enable CONFIG_IKCONFIG_PROC."
        ));
    };
    let rustc_kernel = cfg.get("CONFIG_RUSTC_VERSION_TEXT").map(str::to_string);
    if !cfg.enabled("CONFIG_RUST") {
        return Check::new(ID, T, true, Status::Fail, format!("CONFIG_RUST is not set ({})", cfg.source))
            .fix("Boot a kernel built with CONFIG_RUST=y (e.g. Debian ≥ 6.18, Ubuntu generic, Arch); nvpeer cannot load on this one.")
            .data(RustData::Disabled {
                config_rust: false,
                config: cfg.source.clone(),
            });
    }
    let build = format!("/lib/modules/{rel}/build");
    let missing: Vec<&str> = RUST_ARTIFACTS
        .iter()
        .copied()
        .filter(|a| !ctx.root.exists(&format!("{build}/{a}")))
        .collect();
    let distro = ctx.distro.as_ref();
    let mut details = vec![format!(
        "kernel built by: {}",
        rustc_kernel
            .as_deref()
            .unwrap_or("(CONFIG_RUSTC_VERSION_TEXT missing)")
    )];
    if let Some(l) = &ctx.probes.rustc {
        details.push(format!("local toolchain: {l}"));
    }
    if let Some(d) = distro {
        details.push(format!("distribution: {}", d.pretty));
    }
    let data = RustData::Enabled {
        config_rust: true,
        config: cfg.source.clone(),
        build: build.clone(),
        missing: missing.iter().map(|a| a.to_string()).collect(),
        rustc_kernel: rustc_kernel.clone(),
        rustc_local: ctx.probes.rustc.clone(),
    };
    if !ctx.root.exists(&build) {
        return Check::new(ID, T, false, Status::Warn, format!("CONFIG_RUST=y but {build} is missing"))
            .details(details)
            .fix(match crate::distro::family(distro) {
                crate::distro::Family::Ubuntu => format!("Install this kernel's headers and Rust artifacts so DKMS can rebuild nvpeer: `apt install linux-headers-{rel} linux-lib-rust-{rel}`."),
                _ => "Install this kernel's headers package (and its Rust artifacts) so DKMS can rebuild nvpeer.".to_string(),
            })
            .data(data);
    }
    if !missing.is_empty() {
        return Check::new(
            ID,
            T,
            false,
            Status::Warn,
            format!(
                "CONFIG_RUST=y but the build tree lacks {}",
                missing.join(", ")
            ),
        )
        .details(details)
        .fix(format!(
            "Install the Rust artifacts for this kernel: {}; see docs/compatibility.md.",
            crate::distro::rust_artifacts_install(distro, rel)
        ))
        .data(data);
    }
    if let (Some(k), Some(l)) = (&rustc_kernel, &ctx.probes.rustc) {
        let kv = k.split_whitespace().nth(1);
        let lv = l.split_whitespace().nth(1);
        if kv != lv {
            return Check::new(
                ID,
                T,
                false,
                Status::Warn,
                "the local rustc differs from the one that built the kernel",
            )
            .details(details)
            .fix(match kv {
                Some(v) => format!(
                    "Install the kernel's exact rustc {v} ({}); a different rustc fails with E0514.",
                    crate::distro::rustc_install(distro, v)
                ),
                None => "Put the kernel's exact rustc first in PATH (a different rustc fails with E0514).".to_string(),
            })
            .data(data);
        }
    }
    Check::new(
        ID,
        T,
        false,
        Status::Pass,
        "CONFIG_RUST=y and the Rust artifacts are present",
    )
    .details(details)
    .data(data)
}

/// `kernel.config`: options that the peer-memory path needs or that change behaviour.
pub fn kernel_config(ctx: &Ctx) -> Check {
    const ID: &str = "kernel.config";
    const T: &str = "kernel options";
    let Some(cfg) = &ctx.config else {
        return Check::new(ID, T, false, Status::Unknown, "kernel config not found")
            .fix("Install /boot/config-$(uname -r) or enable CONFIG_IKCONFIG_PROC.");
    };
    let opts = [
        "CONFIG_INFINIBAND",
        "CONFIG_INFINIBAND_USER_MEM",
        "CONFIG_MODVERSIONS",
        "CONFIG_MODULE_SIG_FORCE",
        "CONFIG_DMABUF_MOVE_NOTIFY",
        "CONFIG_PCI_P2PDMA",
    ];
    let mut options = std::collections::BTreeMap::new();
    let mut details = Vec::new();
    for o in opts {
        let v = cfg.get(o).unwrap_or("n");
        options.insert(o.to_string(), v.to_string());
        details.push(format!("{o}={v}"));
    }
    let data = ConfigData {
        source: cfg.source.clone(),
        options,
    };
    if !cfg.enabled("CONFIG_INFINIBAND") || !cfg.enabled("CONFIG_INFINIBAND_USER_MEM") {
        // OFED replaces the in-tree RDMA core; a kernel config without INFINIBAND still works with it.
        let ofed = ctx.root.exists("/sys/module/mlx_compat");
        if !ofed {
            return Check::new(ID, T, true, Status::Fail, "CONFIG_INFINIBAND / CONFIG_INFINIBAND_USER_MEM not enabled")
                .details(details)
                .fix("Use a kernel with InfiniBand user-memory support, or install MLNX_OFED/DOCA-OFED which brings its own RDMA core.")
                .data(data);
        }
    }
    Check::new(
        ID,
        T,
        false,
        Status::Pass,
        format!("RDMA user memory enabled ({})", cfg.source),
    )
    .details(details)
    .data(data)
}

/// EFI variable holding the Secure Boot state (4 attribute bytes, then the value).
const SECURE_BOOT_VAR: &str =
    "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c";

/// `kernel.signing`: Secure Boot, lockdown, signature enforcement, module loading disabled.
pub fn signing(ctx: &Ctx) -> Check {
    const ID: &str = "kernel.signing";
    const T: &str = "Secure Boot / module signing";
    let efi = ctx.root.is_dir("/sys/firmware/efi");
    let sb = ctx
        .root
        .read_bytes(SECURE_BOOT_VAR, 64)
        .and_then(|b| b.last().copied())
        .map(|v| v == 1);
    let lockdown = ctx
        .root
        .read_trim("/sys/kernel/security/lockdown")
        .and_then(|l| {
            l.split_whitespace()
                .find(|w| w.starts_with('['))
                .map(|w| w.trim_matches(|c| c == '[' || c == ']').to_string())
        });
    let enforce = ctx
        .root
        .read_trim("/sys/module/module/parameters/sig_enforce")
        .map(|v| v == "Y" || v == "1");
    let disabled = ctx
        .root
        .read_trim("/proc/sys/kernel/modules_disabled")
        .map(|v| v == "1");
    // nvpeer under either module name (its drop-in `nvidia_peermem`, or `nvpeer`).
    let name = super::rdma::nvpeer_name(ctx);
    let nvpeer = name.is_some();
    let taint = name
        .and_then(|n| ctx.root.read_trim(&format!("/sys/module/{n}/taint")))
        .unwrap_or_default();
    let details = vec![
        format!(
            "firmware: {}",
            if efi {
                "UEFI"
            } else {
                "legacy BIOS (or no efivars)"
            }
        ),
        format!(
            "Secure Boot: {}",
            match sb {
                Some(true) => "enabled",
                Some(false) => "disabled",
                None => "unknown",
            }
        ),
        format!("lockdown: {}", lockdown.as_deref().unwrap_or("unknown")),
        format!(
            "module.sig_enforce: {}",
            match enforce {
                Some(true) => "Y",
                Some(false) => "N",
                None => "unknown",
            }
        ),
        format!(
            "modules_disabled: {}",
            match disabled {
                Some(true) => "1",
                Some(false) => "0",
                None => "unknown",
            }
        ),
    ];
    let data = SigningData {
        efi,
        secure_boot: sb,
        lockdown: lockdown.clone(),
        sig_enforce: enforce,
        modules_disabled: disabled,
        nvpeer_taint: taint.clone(),
    };
    if disabled == Some(true) && !nvpeer {
        return Check::new(ID, T, true, Status::Fail, "module loading is disabled (kernel.modules_disabled=1)")
            .details(details)
            .fix("Load nvpeer before modules_disabled is set (early in boot), or reboot without setting it.")
            .data(data);
    }
    let must_sign = sb == Some(true)
        || enforce == Some(true)
        || lockdown.as_deref().is_some_and(|l| l != "none");
    if must_sign && !nvpeer {
        return Check::new(ID, T, false, Status::Warn, "signed modules required: nvpeer must be signed with an enrolled key")
            .details(details)
            .fix(format!(
                "Let DKMS sign nvpeer: {} (or sign by hand: `make sign KEY=<key> CERT=<cert.der>` with an enrolled certificate). An unsigned or foreign-key module is refused with `Key was rejected by service`.",
                crate::distro::mok_enroll(ctx.distro.as_ref())
            ))
            .data(data);
    }
    if nvpeer && taint.contains('E') {
        return Check::new(
            ID,
            T,
            false,
            Status::Warn,
            "nvpeer is loaded unsigned (taint E)",
        )
        .details(details)
        .fix("Sign the module (`make sign`) before enabling Secure Boot.")
        .data(data);
    }
    Check::new(
        ID,
        T,
        false,
        Status::Pass,
        if must_sign {
            "signing enforced and nvpeer loaded"
        } else {
            "module signature not enforced"
        },
    )
    .details(details)
    .data(data)
}
