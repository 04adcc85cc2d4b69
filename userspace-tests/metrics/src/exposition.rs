//! The Prometheus text exposition (format 0.0.4, what node_exporter's textfile collector parses)
//! of a [`Snapshot`], encoded by prometheus-client. docs/install.md ("Monitoring") lists every
//! series.

use crate::series::{self, Family, Series};
use crate::snapshot::{GpuBar1, Snapshot};
use nvpeer_doctor::checks::NvMemProvider;
use nvpeer_doctor::paths::{Path, State};
use nvpeer_doctor::report::{Report, Status, Verdict};
use nvpeer_uapi::debugfs::Stats;
use nvpeer_uapi::memory_peers::PeerCounters;
use prometheus_client::encoding::{prometheus_text, EncodeLabelSet};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family as Fam;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Every series' name starts with this (and `_`).
pub const PREFIX: &str = "nvpeer";

/// A gauge of unsigned values (bytes, counts, 0/1).
type U64Gauge = Gauge<u64, AtomicU64>;

/// The text of the exposition.
pub fn encode(s: &Snapshot) -> Result<String, std::fmt::Error> {
    let mut r = Registry::with_prefix(PREFIX);
    tools(&mut r);
    stats(&mut r, s.stats.as_ref().ok());
    providers(&mut r, &s.providers);
    memory_peers(&mut r, &s.peer_clients);
    bar1(&mut r, &s.gpus);
    doctor(&mut r, &s.report);
    let mut out = String::new();
    prometheus_text::encode(&mut out, &r)?;
    Ok(out)
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: String,
}

fn tools(r: &mut Registry) {
    let f = Fam::<VersionLabels, U64Gauge>::default();
    f.get_or_create(&VersionLabels {
        version: env!("CARGO_PKG_VERSION").to_string(),
    })
    .set(1);
    r.register(
        "tools_info",
        "The nvpeer-tools release that wrote these series (always 1)",
        f,
    );
}

/// A label set of one name and value (the three stats families differ only in the name).
type OneLabel = [(&'static str, &'static str); 1];

/// nvpeer's own counters: `nvpeer_up`, then each key of `stats` as [`series`] maps it. A key this
/// release does not know is left out.
fn stats(r: &mut Registry, stats: Option<&Stats>) {
    r.register(
        "up",
        "1 when nvpeer's counters were read from debugfs (/sys/kernel/debug/nvpeer/stats); 0 when not: nvpeer not loaded, debugfs not mounted, or not run as root. The nvpeer_* counters are absent then",
        ConstGauge::<u64>::new(stats.is_some().into()),
    );
    let Some(stats) = stats else { return };
    let families: Vec<(Family, Fam<OneLabel, Counter>)> =
        Family::ALL.iter().map(|f| (*f, Fam::default())).collect();
    for (key, value) in &stats.values {
        match series::of(key) {
            Some(Series::Gauge { name, help }) => {
                r.register(name, help, ConstGauge::<u64>::new(*value));
            }
            Some(Series::Counter { name, help }) => {
                r.register(name, help, ConstCounter::<u64>::new(*value));
            }
            Some(Series::Member { family, value: v }) => {
                if let Some((_, fam)) = families.iter().find(|(f, _)| *f == family) {
                    fam.get_or_create(&[(family.label(), v)]).inc_by(*value);
                }
            }
            None => {}
        }
    }
    // (a family left empty is not written: prometheus-client skips empty metrics)
    for (family, fam) in families {
        r.register(family.name(), family.help(), fam);
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    module: String,
    owner: String,
    version: String,
}

/// Who serves `nv_mem`: how many modules, and one info series per module.
fn providers(r: &mut Registry, providers: &[NvMemProvider]) {
    r.register(
        "nv_mem_providers",
        "Loaded modules that serve the nv_mem peer-memory client (nvpeer as nvidia_peermem or nvpeer, NVIDIA's nvidia_peermem, Mellanox's nv_peer_mem): 1 on a working node, 0 when none is loaded, 2 or more is a conflict",
        ConstGauge::<u64>::new(providers.len() as u64),
    );
    if providers.is_empty() {
        return;
    }
    let f = Fam::<ProviderLabels, U64Gauge>::default();
    for p in providers {
        f.get_or_create(&ProviderLabels {
            module: p.module.to_string(),
            owner: p.owner.to_string(),
            version: p.version.clone().unwrap_or_default(),
        })
        .set(1);
    }
    r.register(
        "nv_mem_provider_info",
        "A loaded module that serves nv_mem, as nvpeer doctor tells them apart (always 1): module name in /sys/module, owner nvpeer|nvidia|mellanox|unknown, its version",
        f,
    );
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClientLabels {
    client: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClientInfoLabels {
    client: String,
    version: String,
}

/// The peer-memory core's counters of every registered client, where the core keeps
/// `/sys/kernel/mm/memory_peers` (MLNX_OFED before 24.04, or a kernel that exports `mm_kobj`).
fn memory_peers(r: &mut Registry, clients: &[PeerCounters]) {
    if clients.is_empty() {
        return;
    }
    let info = Fam::<ClientInfoLabels, U64Gauge>::default();
    for c in clients {
        info.get_or_create(&ClientInfoLabels {
            client: c.client.clone(),
            version: c.version.clone(),
        })
        .set(1);
    }
    r.register(
        "memory_peers_client_info",
        "A peer-memory client registered with the core, from /sys/kernel/mm/memory_peers/<client>/version (always 1)",
        info,
    );
    for counter in nvpeer_uapi::memory_peers::COUNTERS {
        let f = Fam::<ClientLabels, Counter>::default();
        for c in clients {
            if let Some(v) = c.values.get(counter) {
                f.get_or_create(&ClientLabels {
                    client: c.client.clone(),
                })
                .inc_by(*v);
            }
        }
        let name = format!(
            "memory_peers_{}",
            counter.strip_prefix("num_").unwrap_or(counter)
        );
        let help = format!(
            "The peer-memory core's counter of each client (/sys/kernel/mm/memory_peers/<client>/{counter})"
        );
        r.register(name, help, f);
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabels {
    gpu: String,
    pci_bus_id: String,
}

/// BAR1 size and use per GPU (NVML); nothing without NVML.
fn bar1(r: &mut Registry, gpus: &[GpuBar1]) {
    if gpus.is_empty() {
        return;
    }
    let size = Fam::<GpuLabels, U64Gauge>::default();
    let used = Fam::<GpuLabels, U64Gauge>::default();
    for g in gpus {
        let l = GpuLabels {
            gpu: g.index.to_string(),
            pci_bus_id: g.bdf.clone(),
        };
        size.get_or_create(&l).set(g.bar1.total);
        used.get_or_create(&l).set(g.bar1.used);
    }
    r.register(
        "gpu_bar1_size_bytes",
        "BAR1 aperture of the GPU (NVML nvmlDeviceGetBAR1MemoryInfo total); gpu is NVML's index",
        size,
    );
    r.register(
        "gpu_bar1_used_bytes",
        "BAR1 in use on the GPU: CUDA mappings and peer-memory pins (NVML nvmlDeviceGetBAR1MemoryInfo used); pins beyond the free rest fail",
        used,
    );
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckLabels {
    check: String,
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FaultLabels {
    check: String,
    code: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabels {
    path: String,
    state: String,
}

/// The JSON name of a check status (docs/doctor.md).
pub fn status_name(s: Status) -> &'static str {
    match s {
        Status::Pass => "pass",
        Status::Warn => "warn",
        Status::Fail => "fail",
        Status::Unknown => "unknown",
        Status::Skip => "skip",
    }
}

/// The JSON name of a path.
pub fn path_name(p: Path) -> &'static str {
    match p {
        Path::Nvpeer => "nvpeer",
        Path::NvidiaPeermem => "nvidia_peermem",
        Path::Dmabuf => "dmabuf",
    }
}

/// The JSON name of a path's state.
pub fn state_name(s: State) -> &'static str {
    match s {
        State::Ready => "ready",
        State::NotReady => "not_ready",
        State::CouldNotCheck => "could_not_check",
        State::NotInUse => "not_in_use",
    }
}

/// The doctor's verdicts: one series per check, one per path, and the overall answer.
fn doctor(r: &mut Registry, report: &Report) {
    r.register(
        "doctor_ready",
        "1 when nvpeer doctor finds some GPUDirect RDMA path ready (its exit status 0), 0 when not",
        ConstGauge::<u64>::new((report.verdict == Verdict::Ready).into()),
    );
    let paths = Fam::<PathLabels, U64Gauge>::default();
    for v in &report.paths {
        paths
            .get_or_create(&PathLabels {
                path: path_name(v.path).to_string(),
                state: state_name(v.state).to_string(),
            })
            .set((v.state == State::Ready).into());
    }
    r.register(
        "doctor_path_ready",
        "1 when the GPUDirect RDMA path is ready (nvpeer doctor: every check it needs passed), 0 when not; state ready|not_ready|could_not_check|not_in_use",
        paths,
    );
    let checks = Fam::<CheckLabels, U64Gauge>::default();
    for c in &report.checks {
        checks
            .get_or_create(&CheckLabels {
                check: c.id.to_string(),
                status: status_name(c.status).to_string(),
            })
            .set((c.status == Status::Pass).into());
    }
    let faults = Fam::<FaultLabels, U64Gauge>::default();
    for c in &report.checks {
        if let Some(code) = c.code {
            faults
                .get_or_create(&FaultLabels {
                    check: c.id.to_string(),
                    code: code.to_string(),
                })
                .set(matches!(c.status, Status::Fail | Status::Warn | Status::Unknown).into());
        }
    }
    r.register(
        "doctor_fault",
        "One series per nvpeer doctor check with its fault code (docs/operations.md): 1 while the check does not pass (fail, warn or unknown), 0 when it passes or does not apply",
        faults,
    );
    r.register(
        "doctor_check_passed",
        "One series per nvpeer doctor check (docs/doctor.md): 1 when it passed, 0 when not; status pass|warn|fail|unknown|skip",
        checks,
    );
}
