//! Node profiles: what a node of one kind must have (`nvpeer doctor --profile FILE`), as a typed
//! TOML file, and the check `node.profile` that holds the node to it. `--write-profile FILE`
//! records a healthy node's own, to hold the rest of its kind to.
//!
//! Every field is optional: a profile says only what it names. A field the doctor cannot read
//! here (a GPU's name without the CUDA probe, BAR1 without NVML) makes the check `unknown`, never
//! a pass.

use crate::checks::Ctx;
use crate::pci::{classify, PathClass};
use crate::report::{Check, Status};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A node profile.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The kind of node (`DGX H100`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where its figures come from (a specification, or the node it was recorded on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<NicSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologySpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub software: Option<SoftwareSpec>,
}

/// The GPUs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// NVIDIA GPUs on the PCI bus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<usize>,
    /// Text every GPU's name contains (`H100`; the CUDA probe's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_contains: Option<String>,
    /// The PCI device ids every GPU's is one of (`[0x2330]`: H100 SXM5 80GB, in pci.ids); read
    /// from sysfs, so it needs no live probe (the Slurm health check's `--no-probes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_device_ids: Option<Vec<u32>>,
    /// The least BAR1 of every GPU, MiB (NVML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_bar1_mib: Option<u64>,
}

/// The RDMA devices that carry GPU traffic.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicSpec {
    /// Which RDMA devices count (a name prefix: `mlx5_`); default every one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_prefix: Option<String>,
    /// Exactly which RDMA devices count, by name (a node kind's compute NICs, where its storage
    /// NICs share their prefix); each must be present. With `name_prefix`, a device must match
    /// both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
    /// How many of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<usize>,
    /// Every port's link layer (`InfiniBand`, `Ethernet`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_layer: Option<String>,
    /// Every port's least rate, Gb/s (`400`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rate_gbps: Option<f64>,
}

/// How near each GPU's nearest NIC must be.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologySpec {
    /// The farthest path class a GPU's nearest NIC may be at: `PIX`, `PXB`, `PHB`, `NODE`, `SYS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub farthest: Option<PathClass>,
}

/// Software floors.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SoftwareSpec {
    /// The least NVIDIA driver version (`580.65.06`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_driver: Option<String>,
    /// The least kernel release (`6.8`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_kernel: Option<String>,
}

/// Why a profile could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("{}: {}", .0.display(), .1)]
    Read(std::path::PathBuf, std::io::Error),
    #[error("{}: {}", .0.display(), .1)]
    Parse(std::path::PathBuf, toml::de::Error),
    #[error("{}: {}", .0.display(), .1)]
    Write(std::path::PathBuf, String),
    #[error("{}: larger than 64 KiB, which no node profile is", .0.display())]
    TooLarge(std::path::PathBuf),
    #[error("{}: no such file, nor a built-in profile ({})", .0.display(), .1)]
    NotFound(std::path::PathBuf, String),
    #[error("{}: {}", .0.display(), .1)]
    Inconsistent(std::path::PathBuf, String),
}

/// The profile in `path` (at most 64 KiB: a profile is a few lines).
pub fn load(path: &Path) -> Result<Profile, ProfileError> {
    use std::io::Read;
    const MAX: u64 = 64 * 1024;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX + 1).read_to_string(&mut text))
        .map_err(|e| ProfileError::Read(path.to_path_buf(), e))?;
    if text.len() as u64 > MAX {
        return Err(ProfileError::TooLarge(path.to_path_buf()));
    }
    let p: Profile =
        toml::from_str(&text).map_err(|e| ProfileError::Parse(path.to_path_buf(), e))?;
    p.consistent()
        .map_err(|e| ProfileError::Inconsistent(path.to_path_buf(), e))?;
    Ok(p)
}

/// The leading numbers of a version (`7.2.12+deb14-amd64` is 7, 2, 12; `580.65.06` 580, 65, 6).
fn numbers(v: &str) -> Vec<u64> {
    v.split(['.', '-', '+', '~'])
        .map_while(|p| p.parse().ok())
        .collect()
}

/// `have` is at least `want`, compared number by number.
fn at_least(have: &str, want: &str) -> bool {
    numbers(have) >= numbers(want)
}

impl Profile {
    /// Whether an item needs a live probe (CUDA or NVML): a GPU's name, BAR1.
    pub fn needs_probes(&self) -> bool {
        self.gpu
            .as_ref()
            .is_some_and(|g| g.name_contains.is_some() || g.min_bar1_mib.is_some())
    }
}

impl Profile {
    /// What no node could match, refused when the profile is read: a named NIC outside its
    /// `name_prefix`, a NIC count above the names given.
    fn consistent(&self) -> Result<(), String> {
        let Some(n) = &self.nic else { return Ok(()) };
        if let (Some(names), Some(p)) = (&n.names, &n.name_prefix) {
            if let Some(bad) = names.iter().find(|d| !d.starts_with(p.as_str())) {
                return Err(format!(
                    "[nic] names {bad}, which its name_prefix \"{p}\" leaves out"
                ));
            }
        }
        if let (Some(names), Some(c)) = (&n.names, n.count) {
            if c > names.len() {
                return Err(format!(
                    "[nic] count = {c}, more than the {} names it gives",
                    names.len()
                ));
            }
        }
        Ok(())
    }
}

impl NicSpec {
    /// Whether the RDMA device `dev` is one the profile counts.
    fn counts(&self, dev: &str) -> bool {
        self.name_prefix
            .as_deref()
            .is_none_or(|p| dev.starts_with(p))
            && self
                .names
                .as_ref()
                .is_none_or(|n| n.iter().any(|n| n == dev))
    }
}

/// Whether `dev` counts under `nic` (every device without a `[nic]` table).
fn counted(nic: Option<&NicSpec>, dev: &str) -> bool {
    nic.is_none_or(|n| n.counts(dev))
}

/// The profiles nvpeer ships, by the name `--profile` takes in place of a file (each file's
/// `source` cites the specification its figures come from).
pub const BUILTIN: &[(&str, &str)] = &[
    ("dgx-h100", include_str!("../profiles/dgx-h100.toml")),
    ("dgx-h200", include_str!("../profiles/dgx-h200.toml")),
    (
        "azure-nd-h100-v5",
        include_str!("../profiles/azure-nd-h100-v5.toml"),
    ),
    (
        "azure-nd-h200-v5",
        include_str!("../profiles/azure-nd-h200-v5.toml"),
    ),
];

/// The profile `--profile ARG` names, and how to name it in the check: the file `arg` where
/// one is there, else the built-in profile of that name.
pub fn resolve(arg: &Path) -> Result<(String, Profile), ProfileError> {
    if arg.exists() {
        return Ok((arg.display().to_string(), load(arg)?));
    }
    let builtin = arg
        .to_str()
        .and_then(|a| BUILTIN.iter().find(|(n, _)| *n == a));
    match builtin {
        Some((name, text)) => {
            let p: Profile =
                toml::from_str(text).map_err(|e| ProfileError::Parse(arg.to_path_buf(), e))?;
            p.consistent()
                .map_err(|e| ProfileError::Inconsistent(arg.to_path_buf(), e))?;
            Ok((format!("built-in {name}"), p))
        }
        None => Err(ProfileError::NotFound(
            arg.to_path_buf(),
            BUILTIN
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
        )),
    }
}

/// One RDMA port's link layer and rate (Gb/s).
struct Port {
    dev: String,
    link_layer: String,
    rate: Option<f64>,
}

fn ports(ctx: &Ctx, nic: Option<&NicSpec>) -> (Vec<String>, Vec<Port>) {
    let devs: Vec<String> = ctx
        .rdma_devices
        .iter()
        .filter(|d| counted(nic, d))
        .cloned()
        .collect();
    let mut out = Vec::new();
    for d in &devs {
        for p in ctx.root.list(&format!("/sys/class/infiniband/{d}/ports")) {
            let base = format!("/sys/class/infiniband/{d}/ports/{p}");
            out.push(Port {
                dev: format!("{d}/{p}"),
                link_layer: ctx
                    .root
                    .read_trim(&format!("{base}/link_layer"))
                    .unwrap_or_default(),
                rate: ctx
                    .root
                    .read_trim(&format!("{base}/rate"))
                    .and_then(|r| r.split_whitespace().next()?.parse().ok()),
            });
        }
    }
    (devs, out)
}

/// Each GPU's nearest NIC among those the profile counts: (GPU, class); none for a GPU without a
/// NIC.
fn nearest(ctx: &Ctx, nic: Option<&NicSpec>) -> Vec<(String, Option<PathClass>)> {
    ctx.gpus
        .iter()
        .map(|g| {
            let best = ctx
                .nics
                .iter()
                .filter(|n| counted(nic, &n.name))
                .map(|n| classify(g, &n.pci))
                .min();
            (g.bdf.clone(), best)
        })
        .collect()
}

/// What the check found: mismatches, and what it could not read.
#[derive(Default)]
struct Judgement {
    matched: Vec<String>,
    wrong: Vec<String>,
    unread: Vec<String>,
}

impl Judgement {
    fn judge(&mut self, ok: bool, what: String) {
        if ok {
            self.matched.push(what);
        } else {
            self.wrong.push(what);
        }
    }
}

fn gpu_names(ctx: &Ctx) -> Option<Vec<(String, String)>> {
    match &ctx.probes.cuda {
        crate::probes::CudaProbe::Ok { gpus, .. } => Some(
            gpus.iter()
                .map(|g| (g.bdf.clone(), g.name.clone()))
                .collect(),
        ),
        _ => match &ctx.probes.nvml {
            crate::nvml::NvmlProbe::Ok { gpus, .. } => Some(
                gpus.iter()
                    .map(|g| (g.bdf.clone(), g.name.clone()))
                    .collect(),
            ),
            _ => None,
        },
    }
}

fn judge(p: &Profile, ctx: &Ctx) -> Judgement {
    let mut j = Judgement::default();
    if let Some(g) = &p.gpu {
        if let Some(n) = g.count {
            j.judge(
                ctx.gpus.len() == n,
                format!("{} NVIDIA GPU(s), the profile says {n}", ctx.gpus.len()),
            );
        }
        if let Some(want) = &g.name_contains {
            match gpu_names(ctx) {
                Some(names) if !names.is_empty() => {
                    let bad: Vec<String> = names
                        .iter()
                        .filter(|(_, n)| !n.contains(want.as_str()))
                        .map(|(b, n)| format!("{b} \"{n}\""))
                        .collect();
                    j.judge(
                        bad.is_empty(),
                        if bad.is_empty() {
                            format!("every GPU's name has \"{want}\"")
                        } else {
                            format!("GPU(s) without \"{want}\" in the name: {}", bad.join(", "))
                        },
                    );
                }
                _ => j
                    .unread
                    .push("the GPUs' names (no CUDA or NVML probe)".into()),
            }
        }
        if let Some(ids) = &g.pci_device_ids {
            let bad: Vec<String> = ctx
                .gpus
                .iter()
                .filter(|d| !ids.contains(&d.device))
                .map(|d| format!("{} {:#06x}", d.bdf, d.device))
                .collect();
            let want = ids
                .iter()
                .map(|i| format!("{i:#06x}"))
                .collect::<Vec<_>>()
                .join(" or ");
            j.judge(
                !ctx.gpus.is_empty() && bad.is_empty(),
                if ctx.gpus.is_empty() {
                    format!("no NVIDIA GPU to have PCI device id {want}")
                } else if bad.is_empty() {
                    format!("every GPU's PCI device id is {want}")
                } else {
                    format!(
                        "GPU(s) whose PCI device id is not {want}: {}",
                        bad.join(", ")
                    )
                },
            );
        }
        if let Some(min) = g.min_bar1_mib {
            match &ctx.probes.nvml {
                crate::nvml::NvmlProbe::Ok { gpus, .. } if !gpus.is_empty() => {
                    for n in gpus {
                        match &n.bar1 {
                            Ok(b) => {
                                let mib = b.total >> 20;
                                j.judge(
                                    mib >= min,
                                    format!(
                                        "{}: BAR1 {mib} MiB, the profile's least {min} MiB",
                                        n.bdf
                                    ),
                                );
                            }
                            Err(e) => j.unread.push(format!("{}'s BAR1 ({e})", n.bdf)),
                        }
                    }
                }
                _ => j.unread.push("BAR1 (no NVML probe)".into()),
            }
        }
    }
    if let Some(n) = &p.nic {
        let (devs, ports) = ports(ctx, Some(n));
        let which = match (&n.name_prefix, &n.names) {
            (_, Some(names)) => format!(" among the {} named", names.len()),
            (Some(p), None) => format!(" named {p}*"),
            (None, None) => String::new(),
        };
        if let Some(names) = &n.names {
            let missing: Vec<&str> = names
                .iter()
                .filter(|d| !devs.contains(d))
                .map(String::as_str)
                .collect();
            j.judge(
                missing.is_empty(),
                if missing.is_empty() {
                    format!("RDMA devices {} present", names.join(", "))
                } else {
                    format!("RDMA device(s) missing: {}", missing.join(", "))
                },
            );
        }
        if let Some(c) = n.count {
            j.judge(
                devs.len() == c,
                format!("{} RDMA device(s){which}, the profile says {c}", devs.len()),
            );
        }
        if let Some(ll) = &n.link_layer {
            let bad: Vec<String> = ports
                .iter()
                .filter(|p| &p.link_layer != ll)
                .map(|p| {
                    format!(
                        "{} {}",
                        p.dev,
                        if p.link_layer.is_empty() {
                            "?"
                        } else {
                            &p.link_layer
                        }
                    )
                })
                .collect();
            j.judge(
                !ports.is_empty() && bad.is_empty(),
                if ports.is_empty() {
                    format!("no RDMA port{which} to be {ll}")
                } else if bad.is_empty() {
                    format!("every port{which} is {ll}")
                } else {
                    format!("port(s) not {ll}: {}", bad.join(", "))
                },
            );
        }
        if let Some(min) = n.min_rate_gbps {
            let bad: Vec<String> = ports
                .iter()
                .filter(|p| p.rate.is_none_or(|r| r < min))
                .map(|p| {
                    format!(
                        "{} {}",
                        p.dev,
                        p.rate.map_or("?".into(), |r| format!("{r} Gb/s"))
                    )
                })
                .collect();
            j.judge(
                !ports.is_empty() && bad.is_empty(),
                if ports.is_empty() {
                    format!("no RDMA port{which} at {min} Gb/s")
                } else if bad.is_empty() {
                    format!("every port{which} at {min} Gb/s or more")
                } else {
                    format!("port(s) below {min} Gb/s: {}", bad.join(", "))
                },
            );
        }
    }
    if let Some(far) = p.topology.as_ref().and_then(|t| t.farthest) {
        let bad: Vec<String> = nearest(ctx, p.nic.as_ref())
            .into_iter()
            .filter(|(_, c)| c.is_none_or(|c| c > far))
            .map(|(g, c)| format!("{g} {}", c.map_or("no NIC".into(), |c| format!("{c:?}"))))
            .collect();
        j.judge(
            bad.is_empty(),
            if bad.is_empty() {
                format!("every GPU has a NIC at {far:?} or nearer")
            } else {
                format!(
                    "GPU(s) whose nearest NIC is farther than {far:?}: {}",
                    bad.join(", ")
                )
            },
        );
    }
    if let Some(s) = &p.software {
        if let Some(min) = &s.min_driver {
            match crate::checks::nvidia::driver_version(ctx) {
                Some(v) => j.judge(
                    at_least(&v, min),
                    format!("NVIDIA driver {v}, the profile's least {min}"),
                ),
                None => j
                    .unread
                    .push("the NVIDIA driver's version (not loaded)".into()),
            }
        }
        if let Some(min) = &s.min_kernel {
            match &ctx.release {
                Some(r) => j.judge(
                    at_least(r, min),
                    format!("kernel {r}, the profile's least {min}"),
                ),
                None => j.unread.push("the kernel release".into()),
            }
        }
    }
    j
}

/// `node.profile`: the node against `--profile`; not applicable without one.
pub fn check(ctx: &Ctx) -> Check {
    const ID: &str = "node.profile";
    const TITLE: &str = "node profile";
    let Some((file, p)) = &ctx.profile else {
        return Check::new(ID, TITLE, true, Status::Skip, "no --profile given");
    };
    let name = p.name.as_deref().unwrap_or("the profile");
    let j = judge(p, ctx);
    let mut details: Vec<String> = j.wrong.iter().map(|w| format!("✘ {w}")).collect();
    details.extend(j.unread.iter().map(|u| format!("? not read: {u}")));
    details.extend(j.matched.iter().map(|m| format!("✔ {m}")));
    let (status, summary) = if !j.wrong.is_empty() {
        (
            Status::Fail,
            format!("does not match {name} ({file}): {}", j.wrong.join("; ")),
        )
    } else if !j.unread.is_empty() {
        (
            Status::Unknown,
            format!(
                "{} of {name}'s items could not be read here",
                j.unread.len()
            ),
        )
    } else {
        (
            Status::Pass,
            format!("matches {name} ({} items)", j.matched.len()),
        )
    };
    let c = Check::new(ID, TITLE, true, status, summary).details(details);
    match status {
        Status::Fail => c.fix(
            "replace or reseat what differs, or hold this node to the profile of its own kind",
        ),
        Status::Unknown => {
            c.fix("run the doctor with its live probes (without --no-probes, as root)")
        }
        _ => c,
    }
}

/// This node's own profile, to hold others of its kind to: what the doctor reads here, every
/// figure as a floor or an exact count.
pub fn of_node(ctx: &Ctx) -> Profile {
    let names = gpu_names(ctx).unwrap_or_default();
    let common = names
        .first()
        .map(|(_, n)| n.clone())
        .filter(|n| names.iter().all(|(_, m)| m == n));
    let bar1 = match &ctx.probes.nvml {
        crate::nvml::NvmlProbe::Ok { gpus, .. } => gpus
            .iter()
            .filter_map(|g| g.bar1.as_ref().ok().map(|b| b.total >> 20))
            .min(),
        _ => None,
    };
    let (devs, ports) = ports(ctx, None);
    let mut ids: Vec<u32> = ctx
        .gpus
        .iter()
        .map(|g| g.device)
        .filter(|d| *d != 0)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let link_layer = ports
        .first()
        .map(|p| p.link_layer.clone())
        .filter(|l| !l.is_empty() && ports.iter().all(|p| &p.link_layer == l));
    // (a floor only where every port says its rate: a port without one fails the profile)
    let rate = ports
        .iter()
        .map(|p| p.rate)
        .collect::<Option<Vec<f64>>>()
        .and_then(|r| r.into_iter().reduce(f64::min));
    let farthest = nearest(ctx, None)
        .into_iter()
        .map(|(_, c)| c)
        .collect::<Option<Vec<_>>>();
    Profile {
        name: Some(format!(
            "recorded on {}",
            ctx.root
                .read_trim("/proc/sys/kernel/hostname")
                .unwrap_or_else(|| "this node".into())
        )),
        source: Some(format!(
            "nvpeer doctor --write-profile, nvpeer-tools {}",
            env!("CARGO_PKG_VERSION")
        )),
        gpu: Some(GpuSpec {
            count: Some(ctx.gpus.len()),
            name_contains: common,
            pci_device_ids: (!ids.is_empty()).then_some(ids),
            min_bar1_mib: bar1,
        }),
        nic: Some(NicSpec {
            name_prefix: None,
            names: None,
            count: Some(devs.len()),
            link_layer,
            min_rate_gbps: rate,
        }),
        topology: farthest
            .and_then(|c| c.into_iter().max())
            .map(|c| TopologySpec { farthest: Some(c) }),
        software: Some(SoftwareSpec {
            min_driver: crate::checks::nvidia::driver_version(ctx),
            min_kernel: ctx.release.clone(),
        }),
    }
}

/// Writes `p` to `path` as TOML, whole and never through a link (nvpeer-files).
pub fn write(p: &Profile, path: &Path) -> Result<(), ProfileError> {
    let text =
        toml::to_string(p).map_err(|e| ProfileError::Write(path.to_path_buf(), e.to_string()))?;
    let text = format!(
        "# nvpeer node profile (docs/operations.md, \"Node profiles\"): nvpeer doctor --profile FILE\n{text}"
    );
    nvpeer_files::write_file(path, text.as_bytes())
        .map_err(|e| ProfileError::Write(path.to_path_buf(), e.to_string()))
}
