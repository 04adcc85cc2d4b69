//! Bandwidth (`write_bw`, `read_bw`, `send_bw`): how one size runs (its plan), the sizes of a
//! test against nvpeer's far side, both halves of a bidirectional (`-b`) size, and the run against
//! perftest's own server. The posting loop itself is in `bwloop`.

use super::bwloop::{
    cq_mod, run_lanes, sum_bidirectional, BwPlan, Lane, Poster, SideResult, PEAK_MAX_ITERS, WC_RECV,
};
use super::doc::{BenchTestDoc, BwRow, DataValidation, PerftestInfo, Row};
use super::{be, perftest_name, perftest_title, sizes, Bench, BenchError, POLL};
use crate::cli::BenchTest;
use crate::line_rate::{self, Threshold};
use crate::pattern;
use crate::peer::{BwOp, Peer, Req, Resp};
use crate::perftest_peer::{self, PerftestServer};
use crate::perftest_wire::Report;
use crate::report;
use crate::stats;
use crate::verbs::{self, Endpoint, Op};
use std::time::Instant;

impl Bench {
    /// How one size of a bandwidth test runs.
    fn plan(&self, test: BenchTest, size: u64) -> BwPlan {
        let iters = u64::from(self.args.iters_for(test));
        let duration = self
            .args
            .duration
            .map(|d| (f64::from(d), f64::from(self.args.margin)));
        BwPlan {
            iters,
            depth: u64::from(self.args.tx_depth),
            cq_mod: cq_mod(u64::from(self.args.tx_depth), size, self.args.all),
            peak: !self.args.no_peak && duration.is_none() && iters <= PEAK_MAX_ITERS,
            duration,
            warm_up: self.args.perform_warm_up
                && matches!(test, BenchTest::WriteBw | BenchTest::ReadBw),
        }
    }

    /// Bandwidth of one operation over all sizes.
    pub(super) fn bw(&mut self, test: BenchTest) -> Result<BenchTestDoc, BenchError> {
        let sz = sizes(&self.args, test);
        let max = *sz.iter().max().unwrap_or(&2);
        let iters = self.args.iters_for(test);
        let depth = if test == BenchTest::SendBw {
            self.args.tx_depth.max(iters)
        } else {
            self.args.tx_depth
        };
        let mut lbuf = self.backend.alloc(max as usize).map_err(be("allocation"))?;
        let lmr = self
            .reg
            .register(lbuf.as_ref(), 0, max as usize)
            .map_err(|e| BenchError(format!("registration: {}", e.msg)))?;
        let rb = self
            .peer
            .as_mut()
            .ok_or_else(|| BenchError("no peer".into()))?
            .alloc(max, false)
            .map_err(be("peer alloc"))?;
        // perftest's -q: that many QP pairs, all writing to (reading from) the same buffers.
        let mut eps = vec![self.connect(depth, false)?];
        for _ in 1..self.args.qps {
            eps.push(self.connect(depth, true)?);
        }
        let bidi = self.args.bidirectional;
        let title = perftest_title(test, bidi);
        let sum = if bidi {
            "; figures: the sum of both sides'"
        } else {
            ""
        };
        self.say(&format!(
            "\n {title} (mem {}, {} outstanding, {} QP{sum})",
            self.mem, self.args.tx_depth, self.args.qps
        ));
        let mut cells = Vec::new();
        let pb = report::progress(
            sz.len() as u64,
            &title,
            self.args.no_progress || self.args.common.json,
        );
        let mut rows = Vec::new();
        let mut last = None;
        let mut checked = 0u64;
        for &s in &sz {
            let seed = DV_SEED ^ s;
            if self.args.data_validation {
                self.dv_prepare(test, lbuf.as_mut(), rb.id, s, seed)?;
            }
            // This side posts into the far buffer; with -b the far side posts into this one.
            let op = bw_op(test, rb.rkey, rb.addr);
            let back = bw_op(test, lmr.rkey(), lbuf.addr());
            let plan = self.plan(test, s);
            if test == BenchTest::SendBw {
                let p = self
                    .peer
                    .as_mut()
                    .ok_or_else(|| BenchError("no peer".into()))?;
                p.unit(Req::PostRecv {
                    id: rb.id,
                    off: 0,
                    len: s,
                    count: iters,
                })
                .map_err(be("peer post_recv"))?;
                if bidi {
                    // The far side's messages land in this side's buffer (send_bw has one QP).
                    for i in 0..iters {
                        eps[0]
                            .post_recv(u64::from(i), lmr.lkey(), lbuf.addr(), s)
                            .map_err(be("post_recv"))?;
                    }
                }
            }
            let (mine, theirs) = if bidi {
                let (m, t) = self.both_halves(
                    &mut eps,
                    op,
                    back,
                    (lmr.lkey(), lbuf.addr()),
                    rb.id,
                    s,
                    &plan,
                )?;
                (m, Some(t))
            } else {
                let m = run_bw(&mut eps, op.op(), lmr.lkey(), lbuf.addr(), s, &plan)?;
                (m, None)
            };
            if test == BenchTest::SendBw {
                // The far side's receives its own loop did not see (all of them without -b).
                let seen = theirs.map_or(0, |t| t.recvs);
                self.wait_peer_recvs(u64::from(iters).saturating_sub(seen))?;
                if bidi {
                    wait_own_recvs(&eps[0], u64::from(iters).saturating_sub(mine.recvs))?;
                }
            }
            if self.args.data_validation {
                self.dv_check(test, lbuf.as_ref(), rb.id, s, seed)?;
                checked += 1;
            }
            let r = match theirs {
                Some(t) => sum_bidirectional(&mine.bw, &t.bw),
                None => mine.bw,
            };
            cells.push(report::bw_row(&r, self.args.report_gbits));
            rows.push(Row::Bandwidth(BwRow::new(&r, self.args.report_gbits)));
            last = Some(r);
            pb.inc(1);
        }
        pb.finish_and_clear();
        self.say(&report::table(
            &report::bw_header(self.args.report_gbits),
            &cells,
        ));
        let threshold = last.map(|r| self.judge_rate(&r));
        let dv = self
            .args
            .data_validation
            .then(|| self.dv_summary(test, checked));
        let last = *sz.last().unwrap_or(&max);
        let info = self.info(
            &perftest_name(test, bidi),
            Some(&eps[0]),
            Some(self.plan(test, last).cq_mod),
            Some(test == BenchTest::ReadBw),
            // perftest's RX_depth of a bidirectional send test: here the receives posted per size.
            (bidi && test == BenchTest::SendBw).then_some(iters),
        );
        drop(lmr);
        let _ = self.peer.as_mut().map(|p| p.unit(Req::Drop { id: rb.id }));
        Ok(test_doc(test, info, rows, threshold, dv))
    }

    /// The verdict of a bandwidth test's figure at its largest size against the line rate;
    /// printed, and remembered when it fails the run.
    fn judge_rate(&mut self, r: &stats::BwResult) -> Threshold {
        let (fraction, enforced) = self.args.threshold();
        let mut t = line_rate::judge(
            &self.line_rate,
            fraction,
            self.args.bidirectional,
            stats::mib_to_gbits(r.bw_avg_mib),
            r.msg_size,
            enforced,
        );
        if self.software_device && t.note.is_none() {
            t.note = Some(
                "a software RDMA device (rxe, siw): its rate is the netdev's, and its figures \
                 say nothing about a NIC's line rate"
                    .into(),
            );
        }
        self.say(&t.line());
        self.rate_failed |= t.fails_run();
        t
    }

    /// `--data-validation`, before a size: the source holds the pattern of `seed`, the
    /// destination another one (so that a transfer that never landed shows). With `-b` each
    /// buffer is both a source and a destination: both hold the pattern, and must still hold it.
    fn dv_prepare(
        &mut self,
        test: BenchTest,
        lbuf: &mut dyn crate::mem::Buffer,
        far: u32,
        size: u64,
        seed: u64,
    ) -> Result<(), BenchError> {
        let (local, remote) = dv_seeds(test, self.args.bidirectional, seed);
        lbuf.write(0, &pattern::generate(local, 0, size as usize))
            .map_err(be("data validation: filling this side's buffer"))?;
        self.peer
            .as_mut()
            .ok_or_else(|| BenchError("no peer".into()))?
            .unit(Req::Fill {
                id: far,
                off: 0,
                len: size,
                seed: remote,
            })
            .map_err(be("data validation: filling the far side's buffer"))
    }

    /// `--data-validation`, after a size: the destination (both buffers with `-b`) holds the
    /// source's pattern.
    fn dv_check(
        &mut self,
        test: BenchTest,
        lbuf: &dyn crate::mem::Buffer,
        far: u32,
        size: u64,
        seed: u64,
    ) -> Result<(), BenchError> {
        let (check_local, check_far) = dv_destinations(test, self.args.bidirectional);
        let bad = |side: &str, at: u64| {
            BenchError(format!(
                "data validation: {size}-byte messages: {side} buffer differs from the source's \
                 pattern at offset {at} (the NIC delivered wrong, stale or misplaced data)"
            ))
        };
        if check_local {
            let mut got = vec![0u8; size as usize];
            lbuf.read(0, &mut got)
                .map_err(be("data validation: reading this side's buffer"))?;
            if let Some(at) = pattern::first_mismatch(seed, 0, &got) {
                return Err(bad("this side's", at as u64));
            }
        }
        if check_far {
            let mismatch = self
                .peer
                .as_mut()
                .ok_or_else(|| BenchError("no peer".into()))?
                .verify(far, 0, size, seed)
                .map_err(be("data validation: checking the far side's buffer"))?;
            if let Some(at) = mismatch {
                return Err(bad("the far side's", at));
            }
        }
        Ok(())
    }

    /// What `--data-validation` checked, for the `--json` document and the text.
    fn dv_summary(&self, test: BenchTest, sizes: u64) -> DataValidation {
        let checked = if self.args.bidirectional {
            "both buffers (each is a source and a destination with -b: a transfer that did not \
             land is not seen, corrupted or misplaced data is)"
        } else if test == BenchTest::ReadBw {
            "this side's buffer (the READs' destination)"
        } else {
            "the far side's buffer (the destination)"
        };
        let d = DataValidation {
            sizes,
            checked: checked.into(),
        };
        self.say(&format!(
            " data validation: {sizes} size(s) checked, {checked}"
        ));
        d
    }

    /// Both halves of a bidirectional (`-b`) size at once: this side posts `op` on `eps` from
    /// its buffer `local` (lkey, address) while the far side posts `back` on its QPs from its
    /// buffer `far_id`. In loopback both run in one loop here; against a `--server -b` the server
    /// runs its half on the request `BwRun`, answered when it is done. Returns (this side, far
    /// side).
    #[allow(clippy::too_many_arguments)]
    fn both_halves(
        &mut self,
        eps: &mut [Endpoint],
        op: BwOp,
        back: BwOp,
        local: (u32, u64),
        far_id: u32,
        size: u64,
        plan: &BwPlan,
    ) -> Result<(SideResult, SideResult), BenchError> {
        match self.peer.as_mut() {
            Some(Peer::Local(t)) => {
                let mut lanes = own_lanes(eps, op.op(), local.0, local.1);
                lanes.extend(t.lanes(far_id, back.op(), 1).map_err(BenchError)?);
                match run_lanes(&mut lanes, size, plan).map_err(|e| BenchError(e.to_string()))?[..]
                {
                    [mine, theirs] => Ok((mine, theirs)),
                    _ => Err(BenchError("bidirectional run: not two sides".into())),
                }
            }
            Some(Peer::Remote(ch)) => {
                ch.send(&Req::BwRun {
                    id: far_id,
                    op: back,
                    size,
                    plan: *plan,
                })
                .map_err(be("bidirectional start"))?;
                let mine = run_bw(eps, op.op(), local.0, local.1, size, plan);
                // The far side answers whatever happened here (its requests fail once this side's
                // QPs stop): read its answer before anything else goes on the channel.
                let answer: Result<Resp, _> = ch.recv();
                let mine = mine?;
                match answer.map_err(be("the far side's half"))? {
                    Resp::Bw { half } => far_half(half, size).map(|t| (mine, t)),
                    Resp::Err { msg, .. } => {
                        Err(BenchError(format!("the far side's half: peer: {msg}")))
                    }
                    r => Err(BenchError(format!(
                        "the far side's half: unexpected answer {r:?}"
                    ))),
                }
            }
            None => Err(BenchError("no peer".into())),
        }
    }

    /// Waits until the far side has received `n` more messages (send_bw).
    fn wait_peer_recvs(&mut self, n: u64) -> Result<(), BenchError> {
        let p = self
            .peer
            .as_mut()
            .ok_or_else(|| BenchError("no peer".into()))?;
        let mut got = 0u64;
        while got < n {
            let want = u32::try_from(n - got).unwrap_or(u32::MAX);
            let c = p
                .wait_recv(want, POLL.as_millis() as u64)
                .map_err(be("peer recv"))?;
            if c.is_empty() {
                return Err(BenchError("peer did not receive every message".into()));
            }
            if let Some(bad) = c.iter().find(|c| !c.ok()) {
                return Err(BenchError(format!(
                    "peer receive: {}",
                    verbs::wc_status_name(bad.status)
                )));
            }
            got += c.len() as u64;
        }
        Ok(())
    }

    /// write_bw or read_bw against perftest's server at `host` (`--perftest`): its buffer is the
    /// far side, its exchange sets the test up, and it gets this side's report at the end.
    pub(super) fn bw_perftest(
        &mut self,
        test: BenchTest,
        host: &str,
    ) -> Result<BenchTestDoc, BenchError> {
        let sz = sizes(&self.args, test);
        let max = *sz.iter().max().unwrap_or(&2);
        let dev = self
            .dev
            .clone()
            .ok_or_else(|| BenchError("no RDMA device".into()))?;
        let lbuf = self.backend.alloc(max as usize).map_err(be("allocation"))?;
        let lmr = self
            .reg
            .register(lbuf.as_ref(), 0, max as usize)
            .map_err(|e| BenchError(format!("registration: {}", e.msg)))?;
        let mut ep = Endpoint::new(&dev, self.args.tx_depth).map_err(be("QP"))?;
        self.limit(&mut ep);
        let gid = perftest_peer::sends_gid(&dev, self.args.common.gid_index.is_some());
        let srv = PerftestServer::connect(
            host,
            self.args.common.port,
            &dev,
            &mut ep,
            gid,
            lmr.rkey(),
            lbuf.addr(),
        )
        .map_err(be("perftest"))?;
        let title = perftest_title(test, false);
        self.say(&format!(
            "\n {title} against perftest {} at {host} (mem {}, {} outstanding, MTU {})",
            srv.version,
            self.mem,
            self.args.tx_depth,
            verbs::mtu_bytes(srv.mtu)
        ));
        let op = match test {
            BenchTest::ReadBw => Op::Read {
                rkey: srv.theirs.rkey,
                raddr: srv.theirs.vaddr,
            },
            _ => Op::Write {
                rkey: srv.theirs.rkey,
                raddr: srv.theirs.vaddr,
            },
        };
        let mut rows = Vec::new();
        let mut cells = Vec::new();
        let mut last = None;
        for &s in &sz {
            let r = run_bw(
                std::slice::from_mut(&mut ep),
                op,
                lmr.lkey(),
                lbuf.addr(),
                s,
                &self.plan(test, s),
            )?
            .bw;
            cells.push(report::bw_row(&r, self.args.report_gbits));
            rows.push(Row::Bandwidth(BwRow::new(&r, self.args.report_gbits)));
            last = Some(r);
        }
        self.say(&report::table(
            &report::bw_header(self.args.report_gbits),
            &cells,
        ));
        let threshold = last.map(|r| self.judge_rate(&r));
        // perftest's client hands its server the report of its last size, in its own unit.
        let conv = |v: f64| {
            if self.args.report_gbits {
                stats::mib_to_gbits(v)
            } else {
                v
            }
        };
        let rep = last.map_or_else(Report::default, |r| Report {
            size: r.msg_size,
            iters: r.iterations,
            bw_peak: conv(r.bw_peak_mib),
            bw_avg: conv(r.bw_avg_mib),
            msg_rate: r.msg_rate_mpps,
        });
        srv.finish(&rep).map_err(be("perftest end of test"))?;
        let cq = self.plan(test, *sz.last().unwrap_or(&max)).cq_mod;
        let info = self.info(
            &perftest_name(test, false),
            Some(&ep),
            Some(cq),
            Some(test == BenchTest::ReadBw),
            None,
        );
        drop(lmr);
        Ok(test_doc(test, info, rows, threshold, None))
    }
}

/// `--data-validation`'s pattern seed (each size's is this xor the size).
const DV_SEED: u64 = 0x6e76_7065_6572_6476;
/// What the destination holds before a size, so that a transfer that never landed shows.
const DV_OTHER: u64 = 0x5a5a_5a5a_5a5a_5a5a;

/// The patterns (this side's buffer, the far side's) before a size of `test`: the source gets
/// `seed`, the destination another one; with `-b` both are sources and get `seed`.
fn dv_seeds(test: BenchTest, bidirectional: bool, seed: u64) -> (u64, u64) {
    match test {
        _ if bidirectional => (seed, seed),
        BenchTest::ReadBw => (seed ^ DV_OTHER, seed),
        _ => (seed, seed ^ DV_OTHER),
    }
}

/// Which buffers (this side's, the far side's) must hold `seed`'s pattern after a size: the
/// destination (READ: this side's; WRITE and SEND: the far side's); both with `-b`.
fn dv_destinations(test: BenchTest, bidirectional: bool) -> (bool, bool) {
    (
        bidirectional || test == BenchTest::ReadBw,
        bidirectional || test != BenchTest::ReadBw,
    )
}

/// The `--json` document of a bandwidth test: perftest's `test_info` and `results`, and
/// nvpeer's `threshold` (the line-rate verdict) and `data_validation`.
fn test_doc(
    test: BenchTest,
    info: PerftestInfo,
    rows: Vec<Row>,
    threshold: Option<Threshold>,
    dv: Option<DataValidation>,
) -> BenchTestDoc {
    BenchTestDoc {
        threshold,
        data_validation: dv,
        ..BenchTestDoc::ran(test.name(), info, rows)
    }
}

/// [`run_lanes`] on this side's QPs alone, all posting `op` from one buffer.
fn run_bw(
    eps: &mut [Endpoint],
    op: Op,
    lkey: u32,
    addr: u64,
    size: u64,
    plan: &BwPlan,
) -> Result<SideResult, BenchError> {
    let mut lanes = own_lanes(eps, op, lkey, addr);
    let r = run_lanes(&mut lanes, size, plan).map_err(|e| BenchError(e.to_string()))?;
    r.first()
        .copied()
        .ok_or_else(|| BenchError("no result".into()))
}

/// The request `test` posts into the other side's buffer `rkey`/`raddr`.
fn bw_op(test: BenchTest, rkey: u32, raddr: u64) -> BwOp {
    match test {
        BenchTest::ReadBw => BwOp::Read { rkey, raddr },
        BenchTest::SendBw => BwOp::Send,
        _ => BwOp::Write { rkey, raddr },
    }
}

/// The far side's half as the server answered it, checked against the run it belongs to.
fn far_half(half: SideResult, size: u64) -> Result<SideResult, BenchError> {
    let b = &half.bw;
    let figures = [b.bw_peak_mib, b.bw_avg_mib, b.msg_rate_mpps];
    if b.msg_size != size || figures.iter().any(|v| !v.is_finite() || *v < 0.0) {
        return Err(BenchError(format!(
            "the far side's half is not of this run ({} bytes, figures {figures:?}; expected \
             {size} bytes and finite figures)",
            b.msg_size
        )));
    }
    Ok(half)
}

/// Waits until `n` more receives completed on `ep` (send_bw `-b`: the far side's messages that
/// this side's own loop did not see).
fn wait_own_recvs(ep: &Endpoint, n: u64) -> Result<(), BenchError> {
    let mut got = 0u64;
    let start = Instant::now();
    let mut cs = Vec::new();
    while got < n {
        cs.clear();
        ep.poll_now(16, &mut cs).map_err(be("poll"))?;
        for c in &cs {
            if !c.ok() {
                return Err(BenchError(format!(
                    "receive: {}",
                    verbs::wc_status_name(c.status)
                )));
            }
            if c.opcode & WC_RECV != 0 {
                got += 1;
            }
        }
        if cs.is_empty() && start.elapsed() > POLL {
            return Err(BenchError(format!(
                "this side received {got} of the far side's last {n} messages"
            )));
        }
    }
    Ok(())
}

/// This side's lanes (side 0) over `eps`.
fn own_lanes(eps: &mut [Endpoint], op: Op, lkey: u32, addr: u64) -> Vec<Lane<'_>> {
    eps.iter_mut()
        .map(|ep| Lane {
            qp: ep as &mut dyn Poster,
            op,
            lkey,
            addr,
            side: 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perftest_names_with_and_without_b() {
        assert_eq!(
            perftest_name(BenchTest::WriteBw, false),
            "RDMA_Write_BW_Test"
        );
        assert_eq!(perftest_name(BenchTest::ReadBw, false), "RDMA_Read_BW_Test");
        assert_eq!(perftest_name(BenchTest::SendBw, false), "Send_BW_Test");
        // perftest's write_test_info_to_file: verb, "Bidirectional_", "BW_", "Test".
        assert_eq!(
            perftest_name(BenchTest::WriteBw, true),
            "RDMA_Write_Bidirectional_BW_Test"
        );
        assert_eq!(
            perftest_name(BenchTest::ReadBw, true),
            "RDMA_Read_Bidirectional_BW_Test"
        );
        assert_eq!(
            perftest_name(BenchTest::SendBw, true),
            "Send_Bidirectional_BW_Test"
        );
        assert_eq!(
            perftest_title(BenchTest::WriteBw, true),
            "RDMA_Write Bidirectional BW Test"
        );
        // Only bandwidth tests are bidirectional.
        assert_eq!(
            perftest_name(BenchTest::WriteLat, true),
            "RDMA_Write_imm_Latency_Test"
        );
    }

    /// The destination starts with another pattern than the source's (a transfer that never
    /// landed fails the check), and the check reads the destination.
    #[test]
    fn data_validation_checks_the_destination() {
        let seed = 7;
        for test in [BenchTest::WriteBw, BenchTest::SendBw] {
            let (local, far) = dv_seeds(test, false, seed);
            assert_eq!(local, seed);
            assert_ne!(far, seed);
            assert_eq!(dv_destinations(test, false), (false, true));
        }
        let (local, far) = dv_seeds(BenchTest::ReadBw, false, seed);
        assert_eq!((far, local != seed), (seed, true));
        assert_eq!(dv_destinations(BenchTest::ReadBw, false), (true, false));
        for test in [BenchTest::WriteBw, BenchTest::ReadBw, BenchTest::SendBw] {
            assert_eq!(dv_seeds(test, true, seed), (seed, seed));
            assert_eq!(dv_destinations(test, true), (true, true));
        }
        // The two patterns really differ at the start of the buffer.
        let a = pattern::generate(seed, 0, 64);
        assert!(pattern::first_mismatch(seed ^ DV_OTHER, 0, &a).is_some());
    }

    #[test]
    fn the_far_half_must_belong_to_the_run() {
        let ok = SideResult {
            bw: stats::bandwidth(4096, 10, 1.0, None),
            recvs: 3,
        };
        assert_eq!(far_half(ok, 4096).unwrap(), ok);
        assert!(far_half(ok, 8192).is_err());
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            let mut h = ok;
            h.bw.bw_avg_mib = bad;
            assert!(far_half(h, 4096).is_err(), "{bad}");
        }
    }
}
