//! `nvpeer bench` paired with perftest: as the client of an `ib_write_bw` / `ib_read_bw` server
//! (`--perftest`), and as the server of their clients (a `--server` recognises them by their first
//! bytes). Both speak [`crate::perftest_wire`]; the measurement itself is nvpeer's own loop.

use crate::limits::Caps;
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
    #[error(
        "refused: a buffer of {len} bytes (the larger of the offered size and the client's page \
         size {page}) would exceed this server's limit of {limit} bytes per client \
         (--server-mem-limit)"
    )]
    MemLimit { len: u64, page: u32, limit: u64 },
    #[error("dropped: {phase} did not complete within {secs} s ({flag} sets it)")]
    Timeout {
        phase: &'static str,
        secs: f64,
        flag: &'static str,
    },
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
    /// The server registers its buffers with PCIe relaxed ordering (perftest's default; off with
    /// `--disable_pcie_relaxed`, which perftest asks of both sides).
    pub relaxed_ordering: bool,
    /// The server's dma-bufs map its GPU memory through the PCIe BAR (`--use_cuda_pcie_mapping`).
    pub pcie_mapping: bool,
}

/// The device half of serving a perftest client: the exchange ([`serve`]) is the same whatever
/// holds the QP and the buffer, so that it is tested without a device.
pub trait Side {
    /// The path MTU this side offers (an `ibv_mtu` value).
    fn mtu(&self) -> u8;
    /// Allocates and registers the `len`-byte buffer offered to the client; this side's address.
    fn offer(&mut self, len: usize) -> Result<Dest, PairError>;
    /// Connects this side's QP to the client's, with the agreed MTU.
    fn connect(&mut self, theirs: &Dest, mtu: u8) -> Result<(), PairError>;
}

/// The buffer offered to a perftest client that said page size `page`: max(`size`, the page
/// size), within the server's memory limit (`--server-mem-limit`); a page size that is not a
/// power of two is malformed.
pub fn buffer_len(size: u64, page: u32, mem_limit: u64) -> Result<usize, PairError> {
    if !page.is_power_of_two() {
        return Err(PairError::Wire(WireError::Bad {
            what: "page size",
            text: page.to_string(),
        }));
    }
    let len = size.max(u64::from(page));
    if len > mem_limit {
        return Err(PairError::MemLimit {
            len,
            page,
            limit: mem_limit,
        });
    }
    usize::try_from(len)
        .map_err(|_| PairError::Setup(format!("{len} bytes do not fit this machine")))
}

/// Maps a passed deadline of `phase` to the error naming the flag that sets it.
fn timed(phase: &'static str, flag: &'static str) -> impl Fn(WireError) -> PairError {
    move |e| match e {
        WireError::Timeout(limit) => PairError::Timeout {
            phase,
            secs: limit.as_secs_f64(),
            flag,
        },
        e => PairError::Wire(e),
    }
}

/// Serves one perftest client (`ib_write_bw` or `ib_read_bw` as client) on `s`: offers a buffer
/// of the server's memory (held by `side`), stays passive during the test, and returns the
/// client's report. The exchanges before and after the test must each complete within
/// `caps.handshake_timeout`, and the test within `caps.idle_timeout`; the buffer counts against `caps.mem_limit`.
pub fn serve(
    s: TcpStream,
    side: &mut dyn Side,
    o: &ServeOpts,
    caps: &Caps,
) -> Result<Report, PairError> {
    let mut wire = Wire::new(s, false);
    let before = timed("the exchange before its test", "--server-handshake-timeout");
    wire.set_deadline(caps.handshake_timeout);
    wire.versions().map_err(&before)?;
    let (page, _) = wire
        .sys_data(page_size() as u32, cache_line())
        .map_err(&before)?;
    let len = buffer_len(o.size, page, caps.mem_limit)?;
    let mtu = wire.mtu(side.mtu()).map_err(&before)?;
    let mine = side.offer(len)?;
    let theirs = wire.keys(&mine).map_err(&before)?;
    side.connect(&theirs, mtu)?;
    wire.keys(&mine).map_err(&before)?;
    wire.keys(&mine).map_err(&before)?;
    // The client's test runs now; its next message says it is over.
    wire.set_deadline(caps.idle_timeout);
    wire.keys(&mine)
        .map_err(timed("its test", "--server-idle-timeout"))?;
    let after = timed("the exchange after its test", "--server-handshake-timeout");
    wire.set_deadline(caps.handshake_timeout);
    let theirs = wire.reports(&Report::default()).map_err(&after)?;
    wire.keys(&mine).map_err(&after)?;
    Ok(theirs)
}

/// [`Side`] on an RDMA device: one QP, and the buffer of `backend` registered on `path`.
pub struct DeviceSide<'a> {
    dev: &'a Device,
    backend: &'a dyn Backend,
    path: RegPath,
    gid: bool,
    /// Register the offered buffer with relaxed ordering ([`ServeOpts::relaxed_ordering`]).
    relaxed: bool,
    ep: Endpoint,
    // Deregistered before its memory is freed (fields drop in this order).
    mr: Option<Mr>,
    buf: Option<Box<dyn Buffer>>,
}

impl<'a> DeviceSide<'a> {
    /// A QP on `dev` set up as `o` says (`-m`, `-T`, `-x`).
    pub fn new(
        dev: &'a Device,
        backend: &'a dyn Backend,
        path: RegPath,
        o: &ServeOpts,
    ) -> Result<Self, PairError> {
        let mut ep = Endpoint::new(dev, 128).map_err(|e| PairError::Setup(format!("QP: {e}")))?;
        if let Some(m) = o.mtu {
            ep.limit_mtu(m);
        }
        ep.set_traffic_class(o.traffic_class);
        Ok(DeviceSide {
            dev,
            backend,
            path,
            gid: sends_gid(dev, o.gid_given),
            relaxed: o.relaxed_ordering,
            ep,
            mr: None,
            buf: None,
        })
    }
}

impl Side for DeviceSide<'_> {
    fn mtu(&self) -> u8 {
        self.ep.offer().0
    }

    fn offer(&mut self, len: usize) -> Result<Dest, PairError> {
        let buf = self
            .backend
            .alloc(len)
            .map_err(|e| PairError::Setup(format!("allocate {len} bytes: {e}")))?;
        let reg = Registrar {
            pd: Some(self.dev.pd.clone()),
            core: None,
            path: self.path,
            relaxed: self.relaxed,
        };
        let mr = reg
            .register(buf.as_ref(), 0, len)
            .map_err(|e| PairError::Setup(format!("register {len} bytes: {}", e.msg)))?;
        let mine = my_dest(self.dev, &self.ep, mr.rkey(), buf.addr(), self.gid);
        self.mr = Some(mr);
        self.buf = Some(buf);
        Ok(mine)
    }

    fn connect(&mut self, theirs: &Dest, mtu: u8) -> Result<(), PairError> {
        connect(&mut self.ep, theirs, mtu)
    }
}

/// A device-free [`Side`] and a scripted perftest client, for the tests of the exchange here and
/// of the server's admission ([`crate::server`]).
#[cfg(test)]
pub(crate) mod fake {
    use super::*;
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};

    /// Records the buffer it was asked for instead of allocating one.
    #[derive(Default, Clone)]
    pub struct FakeSide {
        pub offered: Arc<Mutex<Option<usize>>>,
    }

    impl Side for FakeSide {
        fn mtu(&self) -> u8 {
            3
        }
        fn offer(&mut self, len: usize) -> Result<Dest, PairError> {
            *self.offered.lock().unwrap() = Some(len);
            Ok(dest(0x1000))
        }
        fn connect(&mut self, _: &Dest, _: u8) -> Result<(), PairError> {
            Ok(())
        }
    }

    fn dest(vaddr: u64) -> Dest {
        Dest {
            lid: 1,
            out_reads: 16,
            qpn: 0x11,
            psn: 0x22,
            rkey: 0x33,
            vaddr,
            gid: Some([0; 16]),
            srqn: 0,
        }
    }

    /// What the scripted client does once its QPs are "connected" (the third address).
    #[derive(Clone, Copy)]
    pub enum Then {
        /// Its test is over at once: the end-of-test messages follow.
        Finish,
        /// Says nothing more for this long, holding the connection.
        Silent(Duration),
    }

    /// A perftest client on `s` that says page size `page`, then does `then`; stops at the first
    /// failed read or write (the server closed) and says how far it got.
    pub fn client(mut s: TcpStream, page: u32, then: Then) -> &'static str {
        let mut step = |m: &[u8]| -> bool {
            let mut r = vec![0u8; m.len()];
            s.write_all(m).is_ok() && s.read_exact(&mut r).is_ok()
        };
        let mut version = b"6.24".to_vec();
        version.resize(16, 0);
        let key = dest(0x2000).encode();
        if !(step(&version) && step(&page.to_be_bytes()) && step(&64u32.to_be_bytes())) {
            return "refused at the system data";
        }
        if !(step(b"3\0") && step(&key) && step(&key) && step(&key)) {
            return "refused in the exchange";
        }
        if let Then::Silent(d) = then {
            std::thread::sleep(d);
        }
        let report = [0u8; 8];
        if !(step(&key)
            && step(&report)
            && step(&report)
            && step(&report)
            && step(&report)
            && step(&report)
            && step(&key))
        {
            return "dropped after the exchange";
        }
        "finished"
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{client, FakeSide, Then};
    use super::*;
    use std::net::TcpListener;
    use std::sync::mpsc;

    fn opts() -> ServeOpts {
        ServeOpts {
            size: 65536,
            gid_given: true,
            mtu: None,
            traffic_class: 0,
            bidirectional: false,
            relaxed_ordering: true,
            pcie_mapping: false,
        }
    }

    /// Serves one scripted client (page size `page`, then `then`) with `caps` on a thread;
    /// the server's answer arrives on the receiver, the client's story from the join handle.
    fn pair(
        page: u32,
        then: Then,
        caps: Caps,
    ) -> (
        mpsc::Receiver<Result<Report, PairError>>,
        FakeSide,
        std::thread::JoinHandle<&'static str>,
    ) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let c = std::thread::spawn(move || {
            client(TcpStream::connect(("127.0.0.1", port)).unwrap(), page, then)
        });
        let side = FakeSide::default();
        let (tx, rx) = mpsc::channel();
        let mut s2 = side.clone();
        std::thread::spawn(move || {
            let (st, _) = l.accept().unwrap();
            let _ = tx.send(serve(st, &mut s2, &opts(), &caps));
        });
        (rx, side, c)
    }

    #[test]
    fn the_buffer_is_the_larger_of_size_and_page_within_the_memory_limit() {
        assert_eq!(buffer_len(65536, 4096, 1 << 20).unwrap(), 65536);
        assert_eq!(buffer_len(2, 65536, 1 << 20).unwrap(), 65536);
        assert_eq!(buffer_len(1 << 20, 4096, 1 << 20).unwrap(), 1 << 20);
        let e = buffer_len(65536, 1 << 31, 1 << 20).unwrap_err().to_string();
        assert!(
            e.contains("--server-mem-limit") && e.contains("2147483648"),
            "{e}"
        );
        assert!(buffer_len(1 << 21, 4096, 1 << 20).is_err());
        for page in [0, 3, 4097, u32::MAX] {
            assert!(buffer_len(1, page, u64::MAX).is_err(), "{page}");
        }
    }

    #[test]
    fn a_whole_exchange_with_a_perftest_client() {
        let (rx, side, c) = pair(4096, Then::Finish, Caps::default());
        let r = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(r.unwrap(), Report::default());
        assert_eq!(c.join().unwrap(), "finished");
        assert_eq!(*side.offered.lock().unwrap(), Some(65536));
    }

    #[test]
    fn an_oversized_page_size_is_refused_before_anything_is_allocated() {
        let caps = Caps {
            mem_limit: 1 << 20,
            ..Caps::default()
        };
        let (rx, side, c) = pair(1 << 31, Then::Finish, caps);
        let r = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            matches!(r, Err(PairError::MemLimit { len, .. }) if len == 1 << 31),
            "{r:?}"
        );
        assert_eq!(*side.offered.lock().unwrap(), None);
        assert_eq!(c.join().unwrap(), "refused in the exchange");
    }

    #[test]
    fn a_client_silent_after_the_exchange_is_dropped() {
        let caps = Caps {
            idle_timeout: Duration::from_millis(300),
            ..Caps::default()
        };
        let start = std::time::Instant::now();
        let (rx, _, c) = pair(4096, Then::Silent(Duration::from_secs(3)), caps);
        let r = rx
            .recv_timeout(Duration::from_secs(2))
            .expect("the server still waits on a silent client");
        assert!(start.elapsed() < Duration::from_secs(2));
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("its test did not complete within 0.3 s")
                && e.contains("--server-idle-timeout"),
            "{e}"
        );
        assert_eq!(c.join().unwrap(), "dropped after the exchange");
    }

    #[test]
    fn a_trickling_client_is_dropped_at_the_handshake_deadline() {
        let caps = Caps {
            handshake_timeout: Duration::from_millis(300),
            ..Caps::default()
        };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let c = std::thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            // One byte of its version every 100 ms: each read is quick, the message is late.
            for b in b"6.24\0\0\0\0\0\0\0\0\0\0\0\0" {
                if std::io::Write::write_all(&mut s, &[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let (st, _) = l.accept().unwrap();
        let start = std::time::Instant::now();
        let e = serve(st, &mut FakeSide::default(), &opts(), &caps)
            .unwrap_err()
            .to_string();
        assert!(start.elapsed() < Duration::from_secs(1));
        assert!(e.contains("--server-handshake-timeout"), "{e}");
        c.join().unwrap();
    }
}
