//! `nvpeer validate`: the conformance suite (docs/validation.md, "Cases"). Capability discovery, the
//! registration matrix per path, data integrity for every operation and direction, and
//! invalidation, each as one case with a pass/fail line and a probable cause. `--nccl` runs
//! NCCL's own test instead (`nccl`).
//!
//! Files by concept: `capability` (the `cap.*` prerequisites), `memory` (the `mem.*` cases of the
//! memory backend), `registration` (the registration matrix per path), `transfer` (data integrity
//! per operation and direction), `invalidation` (a free under a live MR), `summary` (the closing
//! report and exit status). This file holds the suite's shared state, the case runner and the
//! order the cases run in.

mod after_free;
mod alloc_kinds;
mod capability;
#[cfg(feature = "bench")]
mod emu_kinds;
mod invalidation;
mod memory;
pub mod nccl;
mod node_profile;
pub mod peer_path;
mod registration;
mod summary;
mod transfer;

pub use registration::{matrix_sizes, OFFSETS};
pub use transfer::direction_pairs;

use crate::cli::{MemKind, Role, ValidateArgs};
use crate::mem::{Backend, Buffer, MemError};
use crate::peer::{self, Peer, Req, Target};
use crate::reg::{RegPath, Registrar};
use crate::report::{self, CaseResult};
use crate::report_html::{self, ReportError};
use crate::sysfs::{self, NodeFacts};
use crate::verbs::Device;
use nvpeer_verdict::Verdict;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

const POLL: Duration = Duration::from_secs(60);

/// Everything the cases share.
pub struct Suite {
    args: ValidateArgs,
    facts: NodeFacts,
    /// How GPU registrations are proven to go through the peer client ([`peer_path`]).
    proof: peer_path::Proof,
    backend: Option<Rc<dyn Backend>>,
    dev: Option<Rc<Device>>,
    emu_core: Option<crate::reg::EmuCoreHandle>,
    peer: Option<Peer>,
    remote_mem: String,
    seed: u64,
    pub info: Vec<(String, String)>,
    pub results: Vec<CaseResult>,
    /// The failed prerequisite (a `cap.*` or `oob.*` case) that keeps the rest from running.
    blocker: Option<String>,
    /// Cases not run because of the blocker, with the reason.
    pub not_run: Vec<(String, String)>,
    /// Print nothing and write no file ([`collect`]: a caller that reports the cases itself,
    /// `nvpeer validate --fleet`).
    quiet: bool,
    /// The JSON document of the run, kept by `finish` for `--json` and `--report`.
    document: Option<report::ValidateReport>,
}

/// Whether a case is a prerequisite of the others: its failure means the suite could not run.
pub fn is_setup_case(name: &str) -> bool {
    name.starts_with("cap.") || name.starts_with("oob.")
}

impl Suite {
    /// Whether a case runs under `--only`. The prerequisites (`cap.*`) always run: every other
    /// case needs what they open, and a failed one is the root cause to name.
    fn wanted(&self, name: &str) -> bool {
        name.starts_with("cap.")
            || name == "node.profile"
            || self.args.only.is_empty()
            || self.args.only.iter().any(|w| name.contains(w.as_str()))
    }

    fn record(&mut self, mut r: CaseResult, start: Instant) {
        r.duration_ms = start.elapsed().as_millis() as u64;
        if r.status == report::Status::Fail && is_setup_case(&r.name) && self.blocker.is_none() {
            self.blocker = Some(format!("{} failed", r.name));
        }
        if !self.args.common.json && !self.quiet {
            report::say(&report::case_line(&r));
        }
        self.results.push(r);
    }

    /// Runs `f` as case `name` unless filtered out.
    fn case(&mut self, name: &str, f: impl FnOnce(&mut Self) -> CaseResult) {
        if !self.wanted(name) {
            return;
        }
        if let Some(b) = &self.blocker {
            self.not_run
                .push((name.to_string(), format!("not run: {b}")));
            return;
        }
        let t = Instant::now();
        let r = f(self);
        self.record(r, t);
    }

    fn gpu(&self) -> bool {
        self.args.common.mem != MemKind::Host
    }

    fn paths(&self) -> Vec<RegPath> {
        match self.args.common.mem {
            MemKind::Host => vec![RegPath::VaMr],
            MemKind::Cuda if self.args.both_paths => vec![RegPath::VaMr, RegPath::DmaBuf],
            MemKind::Cuda => vec![RegPath::VaMr],
            MemKind::CudaDmabuf => vec![RegPath::DmaBuf],
            #[cfg(feature = "bench")]
            MemKind::Emu => vec![RegPath::EmuCore],
        }
    }

    fn registrar(&self, path: RegPath) -> Registrar {
        Registrar {
            pd: self.dev.as_ref().map(|d| d.pd.clone()),
            core: self.emu_core.clone(),
            path,
            relaxed: false,
        }
    }

    /// The counters that prove GPU registrations went through the peer client, read now.
    fn counters(&self) -> Option<peer_path::Snapshot> {
        self.proof.snapshot(Path::new("/"))
    }

    /// Whether registrations on `path` go through a peer-memory client (GPU memory registered by
    /// VA: `ibv_reg_mr`, or the emulated core), so that `reg.*` must prove it: through the core's
    /// `memory_peers` counters, else nvpeer's debugfs stats, else named as unprovable
    /// ([`peer_path::Proof`]).
    fn peer_registered(&self, path: RegPath) -> bool {
        self.gpu() && path != RegPath::DmaBuf
    }

    /// Whether registrations on `path` move counters that can be read here ([`Self::peer_registered`]
    /// and a source that counts).
    fn counted(&self, path: RegPath) -> bool {
        self.peer_registered(path) && self.proof.counts()
    }

    /// The reason verbs cases cannot run, if any.
    fn no_verbs(&self) -> Option<String> {
        if self.dev.is_none() {
            Some("no RDMA device".into())
        } else {
            None
        }
    }

    fn no_regs(&self, path: RegPath) -> Option<String> {
        match path {
            #[cfg(feature = "bench")]
            RegPath::EmuCore if self.emu_core.is_none() => Some("peer_mem_emu not loaded".into()),
            #[cfg(feature = "bench")]
            RegPath::EmuCore => None,
            _ => self.no_verbs(),
        }
    }

    fn alloc(&self, size: u64) -> Result<Box<dyn Buffer>, MemError> {
        match &self.backend {
            Some(b) => b.alloc(size as usize),
            None => Err(MemError::Unsupported("memory backend unavailable".into())),
        }
    }

    /// Runs every case; returns the process exit status.
    pub fn run(&mut self) -> Verdict {
        // The memory cases need the GPU only: they run before the RDMA device is looked for, so
        // that a node without a NIC (or a NIC developer still waiting for a board) learns what
        // its GPU half does.
        self.node_profile();
        self.cap_memory();
        self.mem_cases();
        self.kind_cases();
        self.cap_device();
        self.cap_dmabuf();
        self.cap_peer_client();
        // Far side: a local target in loopback, the server in two-node mode.
        if let (Some(dev), Some(be)) = (self.dev.clone(), self.backend.clone()) {
            let path = self.paths()[0];
            match self.args.common.role() {
                Role::Client(host) => match crate::oob::Channel::connect(&host, self.args.common.port, Duration::from_secs(30)) {
                    Ok(ch) => {
                        let mut p = Peer::Remote(ch);
                        match p.greet(&self.args.common, false) {
                            Ok(mem) => {
                                self.remote_mem = mem;
                                self.peer = Some(p);
                            }
                            Err(e @ peer::PeerError::Unexpected(..)) => self.record(
                                CaseResult::fail(
                                    "oob.connect",
                                    e.to_string(),
                                    "the peer is not an nvpeer server of this version",
                                ),
                                Instant::now(),
                            ),
                            Err(e) => self.record(
                                CaseResult::fail(
                                    "oob.connect",
                                    e.to_string(),
                                    "the server refused this client: give both sides the same \
                                     --token (or NVPEER_TOKEN), and the same nvpeer version; a \
                                     `bench --server -b` serves bidirectional bench clients only",
                                ),
                                Instant::now(),
                            ),
                        }
                    }
                    Err(e) => self.record(CaseResult::fail("oob.connect", e.to_string(), "start `nvpeer validate --server` on the other node first; check the TCP port and firewall"), Instant::now()),
                },
                _ => {
                    self.remote_mem = be.kind().to_string();
                    let limit = self.args.common.serve.caps;
                    self.peer = Some(Peer::Local(Box::new(Target::new(dev, be, path, limit))));
                }
            }
        }
        for path in self.paths() {
            self.reg_cases(path);
        }
        #[cfg(feature = "bench")]
        self.emu_kind_cases();
        for path in self.paths() {
            self.xfer_cases(path);
        }
        for path in self.paths() {
            self.inval_cases(path);
        }
        if let Some(Peer::Remote(_)) = self.peer.as_ref() {
            let _ = self.peer.as_mut().map(|p| p.unit(Req::Bye));
        }
        self.finish()
    }
}

/// What a quiet run ([`collect`]) found: the exit status it would have had, every case that
/// ran, the cases a failed prerequisite kept from running, and that prerequisite.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub verdict: Verdict,
    pub cases: Vec<CaseResult>,
    pub not_run: Vec<(String, String)>,
    pub blocked_by: Option<String>,
}

/// Runs the suite as `nvpeer validate` does (a client or loopback; not `--server`), printing
/// nothing and writing no `--junit` file: the cases come back to the caller (`nvpeer validate
/// --fleet`, which runs one pair of nodes at a time and reports the whole fleet).
pub fn collect(args: ValidateArgs) -> Outcome {
    let mut s = suite(args, true);
    let verdict = s.run();
    Outcome {
        verdict,
        cases: std::mem::take(&mut s.results),
        not_run: std::mem::take(&mut s.not_run),
        blocked_by: s.blocker.take(),
    }
}

/// Why `nvpeer validate` could not run at all (exit status 2, printed once by the caller).
#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error(transparent)]
    Server(#[from] peer::ServerError),
    #[error("--profile {0}")]
    Profile(#[from] nvpeer_doctor::profile::ProfileError),
}

/// Entry point of `nvpeer validate`: the run's verdict, or why it could not run (its `--report`
/// could not be written, its `--server` could not start).
pub fn run(args: ValidateArgs) -> Result<Verdict, ValidateError> {
    if args.report.is_none() && (args.report_from.is_some() || !args.report_bench.is_empty()) {
        return Err(ReportError::NoDirectory.into());
    }
    if let (Some(dir), Some(from)) = (&args.report, &args.report_from) {
        // A saved run's report: nothing runs; the status is the one that run had.
        let doc = report_html::read_validate(from)?;
        let written = report_html::write(dir, &doc, &args.report_bench)?;
        report::say(&written.summary());
        return Ok(doc.verdict());
    }
    if args.nccl {
        return Ok(nccl::run(&nccl::NcclArgs {
            binary: args.nccl_tests.clone(),
            gpus: args.nccl_gpus,
            max_bytes: args.nccl_max_size,
            timeout: Duration::from_secs(args.nccl_timeout),
            json: args.common.json,
        }));
    }
    if let Some(p) = &args.profile {
        // A profile that cannot be read is a bad argument: nothing runs.
        nvpeer_doctor::profile::resolve(p)?;
    }
    if args.common.server {
        serve(&args)?;
        return Ok(Verdict::Passed);
    }
    let mut s = suite(args, false);
    if !s.args.common.json {
        report::say(&format!(
            "nvpeer validate: mem={} role={:?} max-size={} seed={}",
            s.args.common.mem,
            s.args.common.role(),
            s.args.max_size,
            s.seed
        ));
    }
    let verdict = s.run();
    if let (Some(dir), Some(doc)) = (&s.args.report, &s.document) {
        let written = report_html::write(dir, doc, &s.args.report_bench)?;
        // (on stderr under --json: stdout holds the document alone)
        if s.args.common.json {
            eprintln!("{}", written.summary());
        } else {
            report::say(&written.summary());
        }
    }
    Ok(verdict)
}

/// The suite for `args`, nothing run yet.
fn suite(args: ValidateArgs, quiet: bool) -> Suite {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let facts = sysfs::node_facts(Path::new("/"));
    // Only GPU memory registered by VA needs the proof (reading who serves nv_mem scans the node).
    let proof = if args.common.mem == MemKind::Host {
        peer_path::Proof::Unprovable("host memory: no peer client involved".into())
    } else {
        peer_path::decide(Path::new("/"))
    };
    let remote_mem = args.common.mem.to_string();
    Suite {
        info: vec![("seed".into(), seed.to_string())],
        args,
        facts,
        proof,
        backend: None,
        dev: None,
        emu_core: None,
        peer: None,
        remote_mem,
        seed,
        results: Vec::new(),
        blocker: None,
        not_run: Vec::new(),
        quiet,
        document: None,
    }
}

fn serve(args: &ValidateArgs) -> Result<(), peer::ServerError> {
    let c = &args.common;
    let path = if c.mem == MemKind::CudaDmabuf {
        RegPath::DmaBuf
    } else {
        RegPath::VaMr
    };
    peer::run_server(c, path, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_prerequisites_block() {
        for n in [
            "cap.memory",
            "cap.rdma-device",
            "cap.peer-client",
            "oob.connect",
        ] {
            assert!(is_setup_case(n), "{n}");
        }
        for n in [
            "reg.sizes[ibv_reg_mr]",
            "xfer.write.host->host[ibv_reg_mr]",
            "mem.alloc-free",
        ] {
            assert!(!is_setup_case(n), "{n}");
        }
    }
}
