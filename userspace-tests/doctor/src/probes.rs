//! Live probes through the CUDA driver (cudarc, dlopened), NVML (nvml-wrapper, dlopened) and
//! libibverbs (sideway, dlopened). Every library is optional: its absence, or a symbol it lacks, is
//! a finding, never a crash.

use cudarc::driver::{result as cu, sys as cusys};
use serde::Serialize;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::memory_region::RegisterMemoryRegionErrorKind;
use sideway::ibverbs::AccessFlags;

/// GPU attributes relevant to GPUDirect RDMA, per CUDA device.
#[derive(Debug, Clone, Serialize)]
pub struct GpuAttrs {
    /// CUDA ordinal.
    pub ordinal: i32,
    /// Lower-case `DDDD:BB:DD.F` (matches sysfs).
    pub bdf: String,
    /// Marketing name.
    pub name: String,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED` (116).
    pub gdr_supported: Option<i32>,
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` (124).
    pub dmabuf_supported: Option<i32>,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED` (110).
    pub gdr_vmm_supported: Option<i32>,
    /// Framebuffer size in bytes.
    pub total_mem: Option<u64>,
}

/// Result of the CUDA probe.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CudaProbe {
    /// Not run (fixture root, or `--no-probes`).
    NotRun,
    /// `libcuda.so` could not be loaded.
    LibraryMissing,
    /// `cuInit` or device enumeration failed.
    Failed {
        /// What failed, with the CUDA error.
        error: String,
    },
    /// Probed.
    Ok {
        /// `cuDriverGetVersion` (e.g. 13000); `None` when the library lacks it.
        driver_api: Option<i32>,
        /// One entry per device.
        gpus: Vec<GpuAttrs>,
    },
}

/// Outcome of `ibv_reg_dmabuf_mr(pd, 0, 0, 0, fd = -1, 0)` on one device.
#[derive(Debug, Clone, Serialize)]
pub struct DmabufProbe {
    /// RDMA device name.
    pub device: String,
    /// errno returned (EBADF = the kernel and provider support dma-buf).
    pub errno: Option<i32>,
    /// `supported`, `unsupported` or `inconclusive`.
    pub verdict: &'static str,
}

/// Result of the verbs probe.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum VerbsProbe {
    /// Not run (fixture root, or `--no-probes`).
    NotRun,
    /// libibverbs could not be loaded or has no device list support.
    Unavailable {
        /// The error.
        error: String,
    },
    /// The library works but lists no device.
    NoDevices,
    /// One result per device.
    Probed {
        /// Per device.
        results: Vec<DmabufProbe>,
    },
}

/// Everything the live probes found (tests build this by hand).
#[derive(Debug, Clone, Serialize)]
pub struct Probes {
    /// CUDA side.
    pub cuda: CudaProbe,
    /// Verbs side.
    pub verbs: VerbsProbe,
    /// `rustc --version` of the local toolchain, when one is on PATH.
    pub rustc: Option<String>,
    /// `modinfo -F license nvidia`, for when the module is installed but not loaded.
    pub nvidia_license: Option<String>,
    /// NVML side (BAR1 used/free, MIG).
    pub nvml: crate::nvml::NvmlProbe,
    /// NVML's C2C link fields per GPU (empty without NVML): what makes a GPU coherent (crate::c2c).
    pub c2c: Vec<crate::nvml::NvmlC2c>,
    /// The doctor's own environment (`NCCL_*`, `UCX_*`, `NVSHMEM_*` and `HOME` matter), as the libraries would
    /// see it when started from the same shell.
    pub env: Vec<(String, String)>,
}

impl Probes {
    /// No live probing.
    pub fn none() -> Self {
        Self {
            cuda: CudaProbe::NotRun,
            verbs: VerbsProbe::NotRun,
            rustc: None,
            nvidia_license: None,
            nvml: crate::nvml::NvmlProbe::NotRun,
            c2c: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Runs every live probe.
    pub fn run() -> Self {
        let (nvml, c2c) = crate::nvml::probe_with_c2c();
        Self {
            cuda: probe_cuda(),
            verbs: probe_verbs(),
            rustc: command_line("rustc", &["--version"]),
            nvidia_license: command_line("modinfo", &["-F", "license", "nvidia"]),
            nvml,
            c2c,
            env: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .filter(|(k, _)| {
                    k.starts_with("NCCL_")
                        || k.starts_with("UCX_")
                        || k.starts_with("NVSHMEM_")
                        || k == "HOME"
                        || (cfg!(feature = "bench") && k == BENCH_P2P_PROVIDER)
                })
                .collect(),
        }
    }
}

/// The test bench's declaration that its node has no NVIDIA driver and that the module this
/// names (its provider emulator, `nvp2p_emu`) stands in for nvidia.ko: honoured by bench builds
/// alone (the `bench` feature, which the packages are built without), where `nvidia.driver` and
/// `nvidia.p2p_symbols` then warn instead of failing. Read from the live environment only.
pub const BENCH_P2P_PROVIDER: &str = "NVPEER_BENCH_P2P_PROVIDER";

/// First line of a helper command's output, when it runs and succeeds.
fn command_line(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// The libcuda entry points the probe calls; cudarc panics on a missing one, so each is looked up
/// first. `cuDriverGetVersion` is optional (the probe reports the API version as unknown).
pub const CUDA_REQUIRED: [&str; 8] = [
    "cuInit",
    "cuGetErrorString",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuDeviceGetName",
    "cuDeviceGetPCIBusId",
    "cuDeviceTotalMem_v2",
];

/// The names in `names` that `lib` does not export.
pub fn missing_symbols<'n>(lib: &libloading::Library, names: &[&'n str]) -> Vec<&'n str> {
    names
        .iter()
        .copied()
        // SAFETY: only the symbol's address is looked up, as an opaque pointer; nothing is called.
        .filter(|n| unsafe { lib.get::<*const std::ffi::c_void>(n.as_bytes()) }.is_err())
        .collect()
}

/// Reads the CUDA attributes of every GPU.
pub fn probe_cuda() -> CudaProbe {
    // SAFETY: only tries to dlopen the library and drops it again; no symbols are called.
    if !unsafe { cusys::is_culib_present() } {
        return CudaProbe::LibraryMissing;
    }
    // SAFETY: the library is present (checked above), so culib() loads it instead of panicking.
    let lib = unsafe { cusys::culib() };
    let missing = missing_symbols(lib, &CUDA_REQUIRED);
    if !missing.is_empty() {
        return CudaProbe::Failed {
            error: format!(
                "libcuda.so lacks {} (a partial or stub library)",
                missing.join(", ")
            ),
        };
    }
    if let Err(e) = cu::init() {
        return CudaProbe::Failed {
            error: format!("cuInit: {e:?}"),
        };
    }
    let driver_api = missing_symbols(lib, &["cuDriverGetVersion"])
        .is_empty()
        .then(|| {
            let mut v = 0;
            // SAFETY: the symbol exists (checked) and the library is initialised; the out-pointer is a
            // valid local.
            unsafe { cusys::cuDriverGetVersion(&mut v) };
            v
        });
    let count = match cu::device::get_count() {
        Ok(c) => c,
        Err(e) => {
            return CudaProbe::Failed {
                error: format!("cuDeviceGetCount: {e:?}"),
            }
        }
    };
    let mut gpus = Vec::new();
    for ordinal in 0..count {
        let Ok(dev) = cu::device::get(ordinal) else {
            continue;
        };
        let attr = |a: cusys::CUdevice_attribute| {
            // SAFETY: `dev` came from cuDeviceGet for a valid ordinal.
            unsafe { cu::device::get_attribute(dev, a) }.ok()
        };
        let mut bus = [0i8; 32];
        // SAFETY: the buffer is 32 bytes and its length is passed; `dev` is valid.
        let bdf = if unsafe {
            cusys::cuDeviceGetPCIBusId(bus.as_mut_ptr() as *mut _, bus.len() as i32, dev)
        } == cusys::CUresult::CUDA_SUCCESS
        {
            let bytes: Vec<u8> = bus
                .iter()
                .take_while(|c| **c != 0)
                .map(|c| *c as u8)
                .collect();
            String::from_utf8_lossy(&bytes).to_lowercase()
        } else {
            String::new()
        };
        gpus.push(GpuAttrs {
            ordinal,
            bdf: normalise_bdf(&bdf),
            name: cu::device::get_name(dev).unwrap_or_default(),
            gdr_supported: attr(cusys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED),
            dmabuf_supported: attr(cusys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED),
            gdr_vmm_supported: attr(cusys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED),
            // SAFETY: `dev` came from cuDeviceGet.
            total_mem: unsafe { cu::device::total_mem(dev) }.ok().map(|v| v as u64),
        });
    }
    CudaProbe::Ok { driver_api, gpus }
}

/// CUDA and NVML print `00000000:3B:00.0`; sysfs uses `0000:3b:00.0`.
pub fn normalise_bdf(s: &str) -> String {
    match s.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 => format!("{}:{}", &dom[dom.len() - 4..], rest),
        _ => s.to_string(),
    }
}

/// Why `ibv_get_device_list` returned no list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceListFailure {
    /// libibverbs.so.1 could not be loaded (sideway's loader answers EOPNOTSUPP).
    NoLibrary,
    /// The library is there, the kernel's verbs interface is not (no
    /// /sys/class/infiniband_verbs: ib_uverbs not loaded; libibverbs answers ENOSYS).
    NoKernelSupport,
    /// Anything else, as the library said it.
    Other(String),
}

impl std::fmt::Display for DeviceListFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoLibrary => f.write_str("libibverbs.so.1 could not be loaded"),
            Self::NoKernelSupport => {
                f.write_str("the kernel has no RDMA userspace support (ENOSYS)")
            }
            Self::Other(why) => write!(f, "ibv_get_device_list: {why}"),
        }
    }
}

/// The RDMA devices libibverbs lists, or why it lists none.
pub fn device_list() -> Result<DeviceList, DeviceListFailure> {
    DeviceList::new().map_err(|e| match e.0 {
        sideway::ibverbs::device::GetDeviceListErrorKind::Ibverbs(io) => match io.raw_os_error() {
            Some(95) => DeviceListFailure::NoLibrary,
            Some(38) => DeviceListFailure::NoKernelSupport,
            _ => DeviceListFailure::Other(io.to_string()),
        },
        // (the kind is non-exhaustive)
        _ => DeviceListFailure::Other("failed".into()),
    })
}

/// Opens every RDMA device and asks its provider to import dma-buf fd -1.
pub fn probe_verbs() -> VerbsProbe {
    let list = match device_list() {
        Ok(l) => l,
        Err(why) => {
            return VerbsProbe::Unavailable {
                error: why.to_string(),
            }
        }
    };
    if list.is_empty() {
        return VerbsProbe::NoDevices;
    }
    let mut results = Vec::new();
    for dev in list.iter() {
        let name = dev.name();
        let Ok(ctx) = dev.open() else {
            results.push(DmabufProbe {
                device: name,
                errno: None,
                verdict: "inconclusive",
            });
            continue;
        };
        let Ok(pd) = ctx.alloc_pd() else {
            results.push(DmabufProbe {
                device: name,
                errno: None,
                verdict: "inconclusive",
            });
            continue;
        };
        // SAFETY: fd -1 is never a valid dma-buf, so nothing is mapped; this is the probe NCCL uses.
        let r = unsafe { pd.reg_dmabuf_mr(0, 0, 0, -1, AccessFlags::none()) };
        let errno = match r {
            Ok(_mr) => None,
            Err(e) => match e.0 {
                RegisterMemoryRegionErrorKind::Ibverbs(io) => io.raw_os_error(),
                _ => None,
            },
        };
        results.push(DmabufProbe {
            device: name,
            errno,
            verdict: dmabuf_verdict(errno),
        });
    }
    VerbsProbe::Probed { results }
}

/// EBADF: the provider got as far as looking the fd up, so dma-buf import exists;
/// EOPNOTSUPP / EPROTONOSUPPORT: it does not.
pub fn dmabuf_verdict(errno: Option<i32>) -> &'static str {
    match errno {
        Some(9) => "supported",
        Some(95) | Some(93) => "unsupported",
        _ => "inconclusive",
    }
}
