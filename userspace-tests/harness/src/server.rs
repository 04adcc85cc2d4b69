//! The two-node server (`validate --server`, `bench --server`): listens where it is told
//! (loopback unless told otherwise), admits a client only on its proof of the shared token or,
//! without a token, only from a loopback address (unless `--allow-any-peer`), serves clients one at a time
//! until stopped (`--once`: the first only), frees everything a client held when it leaves, and
//! logs each step on stderr. A connection that does not identify itself within
//! `--server-hello-timeout` ([`PRE_AUTH`]) is closed, and an admitted client silent for
//! `--server-idle-timeout` ([`IDLE`]) is dropped, so that a silent peer cannot hold the serial
//! server; what a client may make it take is capped ([`crate::limits::Caps`]); a failed `accept`
//! is logged and retried.
//!
//! The handshake with a token (protocol 4): the client's hello carries its fresh nonce; the
//! server answers with its own nonce and its proof of the token over both ([`server_proof`]);
//! the client checks that before it sends anything more and answers with its proof over both
//! nonces and its `-b` ([`client_proof`]); the server admits it on that. The token never crosses
//! the wire, each side knows the other holds it, and a recorded handshake answers no other
//! challenge ([`crate::auth`]). What follows the handshake is not sealed: an attacker who can
//! inject into the TCP connection itself can still drive the session it took over (the fleet's
//! rendezvous seals every message; docs/validation.md, "Two nodes").

use crate::auth::{self, Nonce};
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

/// Whether a client at `peer` that proved no token may be served: by a server without a token,
/// from a loopback address or with `--allow-any-peer`; never by a server with one.
pub fn admit(a: &ServeArgs, peer: &SocketAddr) -> Result<(), Refusal> {
    match &a.token {
        Some(_) => Err(Refusal::Token),
        None if peer.ip().is_loopback() || a.allow_any_peer => Ok(()),
        None => Err(Refusal::NotLoopback(peer.ip())),
    }
}

/// The domain of the two-node handshake's proofs ([`crate::auth`]).
const DOMAIN: &[u8] = b"nvpeer-harness-4 ";

/// The server's proof of `token` for the client that sent `client_nonce`.
pub fn server_proof(token: &str, client_nonce: &Nonce, server_nonce: &Nonce) -> Option<Vec<u8>> {
    auth::proof(
        token.as_bytes(),
        DOMAIN,
        b"server",
        &[client_nonce, server_nonce],
    )
}

/// Whether `got` is the server's proof of `token` for these nonces (constant time).
pub fn server_proved(token: &str, client_nonce: &Nonce, server_nonce: &Nonce, got: &[u8]) -> bool {
    auth::proved(
        token.as_bytes(),
        DOMAIN,
        b"server",
        &[client_nonce, server_nonce],
        got,
    )
}

/// The client's proof of `token` for the server that sent `server_nonce`, binding its `-b`.
pub fn client_proof(
    token: &str,
    server_nonce: &Nonce,
    client_nonce: &Nonce,
    bidirectional: bool,
) -> Option<Vec<u8>> {
    auth::proof(
        token.as_bytes(),
        DOMAIN,
        b"client",
        &[server_nonce, client_nonce, &[u8::from(bidirectional)]],
    )
}

/// Whether `got` is the client's proof of `token` for these nonces and `-b` (constant time).
pub fn client_proved(
    token: &str,
    server_nonce: &Nonce,
    client_nonce: &Nonce,
    bidirectional: bool,
    got: &[u8],
) -> bool {
    auth::proved(
        token.as_bytes(),
        DOMAIN,
        b"client",
        &[server_nonce, client_nonce, &[u8::from(bidirectional)]],
        got,
    )
}

/// How an admission ended without the client.
enum NotAdmitted {
    /// Refused: the client is told why.
    Refused(String),
    /// Gone or too slow: logged only.
    Closed(String),
}

/// The admission of a client that said hello with `nonce` and `bidirectional`: by its address
/// without a token ([`admit`]), else the challenge and the client's proof, all within what is
/// left of the pre-admission time of `connected`.
fn admission(
    ch: &mut Channel,
    a: &ServeArgs,
    peer: &SocketAddr,
    nonce: Option<Nonce>,
    bidirectional: bool,
    connected: Instant,
) -> Result<(), NotAdmitted> {
    let Some(token) = a.token.as_deref() else {
        return admit(a, peer).map_err(|why| NotAdmitted::Refused(why.to_string()));
    };
    // (a hello without a nonce cannot be challenged: a client of another version)
    let Some(theirs) = nonce else {
        return Err(NotAdmitted::Refused(Refusal::Token.to_string()));
    };
    let ours = auth::nonce().map_err(|e| NotAdmitted::Closed(e.to_string()))?;
    let proof = server_proof(token, &theirs, &ours)
        .ok_or_else(|| NotAdmitted::Closed("no proof of the token could be made".into()))?;
    ch.send(&Resp::Challenge { nonce: ours, proof })
        .map_err(|e| NotAdmitted::Closed(e.to_string()))?;
    let left = a.caps.hello_timeout.saturating_sub(connected.elapsed());
    match ch.recv_within::<Req>(left) {
        Ok(Req::Proof { proof }) if client_proved(token, &ours, &theirs, bidirectional, &proof) => {
            Ok(())
        }
        Ok(Req::Proof { .. }) => Err(NotAdmitted::Refused(Refusal::Token.to_string())),
        Ok(_) => Err(NotAdmitted::Refused(
            "the request after the challenge must be the proof".into(),
        )),
        Err(OobError::Timeout(_)) => Err(NotAdmitted::Closed(no_hello(a.caps.hello_timeout))),
        // (a client checks the server's proof first: one that holds another token, or none,
        // leaves here)
        Err(OobError::Closed) => Err(NotAdmitted::Closed(
            "the client left at the challenge (it holds another token, or none)".into(),
        )),
        Err(e) => Err(NotAdmitted::Closed(e.to_string())),
    }
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
    // perftest proves no token: it is admitted by its address alone.
    if let Err(why) = admit(a, &peer) {
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

/// The nvpeer client on `stream` (its first bytes are there): its hello, and with a token its
/// proof, must be complete within `a.caps.hello_timeout` of `connected`; once admitted, it may be
/// silent for `a.caps.idle_timeout`.
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
    let (nonce, bidirectional) = match ch.recv_within::<Req>(left) {
        Ok(Req::Hello {
            proto,
            nonce,
            bidirectional,
        }) if proto == PROTO => (nonce, bidirectional),
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
    match admission(&mut ch, a, &peer, nonce, bidirectional, connected) {
        Ok(()) => {}
        Err(NotAdmitted::Refused(why)) => return refuse(&mut ch, why),
        Err(NotAdmitted::Closed(why)) => {
            log.say(&format!("{peer}: closed: {why}"));
            return false;
        }
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
    fn admission_without_a_proof() {
        let lo: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let far: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        let open = args("127.0.0.1", None, false);
        assert!(admit(&open, &lo).is_ok());
        assert!(admit(&open, &far).is_err());
        assert!(admit(&args("0.0.0.0", None, true), &far).is_ok());
        // A server with a token admits no one without the proof, loopback included.
        let tok = args("0.0.0.0", Some("s3cret"), false);
        assert_eq!(admit(&tok, &lo), Err(Refusal::Token));
        assert_eq!(admit(&tok, &far), Err(Refusal::Token));
    }

    #[test]
    fn the_two_proofs_bind_the_token_both_nonces_the_side_and_the_client_s_b() {
        let (c, s) = (auth::nonce().unwrap(), auth::nonce().unwrap());
        let sp = server_proof("tok", &c, &s).unwrap();
        assert!(server_proved("tok", &c, &s, &sp));
        assert!(!server_proved("tok2", &c, &s, &sp));
        assert!(!server_proved("tok", &s, &c, &sp));
        let cp = client_proof("tok", &s, &c, true).unwrap();
        assert!(client_proved("tok", &s, &c, true, &cp));
        assert!(!client_proved("tok", &s, &c, false, &cp));
        assert!(!client_proved("tok", &c, &s, true, &cp));
        // The server's proof is never the client's (a reflected challenge proves nothing).
        assert!(!client_proved("tok", &c, &s, false, &sp));
        assert!(!client_proved("tok", &s, &c, false, &sp));
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

    /// A client whose hello says `bidirectional` (`bench -b`) and, given a token, that answers
    /// the server's challenge with its proof of that token (whatever the server proved); the
    /// server's admission or refusal is the next answer on the channel.
    fn client_b(port: u16, token: Option<&str>, bidirectional: bool) -> Channel {
        let mut c = Channel::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        let mine = auth::nonce().unwrap();
        c.send(&Req::Hello {
            proto: PROTO,
            nonce: Some(mine),
            bidirectional,
        })
        .unwrap();
        if let Some(t) = token {
            let Ok(Resp::Challenge { nonce, .. }) = c.recv::<Resp>() else {
                panic!("no challenge");
            };
            let proof = client_proof(t, &nonce, &mine, bidirectional).unwrap();
            c.send(&Req::Proof { proof }).unwrap();
        }
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

    /// Client options with `token` (or none).
    fn common(token: Option<&str>) -> crate::cli::CommonArgs {
        crate::cli::CommonArgs {
            mem: crate::cli::MemKind::Host,
            gpu: crate::cli::GpuSelector::Index(0),
            ib_dev: None,
            ib_port: 1,
            gid_index: None,
            server: false,
            client: Some("127.0.0.1".into()),
            port: 1,
            serve: ServeArgs {
                token: token.map(Into::into),
                ..Default::default()
            },
            json: false,
        }
    }

    /// `Peer::greet` to `port` with `token`: the peer and what the greeting returned.
    fn greet(
        port: u16,
        token: Option<&str>,
    ) -> (crate::peer::Peer, Result<String, crate::peer::PeerError>) {
        let ch = Channel::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        let mut p = crate::peer::Peer::Remote(ch);
        let r = p.greet(&common(token), false);
        (p, r)
    }

    /// A proxy on a loopback port to `to` that records what its one client sent (handed over
    /// once the client closed).
    fn recording_proxy(to: u16) -> (u16, std::sync::mpsc::Receiver<Vec<u8>>) {
        use std::io::Read;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut a, _) = l.accept().unwrap();
            let mut b = TcpStream::connect(("127.0.0.1", to)).unwrap();
            let (mut a2, mut b2) = (a.try_clone().unwrap(), b.try_clone().unwrap());
            let back = std::thread::spawn(move || {
                let _ = std::io::copy(&mut b2, &mut a2);
            });
            let (mut seen, mut buf) = (Vec::new(), [0u8; 4096]);
            while let Ok(n @ 1..) = a.read(&mut buf) {
                seen.extend_from_slice(&buf[..n]);
                if b.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = b.shutdown(std::net::Shutdown::Both);
            let _ = back.join();
            let _ = tx.send(seen);
        });
        (port, rx)
    }

    #[test]
    fn the_handshake_admits_on_the_proof_and_the_token_never_crosses_the_wire() {
        const TOKEN: &str = "s3cret-token-42";
        let a = args("127.0.0.1", Some(TOKEN), false);
        let l = listen(&a, 0).unwrap();
        let (proxy, sent) = recording_proxy(l.local_addr().unwrap().port());
        let t = std::thread::spawn(move || {
            let (mut p, r) = greet(proxy, Some(TOKEN));
            assert_eq!(r.unwrap(), "host");
            assert!(matches!(p.call(Req::Bye), Ok(Resp::Ok)));
        });
        let log = Log::keeping();
        let seen = std::rc::Rc::new(std::cell::Cell::new(0));
        let (st, peer) = l.accept().unwrap();
        assert!(one_client(st, peer, &a, &log, &mut || Counting(
            seen.clone()
        )));
        t.join().unwrap();
        let sent = sent.recv().unwrap();
        let text = String::from_utf8_lossy(&sent);
        assert!(
            text.contains(r#""req":"hello""#) && text.contains(r#""req":"proof""#),
            "{text}"
        );
        assert!(!text.contains(TOKEN) && !text.contains("token"), "{text}");
        assert!(
            log.kept().iter().any(|m| m.contains("admitted")),
            "{:#?}",
            log.kept()
        );
    }

    #[test]
    fn a_client_with_a_token_admits_only_a_server_that_proves_it() {
        // (server token, client token, what the client says)
        let cases: [(Option<&'static str>, Option<&'static str>, &str); 3] = [
            (None, Some("tok"), "has no --token"),
            (Some("other"), Some("tok"), "did not prove the shared token"),
            (
                Some("tok"),
                None,
                "admits clients with its shared token only",
            ),
        ];
        for (server, client, says) in cases {
            let a = args("127.0.0.1", server, false);
            let l = listen(&a, 0).unwrap();
            let port = l.local_addr().unwrap().port();
            let t = std::thread::spawn(move || {
                let (p, r) = greet(port, client);
                drop(p);
                r
            });
            let log = Log::keeping();
            let (st, peer) = l.accept().unwrap();
            let served = one_client(st, peer, &a, &log, &mut || Counting(Default::default()));
            let e = t.join().unwrap().unwrap_err();
            assert!(matches!(e, crate::peer::PeerError::Auth(_)), "{e:?}");
            assert!(e.to_string().contains(says), "{server:?} {client:?}: {e}");
            // A server with a token served no one (the client left at the challenge).
            assert!(server.is_none() || !served, "{:#?}", log.kept());
        }
    }

    #[test]
    fn a_recorded_proof_answers_no_other_challenge_and_a_bad_answer_is_refused() {
        let a = args("127.0.0.1", Some("tok"), false);
        let l = listen(&a, 0).unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let mine = auth::nonce().unwrap();
            let hello = Req::Hello {
                proto: PROTO,
                nonce: Some(mine),
                bidirectional: false,
            };
            // 1: a real handshake, recorded.
            let mut c = Channel::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
            let Ok(Resp::Challenge { nonce, .. }) = c.call::<_, Resp>(&hello) else {
                panic!("no challenge")
            };
            let proof = client_proof("tok", &nonce, &mine, false).unwrap();
            let admitted = c.call::<_, Resp>(&Req::Proof {
                proof: proof.clone(),
            });
            assert!(matches!(admitted, Ok(Resp::Hello { .. })), "{admitted:?}");
            assert!(matches!(c.call::<_, Resp>(&Req::Bye), Ok(Resp::Ok)));
            // 2: the same hello and the recorded proof, against a fresh challenge; 3: a proof
            // of the wrong length; 4: another request in place of the proof; 5: a hello
            // without a nonce.
            let answers = [
                Some(Req::Proof { proof }),
                Some(Req::Proof { proof: vec![0; 31] }),
                Some(Req::Counters),
            ];
            for answer in answers {
                let mut c = Channel::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
                assert!(matches!(
                    c.call::<_, Resp>(&hello),
                    Ok(Resp::Challenge { .. })
                ));
                let r = c.call::<_, Resp>(&answer.unwrap());
                assert!(
                    matches!(&r, Ok(Resp::Err { msg, .. }) if msg.starts_with("refused: ")),
                    "{r:?}"
                );
            }
            let mut c = Channel::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
            let r = c.call::<_, Resp>(&Req::Hello {
                proto: PROTO,
                nonce: None,
                bidirectional: false,
            });
            assert!(
                matches!(&r, Ok(Resp::Err { msg, .. }) if msg == "refused: wrong or missing token"),
                "{r:?}"
            );
        });
        let log = Log::keeping();
        let seen = std::rc::Rc::new(std::cell::Cell::new(0));
        let mut served = Vec::new();
        for _ in 0..5 {
            let (st, peer) = l.accept().unwrap();
            served.push(one_client(st, peer, &a, &log, &mut || {
                Counting(seen.clone())
            }));
        }
        t.join().unwrap();
        assert_eq!(
            served,
            [true, false, false, false, false],
            "{:#?}",
            log.kept()
        );
        // The session saw the first client's Bye only.
        assert_eq!(seen.get(), 1);
        let kept = log.kept();
        assert_eq!(
            kept.iter()
                .filter(|m| m.contains("refused: wrong or missing token"))
                .count(),
            3,
            "{kept:#?}"
        );
        assert!(kept
            .iter()
            .any(|m| m.contains("refused: the request after the challenge must be the proof")));
    }

    #[test]
    fn a_client_silent_after_the_challenge_is_closed_and_the_next_is_served() {
        let mut a = args("127.0.0.1", Some("tok"), false);
        a.caps.hello_timeout = Duration::from_millis(300);
        let l = listen(&a, 0).unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            // Says hello, takes the challenge, never answers it.
            let mut silent = Channel::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
            let hello = Req::Hello {
                proto: PROTO,
                nonce: Some(auth::nonce().unwrap()),
                bidirectional: false,
            };
            assert!(matches!(
                silent.call::<_, Resp>(&hello),
                Ok(Resp::Challenge { .. })
            ));
            let mut next = client(port, Some("tok"));
            assert!(matches!(next.recv::<Resp>(), Ok(Resp::Hello { .. })));
            assert!(matches!(next.call::<_, Resp>(&Req::Bye), Ok(Resp::Ok)));
            drop(silent);
        });
        let log = Log::keeping();
        let started = Instant::now();
        let (st, peer) = l.accept().unwrap();
        assert!(!one_client(st, peer, &a, &log, &mut || Counting(
            Default::default()
        )));
        // Closed within the pre-admission time, not the idle one.
        assert!(started.elapsed() < Duration::from_secs(3));
        let (st, peer) = l.accept().unwrap();
        assert!(one_client(st, peer, &a, &log, &mut || Counting(
            Default::default()
        )));
        t.join().unwrap();
        assert!(
            log.kept()
                .iter()
                .any(|m| m.contains("closed: no hello within 0.3 s")),
            "{:#?}",
            log.kept()
        );
    }
}
