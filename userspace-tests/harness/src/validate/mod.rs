//! `nvpeer validate`: the conformance suite (ecosystem.md §1.6). Capability discovery, the
//! registration matrix per path, data integrity for every operation and direction, and
//! invalidation, each as one case with a pass/fail line and a probable cause.

use crate::causes;
use crate::cli::{MemKind, Role, ValidateArgs};
use crate::environment;
use crate::junit;
use crate::mem::{self, host::HostBackend, Backend, Buffer, MemError};
use crate::pattern;
use crate::peer::{self, Peer, RemoteBuf, Req, Target};
use crate::reg::{Mr, RegPath, Registrar};
use crate::report::{self, CaseResult};
use crate::sysfs::{self, NodeFacts, PeerCounters};
use crate::verbs::{self, Device, Endpoint, Op};
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

const POLL: Duration = Duration::from_secs(60);

/// Everything the cases share.
pub struct Suite {
    args: ValidateArgs,
    facts: NodeFacts,
    backend: Option<Rc<dyn Backend>>,
    dev: Option<Rc<Device>>,
    emu_core: Option<mem::emu::EmuCore>,
    peer: Option<Peer>,
    remote_mem: String,
    seed: u64,
    pub info: Vec<(String, String)>,
    pub results: Vec<CaseResult>,
    /// The failed prerequisite (a `cap.*` or `oob.*` case) that keeps the rest from running.
    blocker: Option<String>,
    /// Cases not run because of the blocker, with the reason.
    pub not_run: Vec<(String, String)>,
}

/// Whether a case is a prerequisite of the others: its failure means the suite could not run.
pub fn is_setup_case(name: &str) -> bool {
    name.starts_with("cap.") || name.starts_with("oob.")
}

fn errno_text(e: Option<i32>) -> String {
    match e {
        Some(n) => std::io::Error::from_raw_os_error(n).to_string(),
        None => "no errno".into(),
    }
}

/// Registration sizes of the matrix: edges around host and GPU pages, powers of two, the max.
pub fn matrix_sizes(max: u64) -> Vec<u64> {
    let mut v: Vec<u64> = vec![1, 2, 3, 7, 4095, 4096, 4097, 65535, 65536, 65537, 2 << 20];
    let mut p = 1u64 << 17;
    while p <= max {
        v.push(p);
        match p.checked_mul(2) {
            Some(n) => p = n,
            None => break,
        }
    }
    v.push(max);
    v.retain(|s| *s <= max);
    v.sort_unstable();
    v.dedup();
    v
}

/// (local is GPU, remote is GPU) pairs to test: GPU→GPU, GPU→host and host→GPU when either side
/// has GPU memory (each once), host→host only when neither has.
pub fn direction_pairs(local_gpu: bool, remote_gpu: bool) -> Vec<(bool, bool)> {
    let mut v = vec![
        (local_gpu, remote_gpu),
        (local_gpu, false),
        (false, remote_gpu),
    ];
    v.sort();
    v.dedup();
    v.reverse();
    v
}

/// Offsets not aligned to the 64 KiB GPU page (and one that is, as a control).
pub const OFFSETS: [u64; 7] = [1, 4095, 4096, 65535, 65536, 65537, 3 * 65536 + 123];

impl Suite {
    /// Whether a case runs under `--only`. The prerequisites (`cap.*`) always run: every other
    /// case needs what they open, and a failed one is the root cause to name.
    fn wanted(&self, name: &str) -> bool {
        name.starts_with("cap.")
            || self.args.only.is_empty()
            || self.args.only.iter().any(|w| name.contains(w.as_str()))
    }

    fn record(&mut self, mut r: CaseResult, start: Instant) {
        r.duration_ms = start.elapsed().as_millis() as u64;
        if r.status == report::Status::Fail && is_setup_case(&r.name) && self.blocker.is_none() {
            self.blocker = Some(format!("{} failed", r.name));
        }
        if !self.args.common.json {
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
            MemKind::Emu => vec![RegPath::EmuCore],
        }
    }

    fn registrar(&self, path: RegPath) -> Registrar {
        Registrar {
            pd: self.dev.as_ref().map(|d| d.pd.clone()),
            core: self.emu_core.clone(),
            path,
        }
    }

    fn counters(&self) -> Option<PeerCounters> {
        sysfs::main_client(Path::new(sysfs::MEMORY_PEERS))
    }

    /// Whether registrations on `path` must show up in the peer client's counters.
    /// Whether a registration on `path` moves the core's client counters that can be read here: not
    /// on a core that keeps no `/sys/kernel/mm/memory_peers` (DOCA-OFED on a kernel without the
    /// `mm_kobj` export, i.e. every Rust-capable kernel), where the counter checks are skipped.
    fn counted(&self, path: RegPath) -> bool {
        self.gpu() && path != RegPath::DmaBuf && self.facts.peer_sysfs
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
            RegPath::EmuCore if self.emu_core.is_none() => Some("peer_mem_emu not loaded".into()),
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

    // ---------------------------------------------------------------- capability cases

    fn cap_memory(&mut self) {
        let kind = self.args.common.mem;
        let gpu = self.args.common.gpu.clone();
        let both = self.args.both_paths;
        self.case("cap.memory", |s| {
            let open = if kind == MemKind::Cuda && both { mem::open(MemKind::CudaDmabuf, &gpu) } else { mem::open(kind, &gpu) };
            match open {
                Ok(b) => {
                    let facts = b.facts();
                    let d = facts.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ");
                    s.info.extend(facts);
                    s.backend = Some(Rc::from(b));
                    CaseResult::pass("cap.memory", format!("{kind}: {d}"))
                }
                Err(e) => {
                    let cause = match &e {
                        MemError::NoLibcuda => "install the NVIDIA driver (libcuda.so.1 comes with it)".to_string(),
                        MemError::NoSuchGpu(..) => "pick another --gpu (index or PCI bus id from nvidia-smi)".into(),
                        MemError::Os { .. } if kind == MemKind::Emu => {
                            "load the bench emulators: modprobe nvp2p_emu peer_mem_emu".into()
                        }
                        MemError::Unsupported(m) if m.contains("DMA_BUF") => {
                            "dma-buf export needs the open NVIDIA kernel modules (>= 515) and a recent kernel".into()
                        }
                        _ => "see the message".into(),
                    };
                    CaseResult::fail("cap.memory", e.to_string(), cause)
                }
            }
        });
        if self.args.common.mem == MemKind::Emu {
            if let Ok(b) = mem::emu::EmuBackend::open() {
                self.emu_core = b.core();
            }
        }
    }

    fn cap_device(&mut self) {
        let c = self.args.common.clone();
        let needs = self.args.common.mem != MemKind::Emu || c.ib_dev.is_some();
        self.case("cap.rdma-device", |s| {
            match Device::open(c.ib_dev.as_deref(), c.ib_port, c.gid_index) {
                Ok(d) => {
                    let detail = format!(
                        "{} port {} {} gid[{}]={} mtu={:?} max_mr_size={}",
                        d.name,
                        d.port,
                        d.link_layer,
                        d.gid_index,
                        sideway::ibverbs::address::Gid { raw: d.gid.raw },
                        d.mtu,
                        d.max_mr_size
                    );
                    s.info.push(("rdma device".into(), d.name.clone()));
                    s.dev = Some(Rc::new(d));
                    CaseResult::pass("cap.rdma-device", detail)
                }
                Err(e) if !needs => CaseResult::skip(
                    "cap.rdma-device",
                    format!("{e} (not needed: --mem emu registers through peer_mem_emu)"),
                ),
                Err(e) => CaseResult::fail("cap.rdma-device", e.to_string(), causes::device(&e)),
            }
        });
    }

    fn cap_dmabuf(&mut self) {
        let needed = self.paths().contains(&RegPath::DmaBuf);
        self.case("cap.dmabuf-import", |s| {
            let Some(d) = s.dev.as_ref() else {
                return CaseResult::skip("cap.dmabuf-import", "no RDMA device");
            };
            match d.dmabuf_probe() {
                Ok(()) => CaseResult::pass(
                    "cap.dmabuf-import",
                    "ibv_reg_dmabuf_mr(fd=-1) -> EBADF: kernel and provider import dma-bufs",
                ),
                Err(n) if needed => CaseResult::fail(
                    "cap.dmabuf-import",
                    format!("ibv_reg_dmabuf_mr(fd=-1) -> {}", errno_text(Some(n))),
                    causes::registration(
                        MemKind::CudaDmabuf,
                        RegPath::DmaBuf,
                        Some(n),
                        0,
                        &s.facts,
                    ),
                ),
                Err(n) => CaseResult::pass(
                    "cap.dmabuf-import",
                    format!(
                        "dma-buf import unsupported ({}); not needed for --mem {}",
                        errno_text(Some(n)),
                        s.args.common.mem
                    ),
                ),
            }
        });
    }

    fn cap_peer_client(&mut self) {
        if !self.gpu() || !self.paths().iter().any(|p| *p != RegPath::DmaBuf) {
            return;
        }
        if !self.facts.peer_sysfs {
            self.case("cap.peer-client", |s| {
                let serving: Vec<&str> = s
                    .facts
                    .modules
                    .iter()
                    .map(String::as_str)
                    .filter(|m| matches!(*m, "nvpeer" | "nvidia_peermem" | "nv_peer_mem" | "classic_peer"))
                    .collect();
                if serving.is_empty() {
                    CaseResult::fail(
                        "cap.peer-client",
                        "no peer-memory module loaded (this core keeps no client list in sysfs)",
                        "load nvpeer: modprobe nvidia-peermem (NCCL/UCX/NVSHMEM look for /sys/module/nvidia_peermem)",
                    )
                } else {
                    CaseResult::pass(
                        "cap.peer-client",
                        format!(
                            "{} loaded; this core keeps no /sys/kernel/mm/memory_peers (DOCA-OFED on a kernel without the mm_kobj export): the client counter checks are skipped",
                            serving.join(", ")
                        ),
                    )
                }
            });
            return;
        }
        self.case("cap.peer-client", |s| match s.counters() {
            Some(c) => CaseResult::pass(
                "cap.peer-client",
                format!("/sys/kernel/mm/memory_peers/{}/version = {}", c.client, c.version),
            ),
            None => {
                let cause = if !s.facts.peer_api && s.args.common.mem != MemKind::Emu {
                    causes::registration(MemKind::Cuda, RegPath::VaMr, Some(libc::EFAULT), 0, &NodeFacts { peer_api: false, ..Default::default() })
                } else {
                    "no peer-memory client registered: load nvpeer (NCCL/UCX/NVSHMEM look for nv_mem)".into()
                };
                CaseResult::fail("cap.peer-client", "no client under /sys/kernel/mm/memory_peers", cause)
            }
        });
    }

    // ---------------------------------------------------------------- memory cases

    fn mem_cases(&mut self) {
        let max = self.args.max_size;
        self.case("mem.alloc-free", |s| {
            let Some(be) = s.backend.clone() else {
                return CaseResult::skip("mem.alloc-free", "no memory backend");
            };
            let mut b = match be.alloc(max as usize) {
                Ok(b) => b,
                Err(e) => {
                    return CaseResult::fail(
                        "mem.alloc-free",
                        e.to_string(),
                        "GPU out of memory or driver error",
                    )
                }
            };
            let mut detail = format!("{max} bytes at {:#x}", b.addr());
            if be.cpu_access() {
                let p = pattern::generate(s.seed, 0, max as usize);
                if let Err(e) = b.write(0, &p) {
                    return CaseResult::fail(
                        "mem.alloc-free",
                        e.to_string(),
                        "copy to the buffer failed",
                    );
                }
                let mut back = vec![0u8; max as usize];
                if let Err(e) = b.read(0, &mut back) {
                    return CaseResult::fail(
                        "mem.alloc-free",
                        e.to_string(),
                        "copy from the buffer failed",
                    );
                }
                if let Some(i) = pattern::first_mismatch(s.seed, 0, &back) {
                    return CaseResult::fail(
                        "mem.alloc-free",
                        format!("pattern mismatch at byte {i}"),
                        "memory corrupts data",
                    );
                }
                detail.push_str(", pattern written and read back");
            }
            match b.release() {
                Ok(()) => CaseResult::pass("mem.alloc-free", format!("{detail}, freed")),
                Err(e) => CaseResult::fail("mem.alloc-free", e.to_string(), "free failed"),
            }
        });
        if self.backend.as_ref().map(|b| b.kind()) == Some(MemKind::CudaDmabuf) {
            self.case("mem.dmabuf-export", |s| {
                let mut sizes = vec![];
                for sz in [1u64, 65536, 65537, max] {
                    let mut b = match s.alloc(sz) {
                        Ok(b) => b,
                        Err(e) => return CaseResult::fail("mem.dmabuf-export", format!("{sz} bytes: {e}"), "cuMemGetHandleForAddressRange failed: driver/kernel without dma-buf export"),
                    };
                    let Some(d) = b.dmabuf() else {
                        return CaseResult::fail("mem.dmabuf-export", "no fd", "export returned nothing");
                    };
                    let link = std::fs::read_link(format!("/proc/self/fd/{}", d.fd)).map(|p| p.display().to_string()).unwrap_or_default();
                    if !link.contains("dmabuf") {
                        return CaseResult::fail("mem.dmabuf-export", format!("fd {} is '{link}'", d.fd), "the exported fd is not a dma-buf");
                    }
                    if let Err(e) = b.release() {
                        return CaseResult::fail("mem.dmabuf-export", e.to_string(), "free after export failed");
                    }
                    sizes.push(sz.to_string());
                }
                CaseResult::pass("mem.dmabuf-export", format!("exported, checked (anon_inode:dmabuf) and freed: {} bytes", sizes.join(", ")))
            });
        }
    }

    // ---------------------------------------------------------------- registration matrix

    /// Registers `len` at `off` of `buf` on `path`, returns the MR or a failed case.
    fn try_reg(
        &self,
        name: &str,
        reg: &Registrar,
        buf: &dyn Buffer,
        off: u64,
        len: u64,
    ) -> Result<Mr, CaseResult> {
        reg.register(buf, off as usize, len as usize).map_err(|e| {
            CaseResult::fail(
                name,
                format!(
                    "{} of {len} bytes at offset {off}: {}",
                    reg.path.label(),
                    e.msg
                ),
                causes::registration(self.args.common.mem, reg.path, e.errno, len, &self.facts),
            )
        })
    }

    /// Checks that `n` registrations moved the client's counters (GPU VA paths only).
    fn counters_moved(
        &self,
        path: RegPath,
        before: &Option<PeerCounters>,
        n: u64,
    ) -> Result<String, (String, String)> {
        if !self.counted(path) {
            return Ok(String::new());
        }
        let (Some(b), Some(a)) = (before.as_ref(), self.counters()) else {
            return Err((
                "no peer client counters".into(),
                "no client under /sys/kernel/mm/memory_peers (module not loaded?)".into(),
            ));
        };
        let d = a.delta(b);
        let alloc = d.get("num_alloc_mrs").copied().unwrap_or(0);
        let dealloc = d.get("num_dealloc_mrs").copied().unwrap_or(0);
        if alloc < n || dealloc < n {
            return Err((
                format!("{}: num_alloc_mrs +{alloc}, num_dealloc_mrs +{dealloc}, expected +{n} each", a.client),
                format!("registrations did not go through the peer client '{}' (another client claimed them, or host pages were pinned)", a.client),
            ));
        }
        Ok(format!(
            "; {}: num_alloc_mrs +{alloc}, num_dealloc_mrs +{dealloc}",
            a.client
        ))
    }

    fn reg_cases(&mut self, path: RegPath) {
        let tag = format!("[{}]", path.label());
        let max = self.args.max_size;
        let name = format!("reg.sizes{tag}");
        self.case(&name.clone(), |s| {
            if let Some(w) = s.no_regs(path) {
                return CaseResult::skip(&name, w);
            }
            let reg = s.registrar(path);
            let buf = match s.alloc(max) {
                Ok(b) => b,
                Err(e) => return CaseResult::fail(&name, e.to_string(), "allocation failed"),
            };
            let sizes = matrix_sizes(max);
            let before = s.counters();
            for &sz in &sizes {
                match s.try_reg(&name, &reg, buf.as_ref(), 0, sz) {
                    Ok(mr) => mr.dereg(),
                    Err(r) => return r,
                }
            }
            match s.counters_moved(path, &before, sizes.len() as u64) {
                Ok(c) => CaseResult::pass(
                    &name,
                    format!(
                        "{} sizes 1 B .. {max} B registered and deregistered{c}",
                        sizes.len()
                    ),
                ),
                Err((d, cause)) => CaseResult::fail(&name, d, cause),
            }
        });
        let name = format!("reg.offsets{tag}");
        self.case(&name.clone(), |s| {
            if let Some(w) = s.no_regs(path) {
                return CaseResult::skip(&name, w);
            }
            let reg = s.registrar(path);
            let len = 8192u64;
            let size = OFFSETS.iter().max().copied().unwrap_or(0) + 2 * 65536 + len;
            let buf = match s.alloc(size) {
                Ok(b) => b,
                Err(e) => return CaseResult::fail(&name, e.to_string(), "allocation failed"),
            };
            let before = s.counters();
            let mut n = 0;
            for off in OFFSETS {
                for l in [1, len, 65536 + 17] {
                    match s.try_reg(&name, &reg, buf.as_ref(), off, l) {
                        Ok(mr) => mr.dereg(),
                        Err(r) => return r,
                    }
                    n += 1;
                }
            }
            match s.counters_moved(path, &before, n) {
                Ok(c) => {
                    CaseResult::pass(&name, format!("{n} unaligned (offset, length) pairs{c}"))
                }
                Err((d, cause)) => CaseResult::fail(&name, d, cause),
            }
        });
        let name = format!("reg.many-small{tag}");
        let count = self.args.small_mrs.max(1) as u64;
        self.case(&name.clone(), |s| {
            if let Some(w) = s.no_regs(path) {
                return CaseResult::skip(&name, w);
            }
            let reg = s.registrar(path);
            let stride = 65536u64;
            let buf = match s.alloc(count * stride) {
                Ok(b) => b,
                Err(e) => return CaseResult::fail(&name, e.to_string(), "allocation failed"),
            };
            let before = s.counters();
            let mut mrs = Vec::new();
            for i in 0..count {
                match s.try_reg(&name, &reg, buf.as_ref(), i * stride + 512, 4096) {
                    Ok(mr) => mrs.push(mr),
                    Err(mut r) => {
                        r.detail = format!("after {i} live MRs: {}", r.detail);
                        return r;
                    }
                }
            }
            let keys: std::collections::HashSet<u32> = mrs.iter().map(|m| m.lkey()).collect();
            if path != RegPath::EmuCore && keys.len() != mrs.len() {
                return CaseResult::fail(
                    &name,
                    format!("{} distinct lkeys for {} MRs", keys.len(), mrs.len()),
                    "the NIC handed out duplicate keys",
                );
            }
            drop(mrs);
            match s.counters_moved(path, &before, count) {
                Ok(c) => CaseResult::pass(
                    &name,
                    format!("{count} MRs of 4 KiB held at once, then deregistered{c}"),
                ),
                Err((d, cause)) => CaseResult::fail(&name, d, cause),
            }
        });
        let name = format!("reg.churn{tag}");
        let churn = self.args.churn.max(1) as u64;
        self.case(&name.clone(), |s| {
            if let Some(w) = s.no_regs(path) {
                return CaseResult::skip(&name, w);
            }
            let reg = s.registrar(path);
            let buf = match s.alloc(1 << 20) {
                Ok(b) => b,
                Err(e) => return CaseResult::fail(&name, e.to_string(), "allocation failed"),
            };
            let before = s.counters();
            let t = Instant::now();
            for i in 0..churn {
                match s.try_reg(&name, &reg, buf.as_ref(), (i % 3) * 4096, 1 << 19) {
                    Ok(mr) => mr.dereg(),
                    Err(mut r) => {
                        r.detail = format!("cycle {i}: {}", r.detail);
                        return r;
                    }
                }
            }
            let per = t.elapsed().as_secs_f64() * 1e6 / churn as f64;
            let balanced = match (&before, s.counters()) {
                (Some(b), Some(a)) if s.counted(path) => {
                    let d = a.delta(b);
                    let al = d.get("num_alloc_mrs").copied().unwrap_or(0);
                    let de = d.get("num_dealloc_mrs").copied().unwrap_or(0);
                    if al != de || al < churn {
                        return CaseResult::fail(
                            &name,
                            format!("num_alloc_mrs +{al} vs num_dealloc_mrs +{de}"),
                            "registrations leaked in the peer client (dereg did not unpin)",
                        );
                    }
                    format!("; counters balanced (+{al}/+{de})")
                }
                _ => String::new(),
            };
            CaseResult::pass(
                &name,
                format!("{churn} reg/dereg cycles of 512 KiB, {per:.1} us each{balanced}"),
            )
        });
    }

    // ---------------------------------------------------------------- data integrity

    /// Local and remote memory kinds to test (see [`direction_pairs`]).
    fn directions(&self) -> Vec<(bool, bool)> {
        direction_pairs(self.gpu(), self.remote_mem != "host")
    }

    fn side(&self, gpu: bool, remote: bool) -> String {
        if !gpu {
            "host".into()
        } else if remote {
            self.remote_mem.clone()
        } else {
            self.args.common.mem.to_string()
        }
    }

    fn xfer_cases(&mut self, path: RegPath) {
        let ops = ["write", "write-imm", "read", "send-recv"];
        for (lg, rg) in self.directions() {
            for op in ops {
                let name = format!(
                    "xfer.{op}.{}->{}[{}]",
                    self.side(lg, false),
                    self.side(rg, true),
                    path.label()
                );
                self.case(&name.clone(), |s| {
                    if let Some(w) = s.no_verbs() {
                        return CaseResult::skip(&name, w);
                    }
                    if path == RegPath::EmuCore {
                        return CaseResult::skip(
                            &name,
                            "rxe cannot DMA emulated GPU pages: registration path only",
                        );
                    }
                    match s.xfer(&name, op, lg, rg, path) {
                        Ok(d) => CaseResult::pass(&name, d),
                        Err(r) => r,
                    }
                });
            }
        }
    }

    /// Connects a fresh QP pair (local endpoint + the peer's).
    fn connect(&mut self, depth: u32) -> Result<Endpoint, CaseResult> {
        let dev = self
            .dev
            .clone()
            .ok_or_else(|| CaseResult::skip("connect", "no RDMA device"))?;
        let mut ep = Endpoint::new(&dev, depth)
            .map_err(|e| CaseResult::fail("connect", e.to_string(), "QP creation failed"))?;
        let peer = self
            .peer
            .as_mut()
            .ok_or_else(|| CaseResult::skip("connect", "no peer"))?;
        let remote = peer.connect(ep.info(), depth).map_err(|e| {
            CaseResult::fail("connect", e.to_string(), "peer could not connect its QP")
        })?;
        ep.connect(&remote).map_err(|e| {
            CaseResult::fail(
                "connect",
                e.to_string(),
                "QP could not reach RTS: wrong GID index or port, or the peer is unreachable",
            )
        })?;
        Ok(ep)
    }

    fn local_buf(
        &self,
        name: &str,
        gpu: bool,
        path: RegPath,
        len: u64,
    ) -> Result<(Box<dyn Buffer>, Mr), CaseResult> {
        let buf = if gpu {
            self.alloc(len)
        } else {
            HostBackend.alloc(len as usize)
        }
        .map_err(|e| CaseResult::fail(name, e.to_string(), "allocation failed"))?;
        let reg = self.registrar(if gpu { path } else { RegPath::VaMr });
        let mr = self.try_reg(name, &reg, buf.as_ref(), 0, len)?;
        Ok((buf, mr))
    }

    fn xfer(
        &mut self,
        name: &str,
        op: &str,
        lg: bool,
        rg: bool,
        path: RegPath,
    ) -> Result<String, CaseResult> {
        let len = self.args.xfer_size;
        let (mut lbuf, lmr) = self.local_buf(name, lg, path, len)?;
        let peer_err = |e: peer::PeerError| {
            let cause = match e.errno() {
                Some(n) => causes::registration(
                    if rg { MemKind::Cuda } else { MemKind::Host },
                    RegPath::VaMr,
                    Some(n),
                    len,
                    &NodeFacts::default(),
                ),
                None => "peer failed".to_string(),
            };
            CaseResult::fail(name, e.to_string(), cause)
        };
        let rbuf: RemoteBuf = self
            .peer
            .as_mut()
            .ok_or_else(|| CaseResult::skip(name, "no peer"))?
            .alloc(len, !rg)
            .map_err(peer_err)?;
        let mut ep = self.connect(8).map_err(|mut r| {
            r.name = name.into();
            r
        })?;
        let seed = self.seed ^ (len << 8) ^ op.len() as u64;
        let peer = self
            .peer
            .as_mut()
            .ok_or_else(|| CaseResult::skip(name, "no peer"))?;
        let mut x = Xfer {
            name,
            ep: &mut ep,
            peer,
            lbuf: lbuf.as_mut(),
            lkey: lmr.lkey(),
            rbuf,
        };
        // The whole buffer, then a range at offsets not aligned to pages on either side.
        let us = x.once(op, 0, 0, len, seed)?;
        let mut detail = format!("{len} bytes ({us:.0} us)");
        if len > 8192 {
            let (lo, ro, l) = (3, 4099, len - 8192);
            x.once(op, lo, ro, l, seed.rotate_left(17))?;
            detail.push_str(&format!(" + {l} bytes at offsets {lo} -> {ro}"));
        }
        let _ = x.peer.unit(Req::Drop { id: rbuf.id });
        drop(lmr);
        Ok(format!("{detail}, pattern verified at the destination"))
    }

    // ---------------------------------------------------------------- invalidation

    fn inval_cases(&mut self, path: RegPath) {
        for inflight in [false, true] {
            let name = format!(
                "inval.{}[{}]",
                if inflight {
                    "free-inflight"
                } else {
                    "free-idle"
                },
                path.label()
            );
            self.case(&name.clone(), |s| {
                if !s.gpu() {
                    return CaseResult::skip(&name, "host memory stays pinned by its MR; invalidation applies to GPU memory");
                }
                if let Some(w) = s.no_regs(path) {
                    return CaseResult::skip(&name, w);
                }
                if path == RegPath::EmuCore {
                    if inflight {
                        return CaseResult::skip(&name, "no DMA engine behind the emulated core; see the emulator scenario suites");
                    }
                    return s.inval_emu(&name);
                }
                match s.inval_verbs(&name, path, inflight) {
                    Ok(r) | Err(r) => r,
                }
            });
        }
    }

    fn inval_emu(&mut self, name: &str) -> CaseResult {
        let reg = self.registrar(RegPath::EmuCore);
        let mut buf = match self.alloc(1 << 20) {
            Ok(b) => b,
            Err(e) => return CaseResult::fail(name, e.to_string(), "allocation failed"),
        };
        let before = self.counters();
        let mr = match self.try_reg(name, &reg, buf.as_ref(), 4096, 300_000) {
            Ok(m) => m,
            Err(r) => return r,
        };
        if let Err(e) = buf.release() {
            return CaseResult::fail(name, e.to_string(), "emulated cudaFree failed");
        }
        let q = match mr.emu().map(|m| m.query()) {
            Some(Ok(q)) => q,
            Some(Err(e)) => return CaseResult::fail(name, e.to_string(), "cannot query the MR"),
            None => return CaseResult::fail(name, "not an emulated MR", "internal"),
        };
        use mem::emu::{qflags, state};
        let stopped = q.state != state::MAPPED || q.flags & qflags::REVOKED != 0;
        let invalidating = q.flags & qflags::INVALIDATING != 0;
        drop(mr);
        let cb = match (&before, self.counters()) {
            (Some(b), Some(a)) => a
                .get("num_free_callbacks")
                .saturating_sub(b.get("num_free_callbacks")),
            _ => 0,
        };
        if !invalidating {
            // A persistent client: the provider keeps the pages until the pin is put at dereg.
            if q.state != state::MAPPED {
                return CaseResult::fail(
                    name,
                    format!(
                        "persistent registration became {} after free",
                        state::name(q.state)
                    ),
                    "a client without an invalidate callback had its MR torn down",
                );
            }
            return CaseResult::pass(name, format!("persistent client: the MR stays mapped after the free (pages pinned until dereg, by design), num_free_callbacks +{cb}, dereg afterwards ok"));
        }
        if !stopped {
            return CaseResult::fail(
                name,
                format!(
                    "MR still {} after free (flags {:#x})",
                    state::name(q.state),
                    q.flags
                ),
                "the peer client did not invalidate on the free callback",
            );
        }
        if cb == 0 && self.facts.peer_sysfs {
            return CaseResult::fail(
                name,
                "num_free_callbacks did not move",
                "the client did not call the core's invalidate from the free callback",
            );
        }
        if !self.facts.peer_sysfs && q.invalidations == 0 {
            return CaseResult::fail(
                name,
                format!(
                    "MR {} after free but the core saw no invalidation",
                    state::name(q.state)
                ),
                "the client did not call the core's invalidate from the free callback",
            );
        }
        let cbs = if self.facts.peer_sysfs {
            format!(", num_free_callbacks +{cb}")
        } else {
            " (this core keeps no counters in sysfs)".into()
        };
        CaseResult::pass(
            name,
            format!(
                "freed under a live MR: state {}, {} invalidation(s){cbs}, dereg afterwards ok",
                state::name(q.state),
                q.invalidations
            ),
        )
    }

    fn inval_verbs(
        &mut self,
        name: &str,
        path: RegPath,
        inflight: bool,
    ) -> Result<CaseResult, CaseResult> {
        let len = self.args.xfer_size;
        let fail = |d: String, c: &str| CaseResult::fail(name, d, c);
        let (mut lbuf, lmr) = self.local_buf(name, true, path, len)?;
        let rbuf = self
            .peer
            .as_mut()
            .ok_or_else(|| CaseResult::skip(name, "no peer"))?
            .alloc(len, true)
            .map_err(|e| fail(e.to_string(), "peer alloc failed"))?;
        let n_inflight: u32 = if inflight { 32 } else { 0 };
        let mut ep = self.connect(n_inflight + 8).map_err(|mut r| {
            r.name = name.into();
            r
        })?;
        let before = self.counters();
        let op = Op::Write {
            rkey: rbuf.rkey,
            raddr: rbuf.addr,
        };
        for i in 0..n_inflight {
            ep.post(op, i as u64, lmr.lkey(), lbuf.addr(), len)
                .map_err(|e| fail(e.to_string(), "post failed"))?;
        }
        // Free the GPU memory under the live MR (and, in-flight, under queued DMA).
        lbuf.release()
            .map_err(|e| fail(e.to_string(), "cuMemFree failed"))?;
        let mut seen = Vec::new();
        if inflight {
            seen = ep.poll(n_inflight as usize, POLL).unwrap_or_default();
        }
        // The MR must stop working: a new transfer from it must not succeed.
        let post = ep.post(op, 999, lmr.lkey(), lmr.addr, len);
        let after_status = match post {
            Err(_) => None,
            Ok(()) => match ep.poll(1, Duration::from_secs(20)) {
                Ok(cs) => cs
                    .iter()
                    .find(|c| c.wr_id == 999)
                    .map(|c| c.status)
                    .or(Some(5)),
                Err(_) => None,
            },
        };
        drop(lmr);
        let _ = self
            .peer
            .as_mut()
            .map(|p| p.unit(Req::Drop { id: rbuf.id }));
        let cb = match (&before, self.counters()) {
            (Some(b), Some(a)) => Some(
                a.get("num_free_callbacks")
                    .saturating_sub(b.get("num_free_callbacks")),
            ),
            _ => None,
        };
        let ok_before = seen.iter().filter(|c| c.ok()).count();
        let flight = if inflight {
            format!(
                "{ok_before}/{} in-flight writes completed before the revoke, ",
                seen.len()
            )
        } else {
            String::new()
        };
        match after_status {
            Some(0) if path == RegPath::DmaBuf => Ok(CaseResult::pass(
                name,
                format!("{flight}transfer after free still succeeded: the dma-buf importer keeps the pages until dereg (no revoke); process alive"),
            )),
            Some(0) if self.facts.persistent == Some(true) => Ok(CaseResult::pass(
                name,
                format!("{flight}transfer after free still succeeded: persistent client (persistent_api_support=1) keeps the pages pinned until dereg, by design; process alive"),
            )),
            Some(0) => Ok(fail(
                format!("{flight}RDMA WRITE from the freed MR completed successfully"),
                "the MR kept working on freed GPU memory: the peer client did not invalidate (the NIC may DMA into reused memory); \
                 expected only for a persistent client (persistent_api_support=1)",
            )),
            st => {
                let how = st.map(|s| format!("completion '{}'", verbs::wc_status_name(s))).unwrap_or_else(|| "post refused".into());
                if self.counted(path) && cb == Some(0) {
                    return Ok(fail(format!("{flight}MR stopped ({how}) but num_free_callbacks did not move"), "revocation happened outside the peer client's free callback"));
                }
                let cbs = cb.map(|c| format!(", num_free_callbacks +{c}")).unwrap_or_default();
                Ok(CaseResult::pass(name, format!("{flight}MR stopped working after free ({how}){cbs}; process alive, dereg ok")))
            }
        }
    }

    /// Runs every case; returns the process exit status.
    pub fn run(&mut self) -> u8 {
        self.cap_memory();
        self.cap_device();
        self.cap_dmabuf();
        self.cap_peer_client();
        self.mem_cases();
        // Far side: a local target in loopback, the server in two-node mode.
        if let (Some(dev), Some(be)) = (self.dev.clone(), self.backend.clone()) {
            let path = self.paths()[0];
            match self.args.common.role() {
                Role::Client(host) => match crate::oob::Channel::connect(&host, self.args.common.port, Duration::from_secs(30)) {
                    Ok(ch) => {
                        let mut p = Peer::Remote(ch);
                        match p.call(peer::hello(&self.args.common)) {
                            Ok(peer::Resp::Hello { mem, .. }) => {
                                self.remote_mem = mem;
                                self.peer = Some(p);
                            }
                            Ok(r) => self.record(
                                CaseResult::fail(
                                    "oob.connect",
                                    format!("unexpected answer to hello: {r:?}"),
                                    "the peer is not an nvpeer server of this version",
                                ),
                                Instant::now(),
                            ),
                            Err(e) => self.record(
                                CaseResult::fail(
                                    "oob.connect",
                                    e.to_string(),
                                    "the server refused this client: give both sides the same \
                                     --token (or NVPEER_TOKEN), and the same nvpeer version",
                                ),
                                Instant::now(),
                            ),
                        }
                    }
                    Err(e) => self.record(CaseResult::fail("oob.connect", e.to_string(), "start `nvpeer validate --server` on the other node first; check the TCP port and firewall"), Instant::now()),
                },
                _ => {
                    self.remote_mem = be.kind().to_string();
                    let limit = self.args.common.serve.mem_limit;
                    self.peer = Some(Peer::Local(Box::new(Target::new(dev, be, path, limit))));
                }
            }
        }
        for path in self.paths() {
            self.reg_cases(path);
        }
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

    /// Prints the report (text or JSON), writes the JUnit file if asked; returns the exit status:
    /// 0 all ran cases passed, 1 a case failed, 2 a prerequisite failed (the suite could not run).
    fn finish(&self) -> u8 {
        let mut s = report::summarize(&self.results);
        s.not_run = self.not_run.len();
        let gpu_bus = self
            .info
            .iter()
            .find(|(k, _)| k == "pci bus id")
            .map(|(_, v)| v.as_str());
        let mut env = environment::collect(
            Path::new("/"),
            self.dev.as_ref().map(|d| d.name.as_str()),
            gpu_bus,
            environment::ofed_info(),
        );
        // The doctor's snapshot goes into the reports meant to be handed in.
        if self.args.common.json || self.args.junit.is_some() {
            env.doctor = environment::doctor_snapshot(Path::new("/"));
        }
        let mut code = if self.blocker.is_some() {
            2
        } else {
            u8::from(s.failed > 0)
        };
        if self.args.common.json {
            let r = report::ValidateReport {
                tool: "nvpeer validate",
                version: env!("CARGO_PKG_VERSION"),
                mem: self.args.common.mem.to_string(),
                role: format!("{:?}", self.args.common.role()).to_lowercase(),
                environment: &env,
                facts: self
                    .info
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect(),
                cases: &self.results,
                blocked_by: self.blocker.as_deref(),
                not_run: self.not_run.iter().map(|(n, _)| n.as_str()).collect(),
                summary: s,
            };
            report::print_json(&r);
        } else {
            if let Some(b) = &self.blocker {
                report::say(&format!(
                    "NOT RUN {} case(s): {b}; fix that first (see its probable cause above)",
                    self.not_run.len()
                ));
            }
            report::say(&env.text());
            report::say(&report::summary_line(&s));
        }
        if let Some(f) = &self.args.junit {
            let mut props = env.pairs();
            props.extend(self.info.iter().cloned());
            let written = junit::render("nvpeer validate", &self.results, &self.not_run, &props)
                .and_then(|x| std::fs::write(f, x));
            if let Err(e) = written {
                eprintln!("nvpeer validate: writing {}: {e}", f.display());
                code = 2;
            }
        }
        code
    }
}

/// One data-integrity transfer between a local MR and a peer buffer.
struct Xfer<'a> {
    name: &'a str,
    ep: &'a mut Endpoint,
    peer: &'a mut Peer,
    lbuf: &'a mut dyn Buffer,
    lkey: u32,
    rbuf: RemoteBuf,
}

impl Xfer<'_> {
    fn fail(&self, d: String, c: impl Into<String>) -> CaseResult {
        CaseResult::fail(self.name, d, c)
    }

    /// Moves `len` bytes between local offset `lo` and remote offset `ro` with `op`, then checks
    /// the pattern (keyed by the remote offsets) at the destination. Returns microseconds.
    fn once(&mut self, op: &str, lo: u64, ro: u64, len: u64, seed: u64) -> Result<f64, CaseResult> {
        let (rkey, raddr) = (self.rbuf.rkey, self.rbuf.addr + ro);
        let imm = 0x5eed_0000 | (ro as u32 & 0xffff);
        let opv = match op {
            "write" => Op::Write { rkey, raddr },
            "write-imm" => Op::WriteImm { rkey, raddr, imm },
            "read" => Op::Read { rkey, raddr },
            _ => Op::Send,
        };
        let id = self.rbuf.id;
        if op == "read" {
            self.peer
                .unit(Req::Fill {
                    id,
                    off: ro,
                    len,
                    seed,
                })
                .map_err(|e| self.fail(e.to_string(), "peer could not fill its buffer"))?;
        } else {
            let p = pattern::generate(seed, ro, len as usize);
            self.lbuf
                .write(lo as usize, &p)
                .map_err(|e| self.fail(e.to_string(), "could not fill the local buffer"))?;
        }
        if matches!(op, "write-imm" | "send-recv") {
            let rlen = if op == "send-recv" { len } else { 0 };
            self.peer
                .unit(Req::PostRecv {
                    id,
                    off: ro,
                    len: rlen,
                    count: 1,
                })
                .map_err(|e| self.fail(e.to_string(), "peer could not post a receive"))?;
        }
        let t = Instant::now();
        self.ep
            .post(opv, 7, self.lkey, self.lbuf.addr() + lo, len)
            .map_err(|e| self.fail(e.to_string(), "post failed"))?;
        let cs = self.ep.poll(1, POLL).map_err(|e| {
            self.fail(
                e.to_string(),
                "no completion: the NIC never finished the request",
            )
        })?;
        if let Some(c) = cs.iter().find(|c| !c.ok()) {
            return Err(self.fail(
                format!(
                    "{} completed with '{}' (vendor err {:#x})",
                    opv.name(),
                    verbs::wc_status_name(c.status),
                    c.vendor_err
                ),
                causes::completion(c.status, false),
            ));
        }
        if matches!(op, "write-imm" | "send-recv") {
            let rc = self
                .peer
                .wait_recv(1, POLL.as_millis() as u64)
                .map_err(|e| self.fail(e.to_string(), "peer receive failed"))?;
            let Some(r) = rc.first() else {
                return Err(self.fail(
                    "no receive completion at the peer".into(),
                    "the peer's QP got nothing",
                ));
            };
            if !r.ok() {
                return Err(self.fail(
                    format!(
                        "peer receive completed with '{}'",
                        verbs::wc_status_name(r.status)
                    ),
                    causes::completion(r.status, false),
                ));
            }
            if op == "write-imm" && r.imm != imm {
                return Err(self.fail(
                    format!("immediate {:#x}, expected {imm:#x}", r.imm),
                    "immediate data corrupted",
                ));
            }
            if op == "send-recv" && r.byte_len as u64 != len {
                return Err(self.fail(
                    format!("received {} bytes, expected {len}", r.byte_len),
                    "message truncated",
                ));
            }
        }
        let us = t.elapsed().as_secs_f64() * 1e6;
        let mismatch = if op == "read" {
            let mut v = vec![0u8; len as usize];
            self.lbuf
                .read(lo as usize, &mut v)
                .map_err(|e| self.fail(e.to_string(), "could not read back"))?;
            pattern::first_mismatch(seed, ro, &v).map(|i| i as u64)
        } else {
            self.peer
                .verify(id, ro, len, seed)
                .map_err(|e| self.fail(e.to_string(), "peer could not verify"))?
        };
        if let Some(i) = mismatch {
            return Err(self.fail(
                format!("data mismatch at byte {i} of {len} (local offset {lo}, remote offset {ro})"),
                "payload corrupted between the NIC and memory (wrong DMA address or SGL trimming, PCIe ordering, IOMMU)",
            ));
        }
        Ok(us)
    }
}

/// Entry point of `nvpeer validate`.
pub fn run(args: ValidateArgs) -> u8 {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    if args.common.server {
        return serve(&args);
    }
    let facts = sysfs::node_facts(Path::new("/"));
    let remote_mem = args.common.mem.to_string();
    let mut s = Suite {
        info: vec![("seed".into(), seed.to_string())],
        args,
        facts,
        backend: None,
        dev: None,
        emu_core: None,
        peer: None,
        remote_mem,
        seed,
        results: Vec::new(),
        blocker: None,
        not_run: Vec::new(),
    };
    if !s.args.common.json {
        report::say(&format!(
            "nvpeer validate: mem={} role={:?} max-size={} seed={seed}",
            s.args.common.mem,
            s.args.common.role(),
            s.args.max_size
        ));
    }
    s.run()
}

fn serve(args: &ValidateArgs) -> u8 {
    let c = &args.common;
    let path = if c.mem == MemKind::CudaDmabuf {
        RegPath::DmaBuf
    } else {
        RegPath::VaMr
    };
    peer::run_server("nvpeer validate --server", c, path, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_cover_every_pairing_once() {
        assert_eq!(
            direction_pairs(true, true),
            vec![(true, true), (true, false), (false, true)]
        );
        assert_eq!(direction_pairs(false, false), vec![(false, false)]);
        // Host client against a GPU server: host→GPU and host→host.
        assert_eq!(
            direction_pairs(false, true),
            vec![(false, true), (false, false)]
        );
        assert_eq!(
            direction_pairs(true, false),
            vec![(true, false), (false, false)]
        );
    }

    #[test]
    fn matrix_covers_edges() {
        let m = matrix_sizes(4 << 20);
        assert_eq!(m.first(), Some(&1));
        assert_eq!(m.last(), Some(&(4 << 20)));
        for s in [4095, 4096, 4097, 65535, 65536, 65537] {
            assert!(m.contains(&s), "{s}");
        }
        assert!(m.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(matrix_sizes(3), vec![1, 2, 3]);
        let odd = matrix_sizes(100_000);
        assert_eq!(odd.last(), Some(&100_000));
        assert!(OFFSETS.iter().filter(|o| *o % 65536 != 0).count() >= 5);
    }

    proptest::proptest! {
        #[test]
        fn matrix_never_overflows(max in 1u64..=u64::MAX) {
            let m = matrix_sizes(max);
            proptest::prop_assert_eq!(m.last(), Some(&max));
            proptest::prop_assert!(m.windows(2).all(|w| w[0] < w[1]));
            proptest::prop_assert!(m.len() <= 11 + 48);
        }
    }

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
