//! NVML (nvml-wrapper, dlopened `libnvidia-ml.so.1`): BAR1 used/free and MIG mode per GPU, the
//! figures `nvidia-smi -q` shows. Missing library or symbols are findings, never a crash.

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use serde::Serialize;

/// BAR1 as NVML accounts it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Bar1 {
    /// Total BAR1 aperture, bytes.
    pub total: u64,
    /// Mapped now (CUDA mappings, peer-memory pins, ...), bytes.
    pub used: u64,
    /// Free, bytes.
    pub free: u64,
}

/// MIG mode: current and the one after the next GPU reset.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Mig {
    /// MIG enabled now.
    pub current: bool,
    /// MIG enabled after the next reset.
    pub pending: bool,
}

/// One GPU as NVML sees it.
#[derive(Debug, Clone, Serialize)]
pub struct NvmlGpu {
    /// NVML index.
    pub index: u32,
    /// Lower-case `DDDD:BB:DD.F`.
    pub bdf: String,
    /// Marketing name.
    pub name: String,
    /// BAR1 figures, or why they are missing.
    pub bar1: Result<Bar1, String>,
    /// MIG mode; `Err("not supported")` on GPUs without MIG.
    pub mig: Result<Mig, String>,
}

/// Result of the NVML probe.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum NvmlProbe {
    /// Not run (fixture root, or `--no-probes`).
    NotRun,
    /// `libnvidia-ml.so.1` could not be loaded.
    LibraryMissing,
    /// `nvmlInit` or enumeration failed.
    Failed {
        /// What failed.
        error: String,
    },
    /// Probed.
    Ok {
        /// `nvmlSystemGetDriverVersion`.
        driver: Option<String>,
        /// One entry per GPU.
        gpus: Vec<NvmlGpu>,
    },
}

impl NvmlProbe {
    /// The GPU with this BDF, when NVML was probed.
    pub fn gpu(&self, bdf: &str) -> Option<&NvmlGpu> {
        match self {
            NvmlProbe::Ok { gpus, .. } => gpus.iter().find(|g| g.bdf == bdf),
            _ => None,
        }
    }
}

fn why(e: NvmlError) -> String {
    match e {
        NvmlError::NotSupported => "not supported".into(),
        NvmlError::FailedToLoadSymbol(s) => format!("libnvidia-ml lacks a symbol: {s}"),
        e => e.to_string(),
    }
}

/// Queries every GPU.
pub fn probe() -> NvmlProbe {
    let nvml = match Nvml::init() {
        Ok(n) => n,
        Err(NvmlError::LibloadingError(_)) => return NvmlProbe::LibraryMissing,
        Err(e) => {
            return NvmlProbe::Failed {
                error: format!("nvmlInit: {}", why(e)),
            }
        }
    };
    let count = match nvml.device_count() {
        Ok(c) => c,
        Err(e) => {
            return NvmlProbe::Failed {
                error: format!("nvmlDeviceGetCount: {}", why(e)),
            }
        }
    };
    let mut gpus = Vec::new();
    for index in 0..count {
        let Ok(dev) = nvml.device_by_index(index) else {
            continue;
        };
        let bdf = dev
            .pci_info()
            .map(|p| crate::probes::normalise_bdf(&p.bus_id.to_lowercase()))
            .unwrap_or_default();
        gpus.push(NvmlGpu {
            index,
            bdf,
            name: dev.name().unwrap_or_default(),
            bar1: dev
                .bar1_memory_info()
                .map(|b| Bar1 {
                    total: b.total,
                    used: b.used,
                    free: b.free,
                })
                .map_err(why),
            mig: dev
                .mig_mode()
                .map(|m| Mig {
                    current: m.current != 0,
                    pending: m.pending != 0,
                })
                .map_err(why),
        });
    }
    NvmlProbe::Ok {
        driver: nvml.sys_driver_version().ok(),
        gpus,
    }
}
