//! One reading of the node: nvpeer's counters (nvpeer-uapi), the peer-memory core's, who serves
//! `nv_mem`, BAR1 per GPU (the doctor's NVML probe) and the doctor's report. Both outputs, the
//! Prometheus exposition and the NFD feature file, are written from one snapshot.

use nvpeer_doctor::checks::{self, NvMemProvider};
use nvpeer_doctor::nvml::{Bar1, NvmlProbe};
use nvpeer_doctor::probes::Probes;
use nvpeer_doctor::report::{Report, Require};
use nvpeer_doctor::root::SysRoot;
use nvpeer_uapi::debugfs::{self, Stats};
use nvpeer_uapi::memory_peers::{self, PeerCounters};
use std::path::Path;

/// One GPU's BAR1, as NVML accounts it.
#[derive(Debug, Clone)]
pub struct GpuBar1 {
    /// NVML index.
    pub index: u32,
    /// Lower-case `DDDD:BB:DD.F`, as sysfs spells it.
    pub bdf: String,
    /// The figures.
    pub bar1: Bar1,
}

/// Everything the outputs are made of.
#[derive(Debug)]
pub struct Snapshot {
    /// nvpeer's debugfs `stats`, or why it could not be read (module not loaded, debugfs not
    /// mounted, not root).
    pub stats: Result<Stats, nvpeer_uapi::Error>,
    /// The peer-memory core's clients and their counters, where the core keeps
    /// `/sys/kernel/mm/memory_peers` (empty elsewhere).
    pub peer_clients: Vec<PeerCounters>,
    /// The loaded modules that serve `nv_mem`, as the doctor tells them apart.
    pub providers: Vec<NvMemProvider>,
    /// BAR1 of every GPU NVML could read it for (empty without NVML).
    pub gpus: Vec<GpuBar1>,
    /// The doctor's report, its verdict about any path.
    pub report: Report,
}

impl Snapshot {
    /// Reads the node under `root` with `probes` (the live ones, or none).
    pub fn take(root: &Path, probes: Probes) -> Snapshot {
        let sys = SysRoot::new(root);
        let ctx = checks::Ctx::load(&sys, probes);
        let report = nvpeer_doctor::report_of(&ctx, Require::Any);
        Snapshot {
            stats: debugfs::read_stats(root),
            peer_clients: memory_peers::peer_clients(root),
            providers: checks::nv_mem_providers(&ctx),
            gpus: bar1_of(&ctx.probes.nvml),
            report,
        }
    }

    /// The loaded nvpeer (under either module name), if one is.
    pub fn nvpeer(&self) -> Option<&NvMemProvider> {
        self.providers.iter().find(|p| p.owner == "nvpeer")
    }
}

/// The GPUs whose BAR1 NVML reported; none when NVML was not probed, is missing or failed.
pub fn bar1_of(nvml: &NvmlProbe) -> Vec<GpuBar1> {
    match nvml {
        NvmlProbe::Ok { gpus, .. } => gpus
            .iter()
            .filter_map(|g| {
                Some(GpuBar1 {
                    index: g.index,
                    bdf: g.bdf.clone(),
                    bar1: *g.bar1.as_ref().ok()?,
                })
            })
            .collect(),
        _ => Vec::new(),
    }
}
