//! Out-of-band exchange over TCP, like perftest's: the client connects to the server's port and
//! both speak newline-delimited JSON. Each request gets exactly one response.

use serde::{de::DeserializeOwned, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Longest accepted line (a garbled peer must not make us allocate without bound).
pub(crate) const MAX_LINE: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum OobError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("peer closed the connection")]
    Closed,
    #[error("bad message from peer: {0}")]
    Bad(String),
    #[error("no complete message within {} s", .0.as_secs_f64())]
    Timeout(Duration),
    /// A message that does not come from the authenticated peer as it sent it (a framing layer's
    /// check above this channel: the fleet's sealed frames).
    #[error("message refused: {0}")]
    Forged(String),
}

/// One TCP connection carrying JSON lines.
pub struct Channel {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Channel {
    /// Connects to `host:port`, retrying for up to `wait` while the server starts.
    pub fn connect(host: &str, port: u16, wait: Duration) -> Result<Self, OobError> {
        let start = std::time::Instant::now();
        loop {
            let addrs = (host, port)
                .to_socket_addrs()
                .map_err(|e| OobError::Io(format!("resolve {host}"), e))?;
            let mut last = None;
            for a in addrs {
                match TcpStream::connect_timeout(&a, Duration::from_secs(5)) {
                    Ok(s) => return Self::from_stream(s),
                    Err(e) => last = Some(e),
                }
            }
            if start.elapsed() > wait {
                return Err(OobError::Io(
                    format!("connect to {host}:{port}"),
                    last.unwrap_or_else(|| std::io::Error::other("no address")),
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Wraps an accepted or connected stream.
    pub fn from_stream(s: TcpStream) -> Result<Self, OobError> {
        let _ = s.set_nodelay(true);
        let w = s
            .try_clone()
            .map_err(|e| OobError::Io("clone socket".into(), e))?;
        Ok(Channel {
            r: BufReader::new(s),
            w,
        })
    }

    pub fn send<T: Serialize>(&mut self, m: &T) -> Result<(), OobError> {
        let mut line = serde_json::to_vec(m).map_err(|e| OobError::Bad(e.to_string()))?;
        line.push(b'\n');
        self.w
            .write_all(&line)
            .map_err(|e| OobError::Io("send".into(), e))
    }

    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<T, OobError> {
        let mut buf = Vec::new();
        let n = (&mut self.r)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| OobError::Io("receive".into(), e))?;
        if n == 0 {
            return Err(OobError::Closed);
        }
        if buf.last() != Some(&b'\n') {
            return Err(OobError::Bad(format!(
                "line longer than {MAX_LINE} bytes or truncated"
            )));
        }
        serde_json::from_slice(&buf).map_err(|e| OobError::Bad(e.to_string()))
    }

    /// [`Channel::recv`] with a deadline for the whole message, however the peer spreads its
    /// bytes over time (one byte every few seconds does not keep the wait going): `Timeout(limit)`
    /// once `limit` has passed without a complete line. The stream's read timeout is restored
    /// afterwards.
    pub fn recv_within<T: DeserializeOwned>(&mut self, limit: Duration) -> Result<T, OobError> {
        let deadline = Instant::now() + limit;
        let before = self.r.get_ref().read_timeout().ok().flatten();
        let line = self.read_line_by(deadline, limit);
        let _ = self.r.get_ref().set_read_timeout(before);
        serde_json::from_slice(&line?).map_err(|e| OobError::Bad(e.to_string()))
    }

    fn read_line_by(&mut self, deadline: Instant, limit: Duration) -> Result<Vec<u8>, OobError> {
        let mut buf = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // A zero read timeout is refused by the socket (it would mean "none"), so an expired
            // deadline ends here.
            if left.is_zero() {
                return Err(OobError::Timeout(limit));
            }
            self.r
                .get_ref()
                .set_read_timeout(Some(left))
                .map_err(|e| OobError::Io("set read timeout".into(), e))?;
            let avail = match self.r.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(OobError::Timeout(limit))
                }
                Err(e) => return Err(OobError::Io("receive".into(), e)),
            };
            if avail.is_empty() {
                return Err(if buf.is_empty() {
                    OobError::Closed
                } else {
                    OobError::Bad("connection closed in the middle of a message".into())
                });
            }
            let (take, done) = match avail.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (avail.len(), false),
            };
            buf.extend_from_slice(&avail[..take]);
            self.r.consume(take);
            if buf.len() > MAX_LINE + 1 {
                return Err(OobError::Bad(format!("line longer than {MAX_LINE} bytes")));
            }
            if done {
                return Ok(buf);
            }
        }
    }

    /// How long a later [`Channel::recv`] may wait for the peer (`None`: forever).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> Result<(), OobError> {
        self.r
            .get_ref()
            .set_read_timeout(t)
            .map_err(|e| OobError::Io("set read timeout".into(), e))
    }

    /// How long a later [`Channel::send`] may wait for the peer to take its bytes (`None`:
    /// forever).
    pub fn set_write_timeout(&self, t: Option<Duration>) -> Result<(), OobError> {
        self.w
            .set_write_timeout(t)
            .map_err(|e| OobError::Io("set write timeout".into(), e))
    }

    /// Sends a request and waits for its response.
    pub fn call<Q: Serialize, A: DeserializeOwned>(&mut self, q: &Q) -> Result<A, OobError> {
        self.send(q)?;
        self.recv()
    }
}

use std::io::Read as _;

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn json_lines_roundtrip_and_reject_garbage() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut c = Channel::from_stream(s).unwrap();
            let v: Vec<u32> = c.recv().unwrap();
            c.send(&v.iter().sum::<u32>()).unwrap();
            // Then garbage.
            c.w.write_all(b"{not json\n").unwrap();
        });
        let mut c = Channel::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        let sum: u32 = c.call(&vec![1u32, 2, 3]).unwrap();
        assert_eq!(sum, 6);
        assert!(matches!(c.recv::<u32>(), Err(OobError::Bad(_))));
        t.join().unwrap();
        assert!(matches!(c.recv::<u32>(), Err(OobError::Closed)));
    }

    #[test]
    fn recv_within_bounds_the_whole_message() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            // A whole message in two pieces, in time.
            s.write_all(b"[1,").unwrap();
            std::thread::sleep(Duration::from_millis(50));
            s.write_all(b"2]\n").unwrap();
            // Then one byte every 100 ms: each read is quick, the message never completes in
            // time.
            for b in b"[3,4,5,6,7,8,9]\n" {
                if s.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let mut c = Channel::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(7))).unwrap();
        let v: Vec<u32> = c.recv_within(Duration::from_secs(5)).unwrap();
        assert_eq!(v, [1, 2]);
        let start = Instant::now();
        let r = c.recv_within::<Vec<u32>>(Duration::from_millis(350));
        assert!(matches!(r, Err(OobError::Timeout(_))), "{r:?}");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        // The stream's own timeout is back.
        assert_eq!(
            c.r.get_ref().read_timeout().unwrap(),
            Some(Duration::from_secs(7))
        );
        t.join().unwrap();
    }
}
