//! `nvpeer bench` paired with perftest: as the client of an `ib_write_bw` / `ib_read_bw` server
//! (`--perftest`), and as the server of their clients (a `--server` recognises them by their first
//! bytes). Both speak [`crate::perftest_wire`]; the measurement itself is nvpeer's own loop.

use crate::mem::{page_size, Backend, Buffer};
use crate::perftest_wire::{Dest, Report, Wire, WireError};
use crate::reg::{Mr, RegPath, Registrar};
use crate::verbs::{ConnInfo, Device, Endpoint};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// perftest's default cache-line size when the CPU does not say.
const CACHE_LINE: u32 = 64;

#[derive(Debug, thiserror::Error)]
pub enum PairError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("{0}")]
    Setup(String),
}

fn cache_line() -> u32 {
    std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(CACHE_LINE)
}

/// Whether perftest would send a GID: always on RoCE, on InfiniBand only when `-x` was given.
pub fn sends_gid(dev: &Device, gid_given: bool) -> bool {
    dev.link_layer != "InfiniBand" || gid_given
}

/// This side's address for the exchange.
fn my_dest(dev: &Device, ep: &Endpoint, rkey: u32, vaddr: u64, gid: bool) -> Dest {
    let info = ep.info();
    Dest {
        lid: info.lid,
        out_reads: u16::from(ep.offer().1),
        qpn: info.qpn,
        psn: info.psn,
        rkey,
        vaddr,
        gid: gid.then_some(dev.gid.raw),
        srqn: 0,
    }
}

/// Connects `ep` to the QP the peer described, with the MTU both agreed on.
fn connect(ep: &mut Endpoint, theirs: &Dest, mtu: u8) -> Result<(), PairError> {
    ep.limit_mtu(mtu);
    let info = ConnInfo {
        qpn: theirs.qpn,
        psn: theirs.psn,
        lid: theirs.lid,
        gid: theirs.gid.unwrap_or([0; 16]),
        mtu,
        out_reads: u8::try_from(theirs.out_reads).unwrap_or(u8::MAX),
    };
    ep.connect(&info)
        .map_err(|e| PairError::Setup(format!("connect to the perftest QP: {e}")))
}

/// The up-front part of the exchange both roles share: versions, system data, MTU.
fn negotiate(w: &mut Wire, ep: &Endpoint) -> Result<(String, u32, u8), PairError> {
    let version = w.versions()?;
    let (page, _) = w.sys_data(page_size() as u32, cache_line())?;
    let mtu = w.mtu(ep.offer().0)?;
    Ok((version, page, mtu))
}

/// A connection to a perftest server, set up to the start of the test.
pub struct PerftestServer {
    wire: Wire,
    mine: Dest,
    /// The server's buffer and QP.
    pub theirs: Dest,
    /// The negotiated path MTU (`ibv_mtu` value).
    pub mtu: u8,
    pub version: String,
}

impl PerftestServer {
    /// Connects to the perftest server at `host:port` (retrying for up to 30 s while it starts),
    /// exchanges everything up to the test and connects `ep` to its QP. `rkey`/`vaddr`: this
    /// side's buffer, announced as perftest announces its own.
    pub fn connect(
        host: &str,
        port: u16,
        dev: &Device,
        ep: &mut Endpoint,
        gid: bool,
        rkey: u32,
        vaddr: u64,
    ) -> Result<Self, PairError> {
        let s = dial(host, port, Duration::from_secs(30))?;
        let mut wire = Wire::new(s, true);
        wire.set_timeout(Some(Duration::from_secs(60)));
        let (version, _, mtu) = negotiate(&mut wire, ep)?;
        let mine = my_dest(dev, ep, rkey, vaddr, gid);
        let theirs = wire.keys(&mine)?;
        connect(ep, &theirs, mtu)?;
        // perftest shakes hands twice more: once connected, and once both QPs are ready.
        wire.keys(&mine)?;
        wire.keys(&mine)?;
        Ok(PerftestServer {
            wire,
            mine,
            theirs,
            mtu,
            version,
        })
    }

    /// Tells the server the test is over, hands it `report` (perftest's server prints it) and
    /// closes the exchange.
    pub fn finish(mut self, report: &Report) -> Result<(), PairError> {
        self.wire.keys(&self.mine)?;
        self.wire.reports(report)?;
        self.wire.keys(&self.mine)?;
        Ok(())
    }
}

fn dial(host: &str, port: u16, wait: Duration) -> Result<TcpStream, PairError> {
    let start = Instant::now();
    loop {
        let addrs = (host, port)
            .to_socket_addrs()
            .map_err(|e| PairError::Setup(format!("resolve {host}: {e}")))?;
        let mut last = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, Duration::from_secs(5)) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        if start.elapsed() > wait {
            let why = last.map_or_else(|| "no address".to_string(), |e| e.to_string());
            return Err(PairError::Setup(format!(
                "connect to {host}:{port}: {why} (is ib_write_bw/ib_read_bw running there?)"
            )));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Whether a connection whose first byte is `first` is a perftest client: perftest opens with
/// its version text (a digit), nvpeer's own protocol with a JSON object.
pub fn opens_perftest(first: u8) -> bool {
    first.is_ascii_digit()
}

/// What a `--server` offers perftest clients.
#[derive(Debug, Clone)]
pub struct ServeOpts {
    /// Largest message the client will send (perftest's server needs the client's `-s`/`-a` too):
    /// the buffer is max(this, page size).
    pub size: u64,
    /// `-x` was given (perftest then sends a GID on InfiniBand too: [`sends_gid`]).
    pub gid_given: bool,
    /// `-m` of the server, an `ibv_mtu` value.
    pub mtu: Option<u8>,
    /// `-T` of the server: the GRH traffic class of every QP it connects (perftest and nvpeer
    /// clients alike).
    pub traffic_class: u8,
    /// `-b` of the server: it runs its half of nvpeer clients' bidirectional bandwidth tests, and
    /// serves only clients that said `-b` too (checked at the hello); perftest clients, whose
    /// exchange does not say, are refused.
    pub bidirectional: bool,
}

/// Serves one perftest client (`ib_write_bw` or `ib_read_bw` as client) on `s`: offers a buffer
/// of the server's memory, stays passive during the test, and returns the client's report.
pub fn serve(
    s: TcpStream,
    dev: &Device,
    backend: &dyn Backend,
    path: RegPath,
    o: &ServeOpts,
) -> Result<Report, PairError> {
    let mut wire = Wire::new(s, false);
    wire.set_timeout(Some(Duration::from_secs(60)));
    let mut ep = Endpoint::new(dev, 128).map_err(|e| PairError::Setup(format!("QP: {e}")))?;
    if let Some(m) = o.mtu {
        ep.limit_mtu(m);
    }
    ep.set_traffic_class(o.traffic_class);
    let (_, page, mtu) = negotiate(&mut wire, &ep)?;
    let len = o.size.max(u64::from(page));
    let len = usize::try_from(len)
        .map_err(|_| PairError::Setup(format!("{len} bytes do not fit this machine")))?;
    let buf: Box<dyn Buffer> = backend
        .alloc(len)
        .map_err(|e| PairError::Setup(format!("allocate {len} bytes: {e}")))?;
    let reg = Registrar {
        pd: Some(dev.pd.clone()),
        core: None,
        path,
    };
    let mr: Mr = reg
        .register(buf.as_ref(), 0, len)
        .map_err(|e| PairError::Setup(format!("register {len} bytes: {}", e.msg)))?;
    let mine = my_dest(dev, &ep, mr.rkey(), buf.addr(), sends_gid(dev, o.gid_given));
    let theirs = wire.keys(&mine)?;
    connect(&mut ep, &theirs, mtu)?;
    wire.keys(&mine)?;
    wire.keys(&mine)?;
    // The client's test runs now; its next message says it is over.
    wire.set_timeout(None);
    wire.keys(&mine)?;
    wire.set_timeout(Some(Duration::from_secs(60)));
    let theirs = wire.reports(&Report::default())?;
    wire.keys(&mine)?;
    drop(mr);
    drop(buf);
    Ok(theirs)
}
