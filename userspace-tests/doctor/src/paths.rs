//! The three ways GPU memory reaches an RDMA NIC, one verdict each: peer memory through nvpeer,
//! peer memory through NVIDIA's nvidia-peermem, and dma-buf. Which checks each path needs, which
//! failures follow from an earlier one (so a root cause is named once), and which library takes
//! which path on this node.

use crate::checks::{defs, Ctx, CONSUMERS};
use crate::report::{Check, Status};
use crate::settings::Effect;
use serde::Serialize;

/// A GPUDirect RDMA path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Path {
    /// Peer memory, served by nvpeer (as `nvidia_peermem` or `nvpeer`).
    Nvpeer,
    /// Peer memory, served by the nvidia-peermem module the NVIDIA driver ships.
    NvidiaPeermem,
    /// dma-buf export by the GPU driver, import by ib_core (`ibv_reg_dmabuf_mr`).
    Dmabuf,
}

/// Every path, in display order.
pub const ALL: [Path; 3] = [Path::Nvpeer, Path::NvidiaPeermem, Path::Dmabuf];

impl Path {
    /// How the report names it.
    pub fn title(self) -> &'static str {
        match self {
            Path::Nvpeer => "peer memory through nvpeer",
            Path::NvidiaPeermem => "peer memory through NVIDIA's nvidia-peermem",
            Path::Dmabuf => "dma-buf",
        }
    }
}

/// The paths a gating check's `fail` (or `unknown`) blocks (its definition's, crate::checks::defs).
pub fn gates(id: &str) -> &'static [Path] {
    defs::def(id).map_or(&[], |d| d.gates)
}

/// Earlier checks whose failure explains this check's: a failure with a failed dependency is
/// reported as following from it, and its fix is the dependency's (its definition's).
pub fn depends_on(id: &str) -> &'static [&'static str] {
    defs::def(id).map_or(&[], |d| d.depends_on)
}

/// A check whose `skip` means the path is not in use on this node (another module serves it).
fn presence(path: Path) -> Option<&'static str> {
    match path {
        Path::NvidiaPeermem => Some("nvidia.peermem"),
        _ => None,
    }
}

/// The state of one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Every check the path needs passed.
    Ready,
    /// A check it needs failed.
    NotReady,
    /// Nothing failed, but a check it needs could not be read.
    CouldNotCheck,
    /// Not in use: another module holds its place (nvpeer loaded as the drop-in nvidia_peermem).
    NotInUse,
}

/// The verdict for one path.
#[derive(Debug, Clone, Serialize)]
pub struct PathVerdict {
    /// Which path.
    pub path: Path,
    /// Its state.
    pub state: State,
    /// The check to fix first (`fail`, or `unknown` for could-not-check), after following
    /// `because_of` to its end.
    pub root_cause: Option<&'static str>,
    /// Every check that blocks it, root causes and consequences alike.
    pub blocked_by: Vec<&'static str>,
}

/// Sets each check's `paths` and `because_of`, then judges every path.
pub fn assess(checks: &mut [Check]) -> Vec<PathVerdict> {
    for c in checks.iter_mut() {
        c.paths = if c.gate {
            gates(c.id).to_vec()
        } else {
            Vec::new()
        };
    }
    let status_of =
        |checks: &[Check], id: &str| checks.iter().find(|c| c.id == id).map(|c| c.status);
    for i in 0..checks.len() {
        let s = checks[i].status;
        if !matches!(s, Status::Fail | Status::Unknown) {
            continue;
        }
        let cause = depends_on(checks[i].id)
            .iter()
            .copied()
            .find(|d| match status_of(checks, d) {
                Some(Status::Fail) => true,
                Some(Status::Unknown) => s == Status::Unknown,
                _ => false,
            });
        checks[i].because_of = cause;
    }
    ALL.iter().map(|&p| judge(checks, p)).collect()
}

fn root_of(checks: &[Check], mut id: &'static str) -> &'static str {
    for _ in 0..checks.len() {
        match checks
            .iter()
            .find(|c| c.id == id)
            .and_then(|c| c.because_of)
        {
            Some(next) => id = next,
            None => break,
        }
    }
    id
}

fn judge(checks: &[Check], path: Path) -> PathVerdict {
    let gating: Vec<&Check> = checks.iter().filter(|c| c.paths.contains(&path)).collect();
    let failed: Vec<&'static str> = gating
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| c.id)
        .collect();
    let unknown: Vec<&'static str> = gating
        .iter()
        .filter(|c| c.status == Status::Unknown)
        .map(|c| c.id)
        .collect();
    if let Some(id) = presence(path) {
        if checks
            .iter()
            .any(|c| c.id == id && c.status == Status::Skip)
        {
            return PathVerdict {
                path,
                state: State::NotInUse,
                root_cause: Some(id),
                blocked_by: vec![id],
            };
        }
    }
    if let Some(first) = failed.first() {
        return PathVerdict {
            path,
            state: State::NotReady,
            root_cause: Some(root_of(checks, first)),
            blocked_by: failed,
        };
    }
    if let Some(first) = unknown.first() {
        return PathVerdict {
            path,
            state: State::CouldNotCheck,
            root_cause: Some(root_of(checks, first)),
            blocked_by: unknown,
        };
    }
    PathVerdict {
        path,
        state: State::Ready,
        root_cause: None,
        blocked_by: Vec::new(),
    }
}

/// How a library treats dma-buf relative to peer memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmabufUse {
    /// Registers through dma-buf whenever its dma-buf probe passes, peer memory otherwise.
    Prefers,
    /// Peer memory when its probe finds a module, dma-buf otherwise.
    Fallback,
    /// Peer memory only.
    Never,
}

/// Which path one library takes here.
#[derive(Debug, Clone, Serialize)]
pub struct LibraryUse {
    /// Library, as in `peer.consumers`.
    pub library: &'static str,
    /// The path it takes; `None`: no GPUDirect RDMA (GPU data staged through host memory, or the
    /// library refuses).
    pub path: Option<Path>,
    /// Why, in one sentence.
    pub why: String,
}

/// The library family whose settings apply (`NCCL`, `UCX`), if the doctor reads any.
fn family(library: &str) -> Option<&'static str> {
    if library.starts_with("NCCL") {
        Some("NCCL")
    } else if library.starts_with("UCX") {
        Some("UCX")
    } else {
        None
    }
}

/// Which path each library of `peer.consumers` takes, given the path verdicts and the NCCL/UCX
/// settings in effect.
pub fn library_uses(ctx: &Ctx, verdicts: &[PathVerdict]) -> Vec<LibraryUse> {
    let ready = |p: Path| {
        verdicts
            .iter()
            .any(|v| v.path == p && v.state == State::Ready)
    };
    let peer = if ready(Path::Nvpeer) {
        Some(Path::Nvpeer)
    } else if ready(Path::NvidiaPeermem) {
        Some(Path::NvidiaPeermem)
    } else {
        None
    };
    let findings = crate::settings::findings(&ctx.settings, &ctx.rdma_devices);
    CONSUMERS
        .iter()
        .map(|p| {
            let set: Vec<&crate::settings::Finding> = findings
                .iter()
                .filter(|f| Some(f.library) == family(p.library))
                .collect();
            let off = set
                .iter()
                .find(|f| matches!(f.effect, Effect::RdmaOff | Effect::GdrOff));
            if let Some(f) = off {
                return LibraryUse {
                    library: p.library,
                    path: None,
                    why: format!("{}={} ({}): {}", f.key, f.value, f.source, f.why),
                };
            }
            let dmabuf_off = set.iter().find(|f| f.effect == Effect::DmabufOff);
            let sees_peer = p.paths.iter().any(|f| ctx.root.exists(f));
            let peer_ok = peer.filter(|_| sees_peer);
            let dmabuf_ok =
                ready(Path::Dmabuf) && p.dmabuf != DmabufUse::Never && dmabuf_off.is_none();
            let (path, why) = match (p.dmabuf, dmabuf_ok, peer_ok) {
                (DmabufUse::Prefers, true, _) => (
                    Some(Path::Dmabuf),
                    "dma-buf passes its probe and it prefers dma-buf".to_string(),
                ),
                (_, _, Some(pp)) => (
                    Some(pp),
                    format!("its probe finds the peer-memory module ({})", p.source),
                ),
                (_, true, None) => (
                    Some(Path::Dmabuf),
                    "no peer-memory module it detects; it falls back to dma-buf".to_string(),
                ),
                (_, false, None) => {
                    let mut why = if peer.is_some() && !sees_peer {
                        format!("its probe does not see the loaded module: {}", p.otherwise)
                    } else {
                        p.otherwise.to_string()
                    };
                    if let Some(f) = dmabuf_off.filter(|_| ready(Path::Dmabuf)) {
                        why.push_str(&format!(" ({}={} turns its dma-buf off)", f.key, f.value));
                    }
                    (None, why)
                }
            };
            LibraryUse {
                library: p.library,
                path,
                why,
            }
        })
        .collect()
}
