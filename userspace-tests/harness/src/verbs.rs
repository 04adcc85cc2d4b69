//! Verbs transport through sideway (dlopened libibverbs): device, port and GID selection, RC queue
//! pairs connected in loopback or across nodes, and the four operations the harness uses
//! (RDMA WRITE, WRITE_WITH_IMM, READ, SEND/RECV).
//!
//! The rest of the harness sees this wrapper instead of libibverbs: device and GID choice, the RC
//! endpoint, its MTU / READ-depth negotiation and GRH, completions and their status names, the four
//! operations.

use serde::{Deserialize, Serialize};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid, GidType};
use sideway::ibverbs::completion::{
    BasicCompletionQueue, PollCompletionQueueError, WorkCompletionStatus,
};
use sideway::ibverbs::device::DeviceInfo;
use sideway::ibverbs::device_context::{DeviceContext, Mtu};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState,
    SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;
use std::net::Ipv6Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Verbs-level failures, each with the errno when the library gave one.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    #[error("libibverbs lists no RDMA device: {0}")]
    NoList(nvpeer_doctor::probes::DeviceListFailure),
    #[error("no RDMA device on this node")]
    NoDevice,
    #[error("RDMA device '{0}' not found (present: {1})")]
    NotFound(String, String),
    #[error("{dev} port {port} is {state} (needs ACTIVE)")]
    PortDown {
        dev: String,
        port: u8,
        state: String,
    },
    #[error("{what}: {msg}")]
    Call {
        what: String,
        msg: String,
        errno: Option<i32>,
    },
    #[error("timed out after {0:?} waiting for completions")]
    Timeout(Duration),
    #[error("{0}")]
    TooLong(String),
}

impl VerbsError {
    pub fn errno(&self) -> Option<i32> {
        match self {
            VerbsError::Call { errno, .. } => *errno,
            _ => None,
        }
    }
}

/// errno carried by the first `io::Error` in an error's source chain.
pub fn errno_of(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io.raw_os_error();
        }
        src = s.source();
    }
    None
}

fn call_err(what: impl Into<String>, e: impl std::error::Error + 'static) -> VerbsError {
    let errno = errno_of(&e);
    let msg = match errno {
        Some(n) => format!("{e}: {}", std::io::Error::from_raw_os_error(n)),
        None => e.to_string(),
    };
    VerbsError::Call {
        what: what.into(),
        msg,
        errno,
    }
}

/// One usable GID of a port: sideway's address and type, with its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidChoice {
    pub index: u8,
    pub gid: Gid,
    pub kind: GidType,
}

/// Picks a GID like perftest does for RoCE: a RoCE v2 entry with an IPv4-mapped address first,
/// then any RoCE v2 entry, then any non-zero entry. (InfiniBand ports use index 0.)
pub fn choose_gid(entries: &[GidChoice]) -> Option<u8> {
    let nonzero: Vec<&GidChoice> = entries.iter().filter(|e| !e.gid.is_zero()).collect();
    let v2 = |e: &&&GidChoice| e.kind == GidType::RoceV2;
    let v4mapped = |e: &&&GidChoice| Ipv6Addr::from(e.gid).to_ipv4_mapped().is_some();
    nonzero
        .iter()
        .filter(v2)
        .find(v4mapped)
        .or_else(|| nonzero.iter().find(v2))
        .or_else(|| nonzero.first())
        .map(|e| e.index)
}

/// The GIDs of `port` that an address handle can name (index 0-255), from libibverbs'
/// `ibv_query_gid_table`. Empty when the table cannot be read (the caller falls back to index 0).
fn gid_table(ctx: &DeviceContext, port: u8) -> Vec<GidChoice> {
    // sideway panics on a GID type it does not know; a table it cannot decode is an empty one.
    let table = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ctx.query_gid_table().map(|t| {
            t.iter()
                .filter(|e| e.port_num() == u32::from(port))
                .filter_map(|e| {
                    let index = u8::try_from(e.gid_index()).ok()?;
                    Some(GidChoice {
                        index,
                        gid: e.gid(),
                        kind: e.gid_type(),
                    })
                })
                .collect::<Vec<_>>()
        })
    }));
    match table {
        Ok(Ok(v)) => v,
        _ => Vec::new(),
    }
}

/// Names of the RDMA devices libibverbs sees (empty when none or no library).
pub fn device_names() -> Result<Vec<String>, VerbsError> {
    let list = nvpeer_doctor::probes::device_list().map_err(VerbsError::NoList)?;
    Ok(list.iter().map(|d| d.name()).collect())
}

/// An opened device with its protection domain and the chosen port/GID.
pub struct Device {
    pub ctx: Arc<DeviceContext>,
    pub pd: Arc<ProtectionDomain>,
    pub name: String,
    pub port: u8,
    pub gid_index: u8,
    pub gid: Gid,
    pub lid: u16,
    pub mtu: Mtu,
    pub max_rd_atom: u8,
    pub max_qp_wr: u32,
    pub max_mr_size: u64,
    pub link_layer: String,
}

impl Device {
    /// Opens `name` (or the first device with an active `port`), and picks the GID.
    pub fn open(name: Option<&str>, port: u8, gid_index: Option<u8>) -> Result<Self, VerbsError> {
        let list = nvpeer_doctor::probes::device_list().map_err(VerbsError::NoList)?;
        if list.is_empty() {
            return Err(VerbsError::NoDevice);
        }
        let names: Vec<String> = list.iter().map(|d| d.name()).collect();
        let mut last_err = None;
        for dev in list.iter() {
            let dn = dev.name();
            if let Some(want) = name {
                if want != dn {
                    continue;
                }
            }
            let ctx = dev
                .open()
                .map_err(|e| call_err(format!("ibv_open_device({dn})"), e))?;
            let pattr = ctx
                .query_port(port)
                .map_err(|e| call_err(format!("ibv_query_port({dn}, {port})"), e))?;
            let state = format!("{:?}", pattr.port_state());
            if state != "Active" {
                last_err = Some(VerbsError::PortDown {
                    dev: dn.clone(),
                    port,
                    state,
                });
                if name.is_some() {
                    break;
                }
                continue;
            }
            let dattr = ctx
                .query_device()
                .map_err(|e| call_err(format!("ibv_query_device({dn})"), e))?;
            let link_layer = format!("{:?}", pattr.link_layer());
            let gid_index = match gid_index {
                Some(i) => i,
                None if link_layer == "InfiniBand" => 0,
                None => choose_gid(&gid_table(&ctx, port)).unwrap_or(0),
            };
            let gid = ctx
                .query_gid(port, gid_index.into())
                .map_err(|e| call_err(format!("ibv_query_gid({dn}, {gid_index})"), e))?;
            let pd = ctx.alloc_pd().map_err(|e| call_err("ibv_alloc_pd", e))?;
            return Ok(Device {
                pd,
                name: dn,
                port,
                gid_index,
                gid,
                lid: pattr.lid(),
                mtu: pattr.active_mtu(),
                max_rd_atom: device_reads(dattr.max_qp_rd_atom()),
                max_qp_wr: dattr.max_qp_wr().max(1) as u32,
                max_mr_size: dattr.max_mr_size(),
                link_layer,
                ctx,
            });
        }
        Err(match (name, last_err) {
            (_, Some(e)) => e,
            (Some(n), None) => VerbsError::NotFound(n.to_string(), names.join(", ")),
            (None, None) => VerbsError::NoDevice,
        })
    }

    /// The `ibv_reg_dmabuf_mr(fd = -1)` probe: EBADF means the kernel and provider support
    /// dma-buf registration, EOPNOTSUPP/EPROTONOSUPPORT mean they do not.
    pub fn dmabuf_probe(&self) -> Result<(), i32> {
        // SAFETY: fd -1 and length 0 make the kernel reject the call before touching memory.
        match unsafe { self.pd.reg_dmabuf_mr(0, 0, 0, -1, AccessFlags::LocalWrite) } {
            Ok(_) => Ok(()),
            Err(e) => {
                let ve = call_err("ibv_reg_dmabuf_mr", e);
                match ve.errno() {
                    Some(libc::EBADF) => Ok(()),
                    Some(n) => Err(n),
                    None => Err(libc::EOPNOTSUPP),
                }
            }
        }
    }
}

/// What one side tells the other to connect an RC QP. `mtu` (an `ibv_mtu` value, 1 = 256 bytes ..
/// 5 = 4096) and `out_reads` (RDMA READs this side accepts in flight) are negotiated as perftest
/// does: the path MTU is the smaller of the two, and each side issues at most as many READs as the
/// other accepts. 0 means "not said" (a peer of an older protocol): the local value stands.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct ConnInfo {
    pub qpn: u32,
    pub psn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
    #[serde(default)]
    pub mtu: u8,
    #[serde(default)]
    pub out_reads: u8,
}

/// The `ibv_mtu` value of a path MTU in bytes (256 .. 4096), as perftest's `-m` takes it.
pub fn mtu_code(bytes: u32) -> Option<u8> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

/// Bytes of an `ibv_mtu` value (0 for a value outside 1..=5).
pub fn mtu_bytes(code: u8) -> u32 {
    match code {
        1..=5 => 128 << code,
        _ => 0,
    }
}

/// The smaller of two `ibv_mtu` values, ignoring one that is not a valid code (perftest keeps its
/// own MTU when the peer's is out of range).
pub fn negotiate_mtu(local: u8, remote: u8) -> u8 {
    if (1..=5).contains(&remote) && remote < local {
        remote
    } else {
        local
    }
}

/// The READ depth a device offers from its `max_qp_rd_atom`: 1 ..= 16 (a device reporting 0 or
/// a negative value still gets one READ in flight; 16 is the most an RC QP negotiates here).
pub fn device_reads(max_qp_rd_atom: i32) -> u8 {
    // In 1..=16 after the clamp, so the cast is lossless.
    max_qp_rd_atom.clamp(1, 16) as u8
}

/// RDMA READs a QP issues: at most this side's own limit, and no more than the responder
/// accepts (`remote` 0: the peer did not say, the local value stands).
pub fn negotiate_reads(local: u8, remote: u8) -> u8 {
    if remote == 0 {
        local
    } else {
        local.min(remote)
    }
}

/// `-m` applied to the MTU a side offers: `code` lowers it, a code above the offer or outside
/// 1..=5 leaves it (perftest ignores a `-m` above the port's active MTU).
pub fn lower_mtu(offer: u8, code: u8) -> u8 {
    if (1..=5).contains(&code) && code < offer {
        code
    } else {
        offer
    }
}

/// `-o` applied to the READ depth a side offers: never above the offer, never below 1.
pub fn lower_reads(offer: u8, n: u8) -> u8 {
    offer.min(n.max(1))
}

/// What [`Endpoint::connect`] programs into the QP against `remote`, from what this side offers
/// (`mtu`, an `ibv_mtu` value, and `reads`, the READ depth).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// The path MTU (`ibv_mtu` value) of RTR: the smaller of the two offers.
    pub mtu: u8,
    /// `max_dest_rd_atomic` of RTR: READs this side accepts as responder (its own offer).
    pub accept_reads: u8,
    /// `max_rd_atomic` of RTS: READs this side issues, at most what the far side accepts.
    pub issue_reads: u8,
}

/// The path MTU and READ depths one side sets up against `remote` (perftest's negotiation).
pub fn negotiate(mtu: u8, reads: u8, remote: &ConnInfo) -> Negotiated {
    Negotiated {
        mtu: negotiate_mtu(mtu, remote.mtu),
        accept_reads: reads,
        issue_reads: negotiate_reads(reads, remote.out_reads),
    }
}

/// The global route header of an RC QP's address vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grh {
    pub dest_gid: Gid,
    pub src_gid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// The GRH this side puts on its packets to `remote`: the peer's GID, this side's GID index and
/// traffic class (`-T`), 64 hops. `None` for a peer that sent no GID (perftest on InfiniBand
/// without `-x`): it is reached by LID alone, and no traffic class is carried.
pub fn grh(remote: &ConnInfo, src_gid_index: u8, traffic_class: u8) -> Option<Grh> {
    (remote.gid != [0; 16]).then_some(Grh {
        dest_gid: Gid { raw: remote.gid },
        src_gid_index,
        hop_limit: 64,
        traffic_class,
    })
}

/// One completion, reduced to what the harness checks.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub byte_len: u32,
    pub imm: u32,
    pub vendor_err: u32,
}

impl Completion {
    pub fn ok(&self) -> bool {
        self.status == 0
    }
}

/// sideway's type for a completion status; `None` for a value libibverbs does not define (a
/// status from a peer is untrusted input, and sideway's own conversion panics on those).
pub fn wc_status(s: u32) -> Option<WorkCompletionStatus> {
    use WorkCompletionStatus as W;
    const KNOWN: [W; 24] = [
        W::Success,
        W::LocalLengthError,
        W::LocalQueuePairOperationError,
        W::LocalEndToEndContextOperationError,
        W::LocalProtectionError,
        W::WorkRequestFlushedError,
        W::MemoryWindowBindError,
        W::BadResponseError,
        W::LocalAccessError,
        W::RemoteInvalidRequestError,
        W::RemoteAccessError,
        W::RemoteOperationError,
        W::RetryCounterExceededError,
        W::ResponderNotReadyRetryCounterExceededError,
        W::LocalReliableDatagramDomainViolationError,
        W::RemoteInvalidReliableDatagramRequest,
        W::RemoteAbortedError,
        W::InvalidEndToEndContextNumberError,
        W::InvalidEndToEndContextStateError,
        W::FatalError,
        W::ResponseTimeoutError,
        W::GeneralError,
        W::TagMatchingError,
        W::TagMatchingRendezvousIncomplete,
    ];
    KNOWN.into_iter().find(|w| *w as u32 == s)
}

/// A completion status in words, as `ibv_wc_status_str` prints it.
pub fn wc_status_name(s: u32) -> &'static str {
    use WorkCompletionStatus as W;
    match wc_status(s) {
        Some(W::Success) => "success",
        Some(W::LocalLengthError) => "local length error",
        Some(W::LocalQueuePairOperationError) => "local QP operation error",
        Some(W::LocalEndToEndContextOperationError) => "local EE context operation error",
        Some(W::LocalProtectionError) => "local protection error",
        Some(W::WorkRequestFlushedError) => "work request flushed",
        Some(W::MemoryWindowBindError) => "memory window bind error",
        Some(W::BadResponseError) => "bad response",
        Some(W::LocalAccessError) => "local access error",
        Some(W::RemoteInvalidRequestError) => "remote invalid request",
        Some(W::RemoteAccessError) => "remote access error",
        Some(W::RemoteOperationError) => "remote operation error",
        Some(W::RetryCounterExceededError) => "transport retry counter exceeded",
        Some(W::ResponderNotReadyRetryCounterExceededError) => "RNR retry counter exceeded",
        Some(W::LocalReliableDatagramDomainViolationError) => "local RDD violation",
        Some(W::RemoteInvalidReliableDatagramRequest) => "remote invalid RD request",
        Some(W::RemoteAbortedError) => "remote aborted",
        Some(W::InvalidEndToEndContextNumberError) => "invalid EE context number",
        Some(W::InvalidEndToEndContextStateError) => "invalid EE context state",
        Some(W::FatalError) => "fatal error",
        Some(W::ResponseTimeoutError) => "response timeout",
        Some(W::GeneralError) => "general error",
        Some(W::TagMatchingError) => "tag matching error",
        Some(W::TagMatchingRendezvousIncomplete) => "tag matching rendezvous incomplete",
        None => "unknown status",
    }
}

/// The length field of a scatter/gather entry: `len` if it fits one message, never truncated.
pub fn sge_len(len: u64) -> Result<u32, VerbsError> {
    nvpeer_figures::size::check_message(len).map_err(VerbsError::TooLong)?;
    u32::try_from(len)
        .map_err(|_| VerbsError::TooLong(format!("{len} bytes do not fit a work request")))
}

/// Access rights every test MR and QP gets.
pub fn full_access() -> AccessFlags {
    AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead
}

/// [`full_access`], with PCIe relaxed ordering (`IBV_ACCESS_RELAXED_ORDERING`) when `relaxed`:
/// how perftest registers its buffers unless `--disable_pcie_relaxed` (perftest_resources.c,
/// `setup_mr_flags`). An optional access flag: a device or kernel without it registers the memory
/// strictly ordered, without an error.
pub fn access(relaxed: bool) -> AccessFlags {
    if relaxed {
        full_access() | AccessFlags::RelaxedOrdering
    } else {
        full_access()
    }
}

/// An RC queue pair with its own completion queue (send and receive share it).
pub struct Endpoint {
    pub qp: BasicQueuePair,
    pub cq: Arc<BasicCompletionQueue>,
    pub psn: u32,
    port: u8,
    gid_index: u8,
    lid: u16,
    gid: Gid,
    mtu: Mtu,
    rd_atom: u8,
    traffic_class: u8,
}

fn mtu_of(code: u8) -> Mtu {
    // Codes are validated (1..=5) before they get here; sideway's conversion panics otherwise.
    Mtu::from(u32::from(code.clamp(1, 5)))
}

fn pseudo_psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(7);
    (t ^ std::process::id().rotate_left(8)) & 0x00ff_ffff
}

impl Endpoint {
    /// Creates a QP with room for `depth` outstanding sends and receives.
    pub fn new(dev: &Device, depth: u32) -> Result<Self, VerbsError> {
        let depth = depth.clamp(1, dev.max_qp_wr);
        let cq = dev
            .ctx
            .create_cq_builder()
            .setup_cqe(depth * 2 + 1)
            .build()
            .map_err(|e| call_err("ibv_create_cq", e))?;
        let qp = dev
            .pd
            .create_qp_builder()
            .setup_max_send_wr(depth)
            .setup_max_recv_wr(depth)
            .setup_max_inline_data(0)
            .setup_send_cq(cq.clone())
            .setup_recv_cq(cq.clone())
            .build()
            .map_err(|e| call_err("ibv_create_qp(RC)", e))?;
        Ok(Endpoint {
            qp,
            cq,
            psn: pseudo_psn(),
            port: dev.port,
            gid_index: dev.gid_index,
            lid: dev.lid,
            gid: dev.gid,
            mtu: dev.mtu,
            rd_atom: dev.max_rd_atom,
            traffic_class: 0,
        })
    }

    pub fn info(&self) -> ConnInfo {
        ConnInfo {
            qpn: self.qp.qp_number(),
            psn: self.psn,
            lid: self.lid,
            gid: self.gid.raw,
            mtu: self.mtu as u8,
            out_reads: self.rd_atom,
        }
    }

    /// Lowers the path MTU this side offers to `code` (an `ibv_mtu` value, perftest's `-m`); a
    /// value above the port's active MTU is ignored, as perftest does.
    pub fn limit_mtu(&mut self, code: u8) {
        self.mtu = mtu_of(lower_mtu(self.mtu as u8, code));
    }

    /// Lowers the READ depth this side accepts and issues (perftest's `-o`).
    pub fn limit_out_reads(&mut self, n: u8) {
        self.rd_atom = lower_reads(self.rd_atom, n);
    }

    /// The GRH traffic class of this QP's packets (perftest's `-T`; on RoCE v2 the IP header's
    /// ToS / traffic class byte). Set before [`Endpoint::connect`]; a path without a GRH (an
    /// InfiniBand peer reached by LID alone) carries none.
    pub fn set_traffic_class(&mut self, tc: u8) -> &mut Self {
        self.traffic_class = tc;
        self
    }

    /// The path MTU (`ibv_mtu` value) and READ depth this side offers.
    pub fn offer(&self) -> (u8, u8) {
        (self.mtu as u8, self.rd_atom)
    }

    /// INIT → RTR → RTS against `remote`, with the path MTU and READ depth negotiated.
    pub fn connect(&mut self, remote: &ConnInfo) -> Result<(), VerbsError> {
        let n = negotiate(self.mtu as u8, self.rd_atom, remote);
        self.mtu = mtu_of(n.mtu);
        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(self.port)
            .setup_access_flags(full_access());
        self.qp
            .modify(&a)
            .map_err(|e| call_err("ibv_modify_qp(INIT)", e))?;

        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(self.mtu)
            .setup_dest_qp_num(remote.qpn)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(n.accept_reads)
            .setup_min_rnr_timer(12);
        let mut ah = AddressHandleAttribute::new();
        ah.setup_dest_lid(remote.lid)
            .setup_port(self.port)
            .setup_service_level(0);
        if let Some(g) = grh(remote, self.gid_index, self.traffic_class) {
            ah.setup_grh(
                &g.dest_gid,
                0,
                g.src_gid_index,
                g.hop_limit,
                g.traffic_class,
            );
        }
        a.setup_address_vector(&ah);
        self.qp
            .modify(&a)
            .map_err(|e| call_err("ibv_modify_qp(RTR)", e))?;

        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(self.psn)
            .setup_timeout(14)
            .setup_retry_cnt(7)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(n.issue_reads);
        self.qp
            .modify(&a)
            .map_err(|e| call_err("ibv_modify_qp(RTS)", e))
    }

    /// Posts one signalled send-queue work request.
    pub fn post(
        &mut self,
        op: Op,
        wr_id: u64,
        lkey: u32,
        laddr: u64,
        len: u64,
    ) -> Result<(), VerbsError> {
        self.post_flagged(op, wr_id, lkey, laddr, len, true)
    }

    /// Posts one work request, signalled or not (bandwidth loops signal every n-th, like
    /// perftest's `--cq-mod`; an unsignalled request completes silently when a later signalled
    /// one completes).
    pub fn post_flagged(
        &mut self,
        op: Op,
        wr_id: u64,
        lkey: u32,
        laddr: u64,
        len: u64,
        signaled: bool,
    ) -> Result<(), VerbsError> {
        let len = sge_len(len)?;
        let flags = if signaled {
            WorkRequestFlags::Signaled
        } else {
            WorkRequestFlags::none()
        };
        let mut g = self.qp.start_post_send();
        let wr = g.construct_wr(wr_id, flags);
        let h = match op {
            Op::Write { rkey, raddr } => wr.setup_write(rkey, raddr),
            Op::WriteImm { rkey, raddr, imm } => wr.setup_write_imm(rkey, raddr, imm),
            Op::Read { rkey, raddr } => wr.setup_read(rkey, raddr),
            Op::Send => wr.setup_send(),
        };
        // SAFETY: the caller keeps the registered buffer alive until the completion is polled
        // (every caller polls before dropping its MR); the NIC checks lkey against the range.
        unsafe { h.setup_sge(lkey, laddr, len) };
        g.post()
            .map_err(|e| call_err(format!("ibv_post_send({})", op.name()), e))
    }

    /// Posts one receive of `len` bytes at `laddr` (zero-length allowed for WRITE_WITH_IMM).
    pub fn post_recv(
        &mut self,
        wr_id: u64,
        lkey: u32,
        laddr: u64,
        len: u64,
    ) -> Result<(), VerbsError> {
        let len = sge_len(len)?;
        let mut g = self.qp.start_post_recv();
        let wr = g.construct_wr(wr_id);
        // SAFETY: as for `post`: the buffer outlives the receive's completion.
        unsafe { wr.setup_sge(lkey, laddr, len) };
        g.post().map_err(|e| call_err("ibv_post_recv", e))
    }

    /// Polls until `n` completions arrived or `timeout` passed.
    pub fn poll(&self, n: usize, timeout: Duration) -> Result<Vec<Completion>, VerbsError> {
        let mut out = Vec::with_capacity(n);
        let start = Instant::now();
        while out.len() < n {
            self.poll_now(n - out.len(), &mut out)?;
            if out.len() < n && start.elapsed() > timeout {
                if out.is_empty() {
                    return Err(VerbsError::Timeout(timeout));
                }
                break;
            }
        }
        Ok(out)
    }

    /// Polls whatever is there now, without waiting. Every completion the poller dequeued is
    /// appended (a poller drains its batch; stopping early would lose completions), so `out` may
    /// grow by more than `_hint`.
    pub fn poll_now(&self, _hint: usize, out: &mut Vec<Completion>) -> Result<(), VerbsError> {
        match self.cq.start_poll() {
            Ok(p) => {
                for wc in p {
                    out.push(Completion {
                        wr_id: wc.wr_id(),
                        status: wc.status(),
                        opcode: wc.opcode(),
                        byte_len: wc.byte_len(),
                        imm: wc.imm_data(),
                        vendor_err: wc.vendor_err(),
                    });
                }
                Ok(())
            }
            Err(PollCompletionQueueError::CompletionQueueEmpty) => Ok(()),
            Err(e) => Err(call_err("ibv_poll_cq", e)),
        }
    }
}

/// A send-queue operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Write { rkey: u32, raddr: u64 },
    WriteImm { rkey: u32, raddr: u64, imm: u32 },
    Read { rkey: u32, raddr: u64 },
    Send,
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Write { .. } => "RDMA_WRITE",
            Op::WriteImm { .. } => "RDMA_WRITE_WITH_IMM",
            Op::Read { .. } => "RDMA_READ",
            Op::Send => "SEND",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(index: u8, g: &str, kind: GidType) -> GidChoice {
        GidChoice {
            index,
            gid: Gid::from(g.parse::<Ipv6Addr>().unwrap()),
            kind,
        }
    }

    #[test]
    fn gid_choice_prefers_roce_v2_ipv4() {
        let t = vec![
            e(0, "fe80::2ff:fe00:1", GidType::RoceV1),
            e(1, "fe80::2ff:fe00:1", GidType::RoceV2),
            e(2, "::ffff:10.99.0.1", GidType::RoceV1),
            e(3, "::ffff:10.99.0.1", GidType::RoceV2),
        ];
        assert_eq!(choose_gid(&t), Some(3));
        assert_eq!(choose_gid(&t[..2]), Some(1));
        assert_eq!(choose_gid(&t[..1]), Some(0));
        assert_eq!(choose_gid(&[e(0, "::", GidType::RoceV2)]), None);
        assert_eq!(choose_gid(&[]), None);
    }

    #[test]
    fn lengths_are_never_truncated() {
        assert_eq!(sge_len(0).unwrap(), 0);
        assert_eq!(sge_len(1 << 31).unwrap(), 1 << 31);
        assert!(matches!(
            sge_len((1 << 31) + 1),
            Err(VerbsError::TooLong(_))
        ));
        assert!(matches!(sge_len(4 << 30), Err(VerbsError::TooLong(_))));
        assert!(matches!(sge_len(u64::MAX), Err(VerbsError::TooLong(_))));
    }

    fn offer(mtu: u8, out_reads: u8) -> ConnInfo {
        ConnInfo {
            qpn: 1,
            psn: 2,
            lid: 3,
            gid: [0; 16],
            mtu,
            out_reads,
        }
    }

    #[test]
    fn mtu_negotiation_takes_the_smaller_valid_mtu() {
        // (local, remote, agreed): both directions agree on the smaller of two MTUs; a peer that
        // said nothing (0, an older protocol) or sent a value that is no ibv_mtu leaves the local.
        let cases = [
            (5, 3, 3),
            (3, 5, 3),
            (4, 4, 4),
            (5, 1, 1),
            (1, 5, 1),
            (4, 0, 4),
            (4, 6, 4),
            (4, 7, 4),
            (4, 128, 4),
            (4, 255, 4),
        ];
        for (local, remote, agreed) in cases {
            assert_eq!(negotiate_mtu(local, remote), agreed, "{local} vs {remote}");
        }
        // The codes are perftest's -m in bytes.
        assert_eq!([1, 2, 3, 4, 5].map(mtu_bytes), [256, 512, 1024, 2048, 4096]);
        assert_eq!((mtu_bytes(0), mtu_bytes(6)), (0, 0));
        // -m 2048 against a 4096 port, and a 1500-byte MTU that is no ibv_mtu.
        assert_eq!(mtu_code(2048).map(|c| negotiate_mtu(5, c)), Some(4));
        assert_eq!(mtu_code(1500), None);
    }

    #[test]
    fn read_depth_is_the_smaller_of_issue_and_accept() {
        // (this side's depth, what the responder accepts, READs issued); 0: the peer did not
        // say, the local depth stands.
        let cases = [
            (16, 4, 4),
            (4, 16, 4),
            (8, 8, 8),
            (16, 1, 1),
            (1, 255, 1),
            (16, 0, 16),
        ];
        for (local, remote, issued) in cases {
            assert_eq!(
                negotiate_reads(local, remote),
                issued,
                "{local} vs {remote}"
            );
        }
        // The device's max_qp_rd_atom, clamped to 1 ..= 16.
        assert_eq!(
            [i32::MIN, -1, 0, 1, 4, 16, 17, 255, i32::MAX].map(device_reads),
            [1, 1, 1, 1, 4, 16, 16, 16, 16]
        );
    }

    #[test]
    fn limits_only_lower_the_offer() {
        // -m: a smaller valid code lowers the offer; a larger one or a non-code leaves it.
        let mtus = [
            (5, 3, 3),
            (3, 5, 3),
            (3, 3, 3),
            (5, 1, 1),
            (5, 0, 5),
            (5, 6, 5),
            (5, 255, 5),
        ];
        for (offer, code, offered) in mtus {
            assert_eq!(lower_mtu(offer, code), offered, "-m code {code} on {offer}");
        }
        // -o: never above the offer, never below one.
        let reads = [(16, 4, 4), (4, 16, 4), (16, 0, 1), (16, 255, 16), (1, 1, 1)];
        for (offer, n, offered) in reads {
            assert_eq!(lower_reads(offer, n), offered, "-o {n} on {offer}");
        }
    }

    #[test]
    fn both_sides_of_a_connection_agree() {
        // A 4096-MTU side with 16 READs meets a 1024-MTU side that accepts 4.
        let a = offer(5, 16);
        let b = offer(3, 4);
        let at_a = negotiate(a.mtu, a.out_reads, &b);
        let at_b = negotiate(b.mtu, b.out_reads, &a);
        assert_eq!(
            at_a,
            Negotiated {
                mtu: 3,
                accept_reads: 16,
                issue_reads: 4
            }
        );
        assert_eq!(
            at_b,
            Negotiated {
                mtu: 3,
                accept_reads: 4,
                issue_reads: 4
            }
        );
        // A peer of the older protocol (no MTU, no depth): the local offer stands.
        assert_eq!(
            negotiate(4, 8, &offer(0, 0)),
            Negotiated {
                mtu: 4,
                accept_reads: 8,
                issue_reads: 8
            }
        );
        // -m and -o on one side lower what both sides use.
        let a = offer(lower_mtu(5, 2), lower_reads(16, 2));
        let b = offer(5, 16);
        assert_eq!(negotiate(b.mtu, b.out_reads, &a).mtu, 2);
        assert_eq!(negotiate(b.mtu, b.out_reads, &a).issue_reads, 2);
        assert_eq!(negotiate(a.mtu, a.out_reads, &b).issue_reads, 2);
    }

    proptest::proptest! {
        #[test]
        fn negotiation_is_symmetric_and_never_exceeds_a_limit(
            ma in 1u8..=5, mb in 1u8..=5, ra in 1u8..=16, rb in 1u8..=16
        ) {
            let at_a = negotiate(ma, ra, &offer(mb, rb));
            let at_b = negotiate(mb, rb, &offer(ma, ra));
            proptest::prop_assert_eq!(at_a.mtu, ma.min(mb));
            proptest::prop_assert_eq!(at_a.mtu, at_b.mtu);
            // Each side issues no more READs than the other accepts, nor than its own limit.
            proptest::prop_assert!(at_a.issue_reads <= at_b.accept_reads);
            proptest::prop_assert!(at_b.issue_reads <= at_a.accept_reads);
            proptest::prop_assert_eq!(at_a.issue_reads, ra.min(rb));
            proptest::prop_assert_eq!(at_b.issue_reads, ra.min(rb));
        }

        #[test]
        fn negotiation_never_panics(m in 0u8..=255, r in 0u8..=255, rm in 0u8..=255, rr in 0u8..=255) {
            let n = negotiate(m, r, &offer(rm, rr));
            proptest::prop_assert!(n.mtu == m || (n.mtu == rm && rm < m && rm >= 1));
            proptest::prop_assert!(n.issue_reads <= r);
        }
    }

    #[test]
    fn traffic_class_goes_into_the_grh() {
        let mut remote = offer(5, 16);
        remote.gid = Gid::from("::ffff:10.0.0.2".parse::<Ipv6Addr>().unwrap()).raw;
        let g = grh(&remote, 3, 106).unwrap();
        assert_eq!(g.traffic_class, 106);
        assert_eq!(g.src_gid_index, 3);
        assert_eq!(g.dest_gid.raw, remote.gid);
        assert_eq!(g.hop_limit, 64);
        assert_eq!(grh(&remote, 0, 0).unwrap().traffic_class, 0);
        assert_eq!(grh(&remote, 0, 255).unwrap().traffic_class, 255);
        // No GID from the peer: LID routing, no GRH, so no traffic class either.
        assert_eq!(grh(&offer(5, 16), 3, 106), None);
    }

    #[test]
    fn status_names() {
        assert_eq!(wc_status_name(0), "success");
        assert_eq!(wc_status_name(10), "remote access error");
        assert_eq!(wc_status_name(5), "work request flushed");
        assert_eq!(wc_status_name(999), "unknown status");
        assert_eq!(wc_status_name(u32::MAX), "unknown status");
        // Every defined status maps to sideway's type and back.
        for v in 0..24 {
            assert_eq!(wc_status(v).map(|w| w as u32), Some(v));
        }
        assert_eq!(wc_status(24), None);
    }
}
