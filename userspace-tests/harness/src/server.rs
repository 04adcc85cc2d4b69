//! The two-node server (`validate --server`, `bench --server`): listens where it is told
//! (loopback unless told otherwise), admits a client only with the shared token or, without a
//! token, only from a loopback address (unless `--allow-any-peer`), serves clients one at a time
//! until stopped (`--once`: the first only), frees everything a client held when it leaves, and
//! logs each step on stderr.

use crate::cli::ServeArgs;
use crate::oob::{Channel, OobError};
use crate::peer::{Req, Resp, PROTO};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// A client that sends nothing for this long is dropped, so one silent client cannot hold a
/// server that serves one client at a time.
pub const IDLE: Duration = Duration::from_secs(600);

/// Setup errors of the server (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--bind {0}: not an IP address")]
    BadAddress(String),
    #[error(
        "--bind {0} accepts peers from the network: give a shared --token (or NVPEER_TOKEN), or \
         --allow-any-peer on a trusted network"
    )]
    Unprotected(String),
    #[error("listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    #[error("accept: {0}")]
    Accept(std::io::Error),
}

/// One client's state on the server: answers its requests; dropped when the client leaves.
pub trait Session {
    fn handle(&mut self, q: Req) -> Resp;
    /// Serves a perftest client on `s` (its exchange, not nvpeer's); `None` when this server
    /// does not pair with perftest, else what to log.
    fn perftest(&mut self, _s: TcpStream) -> Option<Result<String, String>> {
        None
    }
    /// What the server serves, for the hello answer and the log (`host`, `cuda`, ...).
    fn mem(&self) -> String;
}

/// Checks the options and binds the listening socket.
pub fn listen(a: &ServeArgs, port: u16) -> Result<TcpListener, ServeError> {
    let ip: IpAddr = a
        .bind
        .parse()
        .map_err(|_| ServeError::BadAddress(a.bind.clone()))?;
    if !ip.is_loopback() && a.token.is_none() && !a.allow_any_peer {
        return Err(ServeError::Unprotected(a.bind.clone()));
    }
    let addr = SocketAddr::new(ip, port);
    TcpListener::bind(addr).map_err(|e| ServeError::Listen(addr, e))
}

/// Whether a client at `peer` that said `token` may be served.
pub fn admit(a: &ServeArgs, peer: &SocketAddr, token: Option<&str>) -> Result<(), String> {
    match (&a.token, token) {
        (Some(want), Some(got)) if constant_time_eq(want.as_bytes(), got.as_bytes()) => Ok(()),
        (Some(_), _) => Err("wrong or missing token".into()),
        (None, _) if peer.ip().is_loopback() || a.allow_any_peer => Ok(()),
        (None, _) => Err(format!(
            "{} is not a loopback address and this server has no --token",
            peer.ip()
        )),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Log lines on stderr, stamped with the seconds since the server started.
pub struct Log {
    start: Instant,
    quiet: bool,
}

impl Log {
    pub fn new() -> Self {
        Log {
            start: Instant::now(),
            quiet: false,
        }
    }

    /// A log that writes nothing (unit tests).
    pub fn silent() -> Self {
        Log {
            start: Instant::now(),
            quiet: true,
        }
    }

    pub fn say(&self, msg: &str) {
        if self.quiet {
            return;
        }
        let t = self.start.elapsed().as_secs_f64();
        // A closed stderr must not stop the server.
        let _ = writeln!(std::io::stderr(), "[{t:9.3}s] nvpeer server: {msg}");
    }
}

impl Default for Log {
    fn default() -> Self {
        Self::new()
    }
}

/// Serves clients on `l` until stopped (or the first one with `--once`); `session` makes the
/// state of each admitted client.
pub fn serve<S: Session>(
    l: &TcpListener,
    a: &ServeArgs,
    log: &Log,
    mut session: impl FnMut() -> S,
) -> Result<(), ServeError> {
    if let Ok(addr) = l.local_addr() {
        let auth = match (&a.token, a.allow_any_peer) {
            (Some(_), _) => "clients need the shared token",
            (None, true) => "any peer admitted (--allow-any-peer)",
            (None, false) => "loopback clients only",
        };
        log.say(&format!("listening on {addr}; {auth}"));
    }
    loop {
        let (stream, peer) = l.accept().map_err(ServeError::Accept)?;
        let served = one_client(stream, peer, a, log, &mut session);
        if served && a.once {
            log.say("--once: done");
            return Ok(());
        }
    }
}

/// Runs one connection; returns whether the client was admitted.
fn one_client<S: Session>(
    stream: TcpStream,
    peer: SocketAddr,
    a: &ServeArgs,
    log: &Log,
    session: &mut impl FnMut() -> S,
) -> bool {
    log.say(&format!("{peer}: connected"));
    let _ = stream.set_read_timeout(Some(IDLE));
    if crate::perftest_peer::is_perftest(&stream) {
        // perftest sends no token: it is admitted by its address alone.
        if let Err(why) = admit(a, &peer, None) {
            log.say(&format!("{peer}: perftest client refused: {why}"));
            return false;
        }
        return match session().perftest(stream) {
            Some(Ok(msg)) => {
                log.say(&format!("{peer}: {msg}"));
                true
            }
            Some(Err(e)) => {
                log.say(&format!("{peer}: perftest client: {e}"));
                true
            }
            None => {
                log.say(&format!(
                    "{peer}: a perftest client: only `nvpeer bench --server` pairs with perftest"
                ));
                false
            }
        };
    }
    let mut ch = match Channel::from_stream(stream) {
        Ok(c) => c,
        Err(e) => {
            log.say(&format!("{peer}: {e}"));
            return false;
        }
    };
    let refuse = |ch: &mut Channel, why: String| {
        log.say(&format!("{peer}: refused: {why}"));
        let _ = ch.send(&Resp::Err {
            msg: format!("refused: {why}"),
            errno: None,
        });
        false
    };
    let token = match ch.recv::<Req>() {
        Ok(Req::Hello { proto, token }) if proto == PROTO => token,
        Ok(Req::Hello { proto, .. }) => {
            return refuse(
                &mut ch,
                format!("protocol {proto} (this server speaks {PROTO})"),
            )
        }
        Ok(_) => return refuse(&mut ch, "the first request must be hello".into()),
        Err(e) => {
            log.say(&format!("{peer}: {e}"));
            return false;
        }
    };
    if let Err(why) = admit(a, &peer, token.as_deref()) {
        return refuse(&mut ch, why);
    }
    let mut s = session();
    let mem = s.mem();
    if ch
        .send(&Resp::Hello {
            proto: PROTO,
            mem: mem.clone(),
        })
        .is_err()
    {
        return true;
    }
    log.say(&format!("{peer}: admitted, serving {mem} memory"));
    let (mut n, mut errors) = (0u64, 0u64);
    let end = loop {
        let q: Req = match ch.recv() {
            Ok(q) => q,
            Err(OobError::Closed) => break "disconnected".to_string(),
            Err(e) => break format!("dropped: {e}"),
        };
        n += 1;
        let bye = matches!(q, Req::Bye);
        let what = describe(&q);
        let r = s.handle(q);
        match (&r, what) {
            (Resp::Err { msg, .. }, _) => {
                errors += 1;
                log.say(&format!("{peer}: request {n} failed: {msg}"));
            }
            (_, Some(w)) => log.say(&format!("{peer}: {w}")),
            _ => {}
        }
        if let Err(e) = ch.send(&r) {
            break format!("dropped: {e}");
        }
        if bye {
            break "said bye".into();
        }
    };
    drop(s);
    log.say(&format!(
        "{peer}: {end} after {n} requests ({errors} failed); its buffers are freed"
    ));
    true
}

/// The requests worth a log line (not the per-message ones of a measurement).
fn describe(q: &Req) -> Option<String> {
    match q {
        Req::Alloc { size, host } => Some(format!(
            "allocated {size} bytes of {} memory",
            if *host { "host" } else { "test" }
        )),
        Req::Connect { depth, .. } => Some(format!("connected a QP of depth {depth}")),
        Req::Free { id } => Some(format!("freed buffer {id} under its MR")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn args(bind: &str, token: Option<&str>, any: bool) -> ServeArgs {
        ServeArgs {
            bind: bind.into(),
            token: token.map(Into::into),
            allow_any_peer: any,
            once: true,
            mem_limit: 1 << 20,
        }
    }

    #[test]
    fn binds_loopback_and_refuses_unprotected_network_binds() {
        let l = listen(&args("127.0.0.1", None, false), 0).unwrap();
        assert!(l.local_addr().unwrap().ip().is_loopback());
        assert!(matches!(
            listen(&args("0.0.0.0", None, false), 0),
            Err(ServeError::Unprotected(_))
        ));
        assert!(matches!(
            listen(&args("::", None, false), 0),
            Err(ServeError::Unprotected(_))
        ));
        assert!(matches!(
            listen(&args("eth0", None, false), 0),
            Err(ServeError::BadAddress(_))
        ));
        assert!(listen(&args("0.0.0.0", Some("s3cret"), false), 0).is_ok());
        assert!(listen(&args("0.0.0.0", None, true), 0).is_ok());
    }

    #[test]
    fn admission() {
        let lo: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let far: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        let open = args("127.0.0.1", None, false);
        assert!(admit(&open, &lo, None).is_ok());
        assert!(admit(&open, &far, None).is_err());
        assert!(admit(&args("0.0.0.0", None, true), &far, None).is_ok());
        let tok = args("0.0.0.0", Some("s3cret"), false);
        assert!(admit(&tok, &far, Some("s3cret")).is_ok());
        assert!(admit(&tok, &lo, None).is_err());
        assert!(admit(&tok, &far, Some("s3cre")).is_err());
        assert!(admit(&tok, &far, Some("s3cret2")).is_err());
    }

    /// A session that answers every request with Ok and counts how many it saw.
    struct Counting(std::rc::Rc<std::cell::Cell<u32>>);

    impl Session for Counting {
        fn handle(&mut self, _: Req) -> Resp {
            self.0.set(self.0.get() + 1);
            Resp::Ok
        }
        fn mem(&self) -> String {
            "host".into()
        }
    }

    fn client(port: u16, token: Option<&str>) -> Channel {
        let mut c = Channel::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        c.send(&Req::Hello {
            proto: PROTO,
            token: token.map(Into::into),
        })
        .unwrap();
        c
    }

    #[test]
    fn serves_clients_until_stopped_and_refuses_bad_tokens() {
        let mut a = args("127.0.0.1", Some("tok"), false);
        a.once = false;
        let l = listen(&a, 0).unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = std::rc::Rc::new(std::cell::Cell::new(0));
        let t = std::thread::spawn(move || {
            // Three clients: refused, served, served; then the test stops reading.
            let mut c = client(port, Some("wrong"));
            assert!(matches!(c.recv::<Resp>(), Ok(Resp::Err { msg, .. }) if msg.contains("token")));
            for _ in 0..2 {
                let mut c = client(port, Some("tok"));
                assert!(matches!(c.recv::<Resp>(), Ok(Resp::Hello { .. })));
                assert!(matches!(c.call::<_, Resp>(&Req::Counters), Ok(Resp::Ok)));
                assert!(matches!(c.call::<_, Resp>(&Req::Bye), Ok(Resp::Ok)));
            }
            // A request before the hello is refused.
            let mut c = Channel::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
            assert!(matches!(
                c.call::<_, Resp>(&Req::Counters),
                Ok(Resp::Err { .. })
            ));
        });
        let log = Log::silent();
        let s2 = seen.clone();
        for _ in 0..4 {
            let (st, peer) = l.accept().unwrap();
            one_client(st, peer, &a, &log, &mut || Counting(s2.clone()));
        }
        t.join().unwrap();
        assert_eq!(seen.get(), 4);
    }

    #[test]
    fn once_returns_after_the_first_admitted_client() {
        let a = args("127.0.0.1", None, false);
        let l = listen(&a, 0).unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let mut c = client(port, None);
            assert!(matches!(c.recv::<Resp>(), Ok(Resp::Hello { .. })));
            drop(c);
        });
        let seen = std::rc::Rc::new(std::cell::Cell::new(0));
        serve(&l, &a, &Log::silent(), || Counting(seen.clone())).unwrap();
        t.join().unwrap();
        assert_eq!(seen.get(), 0);
    }
}
