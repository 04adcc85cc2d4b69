//! The two-node server (`validate --server`, `bench --server`): listens where it is told
//! (loopback unless told otherwise), admits a client only with the shared token or, without a
//! token, only from a loopback address (unless `--allow-any-peer`), serves clients one at a time
//! until stopped (`--once`: the first only), frees everything a client held when it leaves, and
//! logs each step on stderr. A connection that does not identify itself within
//! `--server-hello-timeout` ([`PRE_AUTH`]) is closed, and an admitted client silent for
//! `--server-idle-timeout` ([`IDLE`]) is dropped, so that a silent peer cannot hold the serial
//! server; what a client may make it take is capped ([`crate::limits::Caps`]); a failed `accept`
//! is logged and retried.

use crate::cli::ServeArgs;
use crate::oob::{Channel, OobError};
use crate::peer::{Req, Resp, PROTO};
use std::cell::RefCell;
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// By default a connection has this long, from `accept`, to send its first bytes and (an nvpeer
/// client) its whole hello; otherwise it is closed (`--server-hello-timeout`). Short, so that one
/// silent or trickling TCP connection holds the server, which serves one client at a time, for
/// seconds, not for [`IDLE`].
pub const PRE_AUTH: Duration = Duration::from_secs(5);

/// By default an admitted client that sends nothing for this long is dropped
/// (`--server-idle-timeout`; a client's requests can be far apart while it measures).
pub const IDLE: Duration = Duration::from_secs(600);

/// After a failed `accept` (EMFILE, ENFILE, ENOBUFS, ECONNABORTED, ...) the server waits this
/// long before the next, doubling on each failure in a row up to [`ACCEPT_BACKOFF_MAX`]: the
/// condition may last (descriptors run out) and the loop must not spin on it.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(50);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

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
    /// Whether this server was started for bidirectional bandwidth tests (`bench --server -b`).
    fn bidirectional(&self) -> bool {
        false
    }
}

/// Why a client is refused at its hello (logged by the server, sent to the client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("wrong or missing token")]
    Token,
    #[error("{0} is not a loopback address and this server has no --token")]
    NotLoopback(IpAddr),
    #[error(
        "this server was started with -b (bidirectional bandwidth) and the client was not: give \
         -b to both sides or to neither"
    )]
    ServerBidirectional,
    #[error(
        "the client runs bidirectional bandwidth tests (-b) and this server was started without \
         -b: give -b to both sides (`nvpeer bench --server -b`) or to neither"
    )]
    ClientBidirectional,
}

/// Whether a client that said `client` (`-b` or not) in its hello may be served by a server
/// started with `server`: both sides must say the same, as perftest's `-b` is given to both of
/// its ends; a mismatch is refused at the hello with what to change.
pub fn agree_bidirectional(server: bool, client: bool) -> Result<(), Refusal> {
    match (server, client) {
        (true, false) => Err(Refusal::ServerBidirectional),
        (false, true) => Err(Refusal::ClientBidirectional),
        _ => Ok(()),
    }
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
pub fn admit(a: &ServeArgs, peer: &SocketAddr, token: Option<&str>) -> Result<(), Refusal> {
    match (&a.token, token) {
        (Some(want), Some(got)) if constant_time_eq(want.as_bytes(), got.as_bytes()) => Ok(()),
        (Some(_), _) => Err(Refusal::Token),
        (None, _) if peer.ip().is_loopback() || a.allow_any_peer => Ok(()),
        (None, _) => Err(Refusal::NotLoopback(peer.ip())),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Log lines on stderr, stamped with the seconds since the server started.
pub struct Log {
    start: Instant,
    quiet: bool,
    /// Messages kept instead of written (unit tests that check what is logged).
    kept: Option<RefCell<Vec<String>>>,
}

impl Log {
    pub fn new() -> Self {
        Log {
            start: Instant::now(),
            quiet: false,
            kept: None,
        }
    }

    /// A log that writes nothing (unit tests).
    pub fn silent() -> Self {
        Log {
            start: Instant::now(),
            quiet: true,
            kept: None,
        }
    }

    /// A log that keeps its messages for [`Log::kept`] and writes nothing (unit tests).
    pub fn keeping() -> Self {
        Log {
            start: Instant::now(),
            quiet: true,
            kept: Some(RefCell::new(Vec::new())),
        }
    }

    /// The messages so far of a [`Log::keeping`] log.
    pub fn kept(&self) -> Vec<String> {
        self.kept
            .as_ref()
            .map_or_else(Vec::new, |k| k.borrow().clone())
    }

    pub fn say(&self, msg: &str) {
        if let Some(k) = &self.kept {
            k.borrow_mut().push(msg.to_string());
        }
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
/// state of each admitted client. A failed `accept` is logged and retried after a short wait,
/// never the end of the server.
pub fn serve<S: Session>(
    l: &TcpListener,
    a: &ServeArgs,
    log: &Log,
    session: impl FnMut() -> S,
) -> Result<(), ServeError> {
    if let Ok(addr) = l.local_addr() {
        let auth = match (&a.token, a.allow_any_peer) {
            (Some(_), _) => "clients need the shared token",
            (None, true) => "any peer admitted (--allow-any-peer)",
            (None, false) => "loopback clients only",
        };
        log.say(&format!("listening on {addr}; {auth}"));
    }
    serve_from(|| l.accept(), a, log, session);
    Ok(())
}

/// The loop of [`serve`] over connections from `accept`; returns when `--once` is done.
fn serve_from<S: Session>(
    mut accept: impl FnMut() -> std::io::Result<(TcpStream, SocketAddr)>,
    a: &ServeArgs,
    log: &Log,
    mut session: impl FnMut() -> S,
) {
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        let (stream, peer) = match accept() {
            Ok(c) => {
                backoff = ACCEPT_BACKOFF_MIN;
                c
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log.say(&format!(
                    "accept failed: {e}; still listening, next try in {} ms",
                    backoff.as_millis()
                ));
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                continue;
            }
        };
        let served = one_client(stream, peer, a, log, &mut session);
        if served && a.once {
            log.say("--once: done");
            return;
        }
    }
}

/// What a fresh connection sent first.
enum Opening {
    /// perftest's version text.
    Perftest,
    /// Something else: nvpeer's JSON hello, or garbage its parser will refuse.
    Nvpeer,
    /// Nothing within the pre-admission time.
    Silent,
    /// The peer closed without sending anything.
    Closed,
    Failed(std::io::Error),
}

/// Waits (up to the stream's read timeout) for the first byte of `stream` without taking it.
fn opening(stream: &TcpStream) -> Opening {
    let mut first = [0u8; 1];
    let peeked = loop {
        match stream.peek(&mut first) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            r => break r,
        }
    };
    match peeked {
        Ok(0) => Opening::Closed,
        Ok(_) if crate::perftest_peer::opens_perftest(first[0]) => Opening::Perftest,
        Ok(_) => Opening::Nvpeer,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Opening::Silent
        }
        Err(e) => Opening::Failed(e),
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
    let connected = Instant::now();
    let hello = a.caps.hello_timeout;
    if let Err(e) = stream.set_read_timeout(Some(hello)) {
        log.say(&format!("{peer}: closed: cannot set a read timeout: {e}"));
        return false;
    }
    match opening(&stream) {
        Opening::Perftest => {}
        Opening::Nvpeer => return nvpeer_client(stream, peer, a, log, connected, session),
        Opening::Silent => {
            log.say(&format!("{peer}: closed: {}", no_hello(hello)));
            return false;
        }
        Opening::Closed => {
            log.say(&format!("{peer}: closed before sending anything"));
            return false;
        }
        Opening::Failed(e) => {
            log.say(&format!("{peer}: closed: {e}"));
            return false;
        }
    }
    // perftest sends no token: it is admitted by its address alone.
    if let Err(why) = admit(a, &peer, None) {
        log.say(&format!("{peer}: perftest client refused: {why}"));
        return false;
    }
    match session().perftest(stream) {
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
    }
}

/// What the log says of a connection closed for want of a hello within `limit`.
fn no_hello(limit: Duration) -> String {
    format!(
        "no hello within {} s (--server-hello-timeout)",
        limit.as_secs_f64()
    )
}

/// The nvpeer client on `stream` (its first bytes are there): its hello must be complete within
/// `a.caps.hello_timeout` of `connected`; once admitted, it may be silent for `a.caps.idle_timeout`.
fn nvpeer_client<S: Session>(
    stream: TcpStream,
    peer: SocketAddr,
    a: &ServeArgs,
    log: &Log,
    connected: Instant,
    session: &mut impl FnMut() -> S,
) -> bool {
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
    let t = a.caps;
    // What is left of the pre-admission time; a zero limit times out at once.
    let left = t.hello_timeout.saturating_sub(connected.elapsed());
    let (token, bidirectional) = match ch.recv_within::<Req>(left) {
        Ok(Req::Hello {
            proto,
            token,
            bidirectional,
        }) if proto == PROTO => (token, bidirectional),
        Ok(Req::Hello { proto, .. }) => {
            return refuse(
                &mut ch,
                format!("protocol {proto} (this server speaks {PROTO})"),
            )
        }
        Ok(_) => return refuse(&mut ch, "the first request must be hello".into()),
        Err(OobError::Timeout(_)) => {
            log.say(&format!("{peer}: closed: {}", no_hello(t.hello_timeout)));
            return false;
        }
        Err(e) => {
            log.say(&format!("{peer}: {e}"));
            return false;
        }
    };
    if let Err(why) = admit(a, &peer, token.as_deref()) {
        return refuse(&mut ch, why.to_string());
    }
    // Admitted: from now on a client may think between requests, and must read its answers.
    if let Err(e) = ch
        .set_read_timeout(Some(t.idle_timeout))
        .and_then(|()| ch.set_write_timeout(Some(t.idle_timeout)))
    {
        log.say(&format!("{peer}: closed: {e}"));
        return false;
    }
    let mut s = session();
    if let Err(why) = agree_bidirectional(s.bidirectional(), bidirectional) {
        return refuse(&mut ch, why.to_string());
    }
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
        // Each request must be whole within the idle time, however its bytes are spread.
        let q: Req = match ch.recv_within(t.idle_timeout) {
            Ok(q) => q,
            Err(OobError::Closed) => break "disconnected".to_string(),
            Err(OobError::Timeout(_)) => {
                let why = format!(
                    "dropped: silent for {} s (--server-idle-timeout)",
                    t.idle_timeout.as_secs_f64()
                );
                // Its next read finds why.
                let _ = ch.send(&Resp::Err {
                    msg: why.clone(),
                    errno: None,
                });
                break why;
            }
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
        Req::BwRun { op, size, plan, .. } => Some(format!(
            "bidirectional: running this side's half, {} of {size} bytes, {}",
            op.op().name(),
            match plan.duration {
                Some((d, _)) => format!("{d} s on each QP"),
                None => format!("{} on each QP", plan.iters),
            }
        )),
        _ => None,
    }
}

#[cfg(test)]
mod hostile;

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
            caps: crate::limits::Caps {
                mem_limit: 1 << 20,
                ..Default::default()
            },
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
        client_b(port, token, false)
    }

    /// A client whose hello says `bidirectional` (`bench -b`).
    fn client_b(port: u16, token: Option<&str>, bidirectional: bool) -> Channel {
        let mut c = Channel::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        c.send(&Req::Hello {
            proto: PROTO,
            token: token.map(Into::into),
            bidirectional,
        })
        .unwrap();
        c
    }

    /// A session of a server started with `-b` or without.
    struct Bidi(bool);

    impl Session for Bidi {
        fn handle(&mut self, _: Req) -> Resp {
            Resp::Ok
        }
        fn mem(&self) -> String {
            "host".into()
        }
        fn bidirectional(&self) -> bool {
            self.0
        }
    }

    #[test]
    fn bidirectional_must_be_said_by_both_sides() {
        assert_eq!(agree_bidirectional(false, false), Ok(()));
        assert_eq!(agree_bidirectional(true, true), Ok(()));
        let e = agree_bidirectional(true, false).unwrap_err().to_string();
        assert!(
            e.contains("server was started with -b") && e.contains("client was not"),
            "{e}"
        );
        let e = agree_bidirectional(false, true).unwrap_err().to_string();
        assert!(e.contains("client runs") && e.contains("without -b"), "{e}");
        // Sessions that do not say are not bidirectional (validate's server).
        let counting = Counting(std::rc::Rc::new(std::cell::Cell::new(0)));
        assert!(!counting.bidirectional());
    }

    #[test]
    fn a_bidirectional_mismatch_is_refused_at_the_hello() {
        let mut a = args("127.0.0.1", None, false);
        a.once = false;
        let l = listen(&a, 0).unwrap();
        let port = l.local_addr().unwrap().port();
        // (server -b, client -b, admitted)
        let cases = [
            (true, false, false),
            (false, true, false),
            (true, true, true),
            (false, false, true),
        ];
        let t = std::thread::spawn(move || {
            for (server, client, admitted) in cases {
                let mut c = client_b(port, None, client);
                match c.recv::<Resp>() {
                    Ok(Resp::Hello { .. }) if admitted => {
                        assert!(matches!(c.call::<_, Resp>(&Req::Bye), Ok(Resp::Ok)));
                    }
                    Ok(Resp::Err { msg, .. }) if !admitted => {
                        assert!(msg.starts_with("refused: ") && msg.contains("-b"), "{msg}");
                        // Then the server closes the connection.
                        assert!(matches!(c.recv::<Resp>(), Err(OobError::Closed)));
                    }
                    other => panic!("server -b {server}, client -b {client}: {other:?}"),
                }
            }
        });
        let log = Log::keeping();
        for (server, _, admitted) in cases {
            let (st, peer) = l.accept().unwrap();
            let served = one_client(st, peer, &a, &log, &mut || Bidi(server));
            // A refused client does not count as served (a --once server waits for the next).
            assert_eq!(served, admitted);
        }
        t.join().unwrap();
        let refused = log.kept().iter().filter(|m| m.contains("refused:")).count();
        assert_eq!(refused, 2, "{:#?}", log.kept());
    }

    /// A `--once` server on a free loopback port, without a token.
    fn loopback_server() -> (ServeArgs, TcpListener, u16) {
        let a = args("127.0.0.1", None, false);
        let l = listen(&a, 0).unwrap();
        let port = l.local_addr().unwrap().port();
        (a, l, port)
    }

    /// A client of [`loopback_server`] that said hello and was admitted.
    fn admitted_client(port: u16) -> Channel {
        let mut c = client(port, None);
        assert!(matches!(c.recv::<Resp>(), Ok(Resp::Hello { .. })));
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
        let (a, l, port) = loopback_server();
        let t = std::thread::spawn(move || {
            drop(admitted_client(port));
        });
        let seen = std::rc::Rc::new(std::cell::Cell::new(0));
        serve(&l, &a, &Log::silent(), || Counting(seen.clone())).unwrap();
        t.join().unwrap();
        assert_eq!(seen.get(), 0);
    }

    #[test]
    fn silent_connections_are_closed_before_admission_and_the_next_client_is_served() {
        let (mut a, l, port) = loopback_server();
        a.caps.hello_timeout = Duration::from_millis(300);
        a.caps.idle_timeout = Duration::from_secs(30);
        let hello = a.caps.hello_timeout;
        let clients = std::thread::spawn(move || {
            let start = Instant::now();
            // One connection that says nothing, one that starts a hello and never ends it.
            let mut silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let mut trickle = TcpStream::connect(("127.0.0.1", port)).unwrap();
            trickle.write_all(b"{\"req\":\"hel").unwrap();
            // Then a real client, queued behind them.
            let mut c = admitted_client(port);
            let admitted_after = start.elapsed();
            // Admitted, it may be silent for longer than the pre-admission time.
            std::thread::sleep(hello * 2);
            assert!(matches!(c.call::<_, Resp>(&Req::Counters), Ok(Resp::Ok)));
            assert!(matches!(c.call::<_, Resp>(&Req::Bye), Ok(Resp::Ok)));
            // The server closed the two that never said hello.
            for s in [&mut silent, &mut trickle] {
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut b = [0u8; 1];
                assert_eq!(std::io::Read::read(s, &mut b).unwrap(), 0);
            }
            admitted_after
        });
        let log = Log::keeping();
        let seen = std::rc::Rc::new(std::cell::Cell::new(0));
        serve_from(|| l.accept(), &a, &log, || Counting(seen.clone()));
        let admitted_after = clients.join().unwrap();
        // Two pre-admission times and some slack, nowhere near the idle timeout.
        assert!(
            admitted_after < Duration::from_secs(3),
            "{admitted_after:?}"
        );
        assert_eq!(seen.get(), 2);
        let kept = log.kept();
        let closed = kept
            .iter()
            .filter(|m| m.ends_with("closed: no hello within 0.3 s (--server-hello-timeout)"))
            .count();
        assert_eq!(closed, 2, "{kept:#?}");
        assert!(kept
            .iter()
            .any(|m| m.ends_with("admitted, serving host memory")));
    }

    #[test]
    fn a_failed_accept_is_logged_and_the_server_goes_on() {
        let (a, l, port) = loopback_server();
        let t = std::thread::spawn(move || {
            let mut c = admitted_client(port);
            assert!(matches!(c.call::<_, Resp>(&Req::Bye), Ok(Resp::Ok)));
        });
        let mut failures = vec![
            std::io::Error::from_raw_os_error(libc::EMFILE),
            std::io::Error::from(std::io::ErrorKind::Interrupted),
            std::io::Error::from_raw_os_error(libc::ECONNABORTED),
        ]
        .into_iter();
        let mut accepts = 0;
        let log = Log::keeping();
        let seen = std::rc::Rc::new(std::cell::Cell::new(0));
        let start = Instant::now();
        serve_from(
            || {
                accepts += 1;
                failures.next().map_or_else(|| l.accept(), Err)
            },
            &a,
            &log,
            || Counting(seen.clone()),
        );
        t.join().unwrap();
        assert_eq!(accepts, 4);
        assert_eq!(seen.get(), 1);
        let kept = log.kept();
        let failed: Vec<&String> = kept
            .iter()
            .filter(|m| m.starts_with("accept failed"))
            .collect();
        // EMFILE and ECONNABORTED are logged with the wait; EINTR is retried silently.
        assert_eq!(failed.len(), 2, "{kept:#?}");
        assert!(failed[0].contains("next try in 50 ms"), "{}", failed[0]);
        assert!(failed[1].contains("next try in 100 ms"), "{}", failed[1]);
        // The waits are short.
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
