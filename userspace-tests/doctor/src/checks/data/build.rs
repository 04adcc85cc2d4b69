//! Data of the kernel build checks and the GPU Operator's: `kernel.rust`, `kernel.config`,
//! `kernel.signing`, `gpu_operator.driver`.

use serde::Serialize;
use std::collections::BTreeMap;

/// `kernel.rust`: can this kernel build and load a Rust module.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum RustData {
    /// CONFIG_RUST is set.
    Enabled {
        /// Always true here.
        config_rust: bool,
        /// Where the kernel config was read.
        config: String,
        /// The kernel's build tree (`/lib/modules/<release>/build`).
        build: String,
        /// Rust build artifacts missing from it.
        missing: Vec<String>,
        /// The rustc the kernel was built with (CONFIG_RUSTC_VERSION_TEXT), when set.
        rustc_kernel: Option<String>,
        /// `rustc --version` of the local toolchain, when one is on PATH.
        rustc_local: Option<String>,
    },
    /// CONFIG_RUST is not set.
    Disabled {
        /// Always false here.
        config_rust: bool,
        /// Where the kernel config was read.
        config: String,
    },
}

/// `kernel.config`: the kernel options GPUDirect RDMA depends on.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigData {
    /// Where the kernel config was read.
    pub source: String,
    /// Each option's value (`y`, `m`, or `n` when unset).
    pub options: BTreeMap<String, String>,
}

/// `kernel.signing`: Secure Boot, lockdown, signature enforcement; null where unknown.
#[derive(Debug, Clone, Serialize)]
pub struct SigningData {
    /// Whether the node booted through UEFI.
    pub efi: bool,
    /// Whether Secure Boot is on.
    pub secure_boot: Option<bool>,
    /// The lockdown mode (`none`, `integrity`, `confidentiality`).
    pub lockdown: Option<String>,
    /// Whether the kernel only loads signed modules (`module.sig_enforce`).
    pub sig_enforce: Option<bool>,
    /// Whether module loading is disabled (`kernel.modules_disabled`).
    pub modules_disabled: Option<bool>,
    /// nvpeer's taint flags when loaded (`OE`, ...), else empty.
    pub nvpeer_taint: String,
}

/// `gpu_operator.driver`: the GPU Operator's driver container and the peer module it loads.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum OperatorData {
    /// A GPU Operator node.
    Container {
        /// Always true here.
        driver_container: bool,
        /// Whether nvpeer's driver-container hook is in the image.
        nvpeer_hook: bool,
        /// The container's `nvidia-peermem.ko` files and whose each is.
        peermem_kos: Vec<PeermemKo>,
        /// Whether the Network Operator's DOCA driver is ready; null without its container.
        doca_container_ready: Option<bool>,
    },
    /// Not a GPU Operator node.
    None {
        /// Always false here.
        driver_container: bool,
    },
}

/// One `nvidia-peermem.ko` of the driver container's module tree.
#[derive(Debug, Clone, Serialize)]
pub struct PeermemKo {
    /// Its path inside the container's tree.
    pub path: String,
    /// Whether it is nvpeer's build (else NVIDIA's).
    pub nvpeer: bool,
}
