//! The posting loop of the bandwidth tests: perftest's signalling (`cq_mod`) and peak rules, the
//! plan of one size ([`BwPlan`]), and [`run_lanes`], which posts and polls on every QP of a run
//! (`-q`; in a loopback `-b` run both sides' QPs, each side measured apart) and is the far half of
//! a two-node `-b` run too. The QPs are [`Poster`]s, so the loop is tested on fake ones.

use super::POLL;
use crate::stats::{self, BwResult};
use crate::verbs::{self, Completion, Endpoint, Op, VerbsError};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Why [`run_lanes`] stopped before its plan was done.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error("no QP to post on")]
    NoQp,
    #[error("post: {0}")]
    Post(VerbsError),
    #[error("poll: {0}")]
    Poll(VerbsError),
    #[error("{op} of {size} bytes completed with '{status}'")]
    Completion {
        op: &'static str,
        size: u64,
        status: &'static str,
    },
    #[error("timed out waiting for completions")]
    Timeout,
}

/// Above this many iterations perftest does not compute the peak (its `-N` is implied).
pub const PEAK_MAX_ITERS: u64 = 20000;

/// How many requests one signalled completion stands for, as perftest decides it: its default
/// `--cq-mod` of 100, one (every request signalled) for messages above 8 KiB unless sweeping,
/// never more than the TX depth.
pub fn cq_mod(depth: u64, size: u64, sweep: bool) -> u64 {
    let m = if size > 8192 && !sweep { 1 } else { 100 };
    m.min(depth).max(1)
}

/// One size of a bandwidth test (what a `-b` run also hands the far side, which runs its half with
/// the same plan).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BwPlan {
    pub iters: u64,
    pub depth: u64,
    pub cq_mod: u64,
    /// Record every post and completion time for perftest's peak.
    pub peak: bool,
    /// `-D`: (seconds, margin) instead of `iters`.
    pub duration: Option<(f64, f64)>,
    /// perftest's `--perform_warm_up`: before the measured run, every QP posts `depth`
    /// requests, each signalled, and waits for all of them (perftest_resources.c,
    /// `perform_warm_up`); nothing of it is measured. Write and read only, as perftest does.
    #[serde(default)]
    pub warm_up: bool,
}

impl BwPlan {
    /// The warm-up's own plan: `depth` requests per QP, every one signalled, no figures kept.
    fn warm_up_plan(&self) -> BwPlan {
        let depth = self.depth.max(1);
        BwPlan {
            iters: depth,
            depth,
            cq_mod: 1,
            peak: false,
            duration: None,
            warm_up: false,
        }
    }
}

/// What a bandwidth loop does with a QP: post and poll. A trait, so that the loop's accounting
/// is tested without a device.
pub trait Poster {
    /// Posts one send-queue request, signalled or not ([`Endpoint::post_flagged`]).
    fn post_flagged(
        &mut self,
        op: Op,
        wr_id: u64,
        lkey: u32,
        addr: u64,
        len: u64,
        signaled: bool,
    ) -> Result<(), VerbsError>;
    /// Appends the completions there are now, without waiting ([`Endpoint::poll_now`]).
    fn poll_now(&self, out: &mut Vec<Completion>) -> Result<(), VerbsError>;
}

impl Poster for Endpoint {
    fn post_flagged(
        &mut self,
        op: Op,
        wr_id: u64,
        lkey: u32,
        addr: u64,
        len: u64,
        signaled: bool,
    ) -> Result<(), VerbsError> {
        Endpoint::post_flagged(self, op, wr_id, lkey, addr, len, signaled)
    }
    fn poll_now(&self, out: &mut Vec<Completion>) -> Result<(), VerbsError> {
        Endpoint::poll_now(self, 64, out)
    }
}

/// One QP's part in a bandwidth run: what it posts, from which local buffer, and whose figures
/// its requests count in (`side` 0: this side; 1: the far side of a loopback `-b` run, whose QPs
/// live in this process).
pub struct Lane<'a> {
    pub qp: &'a mut dyn Poster,
    pub op: Op,
    pub lkey: u32,
    pub addr: u64,
    pub side: usize,
}

/// One side's figures of a bandwidth run, and the receive completions its QPs polled on the way
/// (send_bw `-b`: the other side's messages arriving; they are not this side's requests).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SideResult {
    pub bw: BwResult,
    pub recvs: u64,
}

/// perftest's figures of a bidirectional run (`print_full_bw_report` given the remote report):
/// peak, average and message rate are the sums of both sides', the size and the iterations this
/// side's.
pub fn sum_bidirectional(mine: &BwResult, theirs: &BwResult) -> BwResult {
    BwResult {
        msg_size: mine.msg_size,
        iterations: mine.iterations,
        bw_peak_mib: mine.bw_peak_mib + theirs.bw_peak_mib,
        bw_avg_mib: mine.bw_avg_mib + theirs.bw_avg_mib,
        msg_rate_mpps: mine.msg_rate_mpps + theirs.msg_rate_mpps,
    }
}

/// Completion opcodes with this bit are receives (`IBV_WC_RECV` and `IBV_WC_RECV_RDMA_WITH_IMM`).
pub(super) const WC_RECV: u32 = 128;

/// The bookkeeping of one side of [`run_lanes`].
#[derive(Default)]
struct Side {
    qps: u64,
    /// Requests known complete, over the side's QPs.
    done: u64,
    first_post: Option<f64>,
    /// When the side's last request completed (an iteration run).
    end: Option<f64>,
    tposted: Vec<f64>,
    tcompleted: Vec<(u64, f64)>,
    /// -D: when the measured middle began and the completions by then; then what it measured.
    sample: Option<(f64, u64)>,
    measured: Option<(f64, u64)>,
    recvs: u64,
}

/// Posts requests on every lane (perftest's `-q`; with `-b` in loopback, both sides' QPs),
/// keeping `plan.depth` outstanding on each, signalling every `plan.cq_mod`-th and the last, for
/// `plan.iters` requests per QP or `-D` seconds; returns perftest's figures of each side over its
/// QPs (average over its first post to its last completion, or over the middle of a `-D` run;
/// peak as [`stats::peak_time_per_msg`], with posts and completions counted across the side's
/// QPs as perftest counts them). Receive completions are counted, not taken for requests.
pub fn run_lanes(
    lanes: &mut [Lane<'_>],
    size: u64,
    plan: &BwPlan,
) -> Result<Vec<SideResult>, LoopError> {
    // (every request of the warm-up is signalled and completed before the measured run posts,
    // so its wr_ids, which start again at 0, are never mistaken for the run's)
    if plan.warm_up
        && lanes
            .iter()
            .all(|l| matches!(l.op, Op::Write { .. } | Op::Read { .. }))
    {
        drive(lanes, size, &plan.warm_up_plan())?;
    }
    drive(lanes, size, plan)
}

/// One [`run_lanes`] pass: `plan` posted and polled to its end.
fn drive(lanes: &mut [Lane<'_>], size: u64, plan: &BwPlan) -> Result<Vec<SideResult>, LoopError> {
    let mut run = Run::new(lanes, size, plan)?;
    loop {
        let any_posting = run.post(lanes)?;
        let polled = run.poll(lanes)?;
        if run.finished(any_posting) {
            break;
        }
        if !polled
            && run.start.elapsed()
                > (POLL * 4)
                    .saturating_add(Duration::from_secs(plan.duration.map_or(0, |d| d.0 as u64)))
        {
            return Err(LoopError::Timeout);
        }
    }
    Ok(run.results())
}

/// The state of one [`run_lanes`]: per side, and per lane the requests posted and known
/// complete.
struct Run<'p> {
    plan: &'p BwPlan,
    size: u64,
    sides: Vec<Side>,
    posted: Vec<u64>,
    done: Vec<u64>,
    /// Requests in flight per lane, at least one.
    depth: u64,
    /// A signalled request among every `m` (at most `depth`: else the loop would wait for a
    /// completion nothing asked for).
    m: u64,
    /// A `-D` run (posts until the time is up rather than `plan.iters`).
    endless: bool,
    start: Instant,
    cs: Vec<Completion>,
}

impl<'p> Run<'p> {
    fn new(lanes: &[Lane<'_>], size: u64, plan: &'p BwPlan) -> Result<Self, LoopError> {
        let nsides = lanes.iter().map(|l| l.side + 1).max().unwrap_or(0);
        let mut sides: Vec<Side> = (0..nsides).map(|_| Side::default()).collect();
        for l in lanes {
            sides[l.side].qps += 1;
        }
        if sides.is_empty() || sides.iter().any(|s| s.qps == 0) {
            return Err(LoopError::NoQp);
        }
        let depth = plan.depth.max(1);
        if plan.peak {
            for s in &mut sides {
                let n = plan.iters.saturating_mul(s.qps).min(PEAK_MAX_ITERS * 64);
                s.tposted.reserve(n as usize);
            }
        }
        Ok(Run {
            plan,
            size,
            sides,
            posted: vec![0; lanes.len()],
            done: vec![0; lanes.len()],
            depth,
            m: plan.cq_mod.clamp(1, depth),
            endless: plan.duration.is_some(),
            start: Instant::now(),
            cs: Vec::new(),
        })
    }

    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Tops up every lane to `depth` requests in flight; whether any lane is still posting.
    fn post(&mut self, lanes: &mut [Lane<'_>]) -> Result<bool, LoopError> {
        let (plan, m) = (self.plan, self.m);
        let mut any_posting = false;
        for (k, l) in lanes.iter_mut().enumerate() {
            let t = self.now();
            // A -D run stops posting once its time is up and its last request was a signalled one.
            let posting = match plan.duration {
                Some((d, _)) => t < d || !self.posted[k].is_multiple_of(m),
                None => self.posted[k] < plan.iters,
            };
            any_posting |= posting;
            while posting
                && self.posted[k].saturating_sub(self.done[k]) < self.depth
                && (self.endless || self.posted[k] < plan.iters)
            {
                let n = self.posted[k];
                let signaled = (n + 1).is_multiple_of(m) || (!self.endless && n + 1 == plan.iters);
                let tp = self.now();
                let s = &mut self.sides[l.side];
                s.first_post.get_or_insert(tp);
                if plan.peak {
                    s.tposted.push(tp);
                }
                l.qp.post_flagged(l.op, n, l.lkey, l.addr, self.size, signaled)
                    .map_err(LoopError::Post)?;
                self.posted[k] += 1;
                if self.endless
                    && self.posted[k].is_multiple_of(m)
                    && self.now() >= plan.duration.map_or(0.0, |d| d.0)
                {
                    break;
                }
            }
        }
        Ok(any_posting)
    }

    /// Polls every lane once; whether any completion arrived. A completion with an error ends
    /// the run; a receive is counted, not taken for a request.
    fn poll(&mut self, lanes: &[Lane<'_>]) -> Result<bool, LoopError> {
        let mut polled = false;
        for (k, l) in lanes.iter().enumerate() {
            self.cs.clear();
            l.qp.poll_now(&mut self.cs).map_err(LoopError::Poll)?;
            polled |= !self.cs.is_empty();
            for i in 0..self.cs.len() {
                let c = self.cs[i];
                if !c.ok() {
                    return Err(LoopError::Completion {
                        op: l.op.name(),
                        size: self.size,
                        status: verbs::wc_status_name(c.status),
                    });
                }
                let t = self.now();
                let s = &mut self.sides[l.side];
                if c.opcode & WC_RECV != 0 {
                    s.recvs += 1;
                    continue;
                }
                // wr_id is the index of the signalled request: everything up to it is done.
                let upto = c.wr_id.saturating_add(1).min(self.posted[k]);
                if upto > self.done[k] {
                    s.done += upto - self.done[k];
                    self.done[k] = upto;
                    if self.plan.peak {
                        s.tcompleted.push((s.done - 1, t));
                    }
                }
            }
        }
        Ok(polled)
    }

    /// Takes the time figures of this round; whether the run is over (`-D`: every side measured
    /// its middle and nothing is in flight; else every side completed its requests).
    fn finished(&mut self, any_posting: bool) -> bool {
        let t = self.now();
        match self.plan.duration {
            Some((d, margin)) => {
                for s in &mut self.sides {
                    if s.sample.is_none() && s.measured.is_none() && t >= margin {
                        s.sample = Some((t, s.done));
                    }
                    if let Some((t0, d0)) = s.sample {
                        if t >= d - margin {
                            s.measured = Some((t - t0, s.done - d0));
                            s.sample = None;
                        }
                    }
                }
                let all_done = self.posted.iter().zip(&self.done).all(|(p, d)| p == d);
                !any_posting && all_done && self.sides.iter().all(|s| s.measured.is_some())
            }
            None => {
                for s in &mut self.sides {
                    if s.end.is_none() && s.done >= self.plan.iters.saturating_mul(s.qps) {
                        s.end = Some(t);
                    }
                }
                self.sides.iter().all(|s| s.end.is_some())
            }
        }
    }

    /// perftest's figures of each side.
    fn results(&self) -> Vec<SideResult> {
        self.sides
            .iter()
            .map(|s| {
                let bw = match s.measured {
                    Some((secs, n)) => stats::bandwidth(self.size, n, secs, None),
                    None => {
                        let peak = if self.plan.peak {
                            stats::peak_time_per_msg(&s.tposted, &s.tcompleted)
                        } else {
                            None
                        };
                        let secs = s.end.unwrap_or(0.0) - s.first_post.unwrap_or(0.0);
                        stats::bandwidth(
                            self.size,
                            self.plan.iters.saturating_mul(s.qps),
                            secs,
                            peak,
                        )
                    }
                };
                SideResult { bw, recvs: s.recvs }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signalling_period() {
        assert_eq!(cq_mod(128, 8192, false), 100);
        assert_eq!(cq_mod(8, 2, false), 8);
        assert_eq!(cq_mod(0, 2, false), 1);
        // perftest signals every request above 8 KiB, except in a sweep.
        assert_eq!(cq_mod(128, 65536, false), 1);
        assert_eq!(cq_mod(128, 65536, true), 100);
    }

    #[test]
    fn bidirectional_figures_are_the_sum_of_both_sides() {
        let mine = stats::bandwidth(65536, 1000, 1.0, Some(0.0005));
        let theirs = stats::bandwidth(65536, 1000, 2.0, Some(0.001));
        let b = sum_bidirectional(&mine, &theirs);
        assert_eq!((b.msg_size, b.iterations), (65536, 1000));
        assert!((b.bw_avg_mib - (62.5 + 31.25)).abs() < 1e-9, "{b:?}");
        assert!((b.bw_peak_mib - (125.0 + 62.5)).abs() < 1e-9, "{b:?}");
        assert!((b.msg_rate_mpps - (0.001 + 0.0005)).abs() < 1e-12, "{b:?}");
        // A far side that measured no peak adds none.
        let flat = stats::bandwidth(65536, 1000, 1.0, None);
        assert_eq!(
            sum_bidirectional(&mine, &flat).bw_peak_mib,
            mine.bw_peak_mib
        );
    }

    /// A QP without a device: a signalled request completes at the next poll (with every
    /// unsignalled one before it), receives arrive as told; it records what the loop did.
    #[derive(Default)]
    struct FakeQp {
        posted: u64,
        /// `posted` when the current pass's request 0 was posted (a warm-up numbers its
        /// requests from 0, and so does the measured run after it).
        base: u64,
        /// Requests known complete to the fake: the loop must never have more than its depth
        /// beyond this.
        completed: std::cell::Cell<u64>,
        max_outstanding: u64,
        pending: std::cell::RefCell<Vec<Completion>>,
        /// Receive completions to hand out, one per poll, with wr_ids no request has.
        recvs: std::cell::Cell<u64>,
        /// Status of every completion (0: success).
        status: u32,
        fail_post: bool,
        signalled: Vec<u64>,
        ops: Vec<Op>,
    }

    fn wc(wr_id: u64, status: u32, opcode: u32) -> Completion {
        Completion {
            wr_id,
            status,
            opcode,
            byte_len: 0,
            imm: 0,
            vendor_err: 0,
        }
    }

    impl Poster for FakeQp {
        fn post_flagged(
            &mut self,
            op: Op,
            wr_id: u64,
            _lkey: u32,
            _addr: u64,
            _len: u64,
            signaled: bool,
        ) -> Result<(), VerbsError> {
            if self.fail_post {
                return Err(VerbsError::TooLong("no room".into()));
            }
            if wr_id == 0 {
                assert_eq!(
                    self.completed.get(),
                    self.posted,
                    "a pass starts with none in flight"
                );
                self.base = self.posted;
            }
            assert_eq!(
                wr_id,
                self.posted - self.base,
                "requests are numbered in order"
            );
            self.posted += 1;
            self.max_outstanding = self.max_outstanding.max(self.posted - self.completed.get());
            self.ops.push(op);
            if signaled {
                self.signalled.push(wr_id);
                // IBV_WC_RDMA_WRITE (the fake keeps the absolute number in its own list)
                self.pending
                    .borrow_mut()
                    .push(wc(self.base + wr_id, self.status, 1));
            }
            Ok(())
        }
        fn poll_now(&self, out: &mut Vec<Completion>) -> Result<(), VerbsError> {
            if self.recvs.get() > 0 {
                self.recvs.set(self.recvs.get() - 1);
                // IBV_WC_RECV, with a wr_id far beyond any request.
                out.push(wc(1 << 40, 0, 128));
            }
            for mut c in self.pending.borrow_mut().drain(..) {
                self.completed.set(self.completed.get().max(c.wr_id + 1));
                c.wr_id -= self.base;
                out.push(c);
            }
            Ok(())
        }
    }

    fn plan(iters: u64, depth: u64, cq_mod: u64, peak: bool) -> BwPlan {
        BwPlan {
            iters,
            depth,
            cq_mod,
            peak,
            duration: None,
            warm_up: false,
        }
    }

    #[test]
    fn a_warm_up_posts_depth_signalled_requests_first_and_is_not_measured() {
        let mut qps: Vec<FakeQp> = (0..2).map(|_| FakeQp::default()).collect();
        let p = BwPlan {
            warm_up: true,
            ..plan(1000, 16, 7, false)
        };
        let r = run_lanes(&mut lanes(&mut qps, &[0, 0]), 4096, &p).unwrap();
        // The figures are the measured run's: -q 2 of 1000 each.
        assert_eq!(r[0].bw.iterations, 2000);
        for q in &qps {
            assert_eq!(q.posted, 16 + 1000);
            assert!(q.max_outstanding <= 16, "{}", q.max_outstanding);
            // The warm-up's 16 each signalled, then the run's every 7th and its last.
            let mut want: Vec<u64> = (0..16).collect();
            want.extend((0..1000).filter(|n| (n + 1) % 7 == 0 || *n == 999));
            assert_eq!(q.signalled, want);
        }
        // perftest warms up writes and reads only: a send run has none.
        let mut qps = vec![FakeQp::default()];
        let mut l = lanes(&mut qps, &[0]);
        l[0].op = Op::Send;
        run_lanes(&mut l, 4096, &p).unwrap();
        drop(l);
        assert_eq!(qps[0].posted, 1000);
    }

    fn write_op() -> Op {
        Op::Write {
            rkey: 7,
            raddr: 0x1000,
        }
    }

    /// Lanes over `qps`, the i-th on side `sides[i]`.
    fn lanes<'a>(qps: &'a mut [FakeQp], sides: &[usize]) -> Vec<Lane<'a>> {
        qps.iter_mut()
            .zip(sides)
            .map(|(q, &side)| Lane {
                qp: q as &mut dyn Poster,
                op: write_op(),
                lkey: 1,
                addr: 2,
                side,
            })
            .collect()
    }

    #[test]
    fn every_qp_posts_its_iterations_within_the_depth_and_signals_the_last() {
        let mut qps: Vec<FakeQp> = (0..3).map(|_| FakeQp::default()).collect();
        let p = plan(1000, 16, 7, true);
        let r = run_lanes(&mut lanes(&mut qps, &[0, 0, 0]), 4096, &p).unwrap();
        assert_eq!(r.len(), 1);
        let bw = r[0].bw;
        // perftest's figures over the side's QPs: -q 3 of 1000 each.
        assert_eq!((bw.msg_size, bw.iterations), (4096, 3000));
        assert!(bw.bw_avg_mib.is_finite() && bw.bw_avg_mib >= 0.0, "{bw:?}");
        assert!(
            bw.bw_peak_mib.is_finite() && bw.bw_peak_mib >= 0.0,
            "{bw:?}"
        );
        assert_eq!(r[0].recvs, 0);
        for q in &qps {
            assert_eq!(q.posted, 1000);
            assert!(q.max_outstanding <= 16, "{}", q.max_outstanding);
            // Every 7th and the last (1000 is not a multiple of 7).
            let want: Vec<u64> = (0..1000)
                .filter(|n| (n + 1) % 7 == 0 || *n == 999)
                .collect();
            assert_eq!(q.signalled, want);
            assert!(q.ops.iter().all(|o| *o == write_op()));
        }
    }

    #[test]
    fn two_sides_are_measured_apart_and_receives_are_not_requests() {
        // Loopback -b: this side's QP (side 0) and the far side's (side 1) in one loop; the far
        // side's QP also polls the receives of this side's messages (send_bw -b).
        let mut qps: Vec<FakeQp> = (0..3).map(|_| FakeQp::default()).collect();
        qps[2].recvs.set(50);
        let p = plan(200, 8, 4, false);
        let r = run_lanes(&mut lanes(&mut qps, &[0, 0, 1]), 65536, &p).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].bw.iterations, 400);
        assert_eq!(r[1].bw.iterations, 200);
        // The loop does not wait for receives: it counts those it polled, and the caller waits
        // for the rest (here the fake's undelivered ones).
        assert_eq!(r[0].recvs, 0);
        assert!(r[1].recvs > 0, "{:?}", r[1]);
        assert_eq!(r[1].recvs + qps[2].recvs.get(), 50);
        assert_eq!(r[1].bw.bw_peak_mib, 0.0, "no peak asked");
        for q in &qps {
            assert_eq!(q.posted, 200);
            // A receive taken for a request would have let the loop post beyond the depth.
            assert!(q.max_outstanding <= 8, "{}", q.max_outstanding);
        }
    }

    #[test]
    fn a_duration_run_stops_on_a_signalled_request_and_measures_the_middle() {
        let mut qps: Vec<FakeQp> = (0..2).map(|_| FakeQp::default()).collect();
        let p = BwPlan {
            duration: Some((0.3, 0.1)),
            ..plan(1, 8, 5, false)
        };
        let r = run_lanes(&mut lanes(&mut qps, &[0, 1]), 2, &p).unwrap();
        assert_eq!(r.len(), 2);
        for (q, side) in qps.iter().zip(&r) {
            assert!(q.posted > 0 && q.posted.is_multiple_of(5), "{}", q.posted);
            assert_eq!(q.completed.get(), q.posted);
            // The window holds some of the completions, not all.
            assert!(
                side.bw.iterations > 0 && side.bw.iterations <= q.posted,
                "{side:?}"
            );
            assert_eq!(side.bw.bw_peak_mib, 0.0);
        }
    }

    #[test]
    fn a_plan_that_would_never_signal_is_clamped_not_hung() {
        // Signalling every 50th with 4 in flight, or no depth at all, would wait for completions
        // nothing asked for: the loop signals within its depth instead.
        for p in [plan(100, 4, 50, false), plan(100, 0, 0, false)] {
            let mut qps = vec![FakeQp::default()];
            let r = run_lanes(&mut lanes(&mut qps, &[0]), 8, &p).unwrap();
            assert_eq!(r[0].bw.iterations, 100, "{p:?}");
            assert!(qps[0].max_outstanding <= p.depth.max(1), "{p:?}");
        }
    }

    #[test]
    fn failures_are_errors_not_hangs() {
        // A failed completion names the operation and the status.
        let mut qps = vec![FakeQp {
            status: 12,
            ..Default::default()
        }];
        let e = run_lanes(&mut lanes(&mut qps, &[0]), 4096, &plan(10, 4, 1, false)).unwrap_err();
        let e = e.to_string();
        assert!(e.contains("RDMA_WRITE of 4096 bytes completed with"), "{e}");
        // A failed post.
        let mut qps = vec![FakeQp {
            fail_post: true,
            ..Default::default()
        }];
        let e = run_lanes(&mut lanes(&mut qps, &[0]), 4096, &plan(10, 4, 1, false)).unwrap_err();
        assert!(matches!(e, LoopError::Post(_)), "{e}");
        // No lanes, or a side without a QP.
        assert!(matches!(
            run_lanes(&mut [], 4096, &plan(10, 4, 1, false)),
            Err(LoopError::NoQp)
        ));
        let mut qps: Vec<FakeQp> = (0..2).map(|_| FakeQp::default()).collect();
        assert!(run_lanes(&mut lanes(&mut qps, &[0, 2]), 4096, &plan(10, 4, 1, false)).is_err());
        assert!(qps.iter().all(|q| q.posted == 0));
    }
}
