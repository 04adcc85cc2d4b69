//! perftest's out-of-band exchange over TCP, from its message layout (perftest 6.24, Debian's
//! 25.01.0+0.80: `src/perftest_communication.c`), so that `nvpeer bench` pairs with `ib_write_bw`
//! and `ib_read_bw` in either role.
//!
//! Every exchange is symmetric and fixed-size: the client writes its message and then reads the
//! server's; the server reads first, then writes. A connection carries, in this order:
//!
//! 1. the version, 16 bytes of text padded with NULs (perftest refuses peers below 5.70);
//! 2. two 4-byte big-endian integers, one exchange each: the page size and the cache-line size
//!    (each side keeps the larger);
//! 3. the path MTU as the decimal text of its `ibv_mtu` value plus a NUL, 2 bytes (each side uses
//!    the smaller);
//! 4. the QP's address ([`Dest`]), three times: before connecting, after, and once more once both
//!    QPs are ready to receive;
//! 5. after the client's test: the address once more, then its report (message size and
//!    iterations as 8-byte big-endian integers, peak and average bandwidth and the message rate
//!    as big-endian IEEE doubles), then the address a last time to close.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The perftest version this side speaks (the protocol of Debian's perftest 25.01).
pub const VERSION: &str = "6.24";
/// perftest refuses peers older than this, and so does nvpeer.
pub const MIN_VERSION: f64 = 5.70;
const VERSION_LEN: usize = 16;
/// Address message without a GID (InfiniBand ports without `-x`).
pub const KEY_LEN: usize = 59;
/// Address message with the GID (RoCE, or `-x` given).
pub const KEY_GID_LEN: usize = 108;

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("perftest exchange: {0}")]
    Io(#[from] std::io::Error),
    #[error("perftest peer sent a malformed {what}: {text:?}")]
    Bad { what: &'static str, text: String },
    #[error("perftest peer speaks version {0}; the exchange needs 5.70 or later")]
    TooOld(String),
    /// The deadline of [`Wire::set_deadline`] passed before the peer's message was complete.
    #[error("perftest peer did not complete its message within {} s", .0.as_secs_f64())]
    Timeout(Duration),
}

/// A QP's address as perftest sends it (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    pub lid: u16,
    /// RDMA READs the sender accepts in flight (its `max_dest_rd_atomic`).
    pub out_reads: u16,
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    /// Address of the sender's buffer, where the other side writes or reads.
    pub vaddr: u64,
    /// Present in the GID form of the message.
    pub gid: Option<[u8; 16]>,
    pub srqn: u32,
}

impl Dest {
    /// The fixed-size message: colon-separated hex fields, NUL-padded.
    pub fn encode(&self) -> Vec<u8> {
        let mut text = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        let len = match &self.gid {
            Some(g) => {
                for b in g {
                    text.push_str(&format!("{b:02x}:"));
                }
                text.push_str(&format!("{:08x}:", self.srqn));
                KEY_GID_LEN
            }
            None => {
                text.push_str(&format!("{:08x}", self.srqn));
                KEY_LEN
            }
        };
        let mut m = text.into_bytes();
        m.resize(len, 0);
        m
    }

    /// Parses a message of either form (`with_gid` says which length was read).
    pub fn decode(m: &[u8], with_gid: bool) -> Result<Dest, WireError> {
        let end = m.iter().position(|&b| b == 0).unwrap_or(m.len());
        let text = std::str::from_utf8(&m[..end]).unwrap_or("");
        let bad = || WireError::Bad {
            what: "QP address",
            text: String::from_utf8_lossy(&m[..end]).into_owned(),
        };
        let f: Vec<&str> = text.split(':').collect();
        let want = if with_gid { 6 + 16 + 1 } else { 7 };
        if f.len() < want || f[..want].iter().any(|x| x.is_empty() || x.len() > 16) {
            return Err(bad());
        }
        let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|_| bad());
        let small =
            |s: &str, max: u64| hex(s).and_then(|v| if v <= max { Ok(v) } else { Err(bad()) });
        let gid = if with_gid {
            let mut g = [0u8; 16];
            for (i, b) in g.iter_mut().enumerate() {
                *b = small(f[6 + i], 0xff)? as u8;
            }
            Some(g)
        } else {
            None
        };
        Ok(Dest {
            lid: small(f[0], 0xffff)? as u16,
            out_reads: small(f[1], 0xffff)? as u16,
            qpn: small(f[2], 0xff_ffff)? as u32,
            psn: small(f[3], 0xff_ffff)? as u32,
            rkey: small(f[4], 0xffff_ffff)? as u32,
            vaddr: hex(f[5])?,
            gid,
            srqn: small(f[want - 1], 0xffff_ffff)? as u32,
        })
    }
}

/// A bandwidth report as the client hands it to the server at the end.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Report {
    pub size: u64,
    pub iters: u64,
    pub bw_peak: f64,
    pub bw_avg: f64,
    pub msg_rate: f64,
}

/// Parses a version the way perftest compares them (`atof`: the leading number).
pub fn version_number(v: &str) -> f64 {
    let end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    v[..end].parse().unwrap_or(0.0)
}

/// One side of the TCP connection.
pub struct Wire {
    s: TcpStream,
    client: bool,
    /// When the messages read from now on must be complete, and the limit that set it.
    deadline: Option<(Instant, Duration)>,
}

impl Wire {
    pub fn new(s: TcpStream, client: bool) -> Self {
        let _ = s.set_nodelay(true);
        Wire {
            s,
            client,
            deadline: None,
        }
    }

    /// Reads `out` whole, by the deadline if one is set (however the peer spreads its bytes).
    fn read_all(&mut self, out: &mut [u8]) -> Result<(), WireError> {
        let Some((deadline, limit)) = self.deadline else {
            return Ok(self.s.read_exact(out)?);
        };
        let mut got = 0;
        while got < out.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            // A zero read timeout would mean none: an expired deadline ends here.
            if left.is_zero() {
                return Err(WireError::Timeout(limit));
            }
            self.s.set_read_timeout(Some(left))?;
            match self.s.read(&mut out[got..]) {
                Ok(0) => return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into()),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(WireError::Timeout(limit))
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// One symmetric exchange of `mine.len()` bytes. Each message goes out in one write: perftest
    /// reads it with a single `read`.
    fn xchg(&mut self, mine: &[u8]) -> Result<Vec<u8>, WireError> {
        let mut theirs = vec![0u8; mine.len()];
        if self.client {
            self.s.write_all(mine)?;
            self.read_all(&mut theirs)?;
        } else {
            self.read_all(&mut theirs)?;
            self.s.write_all(mine)?;
        }
        Ok(theirs)
    }

    /// Exchanges versions; the peer's must be 5.70 or later.
    pub fn versions(&mut self) -> Result<String, WireError> {
        let mut m = VERSION.as_bytes().to_vec();
        m.resize(VERSION_LEN, 0);
        let r = self.xchg(&m)?;
        let end = r.iter().position(|&b| b == 0).unwrap_or(r.len());
        let v = String::from_utf8_lossy(&r[..end]).into_owned();
        if version_number(&v) < MIN_VERSION {
            return Err(WireError::TooOld(v));
        }
        Ok(v)
    }

    fn xchg_u32(&mut self, v: u32) -> Result<u32, WireError> {
        let r = self.xchg(&v.to_be_bytes())?;
        Ok(u32::from_be_bytes([r[0], r[1], r[2], r[3]]))
    }

    fn xchg_u64(&mut self, v: u64) -> Result<u64, WireError> {
        let r = self.xchg(&v.to_be_bytes())?;
        let mut b = [0u8; 8];
        b.copy_from_slice(&r);
        Ok(u64::from_be_bytes(b))
    }

    /// Exchanges page and cache-line sizes; returns the larger of each.
    pub fn sys_data(&mut self, page: u32, cache_line: u32) -> Result<(u32, u32), WireError> {
        let p = self.xchg_u32(page)?;
        let c = self.xchg_u32(cache_line)?;
        Ok((page.max(p), cache_line.max(c)))
    }

    /// Exchanges `ibv_mtu` values; returns the one both use (the smaller, ignoring an invalid one).
    pub fn mtu(&mut self, code: u8) -> Result<u8, WireError> {
        let m = [b'0' + code.clamp(1, 5), 0];
        let r = self.xchg(&m)?;
        let remote = match r[0] {
            c @ b'1'..=b'5' if r[1] == 0 => c - b'0',
            _ => 0,
        };
        Ok(crate::verbs::negotiate_mtu(code, remote))
    }

    /// Exchanges QP addresses.
    pub fn keys(&mut self, mine: &Dest) -> Result<Dest, WireError> {
        let m = mine.encode();
        let r = self.xchg(&m)?;
        Dest::decode(&r, mine.gid.is_some())
    }

    /// Exchanges the end-of-test reports.
    pub fn reports(&mut self, mine: &Report) -> Result<Report, WireError> {
        Ok(Report {
            size: self.xchg_u64(mine.size)?,
            iters: self.xchg_u64(mine.iters)?,
            bw_peak: f64::from_bits(self.xchg_u64(mine.bw_peak.to_bits())?),
            bw_avg: f64::from_bits(self.xchg_u64(mine.bw_avg.to_bits())?),
            msg_rate: f64::from_bits(self.xchg_u64(mine.msg_rate.to_bits())?),
        })
    }

    /// Bounds how long one read may wait (`None`: forever).
    pub fn set_timeout(&self, t: Option<Duration>) {
        let _ = self.s.set_read_timeout(t);
    }

    /// The messages read from now on must be complete within `limit` of now, however the peer
    /// spreads them ([`WireError::Timeout`] otherwise); writes wait at most `limit` each.
    pub fn set_deadline(&mut self, limit: Duration) {
        self.deadline = Some((Instant::now() + limit, limit));
        let _ = self.s.set_write_timeout(Some(limit));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::TcpListener;

    fn dest(gid: bool) -> Dest {
        Dest {
            lid: 0x12,
            out_reads: 16,
            qpn: 0x11,
            psn: 0xabcdef,
            rkey: 0x1234_5678,
            vaddr: 0x7f00_dead_b000,
            gid: gid.then_some([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 99, 1, 2]),
            srqn: 0,
        }
    }

    #[test]
    fn address_messages_have_perftests_layout() {
        let m = dest(false).encode();
        assert_eq!(m.len(), KEY_LEN);
        assert_eq!(
            &m[..58],
            b"0012:0010:000011:abcdef:12345678:00007f00deadb000:00000000"
        );
        assert_eq!(m[58], 0);
        let m = dest(true).encode();
        assert_eq!(m.len(), KEY_GID_LEN);
        let text = std::str::from_utf8(&m[..107]).unwrap();
        assert_eq!(
            text,
            "0012:0010:000011:abcdef:12345678:00007f00deadb000:\
             00:00:00:00:00:00:00:00:00:00:ff:ff:0a:63:01:02:00000000:"
        );
        for g in [false, true] {
            assert_eq!(Dest::decode(&dest(g).encode(), g).unwrap(), dest(g));
        }
    }

    #[test]
    fn malformed_addresses_are_errors() {
        assert!(Dest::decode(b"", true).is_err());
        assert!(Dest::decode(&[0u8; KEY_GID_LEN], true).is_err());
        assert!(Dest::decode(
            b"zz:0010:000011:abcdef:12345678:00007f00deadb000:00000000\0",
            false
        )
        .is_err());
        // A LID wider than 16 bits.
        assert!(Dest::decode(b"10000:0010:000011:abcdef:12345678:0:00000000\0", false).is_err());
        // A field longer than 16 hex digits (more than a u64 holds).
        assert!(Dest::decode(
            b"0012:0010:000011:abcdef:12345678:100007f00deadb000:00000000\0",
            false
        )
        .is_err());
    }

    /// Any `Dest` whose fields fit perftest's layout (QPN and PSN are 24-bit on the wire).
    fn any_dest() -> impl Strategy<Value = Dest> {
        (
            (any::<u16>(), any::<u16>(), 0u32..1 << 24, 0u32..1 << 24),
            (
                any::<u32>(),
                any::<u64>(),
                any::<Option<[u8; 16]>>(),
                any::<u32>(),
            ),
        )
            .prop_map(
                |((lid, out_reads, qpn, psn), (rkey, vaddr, gid, srqn))| Dest {
                    lid,
                    out_reads,
                    qpn,
                    psn,
                    rkey,
                    vaddr,
                    gid,
                    srqn,
                },
            )
    }

    proptest! {
        /// Whatever a peer sends, decoding answers (an address or an error), never panics.
        #[test]
        fn decode_of_any_bytes_never_panics(
            m in proptest::collection::vec(any::<u8>(), 0..2 * KEY_GID_LEN),
            with_gid in any::<bool>(),
        ) {
            let _ = Dest::decode(&m, with_gid);
        }

        /// The same over text near the real layout (hex digits, colons, NULs, a stray letter),
        /// where the field checks are actually reached.
        #[test]
        fn decode_of_near_addresses_never_panics(
            m in "[0-9a-fA-F:\\x00xZ]{0,120}",
            with_gid in any::<bool>(),
        ) {
            let _ = Dest::decode(m.as_bytes(), with_gid);
        }

        /// Every address encodes to perftest's fixed length and decodes back to itself.
        #[test]
        fn encode_decode_round_trips(d in any_dest()) {
            let m = d.encode();
            let with_gid = d.gid.is_some();
            prop_assert_eq!(m.len(), if with_gid { KEY_GID_LEN } else { KEY_LEN });
            prop_assert_eq!(Dest::decode(&m, with_gid).unwrap(), d);
        }

        /// A QPN or PSN wider than 24 bits goes out masked, as perftest's `%06x` of a 24-bit
        /// field does, and comes back masked.
        #[test]
        fn wide_qpn_and_psn_are_masked(d in any_dest(), qpn in any::<u32>(), psn in any::<u32>()) {
            let wide = Dest { qpn, psn, ..d };
            let back = Dest::decode(&wide.encode(), d.gid.is_some()).unwrap();
            prop_assert_eq!(back, Dest { qpn: qpn & 0xff_ffff, psn: psn & 0xff_ffff, ..d });
        }

        /// One corrupted byte of a real message: an answer, never a panic.
        #[test]
        fn decode_of_a_corrupted_address_never_panics(
            d in any_dest(),
            at in any::<proptest::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let mut m = d.encode();
            let i = at.index(m.len());
            m[i] = byte;
            let _ = Dest::decode(&m, d.gid.is_some());
        }
    }

    #[test]
    fn versions_compare_like_atof() {
        assert_eq!(version_number("6.24"), 6.24);
        assert_eq!(version_number("5.70-rc"), 5.70);
        assert_eq!(version_number(""), 0.0);
        assert!(version_number("5.6") < MIN_VERSION);
    }

    #[test]
    fn a_whole_exchange_between_client_and_server() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let mut w = Wire::new(l.accept().unwrap().0, false);
            let v = w.versions().unwrap();
            let sys = w.sys_data(4096, 64).unwrap();
            let mtu = w.mtu(3).unwrap();
            let d = w.keys(&dest(true)).unwrap();
            let r = w.reports(&Report::default()).unwrap();
            (v, sys, mtu, d, r)
        });
        let mut w = Wire::new(TcpStream::connect(("127.0.0.1", port)).unwrap(), true);
        assert_eq!(w.versions().unwrap(), VERSION);
        assert_eq!(w.sys_data(65536, 128).unwrap(), (65536, 128));
        assert_eq!(w.mtu(5).unwrap(), 3);
        assert_eq!(w.keys(&dest(true)).unwrap(), dest(true));
        let mine = Report {
            size: 65536,
            iters: 5000,
            bw_peak: 1.5,
            bw_avg: 1.25,
            msg_rate: 0.02,
        };
        assert_eq!(w.reports(&mine).unwrap(), Report::default());
        let (v, sys, mtu, d, r) = server.join().unwrap();
        assert_eq!(
            (v.as_str(), sys, mtu, d, r),
            (VERSION, (65536, 128), 3, dest(true), mine)
        );
    }

    #[test]
    fn old_peers_are_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; VERSION_LEN];
            s.read_exact(&mut b).unwrap();
            let mut old = b"5.60".to_vec();
            old.resize(VERSION_LEN, 0);
            s.write_all(&old).unwrap();
        });
        let mut w = Wire::new(TcpStream::connect(("127.0.0.1", port)).unwrap(), true);
        assert!(matches!(w.versions(), Err(WireError::TooOld(v)) if v == "5.60"));
        t.join().unwrap();
    }
}
