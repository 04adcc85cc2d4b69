//! NVIDIA driver: loaded, flavour, conflicting nouveau, P2P API symbols, CUDA attributes, BAR1.

use super::data::{
    Bar1Data, DriverData, FlavourData, GpuBar1Row, MigData, P2pSymbolsData, PinnedShareData,
};
use super::Ctx;
use crate::probes::CudaProbe;
use crate::report::{Check, Status};

/// Functions nvpeer calls in every mode.
pub const P2P_REQUIRED: [&str; 6] = [
    "nvidia_p2p_get_pages",
    "nvidia_p2p_put_pages",
    "nvidia_p2p_dma_map_pages",
    "nvidia_p2p_dma_unmap_pages",
    "nvidia_p2p_free_page_table",
    "nvidia_p2p_free_dma_mapping",
];
/// Functions of the persistent API (driver ≥ 535), needed for `persistent_api_support=1`.
pub const P2P_PERSISTENT: [&str; 2] = [
    "nvidia_p2p_get_pages_persistent",
    "nvidia_p2p_put_pages_persistent",
];

/// Driver version from `/sys/module/nvidia/version` or `/proc/driver/nvidia/version`.
pub(crate) fn driver_version(ctx: &Ctx) -> Option<String> {
    ctx.root
        .read_trim("/sys/module/nvidia/version")
        .or_else(|| {
            let t = ctx.root.read("/proc/driver/nvidia/version")?;
            let first = t.lines().next()?;
            first
                .split_whitespace()
                .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
                .map(str::to_string)
        })
}

/// The module the test bench declares as its stand-in for nvidia.ko
/// ([`crate::probes::BENCH_P2P_PROVIDER`] in the doctor's environment), in bench builds only: the
/// product has no such override, and a P2P API from any module other than `nvidia` is a failure.
#[cfg(feature = "bench")]
fn bench_provider<'c>(ctx: &'c Ctx<'_>) -> Option<&'c str> {
    ctx.probes
        .env
        .iter()
        .find(|(k, _)| k == crate::probes::BENCH_P2P_PROVIDER)
        .map(|(_, v)| v.as_str())
}
#[cfg(not(feature = "bench"))]
fn bench_provider<'c>(_ctx: &'c Ctx<'_>) -> Option<&'c str> {
    None
}

/// Whether `module` is the provider the bench declared for itself (never in the product).
fn bench_declared(ctx: &Ctx, module: &str) -> bool {
    bench_provider(ctx).is_some_and(|b| b == module)
}

/// `nvidia.driver`: the NVIDIA kernel driver is loaded. The P2P API exported by another module
/// (an emulator, a look-alike) is a failure: nvpeer would pin through something that is not
/// NVIDIA's driver. Only a bench build whose environment names that module as the bench's own
/// stand-in ([`bench_provider`]) reports it as a warning instead.
pub fn driver(ctx: &Ctx) -> Check {
    const ID: &str = "nvidia.driver";
    const T: &str = "NVIDIA driver";
    let loaded = ctx.module_loaded("nvidia") || ctx.root.exists("/proc/driver/nvidia/version");
    let version = driver_version(ctx);
    if loaded {
        let v = version.clone().unwrap_or_else(|| "version unknown".into());
        return Check::new(ID, T, true, Status::Pass, format!("loaded, {v}")).data(
            DriverData::Loaded {
                loaded: true,
                version,
            },
        );
    }
    let provider = ctx
        .kallsyms
        .as_ref()
        .and_then(|k| k.owner("nvidia_p2p_get_pages"));
    if let Some(p) = provider {
        if bench_declared(ctx, &p) {
            return Check::new(
                ID,
                T,
                false,
                Status::Warn,
                format!(
                    "bench node ({}={p}): nvidia.ko not loaded; the P2P API comes from the bench's provider `{p}`",
                    crate::probes::BENCH_P2P_PROVIDER
                ),
            )
            .fix("A test bench's provider emulator; a production node loads NVIDIA's driver.")
            .data(DriverData::Provider {
                loaded: false,
                p2p_provider: p,
            });
        }
        return Check::new(
            ID,
            T,
            true,
            Status::Fail,
            format!("nvidia.ko not loaded; the nvidia_p2p_* API comes from module `{p}`, not NVIDIA's driver"),
        )
        .fix(format!(
            "Unload `{p}` and load NVIDIA's open kernel modules ({}, `modprobe nvidia`): nvpeer pins GPU memory only through NVIDIA's own driver.",
            crate::distro::nvidia_open_install(ctx.distro.as_ref())
        ))
        .data(DriverData::Provider {
            loaded: false,
            p2p_provider: p,
        });
    }
    Check::new(ID, T, true, Status::Fail, "nvidia.ko is not loaded")
        .fix(format!(
            "Install NVIDIA's open kernel modules ({}) and run `modprobe nvidia` (or start nvidia-persistenced).",
            crate::distro::nvidia_open_install(ctx.distro.as_ref())
        ))
        .data(DriverData::Absent { loaded: false })
}

/// `nvidia.flavour`: open kernel modules (`Dual MIT/GPL`) vs proprietary (`NVIDIA`). A Rust module
/// uses GPL-only symbols, and the kernel refuses to link those with symbols of a proprietary module.
pub fn flavour(ctx: &Ctx) -> Check {
    const ID: &str = "nvidia.flavour";
    const T: &str = "NVIDIA driver flavour";
    let banner = ctx
        .root
        .read("/proc/driver/nvidia/version")
        .unwrap_or_default();
    let taint = ctx.root.read_trim("/sys/module/nvidia/taint");
    let license = ctx.probes.nvidia_license.clone();
    let open = if banner.contains("Open Kernel Module") {
        Some((
            true,
            "/proc/driver/nvidia/version says \"Open Kernel Module\"",
        ))
    } else if taint.as_deref().is_some_and(|t| t.contains('P')) {
        Some((false, "/sys/module/nvidia/taint has P (proprietary)"))
    } else if let Some(l) = license.as_deref() {
        if l.contains("GPL") {
            Some((true, "modinfo license is GPL-compatible"))
        } else {
            Some((false, "modinfo license is proprietary"))
        }
    } else if !banner.is_empty() {
        Some((
            false,
            "/proc/driver/nvidia/version lacks \"Open Kernel Module\"",
        ))
    } else if taint.is_some() {
        Some((true, "/sys/module/nvidia/taint has no P (not proprietary)"))
    } else {
        None
    };
    let data = FlavourData {
        open: open.map(|o| o.0),
        taint,
        license,
    };
    match open {
        Some((true, why)) => Check::new(ID, T, true, Status::Pass, format!("open kernel modules ({why})")).data(data),
        Some((false, why)) => Check::new(ID, T, true, Status::Fail, format!("proprietary kernel modules ({why})"))
            .fix(format!(
                "Install the open flavour ({}): a GPL Rust module cannot link against the proprietary one.",
                crate::distro::nvidia_open_install(ctx.distro.as_ref())
            ))
            .data(data),
        None => {
            let gate = ctx.module_loaded("nvidia");
            let status = if ctx.kallsyms.as_ref().is_some_and(|k| k.has("nvidia_p2p_get_pages")) && !gate {
                Status::Skip
            } else {
                Status::Unknown
            };
            Check::new(ID, T, gate, status, "cannot tell: nvidia.ko not loaded and modinfo unavailable")
                .fix("Load the NVIDIA driver so /proc/driver/nvidia/version shows its flavour.")
                .data(data)
        }
    }
}

/// `nvidia.nouveau`: nouveau must not own the GPUs.
pub fn nouveau(ctx: &Ctx) -> Check {
    const ID: &str = "nvidia.nouveau";
    const T: &str = "nouveau not loaded";
    if ctx.module_loaded("nouveau") {
        Check::new(ID, T, true, Status::Fail, "nouveau is loaded")
            .fix("Blacklist nouveau (`blacklist nouveau` in /etc/modprobe.d, rebuild the initramfs) and reboot.")
    } else {
        Check::new(ID, T, true, Status::Pass, "nouveau is not loaded")
    }
}

/// `nvidia.p2p_symbols`: the `nvidia_p2p_*` API in the running kernel's symbol table.
pub fn p2p_symbols(ctx: &Ctx) -> Check {
    const ID: &str = "nvidia.p2p_symbols";
    const T: &str = "nvidia_p2p_* API";
    let Some(k) = &ctx.kallsyms else {
        return Check::new(
            ID,
            T,
            true,
            Status::Unknown,
            "/proc/kallsyms is not readable",
        )
        .fix("Run on a kernel with CONFIG_KALLSYMS and a readable /proc/kallsyms.");
    };
    let missing: Vec<&str> = P2P_REQUIRED.iter().copied().filter(|s| !k.has(s)).collect();
    let missing_persistent: Vec<&str> = P2P_PERSISTENT
        .iter()
        .copied()
        .filter(|s| !k.has(s))
        .collect();
    let owner = k.owner("nvidia_p2p_get_pages");
    let data = P2pSymbolsData {
        owner: owner.clone(),
        missing: missing.iter().map(|s| s.to_string()).collect(),
        missing_persistent: missing_persistent.iter().map(|s| s.to_string()).collect(),
        addresses_hidden: k.addresses_hidden,
    };
    if !missing.is_empty() {
        return Check::new(ID, T, true, Status::Fail, format!("missing: {}", missing.join(", ")))
            .fix("Load the NVIDIA driver (`modprobe nvidia`); these functions are exported by nvidia.ko.")
            .data(data);
    }
    let owner = owner.unwrap_or_default();
    if owner != "nvidia" && !bench_declared(ctx, &owner) {
        return Check::new(
            ID,
            T,
            true,
            Status::Fail,
            if owner.is_empty() {
                "exported by the kernel image, not by NVIDIA's nvidia.ko".to_string()
            } else {
                format!("exported by `{owner}`, not by NVIDIA's nvidia.ko")
            },
        )
        .fix("Load NVIDIA's open kernel modules (`modprobe nvidia`) in place of the module that exports these functions.")
        .data(data);
    }
    if !missing_persistent.is_empty() {
        return Check::new(ID, T, true, Status::Warn, format!("present in `{owner}`, but no persistent API"))
            .fix("Driver older than 535: load nvpeer with `persistent_api_support=0`, or upgrade the driver.")
            .data(data);
    }
    Check::new(
        ID,
        T,
        true,
        Status::Pass,
        format!("all present (exported by `{owner}`)"),
    )
    .data(data)
}

/// `gpu.cuda`: what the CUDA driver says about GPUDirect RDMA and dma-buf per GPU.
pub fn cuda_attrs(ctx: &Ctx) -> Check {
    const ID: &str = "gpu.cuda";
    const T: &str = "GPU GDR attributes (CUDA)";
    let data = ctx.probes.cuda.clone();
    match &ctx.probes.cuda {
        CudaProbe::NotRun => Check::new(ID, T, false, Status::Skip, "not probed (fixture root or --no-probes)").data(data),
        CudaProbe::LibraryMissing => Check::new(ID, T, false, Status::Unknown, "libcuda.so not found, GPU attributes not checked")
            .fix("Install the NVIDIA user-space driver (libcuda.so.1, e.g. libnvidia-compute) matching the kernel driver.")
            .data(data),
        CudaProbe::Failed { error } => Check::new(ID, T, false, Status::Unknown, format!("CUDA driver unusable: {error}"))
            .fix("Check that /dev/nvidia* exist and the user-space driver matches the kernel module version.")
            .data(data),
        CudaProbe::Ok { driver_api, gpus } => {
            let details: Vec<String> = gpus
                .iter()
                .map(|g| {
                    format!(
                        "GPU{} {} {}: GPUDirect RDMA {}, dma-buf {}, GDR with VMM {}",
                        g.ordinal,
                        g.bdf,
                        g.name,
                        yn(g.gdr_supported),
                        yn(g.dmabuf_supported),
                        yn(g.gdr_vmm_supported)
                    )
                })
                .collect();
            let bad: Vec<String> = gpus.iter().filter(|g| g.gdr_supported == Some(0)).map(|g| g.name.clone()).collect();
            let ver = match driver_api {
                Some(v) => format!("CUDA driver API {}.{}", v / 1000, (v % 1000) / 10),
                None => "CUDA driver API unknown (libcuda lacks cuDriverGetVersion)".to_string(),
            };
            if gpus.is_empty() {
                Check::new(ID, T, true, Status::Fail, format!("{ver}, but no CUDA device"))
                    .fix("Check `nvidia-smi`: the driver sees no usable GPU.")
                    .data(data)
            } else if !bad.is_empty() {
                Check::new(ID, T, true, Status::Fail, format!("{ver}; GPUDirect RDMA unsupported on {}", bad.join(", ")))
                    .details(details)
                    .fix("Use a data-centre/professional GPU: this board does not support GPUDirect RDMA.")
                    .data(data)
            } else {
                Check::new(ID, T, true, Status::Pass, format!("{ver}; {} GPU(s) support GPUDirect RDMA", gpus.len())).details(details).data(data)
            }
        }
    }
}

fn yn(v: Option<i32>) -> &'static str {
    match v {
        Some(0) => "no",
        Some(_) => "yes",
        None => "unknown",
    }
}

/// `IORESOURCE_MEM` in the flags column of the sysfs `resource` file.
const IORESOURCE_MEM: u64 = 0x200;

/// Size of NVIDIA's "BAR1" (the second memory BAR) from the sysfs `resource` file. Counting
/// populated memory BARs instead of reading line 1 keeps it right when BAR0 is 64-bit and BAR1
/// moves to index 2 (as some hypervisors present it).
pub fn bar1_size(ctx: &Ctx, dev: &crate::pci::PciDev) -> Option<u64> {
    parse_bar1(&ctx.root.read(&format!("{}/resource", dev.sysfs()))?)
}

/// The second memory BAR's size in a sysfs `resource` text (`start end flags` per line, the six
/// BARs first). A range covering all of u64 has no representable size and is skipped.
pub fn parse_bar1(text: &str) -> Option<u64> {
    let mut mem_bars = text.lines().take(6).filter_map(|line| {
        let mut it = line.split_whitespace().map(crate::root::parse_num);
        let (start, end, flags) = (it.next()??, it.next()??, it.next()??);
        if end > start && flags & IORESOURCE_MEM != 0 {
            (end - start).checked_add(1)
        } else {
            None
        }
    });
    mem_bars.nth(1)
}

/// `pinned_bytes` from nvpeer's debugfs `stats` (uapi/debugfs.md; root only), when readable.
pub fn pinned_bytes(ctx: &Ctx) -> Option<u64> {
    nvpeer_uapi::debugfs::read_stats(ctx.root.base())
        .ok()?
        .get("pinned_bytes")
}

fn mib(b: u64) -> u64 {
    b >> 20
}

/// nvpeer's pins above this percentage of BAR1 are a warning: the next registrations, nvpeer's
/// or anyone's, are about to fail for want of BAR1.
pub const PINNED_WARN_PERCENT: u64 = 75;

/// BAR1 is low when less than this fraction of it is free (1/8) ...
const FREE_LOW_DIVISOR: u64 = 8;
/// ... or less than this many bytes.
const FREE_LOW_BYTES: u64 = 1 << 30;

/// `part` as a percentage of `whole`, one decimal; `None` when `whole` is 0.
fn percent(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| (part as f64 * 1000.0 / whole as f64).round() / 10.0)
}

/// One GPU's BAR1 as far as it is known: its size (NVML or sysfs) and NVML's used/free.
#[derive(Debug, Clone)]
pub struct GpuBar1 {
    pub bdf: String,
    pub size: Option<u64>,
    pub nvml: Option<crate::nvml::Bar1>,
}

/// nvpeer's pinned bytes set against BAR1. debugfs counts the pins of all GPUs together and
/// publishes no split per GPU, so they are attributed to a GPU only when there is one; with
/// several, they are set against the BAR1 of all of them together, which still bounds the worst
/// GPU from below (pins above p % of the sum put at least one GPU above p % of its own BAR1).
#[derive(Debug, Clone, PartialEq)]
pub struct PinnedShare {
    /// The GPU the pins belong to, when there is only one.
    pub gpu: Option<String>,
    /// BAR1 the pins are compared with: that GPU's, or all GPUs' together.
    pub bar1: u64,
    /// Pinned bytes as a percentage of `bar1`.
    pub percent_of_bar1: f64,
    /// Pinned bytes as a percentage of NVML's used BAR1 (one GPU, NVML only).
    pub percent_of_used: Option<f64>,
    /// Free BAR1 (NVML), of that GPU or all GPUs together.
    pub free: Option<u64>,
}

impl PinnedShare {
    /// `None` when some GPU's BAR1 size is unknown (nothing to compare with).
    pub fn of(pinned: u64, gpus: &[GpuBar1]) -> Option<PinnedShare> {
        let sizes: Option<Vec<u64>> = gpus.iter().map(|g| g.size).collect();
        let bar1 = sizes?.iter().try_fold(0u64, |a, &s| a.checked_add(s))?;
        let percent_of_bar1 = percent(pinned, bar1)?;
        let frees: Option<Vec<u64>> = gpus.iter().map(|g| g.nvml.map(|b| b.free)).collect();
        let free = frees.and_then(|f| f.iter().try_fold(0u64, |a, &b| a.checked_add(b)));
        let (gpu, percent_of_used) = match gpus {
            [one] => (
                Some(one.bdf.clone()),
                one.nvml.and_then(|b| percent(pinned, b.used)),
            ),
            _ => (None, None),
        };
        Some(PinnedShare {
            gpu,
            bar1,
            percent_of_bar1,
            percent_of_used,
            free,
        })
    }

    /// Whether the pins are above [`PINNED_WARN_PERCENT`] of BAR1.
    pub fn heavy(&self) -> bool {
        self.percent_of_bar1 > PINNED_WARN_PERCENT as f64
    }

    fn describe(&self, pinned: u64, gpus: usize) -> String {
        let mut line = match &self.gpu {
            Some(bdf) => format!(
                "nvpeer has {} MiB pinned on {bdf} (the only GPU): {} % of its BAR1 ({} MiB)",
                mib(pinned),
                self.percent_of_bar1,
                mib(self.bar1)
            ),
            None => format!(
                "nvpeer has {} MiB pinned over {gpus} GPUs: {} % of their BAR1 together ({} MiB); \
                 debugfs counts all GPUs together, so one GPU's share is not known and may be higher",
                mib(pinned),
                self.percent_of_bar1,
                mib(self.bar1)
            ),
        };
        if let Some(u) = self.percent_of_used {
            line.push_str(&format!(", {u} % of the BAR1 in use"));
        }
        line
    }
}

/// What `gpu.bar1` read of every GPU: a line each, the GPUs with a small BAR1 and with little of
/// it free, the JSON rows and the sizes [`PinnedShare`] compares with.
#[derive(Default)]
struct Bar1Survey {
    lines: Vec<String>,
    small: Vec<String>,
    tight: Vec<String>,
    rows: Vec<GpuBar1Row>,
    bar1s: Vec<GpuBar1>,
}

impl Bar1Survey {
    fn of(ctx: &Ctx) -> Bar1Survey {
        let fb = |bdf: &str| match &ctx.probes.cuda {
            CudaProbe::Ok { gpus, .. } => {
                gpus.iter().find(|g| g.bdf == bdf).and_then(|g| g.total_mem)
            }
            _ => None,
        };
        let mut s = Bar1Survey::default();
        for g in &ctx.gpus {
            let nvml = ctx
                .probes
                .nvml
                .gpu(&g.bdf)
                .and_then(|n| n.bar1.as_ref().ok().copied());
            let size = nvml.map(|b| b.total).or_else(|| bar1_size(ctx, g));
            let fbm = fb(&g.bdf);
            let mut line = match size {
                Some(sz) => format!("{}: BAR1 {} MiB", g.bdf, mib(sz)),
                None => format!("{}: BAR1 not readable", g.bdf),
            };
            if let Some(b) = nvml {
                line.push_str(&format!(
                    ", used {} MiB, free {} MiB",
                    mib(b.used),
                    mib(b.free)
                ));
                // Less than an eighth free, or less than 1 GiB: the next large registration fails.
                if b.total > 0 && (b.free < b.total / FREE_LOW_DIVISOR || b.free < FREE_LOW_BYTES) {
                    s.tight.push(g.bdf.clone());
                }
            }
            if let Some(f) = fbm {
                line.push_str(&format!(", framebuffer {} MiB", mib(f)));
            }
            s.lines.push(line);
            if size.is_some_and(|sz| sz < (1 << 30)) {
                s.small.push(g.bdf.clone());
            }
            s.rows.push(GpuBar1Row {
                bdf: g.bdf.clone(),
                bar1_bytes: size,
                bar1_used: nvml.map(|b| b.used),
                bar1_free: nvml.map(|b| b.free),
                fb_bytes: fbm,
            });
            s.bar1s.push(GpuBar1 {
                bdf: g.bdf.clone(),
                size,
                nvml,
            });
        }
        s
    }
}

/// Where `gpu.bar1`'s figures come from.
fn bar1_source(ctx: &Ctx) -> String {
    match &ctx.probes.nvml {
        crate::nvml::NvmlProbe::Ok { .. } => "NVML".to_string(),
        crate::nvml::NvmlProbe::NotRun => "sysfs; used/free need the live NVML probe".to_string(),
        crate::nvml::NvmlProbe::LibraryMissing => {
            "sysfs; libnvidia-ml.so.1 not found, used/free unknown".to_string()
        }
        crate::nvml::NvmlProbe::Failed { error } => format!("sysfs; NVML: {error}"),
    }
}

/// The warning (summary, fix) when nvpeer's pins hold more than [`PINNED_WARN_PERCENT`] of BAR1.
fn heavy_pins_warning(pinned: u64, s: &PinnedShare) -> (String, String) {
    let (what, whose) = match &s.gpu {
        Some(bdf) => (format!("BAR1 on {bdf}"), String::new()),
        None => (
            "the BAR1 of all GPUs together".to_string(),
            format!(
                ", so at least one GPU has more than {PINNED_WARN_PERCENT} % of its own pinned"
            ),
        ),
    };
    (
        format!(
            "nvpeer has pinned {} % of {what} ({} of {} MiB, above {PINNED_WARN_PERCENT} %){whose}",
            s.percent_of_bar1,
            mib(pinned),
            mib(s.bar1)
        ),
        "nvpeer's pins hold BAR1, and registrations beyond the free BAR1 fail (EFAULT/ENOMEM): see which processes hold them (`tgid` in debugfs nvpeer/mrs), deregister MRs no longer used or cap the application's registration cache; a larger BAR1 (Resizable BAR in the BIOS) raises the bound.".into(),
    )
}

/// The warning (summary, fix) for GPUs with little BAR1 free, saying how much of it nvpeer holds.
fn tight_bar1_warning(
    tight: &[String],
    share: Option<&PinnedShare>,
    pinned: Option<u64>,
) -> (String, String) {
    let whose = match (share, pinned) {
        (Some(s), Some(p)) if s.gpu.is_some() => match s.percent_of_used {
            Some(u) if u >= 50.0 => format!(
                " Most of the BAR1 in use is nvpeer's pins ({} MiB, {u} %): deregister nvpeer MRs no longer used (`tgid` in debugfs nvpeer/mrs).",
                mib(p)
            ),
            _ => format!(
                " nvpeer's pins are {} MiB of it: the rest is other mappings (CUDA host-visible memory, nvidia-peermem, dma-buf exports).",
                mib(p)
            ),
        },
        (_, Some(p)) => format!(
            " nvpeer has {} MiB pinned over all GPUs (debugfs does not split them per GPU).",
            mib(p)
        ),
        (_, None) => String::new(),
    };
    (
        format!(
            "little BAR1 left on {} (less than 1/{FREE_LOW_DIVISOR} or 1 GiB free)",
            tight.join(", ")
        ),
        format!("Registrations beyond the free BAR1 fail (EFAULT/ENOMEM): deregister what is no longer used, or check who maps it (`nvidia-smi -q -d MEMORY`).{whose}"),
    )
}

/// `gpu.bar1`: BAR1 bounds how much GPU memory can be pinned for RDMA at once: its size (NVML, or
/// the sysfs resource file), what is mapped now and what is free (NVML), and what nvpeer has
/// pinned (debugfs) against both. (BAR1 from sysfs is the second memory BAR, see [`bar1_size`].)
pub fn bar1(ctx: &Ctx) -> Check {
    const ID: &str = "gpu.bar1";
    const T: &str = "GPU BAR1";
    if ctx.gpus.is_empty() {
        return Check::new(ID, T, false, Status::Skip, "no NVIDIA GPU on the PCI bus");
    }
    let pinned = pinned_bytes(ctx);
    let survey = Bar1Survey::of(ctx);
    let mut details = survey.lines.clone();
    let share = pinned.and_then(|p| PinnedShare::of(p, &survey.bar1s));
    match (pinned, &share) {
        (Some(p), Some(s)) => details.push(s.describe(p, survey.bar1s.len())),
        (Some(p), None) => details.push(format!(
            "nvpeer has {} MiB pinned (all GPUs; debugfs stats pinned_bytes); not compared: a \
             GPU's BAR1 size is unknown",
            mib(p)
        )),
        (None, _) => details.push(
            "nvpeer's pinned bytes: not readable (debugfs stats, root only, nvpeer loaded)".into(),
        ),
    }
    let source = bar1_source(ctx);
    details.push(format!("source: {source}"));
    let data = Bar1Data {
        gpus: survey.rows,
        nvpeer_pinned_bytes: pinned,
        nvpeer_pinned: share.as_ref().map(|s| PinnedShareData {
            gpu: s.gpu.clone(),
            compared_with_bar1_bytes: s.bar1,
            percent_of_bar1: s.percent_of_bar1,
            percent_of_used: s.percent_of_used,
            free_bar1_bytes: s.free,
            attributed: s.gpu.is_some(),
        }),
        pinned_warn_percent: PINNED_WARN_PERCENT,
        source,
    };
    // Every warning that applies, each with its fix.
    let mut warnings: Vec<(String, String)> = Vec::new();
    if !survey.small.is_empty() {
        warnings.push((
            format!("BAR1 below 1 GiB on {}", survey.small.join(", ")),
            "Enable Resizable BAR / large BAR1 in the BIOS; registrations larger than BAR1 fail with EFAULT/ENOMEM.".into(),
        ));
    }
    if let (Some(p), Some(s)) = (pinned, share.as_ref().filter(|s| s.heavy())) {
        warnings.push(heavy_pins_warning(p, s));
    }
    if !survey.tight.is_empty() {
        warnings.push(tight_bar1_warning(&survey.tight, share.as_ref(), pinned));
    }
    if !warnings.is_empty() {
        let (summaries, fixes): (Vec<String>, Vec<String>) = warnings.into_iter().unzip();
        Check::new(ID, T, false, Status::Warn, summaries.join("; "))
            .details(details)
            .fix(fixes.join(" "))
            .data(data)
    } else if survey.bar1s.iter().all(|g| g.size.is_none()) {
        Check::new(ID, T, false, Status::Unknown, "BAR1 not readable")
            .details(details)
            .data(data)
    } else {
        // The per-GPU lines become the summary; the details keep the rest.
        let (gpus, rest): (Vec<String>, Vec<String>) = details
            .into_iter()
            .partition(|d| d.starts_with(|c: char| c.is_ascii_hexdigit()));
        Check::new(ID, T, false, Status::Pass, gpus.join("; "))
            .details(rest)
            .data(data)
    }
}

/// `gpu.mig`: MIG mode per GPU (NVML).
pub fn mig(ctx: &Ctx) -> Check {
    const ID: &str = "gpu.mig";
    const T: &str = "MIG mode";
    use crate::nvml::NvmlProbe;
    let gpus = match &ctx.probes.nvml {
        NvmlProbe::NotRun => {
            return Check::new(
                ID,
                T,
                false,
                Status::Skip,
                "not probed (fixture root or --no-probes)",
            )
        }
        NvmlProbe::LibraryMissing => return Check::new(
            ID,
            T,
            false,
            Status::Unknown,
            "libnvidia-ml.so.1 not found, MIG mode not checked",
        )
        .fix(
            "Install the NVIDIA user-space driver (libnvidia-ml.so.1) matching the kernel driver.",
        ),
        NvmlProbe::Failed { error } => {
            return Check::new(
                ID,
                T,
                false,
                Status::Unknown,
                format!("NVML unusable: {error}"),
            )
        }
        NvmlProbe::Ok { gpus, .. } => gpus,
    };
    let mut details = Vec::new();
    let mut on = Vec::new();
    let mut pending = Vec::new();
    for g in gpus {
        match &g.mig {
            Ok(m) => {
                details.push(format!(
                    "{} {}: MIG {}{}",
                    g.bdf,
                    g.name,
                    if m.current { "on" } else { "off" },
                    if m.pending != m.current {
                        ", changes at the next GPU reset"
                    } else {
                        ""
                    }
                ));
                if m.current {
                    on.push(g.bdf.clone());
                }
                if m.pending != m.current {
                    pending.push(g.bdf.clone());
                }
            }
            Err(e) => details.push(format!("{} {}: MIG {e}", g.bdf, g.name)),
        }
    }
    let data = MigData {
        enabled: on.clone(),
        pending_change: pending,
        gpus: gpus.clone(),
    };
    if !on.is_empty() {
        return Check::new(ID, T, false, Status::Warn, format!("MIG enabled on {}", on.join(", ")))
            .details(details)
            .fix("nv-p2p.h marks the invalidating API unsupported with MIG: keep nvpeer's persistent client (persistent_api_support=1, the default; RM handles MIG there from driver 555), or disable MIG (`nvidia-smi -mig 0`).")
            .data(data);
    }
    Check::new(
        ID,
        T,
        false,
        Status::Pass,
        if gpus.is_empty() {
            "no GPU listed by NVML".to_string()
        } else {
            "MIG off on every GPU".to_string()
        },
    )
    .details(details)
    .data(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_share_needs_every_bar1_size() {
        let gpu = |bdf: &str, size: Option<u64>| GpuBar1 {
            bdf: bdf.into(),
            size,
            nvml: None,
        };
        // A GPU of unknown size: nothing to compare with.
        assert_eq!(
            PinnedShare::of(1, &[gpu("a", Some(1 << 30)), gpu("b", None)]),
            None
        );
        // No BAR1 at all, or sizes whose sum overflows: no figure rather than a wrong one.
        assert_eq!(PinnedShare::of(1, &[gpu("a", Some(0))]), None);
        assert_eq!(
            PinnedShare::of(1, &[gpu("a", Some(u64::MAX)), gpu("b", Some(1))]),
            None
        );
        assert_eq!(PinnedShare::of(1, &[]), None);
        let s = PinnedShare::of(3 << 30, &[gpu("a", Some(4 << 30))]).unwrap();
        assert_eq!((s.percent_of_bar1, s.heavy()), (75.0, false));
        let s = PinnedShare::of((3 << 30) + (64 << 20), &[gpu("a", Some(4 << 30))]).unwrap();
        assert!(s.heavy());
    }
}
