//! What one two-node client may ask the server for. Every request is checked here before the
//! server allocates, registers or posts anything for it, so a malformed or hostile request is
//! answered with an error instead of an abort (a length of 2^64 used to reach the allocator).
//! [`Caps`] holds what a remote peer may make the server take (memory, QPs, time); each has a
//! flag, and a refusal names the flag that raises it.

use crate::peer::Req;
use std::time::Duration;

/// Longest a client may make the server wait for receive completions in one request.
pub const MAX_WAIT_MS: u64 = 600_000;
/// Most ping-pong rounds in one `Pong` request.
pub const MAX_PONG_ITERS: u32 = 10_000_000;
/// Most outstanding work requests a QP may have: the ceiling of `--server-max-depth`.
pub const MAX_DEPTH: u32 = 1 << 16;
/// Most requests per QP of one bidirectional half (`BwRun`; perftest's `MAX_ITER`).
pub const MAX_BW_ITERS: u64 = 100_000_000;
/// Longest `-D` of one bidirectional half, in seconds (the CLI's `-D` limit).
pub const MAX_BW_SECS: f64 = 86_400.0;
/// Longest any of the server's timeouts may be set to (a week), so that a typo does not turn one
/// into forever.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 86_400);

/// What one peer of the server may make it take; flattened into the server's options
/// ([`crate::cli::ServeArgs`]).
#[derive(clap::Args, Debug, Clone, Copy, PartialEq)]
pub struct Caps {
    /// Server: most bytes of test memory one client may hold at once (buffers it allocates, and
    /// the buffer offered to a perftest client).
    #[arg(long = "server-mem-limit", value_name = "SIZE", default_value = "4G", value_parser = crate::cli::parse_size)]
    pub mem_limit: u64,
    /// Server: most QPs one client may hold at once (its newest and those kept for `-q`).
    #[arg(long = "server-max-qps", value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_qps: u32,
    /// Server: deepest QP a client may ask for (outstanding sends and receives each; its CQ holds
    /// twice that), at most 65536; the device's `max_qp_wr` bounds it too.
    #[arg(long = "server-max-depth", value_name = "N", default_value_t = MAX_DEPTH, value_parser = clap::value_parser!(u32).range(1..=MAX_DEPTH as i64))]
    pub max_depth: u32,
    /// Server: most bytes one fill or verify request may cover.
    #[arg(long = "server-verify-limit", value_name = "SIZE", default_value = "2G", value_parser = crate::cli::parse_size)]
    pub verify_limit: u64,
    /// Server: seconds a connection has, from its accept, to say who it is (its first bytes and
    /// nvpeer's whole hello).
    #[arg(long = "server-hello-timeout", value_name = "SECS", default_value = "5", value_parser = parse_secs)]
    pub hello_timeout: Duration,
    /// Server: seconds a perftest client has for its whole exchange before its test, and again
    /// for the one after it.
    #[arg(long = "server-handshake-timeout", value_name = "SECS", default_value = "60", value_parser = parse_secs)]
    pub handshake_timeout: Duration,
    /// Server: seconds an admitted client may stay silent (between nvpeer requests; a perftest
    /// client's whole test) before it is dropped.
    #[arg(long = "server-idle-timeout", value_name = "SECS", default_value = "600", value_parser = parse_secs)]
    pub idle_timeout: Duration,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            mem_limit: 4 << 30,
            max_qps: 64,
            max_depth: MAX_DEPTH,
            verify_limit: 2 << 30,
            hello_timeout: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(600),
        }
    }
}

/// Parses a timeout in seconds (`5`, `0.5`): more than zero, at most [`MAX_TIMEOUT`].
pub fn parse_secs(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}': expected a number of seconds, e.g. 5 or 0.5"))?;
    if !(v > 0.0 && v <= MAX_TIMEOUT.as_secs_f64()) {
        return Err(format!(
            "'{s}': a timeout is more than 0 and at most {} seconds",
            MAX_TIMEOUT.as_secs()
        ));
    }
    Duration::try_from_secs_f64(v).map_err(|e| format!("'{s}': {e}"))
}

/// The server's state as far as checks need it.
pub trait View {
    /// Length of buffer `id`, if it exists.
    fn buf_len(&self, id: u32) -> Option<u64>;
    /// Bytes of test memory the client holds now.
    fn held(&self) -> u64;
    /// Depth of the connected QP, if one is connected.
    fn depth(&self) -> Option<u32>;
    /// QPs the client holds now (its newest and the kept ones).
    fn qps(&self) -> u32;
}

/// Why a request was refused (sent back to the client as the request's error).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refused {
    #[error("no buffer {0}")]
    NoBuffer(u32),
    #[error("range {off}+{len} lies outside buffer {id} ({size} bytes)")]
    OutsideBuffer {
        id: u32,
        off: u64,
        len: u64,
        size: u64,
    },
    #[error("not connected")]
    NotConnected,
    #[error("refused: a buffer of 0 bytes")]
    EmptyBuffer,
    #[error(
        "refused: {size} more bytes would exceed this server's limit of {limit} bytes per client \
         (--server-mem-limit), {held} held"
    )]
    MemLimit { size: u64, limit: u64, held: u64 },
    #[error(
        "refused: QP depth {depth}: this server allows 1 to {max} per QP (--server-max-depth)"
    )]
    Depth { depth: u32, max: u32 },
    #[error(
        "refused: a QP more than this server's limit of {max} per client (--server-max-qps), \
         {held} held"
    )]
    QpLimit { held: u32, max: u32 },
    #[error(
        "refused: {len} bytes in one {what}: this server's limit is {max} bytes per request \
         (--server-verify-limit)"
    )]
    VerifyLimit {
        what: &'static str,
        len: u64,
        max: u64,
    },
    /// A message that does not fit one work request ([`nvpeer_figures::size::check_message`]).
    #[error("{0}")]
    Message(String),
    #[error("refused: {count} receives on a QP of depth {depth}")]
    Receives { count: u32, depth: u32 },
    #[error(
        "refused: wait for {count} completions for {timeout_ms} ms (at most twice the QP depth \
         {depth}, {MAX_WAIT_MS} ms)"
    )]
    Wait {
        count: u32,
        timeout_ms: u64,
        depth: u32,
    },
    #[error("refused: {0} ping-pong rounds (at most {MAX_PONG_ITERS})")]
    PongRounds(u32),
    #[error("refused: messages of 0 bytes")]
    EmptyMessages,
    #[error("refused: {outstanding} outstanding requests on a QP of depth {depth}")]
    Outstanding { outstanding: u64, depth: u32 },
    #[error("refused: {0} requests per QP (1 to {MAX_BW_ITERS})")]
    BwIterations(u64),
    #[error("refused: {0} outstanding requests (1 to {MAX_DEPTH})")]
    BwDepth(u64),
    #[error("refused: a signalled request every {cq_mod} (1 to the depth {depth})")]
    CqModeration { cq_mod: u64, depth: u64 },
    #[error("refused: a peak over {0} requests (at most {max})", max = crate::bench::PEAK_MAX_ITERS)]
    PeakIterations(u64),
    #[error(
        "refused: a -D run of {secs} s with a margin of {margin} s{} (0 < -D <= {MAX_BW_SECS}, \
         twice the margin below it, no peak)",
        if *peak { " and a peak" } else { "" }
    )]
    Duration { secs: f64, margin: f64, peak: bool },
}

fn message(len: u64) -> Result<(), Refused> {
    nvpeer_figures::size::check_message(len).map_err(Refused::Message)
}

/// Checks `q` against `view` and the server's `caps`.
pub fn check(q: &Req, view: &dyn View, caps: &Caps) -> Result<(), Refused> {
    let mem_limit = caps.mem_limit;
    let buf = |id: u32| view.buf_len(id).ok_or(Refused::NoBuffer(id));
    let inside = |id: u32, off: u64, len: u64| -> Result<(), Refused> {
        let size = buf(id)?;
        match off.checked_add(len) {
            Some(end) if end <= size => Ok(()),
            _ => Err(Refused::OutsideBuffer { id, off, len, size }),
        }
    };
    let connected = || view.depth().ok_or(Refused::NotConnected);
    match *q {
        Req::Hello { .. }
        | Req::Proof { .. }
        | Req::Counters
        | Req::Bye
        | Req::Free { .. }
        | Req::Drop { .. } => Ok(()),
        Req::Alloc { size, .. } => {
            if size == 0 {
                return Err(Refused::EmptyBuffer);
            }
            let total = view.held().checked_add(size);
            if total.is_none_or(|t| t > mem_limit) {
                return Err(Refused::MemLimit {
                    size,
                    limit: mem_limit,
                    held: view.held(),
                });
            }
            Ok(())
        }
        Req::Connect { depth, .. } if depth == 0 || depth > caps.max_depth => Err(Refused::Depth {
            depth,
            max: caps.max_depth,
        }),
        // A plain connect replaces every QP held; a kept one adds one.
        Req::Connect { keep: true, .. } if view.qps() >= caps.max_qps => Err(Refused::QpLimit {
            held: view.qps(),
            max: caps.max_qps,
        }),
        Req::Connect { .. } => Ok(()),
        Req::Fill { id, off, len, .. } | Req::Verify { id, off, len, .. } => {
            inside(id, off, len)?;
            if len > caps.verify_limit {
                let what = if matches!(q, Req::Fill { .. }) {
                    "fill"
                } else {
                    "verify"
                };
                return Err(Refused::VerifyLimit {
                    what,
                    len,
                    max: caps.verify_limit,
                });
            }
            Ok(())
        }
        Req::PostRecv {
            id,
            off,
            len,
            count,
        } => {
            inside(id, off, len)?;
            message(len)?;
            let depth = connected()?;
            if count > depth {
                return Err(Refused::Receives { count, depth });
            }
            Ok(())
        }
        Req::WaitRecv { count, timeout_ms } => {
            let depth = connected()?;
            if count > depth.saturating_mul(2) || timeout_ms > MAX_WAIT_MS {
                return Err(Refused::Wait {
                    count,
                    timeout_ms,
                    depth,
                });
            }
            Ok(())
        }
        Req::Pong {
            id, size, iters, ..
        } => {
            inside(id, 0, size)?;
            message(size)?;
            connected()?;
            if iters > MAX_PONG_ITERS {
                return Err(Refused::PongRounds(iters));
            }
            Ok(())
        }
        Req::BwRun { id, size, plan, .. } => {
            if size == 0 {
                return Err(Refused::EmptyMessages);
            }
            inside(id, 0, size)?;
            message(size)?;
            let depth = connected()?;
            if plan.depth > u64::from(depth) {
                return Err(Refused::Outstanding {
                    outstanding: plan.depth,
                    depth,
                });
            }
            check_plan(&plan)
        }
    }
}

/// The plan of a bidirectional half: what the server's loop would post, poll and record.
fn check_plan(p: &crate::bench::BwPlan) -> Result<(), Refused> {
    if p.iters == 0 || p.iters > MAX_BW_ITERS {
        return Err(Refused::BwIterations(p.iters));
    }
    if p.depth == 0 || p.depth > u64::from(MAX_DEPTH) {
        return Err(Refused::BwDepth(p.depth));
    }
    if p.cq_mod == 0 || p.cq_mod > p.depth {
        return Err(Refused::CqModeration {
            cq_mod: p.cq_mod,
            depth: p.depth,
        });
    }
    // The peak keeps a time per request: only as many as perftest computes it for.
    if p.peak && p.iters > crate::bench::PEAK_MAX_ITERS {
        return Err(Refused::PeakIterations(p.iters));
    }
    if let Some((d, margin)) = p.duration {
        let ok = d.is_finite()
            && margin.is_finite()
            && d > 0.0
            && d <= MAX_BW_SECS
            && margin >= 0.0
            && 2.0 * margin < d;
        if !ok || p.peak {
            return Err(Refused::Duration {
                secs: d,
                margin,
                peak: p.peak,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    struct Fake {
        bufs: HashMap<u32, u64>,
        held: u64,
        depth: Option<u32>,
        qps: u32,
    }

    impl View for Fake {
        fn buf_len(&self, id: u32) -> Option<u64> {
            self.bufs.get(&id).copied()
        }
        fn held(&self) -> u64 {
            self.held
        }
        fn depth(&self) -> Option<u32> {
            self.depth
        }
        fn qps(&self) -> u32 {
            self.qps
        }
    }

    /// The default caps with `mem` bytes of memory per client.
    fn caps(mem: u64) -> Caps {
        Caps {
            mem_limit: mem,
            ..Caps::default()
        }
    }

    fn fake() -> Fake {
        Fake {
            bufs: HashMap::from([(1, 65536)]),
            held: 65536,
            depth: Some(8),
            qps: 1,
        }
    }

    #[test]
    fn requests_beyond_the_limits_are_refused() {
        let v = fake();
        let lim = &caps(1 << 20);
        assert!(check(
            &Req::Alloc {
                size: 4096,
                host: true
            },
            &v,
            lim
        )
        .is_ok());
        for size in [0, lim.mem_limit, u64::MAX] {
            assert!(
                check(&Req::Alloc { size, host: false }, &v, lim).is_err(),
                "{size}"
            );
        }
        let fill = |off, len| Req::Fill {
            id: 1,
            off,
            len,
            seed: 0,
        };
        assert!(check(&fill(0, 65536), &v, lim).is_ok());
        assert!(check(&fill(1, 65536), &v, lim).is_err());
        assert!(check(&fill(u64::MAX, 2), &v, lim).is_err());
        assert!(check(
            &Req::Verify {
                id: 2,
                off: 0,
                len: 1,
                seed: 0
            },
            &v,
            lim
        )
        .is_err());
        let recv = |count| Req::PostRecv {
            id: 1,
            off: 0,
            len: 4096,
            count,
        };
        assert!(check(&recv(8), &v, lim).is_ok());
        assert!(check(&recv(9), &v, lim).is_err());
        let wait = |count, timeout_ms| Req::WaitRecv { count, timeout_ms };
        assert!(check(&wait(16, 1000), &v, lim).is_ok());
        assert!(check(&wait(17, 1000), &v, lim).is_err());
        assert!(check(&wait(1, MAX_WAIT_MS + 1), &v, lim).is_err());
        let pong = |size, iters| Req::Pong {
            id: 1,
            size,
            iters,
            rkey: 0,
            raddr: 0,
        };
        assert!(check(&pong(4096, 1000), &v, lim).is_ok());
        assert!(check(&pong(65537, 1), &v, lim).is_err());
        assert!(check(&pong(1, MAX_PONG_ITERS + 1), &v, lim).is_err());
        let unconnected = Fake {
            depth: None,
            ..fake()
        };
        assert!(check(&recv(1), &unconnected, lim).is_err());
    }

    fn connect(depth: u32, keep: bool) -> Req {
        Req::Connect {
            info: crate::verbs::ConnInfo {
                qpn: 1,
                psn: 2,
                lid: 3,
                gid: [0; 16],
                mtu: 3,
                out_reads: 1,
            },
            depth,
            keep,
        }
    }

    #[test]
    fn a_qp_flood_with_keep_is_refused_at_the_cap() {
        let c = caps(1 << 20);
        let mut v = Fake {
            depth: None,
            qps: 0,
            ..fake()
        };
        let mut refusal = None;
        for i in 0..10_000 {
            match check(&connect(8, i > 0), &v, &c) {
                Ok(()) => v.qps = if i > 0 { v.qps + 1 } else { 1 },
                Err(e) => {
                    refusal = Some(e.to_string());
                    break;
                }
            }
        }
        assert_eq!(v.qps, c.max_qps, "QPs held after the flood");
        let e = refusal.expect("no QP was refused");
        assert!(
            e.contains("--server-max-qps") && e.contains("64 held"),
            "{e}"
        );
        // A plain connect replaces them all: always within the cap.
        assert!(check(&connect(8, false), &v, &c).is_ok());
    }

    #[test]
    fn a_qp_deeper_than_the_cap_is_refused() {
        let c = Caps {
            max_depth: 4096,
            ..caps(1 << 20)
        };
        assert!(check(&connect(c.max_depth, false), &fake(), &c).is_ok());
        for depth in [0, c.max_depth + 1, MAX_DEPTH, u32::MAX] {
            let e = check(&connect(depth, false), &fake(), &c)
                .unwrap_err()
                .to_string();
            assert!(e.contains("--server-max-depth"), "{depth}: {e}");
        }
    }

    #[test]
    fn an_oversized_verify_is_refused() {
        let c = Caps {
            mem_limit: 8 << 30,
            verify_limit: 1 << 20,
            ..Caps::default()
        };
        let v = Fake {
            bufs: HashMap::from([(1, 4 << 30)]),
            held: 4 << 30,
            ..fake()
        };
        let verify = |len| Req::Verify {
            id: 1,
            off: 0,
            len,
            seed: 0,
        };
        let fill = |len| Req::Fill {
            id: 1,
            off: 0,
            len,
            seed: 0,
        };
        assert!(check(&verify(1 << 20), &v, &c).is_ok());
        assert!(check(&fill(1 << 20), &v, &c).is_ok());
        for (q, what) in [(verify(4 << 30), "verify"), (fill((1 << 20) + 1), "fill")] {
            let e = check(&q, &v, &c).unwrap_err().to_string();
            assert!(
                e.contains(&format!("bytes in one {what}")) && e.contains("--server-verify-limit"),
                "{e}"
            );
        }
    }

    fn plan(iters: u64, depth: u64, cq_mod: u64, peak: bool) -> crate::bench::BwPlan {
        crate::bench::BwPlan {
            iters,
            depth,
            cq_mod,
            peak,
            duration: None,
            warm_up: false,
        }
    }

    fn bw_run(size: u64, plan: crate::bench::BwPlan) -> Req {
        Req::BwRun {
            id: 1,
            op: crate::peer::BwOp::Send,
            size,
            plan,
        }
    }

    #[test]
    fn bidirectional_halves_beyond_the_limits_are_refused() {
        let v = fake();
        let lim = &caps(1 << 20);
        let ok = |q: Req| check(&q, &v, lim);
        assert!(ok(bw_run(65536, plan(1000, 8, 1, true))).is_ok());
        // Outside the buffer, or more than one message.
        assert!(ok(bw_run(65537, plan(1000, 8, 1, true))).is_err());
        assert!(ok(bw_run(0, plan(1000, 8, 1, true))).is_err());
        // Iterations, depth, signalling out of range.
        for p in [
            plan(0, 8, 1, false),
            plan(MAX_BW_ITERS + 1, 8, 1, false),
            plan(u64::MAX, 8, 1, false),
            plan(10, 0, 1, false),
            plan(10, 9, 1, false), // deeper than the connected QP (8)
            plan(10, 8, 0, false),
            plan(10, 8, 9, false),
        ] {
            assert!(ok(bw_run(4096, p)).is_err(), "{p:?}");
        }
        // A peak records a time per request: refused beyond perftest's peak limit.
        let peak_max = crate::bench::PEAK_MAX_ITERS;
        assert!(ok(bw_run(4096, plan(peak_max, 8, 1, true))).is_ok());
        let e = ok(bw_run(4096, plan(peak_max + 1, 8, 1, true)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("peak"), "{e}");
        assert!(ok(bw_run(4096, plan(peak_max + 1, 8, 1, false))).is_ok());
        // -D: finite, positive, under a day, longer than twice the margin, without a peak.
        let d = |secs: f64, margin: f64, peak: bool| {
            bw_run(
                4096,
                crate::bench::BwPlan {
                    duration: Some((secs, margin)),
                    ..plan(1, 8, 1, peak)
                },
            )
        };
        assert!(ok(d(5.0, 2.0, false)).is_ok());
        for (secs, margin, peak) in [
            (4.0, 2.0, false),
            (5.0, 2.0, true),
            (0.0, 0.0, false),
            (-1.0, 0.0, false),
            (f64::NAN, 0.0, false),
            (f64::INFINITY, 0.0, false),
            (5.0, f64::NAN, false),
            (5.0, -1.0, false),
            (MAX_BW_SECS + 1.0, 0.0, false),
        ] {
            assert!(ok(d(secs, margin, peak)).is_err(), "{secs} {margin} {peak}");
        }
        // Not connected: refused before anything runs.
        let unconnected = Fake {
            depth: None,
            ..fake()
        };
        assert!(check(&bw_run(4096, plan(10, 8, 1, false)), &unconnected, lim).is_err());
    }

    fn any_req() -> impl Strategy<Value = Req> {
        prop_oneof![
            (any::<u64>(), any::<bool>()).prop_map(|(size, host)| Req::Alloc { size, host }),
            (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(id, off, len)| Req::Fill {
                id,
                off,
                len,
                seed: 1
            }),
            (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(id, off, len)| Req::Verify {
                id,
                off,
                len,
                seed: 1
            }),
            (any::<u32>(), any::<u64>(), any::<u64>(), any::<u32>()).prop_map(
                |(id, off, len, count)| Req::PostRecv {
                    id,
                    off,
                    len,
                    count
                }
            ),
            (any::<u32>(), any::<u64>())
                .prop_map(|(count, timeout_ms)| Req::WaitRecv { count, timeout_ms }),
            (any::<u32>(), any::<u64>(), any::<u32>()).prop_map(|(id, size, iters)| Req::Pong {
                id,
                size,
                iters,
                rkey: 0,
                raddr: 0
            }),
            (
                any::<u32>(),
                any::<u64>(),
                (any::<u64>(), any::<u64>(), any::<u64>(), any::<bool>()),
                proptest::option::of((any::<f64>(), any::<f64>())),
            )
                .prop_map(|(id, size, (iters, depth, cq_mod, peak), duration)| {
                    Req::BwRun {
                        id,
                        op: crate::peer::BwOp::Write { rkey: 1, raddr: 2 },
                        size,
                        plan: crate::bench::BwPlan {
                            iters,
                            depth,
                            cq_mod,
                            peak,
                            duration,
                            warm_up: false,
                        },
                    }
                }),
        ]
    }

    proptest! {
        #[test]
        fn accepted_requests_stay_inside_what_the_client_owns(q in any_req()) {
            let v = fake();
            let lim = &caps(1 << 30);
            if check(&q, &v, lim).is_ok() {
                match q {
                    Req::Alloc { size, .. } => prop_assert!(size > 0 && v.held + size <= lim.mem_limit),
                    Req::Fill { id, off, len, .. } | Req::Verify { id, off, len, .. }
                    | Req::PostRecv { id, off, len, .. } => {
                        prop_assert!(off + len <= v.bufs[&id]);
                    }
                    Req::Pong { id, size, .. } => prop_assert!(size <= v.bufs[&id]),
                    Req::BwRun { id, size, plan, .. } => {
                        // What the server's loop then posts, keeps and waits for is bounded.
                        prop_assert!(size >= 1 && size <= v.bufs[&id]);
                        prop_assert!((1..=MAX_BW_ITERS).contains(&plan.iters));
                        prop_assert!(plan.depth >= 1 && plan.depth <= 8);
                        prop_assert!(plan.cq_mod >= 1 && plan.cq_mod <= plan.depth);
                        prop_assert!(!plan.peak || plan.iters <= crate::bench::PEAK_MAX_ITERS);
                        if let Some((d, m)) = plan.duration {
                            prop_assert!(d.is_finite() && d > 0.0 && d <= MAX_BW_SECS);
                            prop_assert!(m >= 0.0 && 2.0 * m < d && !plan.peak);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}
