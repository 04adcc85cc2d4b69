//! NVML (nvml-wrapper, dlopened `libnvidia-ml.so.1`): BAR1 used/free and MIG mode per GPU, the
//! figures `nvidia-smi -q` shows, and the GPU's C2C links (crate::c2c). Missing library or symbols
//! are findings, never a crash.

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

/// `NVML_FI_DEV_C2C_LINK_COUNT`: C2C links present on the device (nvml.h, driver ≥ 525).
pub const FI_C2C_LINK_COUNT: u32 = 170;
/// `NVML_FI_DEV_C2C_LINK_GET_STATUS`: 1 = active, for the link named by the sample's scope.
pub const FI_C2C_LINK_GET_STATUS: u32 = 171;

/// What NVML says about one GPU's NVLink-C2C links to its CPU: the two fields NCCL
/// (`src/graph/xml.cc`, the `<c2c>` node) and UCX (`uct_cuda_base_has_c2c`) read to decide that a
/// GPU is coherently attached.
#[derive(Debug, Clone, Serialize)]
pub struct NvmlC2c {
    /// Lower-case `DDDD:BB:DD.F`.
    pub bdf: String,
    /// `NVML_FI_DEV_C2C_LINK_COUNT`, or why NVML did not answer (`not supported` before driver 525
    /// and on boards without C2C, depending on the driver).
    pub links: Result<u32, String>,
    /// `NVML_FI_DEV_C2C_LINK_GET_STATUS` of link 0 (nvml-wrapper passes scope 0 only; NCCL asks
    /// every link); `None` when there are no links or NVML did not answer.
    pub link0_active: Option<bool>,
}

impl NvmlC2c {
    /// Whether NVML reports an active C2C link, NCCL's condition for a GPU↔CPU C2C link.
    pub fn active(&self) -> bool {
        matches!(self.links, Ok(n) if n > 0) && self.link0_active == Some(true)
    }
}

fn sample_u64(v: &nvml_wrapper::enums::device::SampleValue) -> Option<u64> {
    use nvml_wrapper::enums::device::SampleValue;
    match *v {
        SampleValue::U32(x) => Some(u64::from(x)),
        SampleValue::U64(x) => Some(x),
        SampleValue::I64(x) => u64::try_from(x).ok(),
        SampleValue::F64(_) => None,
    }
}

/// One field of one device as a number, or why not.
fn field(dev: &nvml_wrapper::Device, id: u32) -> Result<u64, String> {
    let samples = dev
        .field_values_for(&[nvml_wrapper::structs::device::FieldId(id)])
        .map_err(why)?;
    let sample = samples
        .into_iter()
        .next()
        .ok_or_else(|| format!("field {id}: no sample"))?;
    let value = sample.map_err(why)?.value.map_err(why)?;
    sample_u64(&value).ok_or_else(|| format!("field {id}: not an integer"))
}

/// The C2C fields of one device.
fn c2c_of(dev: &nvml_wrapper::Device, bdf: &str) -> NvmlC2c {
    let links = field(dev, FI_C2C_LINK_COUNT).map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    let link0_active = match links {
        Ok(n) if n > 0 => field(dev, FI_C2C_LINK_GET_STATUS).ok().map(|s| s == 1),
        _ => None,
    };
    NvmlC2c {
        bdf: bdf.to_string(),
        links,
        link0_active,
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
    probe_with_c2c().0
}

/// Queries every GPU, with each GPU's C2C fields (empty when NVML could not be used).
pub fn probe_with_c2c() -> (NvmlProbe, Vec<NvmlC2c>) {
    let nvml = match Nvml::init() {
        Ok(n) => n,
        Err(NvmlError::LibloadingError(_)) => return (NvmlProbe::LibraryMissing, Vec::new()),
        Err(e) => {
            let error = format!("nvmlInit: {}", why(e));
            return (NvmlProbe::Failed { error }, Vec::new());
        }
    };
    let count = match nvml.device_count() {
        Ok(c) => c,
        Err(e) => {
            let error = format!("nvmlDeviceGetCount: {}", why(e));
            return (NvmlProbe::Failed { error }, Vec::new());
        }
    };
    let mut gpus = Vec::new();
    let mut c2c = Vec::new();
    for index in 0..count {
        let Ok(dev) = nvml.device_by_index(index) else {
            continue;
        };
        let bdf = dev
            .pci_info()
            .map(|p| crate::probes::normalise_bdf(&p.bus_id.to_lowercase()))
            .unwrap_or_default();
        c2c.push(c2c_of(&dev, &bdf));
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
    let probe = NvmlProbe::Ok {
        driver: nvml.sys_driver_version().ok(),
        gpus,
    };
    (probe, c2c)
}
