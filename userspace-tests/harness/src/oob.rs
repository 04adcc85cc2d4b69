//! Out-of-band exchange over TCP, like perftest's: the client connects to the server's port and
//! both speak newline-delimited JSON. Each request gets exactly one response.

use serde::{de::DeserializeOwned, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Longest accepted line (a garbled peer must not make us allocate without bound).
const MAX_LINE: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum OobError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("peer closed the connection")]
    Closed,
    #[error("bad message from peer: {0}")]
    Bad(String),
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
}
