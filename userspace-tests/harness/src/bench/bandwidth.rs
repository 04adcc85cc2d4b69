//! Bandwidth (`write_bw`, `read_bw`, `send_bw`): how one size runs (its plan), the sizes of a
//! test against nvpeer's far side, both halves of a bidirectional (`-b`) size, and the run against
//! perftest's own server. The posting loop itself is in `bwloop`.

use super::bwloop::{
    cq_mod, run_lanes, sum_bidirectional, BwPlan, Lane, Poster, SideResult, PEAK_MAX_ITERS, WC_RECV,
};
use super::{be, perftest_name, perftest_title, sizes, Bench, BenchError, POLL};
use crate::cli::BenchTest;
use crate::peer::{BwOp, Peer, Req, Resp};
use crate::perftest_peer::{self, PerftestServer};
use crate::perftest_wire::Report;
use crate::report;
use crate::stats;
use crate::verbs::{self, Endpoint, Op};
use serde_json::{json, Value};
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
        }
    }

    /// Bandwidth of one operation over all sizes.
    pub(super) fn bw(&mut self, test: BenchTest) -> Result<Value, BenchError> {
        let sz = sizes(&self.args, test);
        let max = *sz.iter().max().unwrap_or(&2);
        let iters = self.args.iters_for(test);
        let depth = if test == BenchTest::SendBw {
            self.args.tx_depth.max(iters)
        } else {
            self.args.tx_depth
        };
        let lbuf = self.backend.alloc(max as usize).map_err(be("allocation"))?;
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
        for &s in &sz {
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
            let r = match theirs {
                Some(t) => sum_bidirectional(&mine.bw, &t.bw),
                None => mine.bw,
            };
            cells.push(report::bw_row(&r, self.args.report_gbits));
            rows.push(report::bw_json(&r, self.args.report_gbits));
            pb.inc(1);
        }
        pb.finish_and_clear();
        self.say(&report::table(
            &report::bw_header(self.args.report_gbits),
            &cells,
        ));
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
        Ok(json!({"test": test.name(), "test_info": info, "results": rows}))
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
                match run_lanes(&mut lanes, size, plan).map_err(BenchError)?[..] {
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
    pub(super) fn bw_perftest(&mut self, test: BenchTest, host: &str) -> Result<Value, BenchError> {
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
            rows.push(report::bw_json(&r, self.args.report_gbits));
            last = Some(r);
        }
        self.say(&report::table(
            &report::bw_header(self.args.report_gbits),
            &cells,
        ));
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
        Ok(json!({"test": test.name(), "test_info": info, "results": rows}))
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
    let r = run_lanes(&mut lanes, size, plan).map_err(BenchError)?;
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
