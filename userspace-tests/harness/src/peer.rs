//! The far side of every transfer. In loopback it is a [`Target`] in this process (its own QP on
//! the same device); in two-node mode it is the `--server` process, reached over the out-of-band
//! channel with the same requests. Tests drive both the same way through [`Peer`].
//!
//! The requests and answers ([`Req`], [`Resp`]), the local [`Target`] that serves them and the
//! [`Peer`] that sends them are one protocol, kept in one file.

use crate::auth;
use crate::causes;
use crate::cli::CommonArgs;
use crate::limits;
use crate::mem;
use crate::mem::host::HostBackend;
use crate::mem::{Backend, Buffer};
use crate::oob::{Channel, OobError};
use crate::pattern;
use crate::perftest_peer;
use crate::reg::{Mr, RegPath, Registrar};
use crate::server::{self, Session};
use crate::verbs::{Completion, ConnInfo, Device, Endpoint, Op};
use nvpeer_uapi::memory_peers::{self, PeerCounters};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

/// Protocol version; both sides must agree (3: the hello says whether the client runs
/// bidirectional tests, and `BwRun` runs the server's half of one; 4: the shared token is proved,
/// never sent: the hello carries the client's nonce, a server with a token answers with a
/// challenge and admits the client on its proof, [`crate::server`]).
pub const PROTO: u32 = 4;

/// What the far side of a bidirectional (`-b`) bandwidth run posts into the initiator's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BwOp {
    Write { rkey: u32, raddr: u64 },
    Read { rkey: u32, raddr: u64 },
    Send,
}

impl BwOp {
    /// The send-queue operation.
    pub fn op(self) -> Op {
        match self {
            BwOp::Write { rkey, raddr } => Op::Write { rkey, raddr },
            BwOp::Read { rkey, raddr } => Op::Read { rkey, raddr },
            BwOp::Send => Op::Send,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "req", rename_all = "snake_case")]
pub enum Req {
    /// The first request of a connection: the client's fresh `nonce`, which a server with a
    /// token challenges ([`Resp::Challenge`]), and `bidirectional` (`bench -b`), which must be
    /// what the server was started with.
    Hello {
        proto: u32,
        #[serde(default)]
        nonce: Option<auth::Nonce>,
        #[serde(default)]
        bidirectional: bool,
    },
    /// The answer to a [`Resp::Challenge`]: the client's proof of the token over both nonces
    /// and its `bidirectional` ([`crate::server::client_proof`]).
    Proof {
        proof: Vec<u8>,
    },
    /// Allocate and register a buffer (host memory when `host`, else the server's `--mem`).
    Alloc {
        size: u64,
        host: bool,
    },
    /// Create a fresh RC QP and connect it to the initiator's. The previous QP is destroyed unless
    /// `keep` (multi-QP runs: perftest's `-q`); receives and pongs use the newest QP.
    Connect {
        info: ConnInfo,
        depth: u32,
        #[serde(default)]
        keep: bool,
    },
    Fill {
        id: u32,
        off: u64,
        len: u64,
        seed: u64,
    },
    Verify {
        id: u32,
        off: u64,
        len: u64,
        seed: u64,
    },
    PostRecv {
        id: u32,
        off: u64,
        len: u64,
        count: u32,
    },
    WaitRecv {
        count: u32,
        timeout_ms: u64,
    },
    /// Free the memory but keep the MR (invalidation).
    Free {
        id: u32,
    },
    /// Deregister and free.
    Drop {
        id: u32,
    },
    /// Peer-client counters of the main client.
    Counters,
    /// Answer `iters` WRITE_WITH_IMM pings with pongs into the initiator's buffer. The first
    /// receive must have been posted (`PostRecv`, length 0); each pong re-arms the next one.
    Pong {
        id: u32,
        size: u64,
        iters: u32,
        rkey: u32,
        raddr: u64,
    },
    /// The far half of a bidirectional bandwidth size (`bench -b`, a server started with `-b`):
    /// post `op` of `size` bytes from buffer `id` on every connected QP (the newest and the kept
    /// ones) as `plan` says, while the initiator posts its own; answered with this side's figures
    /// (`Resp::Bw`) once every request completed. The receives of a send test are posted before
    /// (`PostRecv`); those this run polls are counted in the answer.
    BwRun {
        id: u32,
        op: BwOp,
        size: u64,
        plan: crate::bench::BwPlan,
    },
    Bye,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "resp", rename_all = "snake_case")]
pub enum Resp {
    Ok,
    /// The admission: this server's protocol and the memory it serves.
    Hello {
        proto: u32,
        mem: String,
    },
    /// A server with a token, to a hello: its own nonce and its proof of the token over both
    /// ([`crate::server::server_proof`]); the client answers with [`Req::Proof`].
    Challenge {
        nonce: auth::Nonce,
        proof: Vec<u8>,
    },
    Buf {
        id: u32,
        addr: u64,
        rkey: u32,
        len: u64,
    },
    Conn {
        info: ConnInfo,
    },
    Verified {
        mismatch: Option<u64>,
    },
    Recv {
        completions: Vec<Completion>,
    },
    Counters {
        counters: Option<PeerCounters>,
    },
    /// This side's half of a bidirectional size (`BwRun`).
    Bw {
        half: crate::bench::SideResult,
    },
    Err {
        msg: String,
        errno: Option<i32>,
    },
}

/// Errors of peer requests.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("peer: {msg}")]
    Remote { msg: String, errno: Option<i32> },
    #[error(transparent)]
    Oob(#[from] OobError),
    #[error("peer answered {0:?} to {1}")]
    Unexpected(Box<Resp>, &'static str),
    /// The handshake did not prove the shared token, on either side (what to change).
    #[error("{0}")]
    Auth(String),
}

impl PeerError {
    pub fn errno(&self) -> Option<i32> {
        match self {
            PeerError::Remote { errno, .. } => *errno,
            _ => None,
        }
    }
}

struct TBuf {
    buf: Box<dyn Buffer>,
    mr: Option<Mr>,
    len: u64,
}

/// The passive side: owns buffers, MRs and one endpoint at a time.
pub struct Target {
    dev: Rc<Device>,
    backend: Rc<dyn Backend>,
    reg: Registrar,
    bufs: HashMap<u32, TBuf>,
    ep: Option<Endpoint>,
    depth: u32,
    /// Earlier QPs of a multi-QP run (`Connect { keep: true }`), passive until the next plain
    /// `Connect`.
    kept: Vec<Endpoint>,
    next: u32,
    /// What this client may make the server take (`--server-*` caps).
    caps: limits::Caps,
    /// What a perftest client is offered (`bench --server`); `None`: perftest clients are refused.
    perftest: Option<perftest_peer::ServeOpts>,
    /// GRH traffic class of the QPs this side connects (`bench -T`).
    traffic_class: u8,
    /// Started with `bench -b`: runs `BwRun`, and serves `-b` clients only.
    bidirectional: bool,
}

fn err(msg: impl Into<String>, errno: Option<i32>) -> Resp {
    Resp::Err {
        msg: msg.into(),
        errno,
    }
}

impl Target {
    /// A target serving `backend` memory registered on `path`, within `caps`.
    pub fn new(
        dev: Rc<Device>,
        backend: Rc<dyn Backend>,
        path: RegPath,
        caps: limits::Caps,
    ) -> Self {
        let reg = Registrar {
            pd: Some(dev.pd.clone()),
            core: None,
            path,
            relaxed: false,
        };
        Target {
            dev,
            backend,
            reg,
            bufs: HashMap::new(),
            ep: None,
            depth: 0,
            kept: Vec::new(),
            next: 1,
            caps,
            perftest: None,
            traffic_class: 0,
            bidirectional: false,
        }
    }

    /// Runs the far half of bidirectional bandwidth tests (`bench --server -b`).
    pub fn with_bidirectional(mut self, on: bool) -> Self {
        self.bidirectional = on;
        self
    }

    /// Lanes posting `op` from buffer `id` on every connected QP (the kept ones and the newest),
    /// counted as `side` ([`crate::bench::run_lanes`]).
    pub fn lanes(
        &mut self,
        id: u32,
        op: Op,
        side: usize,
    ) -> Result<Vec<crate::bench::Lane<'_>>, String> {
        let b = self
            .bufs
            .get(&id)
            .ok_or_else(|| format!("no buffer {id}"))?;
        let mr = b.mr.as_ref().ok_or("buffer not registered")?;
        let (lkey, addr) = (mr.lkey(), b.buf.addr());
        let lanes: Vec<crate::bench::Lane<'_>> = self
            .kept
            .iter_mut()
            .chain(self.ep.iter_mut())
            .map(|ep| crate::bench::Lane {
                qp: ep as &mut dyn crate::bench::Poster,
                op,
                lkey,
                addr,
                side,
            })
            .collect();
        if lanes.is_empty() {
            return Err("not connected".into());
        }
        Ok(lanes)
    }

    /// Registers what it serves with PCIe relaxed ordering (`bench --server` unless
    /// `--disable_pcie_relaxed`, as perftest's server).
    pub fn with_relaxed_ordering(mut self, on: bool) -> Self {
        self.reg.relaxed = on;
        self
    }

    /// Connects this side's QPs with GRH traffic class `tc` (`bench -T`).
    pub fn with_traffic_class(mut self, tc: u8) -> Self {
        self.traffic_class = tc;
        self
    }

    /// Serves perftest clients (`ib_write_bw`/`ib_read_bw` with a host) as `o` says.
    pub fn with_perftest(mut self, o: Option<perftest_peer::ServeOpts>) -> Self {
        self.perftest = o;
        self
    }

    /// Handles one request (never panics on bad input; answers `Err`). Every request is checked
    /// against what this client owns before anything is allocated ([`limits::check`]).
    pub fn handle(&mut self, q: Req) -> Resp {
        if let Err(why) = limits::check(&q, self, &self.caps) {
            return err(why.to_string(), Some(libc::EINVAL));
        }
        match q {
            Req::Hello { proto, .. } if proto == PROTO => Resp::Hello {
                proto: PROTO,
                mem: self.backend.kind().to_string(),
            },
            Req::Hello { proto, .. } => err(
                format!("protocol {proto} not supported (this side speaks {PROTO})"),
                None,
            ),
            // (the server answers proofs before a session exists: one here is out of place)
            Req::Proof { .. } => err("a proof answers a challenge, and none was sent", None),
            Req::Alloc { size, host } => self.alloc(size, host),
            Req::Connect { info, depth, keep } => self.connect(&info, depth, keep),
            Req::Fill { id, off, len, seed } => self.fill(id, off, len, seed),
            Req::Verify { id, off, len, seed } => self.verify(id, off, len, seed),
            Req::PostRecv {
                id,
                off,
                len,
                count,
            } => self.post_recv(id, off, len, count),
            Req::WaitRecv { count, timeout_ms } => self.wait_recv(count, timeout_ms),
            Req::Free { id } => match self.bufs.get_mut(&id) {
                Some(b) => match b.buf.release() {
                    Ok(()) => Resp::Ok,
                    Err(e) => err(e.to_string(), e.errno()),
                },
                None => err(format!("no buffer {id}"), None),
            },
            Req::Drop { id } => {
                if let Some(mut b) = self.bufs.remove(&id) {
                    drop(b.mr.take());
                    let _ = b.buf.release();
                }
                Resp::Ok
            }
            Req::Counters => Resp::Counters {
                counters: memory_peers::main_client(std::path::Path::new("/")),
            },
            Req::Pong {
                id,
                size,
                iters,
                rkey,
                raddr,
            } => self.pong(id, size, iters, rkey, raddr),
            Req::BwRun { .. } if !self.bidirectional => err(
                "bidirectional run refused: this server was not started with -b",
                None,
            ),
            Req::BwRun { id, op, size, plan } => self.bw_run(id, op.op(), size, &plan),
            Req::Bye => Resp::Ok,
        }
    }

    /// A QP connected to the client's (`keep`: the previous one stays alive, for `-q`).
    fn connect(&mut self, info: &ConnInfo, depth: u32, keep: bool) -> Resp {
        let mut ep = match Endpoint::new(&self.dev, depth) {
            Ok(ep) => ep,
            Err(e) => return err(e.to_string(), e.errno()),
        };
        if let Err(e) = ep.set_traffic_class(self.traffic_class).connect(info) {
            return err(e.to_string(), e.errno());
        }
        let info = ep.info();
        match self.ep.replace(ep) {
            Some(old) if keep => self.kept.push(old),
            _ => self.kept.clear(),
        }
        self.depth = depth.clamp(1, self.dev.max_qp_wr);
        Resp::Conn { info }
    }

    /// Writes the pattern of `seed` into buffer `id` at `off`.
    fn fill(&mut self, id: u32, off: u64, len: u64, seed: u64) -> Resp {
        let Some(b) = self.bufs.get_mut(&id) else {
            return err(format!("no buffer {id}"), None);
        };
        match fill_buf(b.buf.as_mut(), off, len, seed) {
            Ok(()) => Resp::Ok,
            Err(e) => err(e.to_string(), e.errno()),
        }
    }

    /// Checks buffer `id` at `off` against the pattern of `seed`: the first byte that differs.
    fn verify(&self, id: u32, off: u64, len: u64, seed: u64) -> Resp {
        let Some(b) = self.bufs.get(&id) else {
            return err(format!("no buffer {id}"), None);
        };
        match verify_buf(b.buf.as_ref(), off, len, seed) {
            Ok(mismatch) => Resp::Verified { mismatch },
            Err(e) => err(e.to_string(), e.errno()),
        }
    }

    /// Posts `count` receives into buffer `id` at `off`.
    fn post_recv(&mut self, id: u32, off: u64, len: u64, count: u32) -> Resp {
        let (Some(b), Some(ep)) = (self.bufs.get(&id), self.ep.as_mut()) else {
            return err("no such buffer or not connected", None);
        };
        let Some(mr) = b.mr.as_ref() else {
            return err("buffer not registered", None);
        };
        for i in 0..count {
            if let Err(e) = ep.post_recv(i as u64, mr.lkey(), b.buf.addr() + off, len) {
                return err(e.to_string(), e.errno());
            }
        }
        Resp::Ok
    }

    /// Up to `count` receive completions within `timeout_ms` (none at the timeout is an answer).
    fn wait_recv(&self, count: u32, timeout_ms: u64) -> Resp {
        let Some(ep) = self.ep.as_ref() else {
            return err("not connected", None);
        };
        match ep.poll(count as usize, Duration::from_millis(timeout_ms)) {
            Ok(c) => Resp::Recv { completions: c },
            Err(crate::verbs::VerbsError::Timeout(_)) => Resp::Recv {
                completions: vec![],
            },
            Err(e) => err(e.to_string(), e.errno()),
        }
    }

    /// This side's half of a bidirectional bandwidth run (`bench -b` in two-node mode).
    fn bw_run(&mut self, id: u32, op: Op, size: u64, plan: &crate::bench::BwPlan) -> Resp {
        let mut lanes = match self.lanes(id, op, 0) {
            Ok(l) => l,
            Err(e) => return err(e, None),
        };
        match crate::bench::run_lanes(&mut lanes, size, plan) {
            Ok(r) => match r.first() {
                Some(half) => Resp::Bw { half: *half },
                None => err("bidirectional run: no result", None),
            },
            Err(e) => err(e.to_string(), None),
        }
    }

    fn alloc(&mut self, size: u64, host: bool) -> Resp {
        let host_be;
        let (be, path): (&dyn Backend, RegPath) = if host {
            host_be = HostBackend;
            (&host_be, RegPath::VaMr)
        } else {
            (self.backend.as_ref(), self.reg.path)
        };
        let buf = match be.alloc(size as usize) {
            Ok(b) => b,
            Err(e) => return err(e.to_string(), e.errno()),
        };
        let reg = Registrar {
            path,
            ..self.reg.clone()
        };
        let mr = match reg.register(buf.as_ref(), 0, size as usize) {
            Ok(m) => m,
            Err(e) => return err(e.msg, e.errno),
        };
        let id = self.next;
        self.next += 1;
        let r = Resp::Buf {
            id,
            addr: buf.addr(),
            rkey: mr.rkey(),
            len: size,
        };
        self.bufs.insert(
            id,
            TBuf {
                buf,
                mr: Some(mr),
                len: size,
            },
        );
        r
    }

    /// The passive half of the latency ping-pong: each received WRITE_WITH_IMM is answered with
    /// one into the initiator's buffer (one receive is expected to be posted already).
    fn pong(&mut self, id: u32, size: u64, iters: u32, rkey: u32, raddr: u64) -> Resp {
        let (Some(b), Some(ep)) = (self.bufs.get(&id), self.ep.as_mut()) else {
            return err("no such buffer or not connected", None);
        };
        let Some(mr) = b.mr.as_ref() else {
            return err("buffer not registered", None);
        };
        let (lkey, addr) = (mr.lkey(), b.buf.addr());
        let mut sends_done = 0u32;
        for i in 0..iters {
            let mut got_recv = false;
            while !got_recv {
                match ep.poll(1, Duration::from_secs(30)) {
                    Ok(cs) => {
                        for c in cs {
                            if !c.ok() {
                                return err(
                                    format!(
                                        "pong: completion {}",
                                        crate::verbs::wc_status_name(c.status)
                                    ),
                                    None,
                                );
                            }
                            if c.opcode & 128 != 0 {
                                got_recv = true;
                            } else {
                                sends_done += 1;
                            }
                        }
                    }
                    Err(e) => return err(e.to_string(), e.errno()),
                }
            }
            // Re-arm for the next ping before answering this one, so a ping never meets an empty
            // receive queue (an RNR NAK would add a retry delay to the measurement).
            if let Err(e) = ep.post_recv(i as u64 + 1, lkey, addr, 0) {
                return err(e.to_string(), e.errno());
            }
            if let Err(e) = ep.post(
                Op::WriteImm {
                    rkey,
                    raddr,
                    imm: i,
                },
                1 << 32 | i as u64,
                lkey,
                addr,
                size,
            ) {
                return err(e.to_string(), e.errno());
            }
        }
        // Drain the send completions not seen yet.
        let left = iters.saturating_sub(sends_done) as usize;
        if left > 0 {
            let _ = ep.poll(left, Duration::from_secs(30));
        }
        Resp::Ok
    }
}

/// The most bytes a fill or verify copies at once: what either takes on top of the buffer, however
/// long the range.
pub const SCRATCH: u64 = 4 << 20;

/// Writes the pattern of `seed` into `buf` at `off`, [`SCRATCH`] bytes at a time.
pub fn fill_buf(buf: &mut dyn Buffer, off: u64, len: u64, seed: u64) -> Result<(), mem::MemError> {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(SCRATCH);
        let at = off + done;
        buf.write(at as usize, &pattern::generate(seed, at, n as usize))?;
        done += n;
    }
    Ok(())
}

/// The first byte of `buf` in `[off, off + len)` that differs from the pattern of `seed`
/// (relative to `off`), read [`SCRATCH`] bytes at a time.
pub fn verify_buf(
    buf: &dyn Buffer,
    off: u64,
    len: u64,
    seed: u64,
) -> Result<Option<u64>, mem::MemError> {
    let mut v = vec![0u8; len.min(SCRATCH) as usize];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(SCRATCH) as usize;
        let at = off + done;
        buf.read(at as usize, &mut v[..n])?;
        if let Some(i) = pattern::first_mismatch(seed, at, &v[..n]) {
            return Ok(Some(done + i as u64));
        }
        done += n as u64;
    }
    Ok(None)
}

/// The far side, local or remote.
pub enum Peer {
    Local(Box<Target>),
    Remote(Channel),
}

impl Peer {
    pub fn call(&mut self, q: Req) -> Result<Resp, PeerError> {
        let r = match self {
            Peer::Local(t) => t.handle(q),
            Peer::Remote(c) => c.call(&q)?,
        };
        match r {
            Resp::Err { msg, errno } => Err(PeerError::Remote { msg, errno }),
            r => Ok(r),
        }
    }

    pub fn is_local(&self) -> bool {
        matches!(self, Peer::Local(_))
    }

    /// The opening of a connection: the hello (this side's protocol, a fresh nonce, whether it
    /// runs bidirectional tests: `bench -b`) and, with a token on both sides, the handshake that
    /// proves it each way ([`crate::server`]); returns the memory the server serves. A client
    /// given a token admits only a server that proves it.
    pub fn greet(&mut self, c: &CommonArgs, bidirectional: bool) -> Result<String, PeerError> {
        let mine = auth::nonce().map_err(|e| PeerError::Auth(e.to_string()))?;
        let token = c.serve.token.as_deref();
        let r = self.call(Req::Hello {
            proto: PROTO,
            nonce: Some(mine),
            bidirectional,
        })?;
        let r = match (r, token) {
            (Resp::Challenge { nonce, proof }, Some(t)) => {
                if !server::server_proved(t, &mine, &nonce, &proof) {
                    return Err(PeerError::Auth(
                        "the server did not prove the shared token: it was given another --token \
                         (or NVPEER_TOKEN), or it is not the nvpeer server meant"
                            .into(),
                    ));
                }
                let proof = server::client_proof(t, &nonce, &mine, bidirectional)
                    .ok_or_else(|| PeerError::Auth("no proof of the token could be made".into()))?;
                self.call(Req::Proof { proof })?
            }
            (Resp::Challenge { .. }, None) => {
                return Err(PeerError::Auth(
                    "the server admits clients with its shared token only: give this side the \
                     same --token (or NVPEER_TOKEN)"
                        .into(),
                ))
            }
            (Resp::Hello { .. }, Some(_)) if !self.is_local() => {
                return Err(PeerError::Auth(
                    "the server has no --token, so it proved none: start it with the same --token \
                     (or NVPEER_TOKEN), or run this side without one"
                        .into(),
                ))
            }
            (r, _) => r,
        };
        match r {
            Resp::Hello { mem, .. } => Ok(mem),
            r => Err(PeerError::Unexpected(Box::new(r), "hello")),
        }
    }

    /// Direct access to the local target (loopback ping-pong drives both QPs itself).
    pub fn local(&mut self) -> Option<&mut Target> {
        match self {
            Peer::Local(t) => Some(t),
            Peer::Remote(_) => None,
        }
    }

    pub fn alloc(&mut self, size: u64, host: bool) -> Result<RemoteBuf, PeerError> {
        match self.call(Req::Alloc { size, host })? {
            Resp::Buf {
                id,
                addr,
                rkey,
                len,
            } => Ok(RemoteBuf {
                id,
                addr,
                rkey,
                len,
            }),
            r => Err(PeerError::Unexpected(Box::new(r), "alloc")),
        }
    }

    pub fn connect(&mut self, info: ConnInfo, depth: u32) -> Result<ConnInfo, PeerError> {
        self.connect_more(info, depth, false)
    }

    /// As [`Peer::connect`]; with `keep` the far side keeps its earlier QPs connected.
    pub fn connect_more(
        &mut self,
        info: ConnInfo,
        depth: u32,
        keep: bool,
    ) -> Result<ConnInfo, PeerError> {
        match self.call(Req::Connect { info, depth, keep })? {
            Resp::Conn { info } => Ok(info),
            r => Err(PeerError::Unexpected(Box::new(r), "connect")),
        }
    }

    pub fn verify(
        &mut self,
        id: u32,
        off: u64,
        len: u64,
        seed: u64,
    ) -> Result<Option<u64>, PeerError> {
        match self.call(Req::Verify { id, off, len, seed })? {
            Resp::Verified { mismatch } => Ok(mismatch),
            r => Err(PeerError::Unexpected(Box::new(r), "verify")),
        }
    }

    pub fn wait_recv(&mut self, count: u32, timeout_ms: u64) -> Result<Vec<Completion>, PeerError> {
        match self.call(Req::WaitRecv { count, timeout_ms })? {
            Resp::Recv { completions } => Ok(completions),
            r => Err(PeerError::Unexpected(Box::new(r), "wait_recv")),
        }
    }

    pub fn counters(&mut self) -> Result<Option<PeerCounters>, PeerError> {
        match self.call(Req::Counters)? {
            Resp::Counters { counters } => Ok(counters),
            r => Err(PeerError::Unexpected(Box::new(r), "counters")),
        }
    }

    pub fn unit(&mut self, q: Req) -> Result<(), PeerError> {
        self.call(q).map(|_| ())
    }
}

/// A buffer on the far side.
#[derive(Debug, Clone, Copy)]
pub struct RemoteBuf {
    pub id: u32,
    pub addr: u64,
    pub rkey: u32,
    pub len: u64,
}

impl limits::View for Target {
    fn buf_len(&self, id: u32) -> Option<u64> {
        self.bufs.get(&id).map(|b| b.len)
    }
    fn held(&self) -> u64 {
        self.bufs.values().map(|b| b.len).sum()
    }
    fn depth(&self) -> Option<u32> {
        self.ep.as_ref().map(|_| self.depth)
    }
    fn qps(&self) -> u32 {
        let n = self.kept.len() + usize::from(self.ep.is_some());
        u32::try_from(n).unwrap_or(u32::MAX)
    }
}

impl Session for Target {
    fn handle(&mut self, q: Req) -> Resp {
        Target::handle(self, q)
    }
    fn perftest(&mut self, s: std::net::TcpStream) -> Option<Result<String, String>> {
        let o = self.perftest.as_ref()?;
        if self.bidirectional {
            return Some(Err(
                "refused: this server was started with -b, and bidirectional pairing with \
                 perftest is not implemented (start the server without -b for perftest clients)"
                    .into(),
            ));
        }
        let r = perftest_peer::DeviceSide::new(&self.dev, self.backend.as_ref(), self.reg.path, o)
            .and_then(|mut side| perftest_peer::serve(s, &mut side, o, &self.caps));
        Some(r.map_err(|e| e.to_string()).map(|r| {
            format!(
                "perftest client finished: #bytes {} #iterations {} BW peak {:.2} BW average {:.2} \
                 MsgRate {:.6} Mpps (bandwidth in the client's unit: MiB/sec, Gb/sec with its \
                 --report_gbits)",
                r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
            )
        }))
    }
    fn mem(&self) -> String {
        self.backend.kind().to_string()
    }
    fn bidirectional(&self) -> bool {
        self.bidirectional
    }
}

/// Why `--server` could not start or stopped serving (exit status 2, printed once by the caller).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Serve(#[from] server::ServeError),
    #[error(transparent)]
    Memory(#[from] mem::MemError),
    /// The RDMA device could not be opened (with its probable cause).
    #[error("{error}\n  probable cause: {cause}")]
    Device { error: String, cause: String },
}

/// `--server` of `validate` and `bench`: checks where to listen, opens the memory backend and
/// the device, then serves until `--once` is done (or forever).
/// `perftest`: what perftest clients are offered (`bench --server`), `None` to refuse them.
pub fn run_server(
    c: &CommonArgs,
    path: RegPath,
    perftest: Option<perftest_peer::ServeOpts>,
) -> Result<(), ServerError> {
    let listener = server::listen(&c.serve, c.port)?;
    let mapped = perftest.as_ref().is_some_and(|o| o.pcie_mapping);
    let backend: Rc<dyn Backend> = Rc::from(mem::open_mapped(c.mem, &c.gpu, mapped)?);
    let dev = Device::open(c.ib_dev.as_deref(), c.ib_port, c.gid_index)
        .map(Rc::new)
        .map_err(|e| ServerError::Device {
            error: e.to_string(),
            cause: causes::device(&e),
        })?;
    let log = server::Log::new();
    log.say(&format!("device {}, {} memory", dev.name, backend.kind()));
    if perftest.as_ref().is_some_and(|o| o.bidirectional) {
        log.say("-b: runs the far half of bidirectional bandwidth tests; serves -b clients only");
    }
    let caps = c.serve.caps;
    server::serve(&listener, &c.serve, &log, || {
        Target::new(dev.clone(), backend.clone(), path, caps)
            .with_traffic_class(perftest.as_ref().map_or(0, |o| o.traffic_class))
            .with_relaxed_ordering(perftest.as_ref().is_some_and(|o| o.relaxed_ordering))
            .with_bidirectional(perftest.as_ref().is_some_and(|o| o.bidirectional))
            .with_perftest(perftest.clone())
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_is_stable_json() {
        let q = Req::Verify {
            id: 1,
            off: 2,
            len: 3,
            seed: 4,
        };
        let s = serde_json::to_string(&q).unwrap();
        assert_eq!(s, r#"{"req":"verify","id":1,"off":2,"len":3,"seed":4}"#);
        let r: Resp = serde_json::from_str(r#"{"resp":"verified","mismatch":null}"#).unwrap();
        assert!(matches!(r, Resp::Verified { mismatch: None }));
        assert!(serde_json::from_str::<Req>(r#"{"req":"format_disk"}"#).is_err());
    }

    #[test]
    fn hello_carries_a_nonce_and_bidirectional_and_never_a_token() {
        // Without the keys: no nonce, not bidirectional (a client that does not say -b).
        let q: Req = serde_json::from_str(r#"{"req":"hello","proto":4}"#).unwrap();
        assert!(matches!(
            q,
            Req::Hello {
                proto: 4,
                nonce: None,
                bidirectional: false
            }
        ));
        let n = vec!["7"; 32].join(",");
        let q: Req = serde_json::from_str(&format!(
            r#"{{"req":"hello","proto":4,"nonce":[{n}],"bidirectional":true}}"#
        ))
        .unwrap();
        assert!(matches!(
            q,
            Req::Hello {
                nonce: Some(x),
                bidirectional: true,
                ..
            } if x == [7; 32]
        ));
        // A nonce is exactly 32 bytes.
        for k in [31, 33] {
            let n = vec!["7"; k].join(",");
            let line = format!(r#"{{"req":"hello","proto":4,"nonce":[{n}]}}"#);
            assert!(serde_json::from_str::<Req>(&line).is_err(), "{k}");
        }
        // What a client sends: this version's protocol, a fresh nonce, its -b; not its token.
        for b in [false, true] {
            let q = Req::Hello {
                proto: PROTO,
                nonce: Some(auth::nonce().unwrap()),
                bidirectional: b,
            };
            let line = serde_json::to_string(&q).unwrap();
            assert!(line.starts_with(&format!(r#"{{"req":"hello","proto":{PROTO},"nonce":["#)));
            assert!(line.ends_with(&format!(r#"],"bidirectional":{b}}}"#)));
        }
        let r: Resp = serde_json::from_str(&format!(
            r#"{{"resp":"challenge","nonce":[{}],"proof":[1,2]}}"#,
            vec!["9"; 32].join(",")
        ))
        .unwrap();
        assert!(
            matches!(r, Resp::Challenge { nonce, proof } if nonce == [9; 32] && proof == [1, 2])
        );
    }
    #[test]
    fn the_far_half_of_a_bidirectional_run_round_trips() {
        let q = Req::BwRun {
            id: 4,
            op: BwOp::Read {
                rkey: 9,
                raddr: 0x7f00,
            },
            size: 65536,
            plan: crate::bench::BwPlan {
                iters: 1000,
                depth: 128,
                cq_mod: 1,
                peak: true,
                duration: Some((5.0, 2.0)),
                warm_up: true,
            },
        };
        let line = serde_json::to_string(&q).unwrap();
        assert!(
            line.starts_with(r#"{"req":"bw_run","id":4,"op":{"kind":"read","rkey":9"#),
            "{line}"
        );
        match serde_json::from_str::<Req>(&line).unwrap() {
            Req::BwRun { id, op, size, plan } => {
                assert_eq!(
                    (id, op, size),
                    (
                        4,
                        BwOp::Read {
                            rkey: 9,
                            raddr: 0x7f00
                        },
                        65536
                    )
                );
                assert_eq!(plan.duration, Some((5.0, 2.0)));
                assert_eq!(
                    op.op(),
                    Op::Read {
                        rkey: 9,
                        raddr: 0x7f00
                    }
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(BwOp::Send.op(), Op::Send);
        // An operation the far side must not run (WRITE_WITH_IMM would raise receives here).
        assert!(
            serde_json::from_str::<BwOp>(r#"{"kind":"write_imm","rkey":1,"raddr":2}"#).is_err()
        );
        let half = crate::bench::SideResult {
            bw: crate::stats::bandwidth(65536, 1000, 1.0, Some(0.0001)),
            recvs: 12,
        };
        let r: Resp =
            serde_json::from_str(&serde_json::to_string(&Resp::Bw { half }).unwrap()).unwrap();
        assert!(matches!(r, Resp::Bw { half: h } if h == half));
    }

    #[test]
    fn fills_and_verifies_go_a_scratch_at_a_time() {
        let len = 2 * SCRATCH + 4097;
        let mut buf = HostBackend.alloc(len as usize + 10).unwrap();
        fill_buf(buf.as_mut(), 10, len, 7).unwrap();
        assert_eq!(verify_buf(buf.as_ref(), 10, len, 7).unwrap(), None);
        // A byte wrong in the third chunk is found at its offset from the range's start.
        let at = 2 * SCRATCH + 3;
        let mut b = [0u8; 1];
        buf.read((10 + at) as usize, &mut b).unwrap();
        buf.write((10 + at) as usize, &[!b[0]]).unwrap();
        assert_eq!(verify_buf(buf.as_ref(), 10, len, 7).unwrap(), Some(at));
        assert_eq!(verify_buf(buf.as_ref(), 10, at, 7).unwrap(), None);
        assert!(verify_buf(buf.as_ref(), 10, len + 1, 7).is_err());
        assert_eq!(verify_buf(buf.as_ref(), 0, 0, 7).unwrap(), None);
    }

    proptest::proptest! {
        #[test]
        fn any_line_decodes_or_errs(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = serde_json::from_slice::<Req>(&b);
            let _ = serde_json::from_slice::<Resp>(&b);
        }

        #[test]
        fn any_numbers_decode_or_err(size in "-?[0-9]{1,30}", id in "-?[0-9]{1,12}") {
            let line = format!(r#"{{"req":"alloc","size":{size},"host":true}}"#);
            let _ = serde_json::from_str::<Req>(&line);
            let line = format!(r#"{{"req":"fill","id":{id},"off":0,"len":{size},"seed":1}}"#);
            let _ = serde_json::from_str::<Req>(&line);
        }
    }
}
