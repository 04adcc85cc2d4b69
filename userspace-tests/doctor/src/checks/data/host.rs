//! Data of the host checks: `kernel.log`, `kernel.dkms`, `platform.memlock`, `rdma.uverbs`,
//! `libs.settings`.

use crate::kmsg::SymbolError;
use crate::limits::Limit;
use crate::settings::{Finding, Settings};
use serde::Serialize;

/// `kernel.log`: module symbol errors in the kernel log.
#[derive(Debug, Clone, Serialize)]
pub struct LogData {
    /// Every "disagrees about version of symbol" and "Unknown symbol" line, in log order.
    pub errors: Vec<SymbolError>,
}

/// `kernel.dkms`: what DKMS built of nvpeer.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum DkmsData {
    /// DKMS has builds (or a failed build) of nvpeer.
    Registered {
        /// The nvpeer versions registered with DKMS.
        versions: Vec<String>,
        /// One row per version and kernel built for.
        builds: Vec<DkmsBuild>,
        /// The running kernel's release.
        running: String,
        /// A build's `make.log` (left when a build failed), else null.
        make_log: Option<String>,
    },
    /// nvpeer is not registered with DKMS.
    Unregistered {
        /// Always empty here.
        versions: Vec<String>,
    },
}

/// One DKMS build of nvpeer.
#[derive(Debug, Clone, Serialize)]
pub struct DkmsBuild {
    /// nvpeer's version.
    pub version: String,
    /// The kernel release it was built for.
    pub kernel: String,
    /// The modules built (`<arch>/module/<file>.ko*`); empty when none.
    pub modules: Vec<String>,
}

/// `platform.memlock`: this process's locked-memory limit.
#[derive(Debug, Clone, Serialize)]
pub struct MemlockData {
    /// The soft limit (what applies).
    pub soft: Limit,
    /// The hard limit (what the soft one could be raised to).
    pub hard: Limit,
    /// The smallest soft limit the doctor accepts, in bytes.
    pub minimum: u64,
}

/// `rdma.uverbs`: the verbs device files and which this user cannot open.
#[derive(Debug, Clone, Serialize)]
pub struct UverbsData {
    /// `/dev/infiniband/uverbs*` names.
    pub files: Vec<String>,
    /// Those that cannot be opened read/write.
    pub denied: Vec<String>,
}

/// `libs.settings`: NCCL/UCX settings in effect and those that switch GPUDirect RDMA off.
#[derive(Debug, Clone, Serialize)]
pub struct SettingsData {
    /// The settings that change what a library does with GPU memory.
    pub findings: Vec<Finding>,
    /// Every NCCL/UCX setting in effect, by name, with where it was set.
    pub settings: Settings,
}
