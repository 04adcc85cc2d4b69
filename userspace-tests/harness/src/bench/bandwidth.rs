//! Bandwidth (`write_bw`, `read_bw`, `send_bw`): how one size runs (perftest's signalling and peak
//! rules), the posting loop over every QP, and the run against perftest's own server.

use super::{be, perftest_name, perftest_title, sizes, Bench, BenchError, POLL};
use crate::cli::BenchTest;
use crate::peer::Req;
use crate::perftest_peer::{self, PerftestServer};
use crate::perftest_wire::Report;
use crate::report;
use crate::stats::{self, BwResult};
use crate::verbs::{self, Endpoint, Op};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

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
        let title = perftest_title(test);
        self.say(&format!(
            "\n {title} (mem {}, {} outstanding, {} QP)",
            self.mem, self.args.tx_depth, self.args.qps
        ));
        let mut cells = Vec::new();
        let pb = report::progress(
            sz.len() as u64,
            title,
            self.args.no_progress || self.args.common.json,
        );
        let mut rows = Vec::new();
        for &s in &sz {
            let op = match test {
                BenchTest::ReadBw => Op::Read {
                    rkey: rb.rkey,
                    raddr: rb.addr,
                },
                BenchTest::SendBw => Op::Send,
                _ => Op::Write {
                    rkey: rb.rkey,
                    raddr: rb.addr,
                },
            };
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
            }
            let r = run_bw(
                &mut eps,
                op,
                lmr.lkey(),
                lbuf.addr(),
                s,
                &self.plan(test, s),
            )?;
            if test == BenchTest::SendBw {
                let p = self
                    .peer
                    .as_mut()
                    .ok_or_else(|| BenchError("no peer".into()))?;
                let mut got = 0usize;
                while got < iters as usize {
                    let c = p
                        .wait_recv((iters as usize - got) as u32, POLL.as_millis() as u64)
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
                    got += c.len();
                }
            }
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
            &perftest_name(test),
            Some(&eps[0]),
            Some(self.plan(test, last).cq_mod),
            Some(test == BenchTest::ReadBw),
        );
        drop(lmr);
        let _ = self.peer.as_mut().map(|p| p.unit(Req::Drop { id: rb.id }));
        Ok(json!({"test": test.name(), "test_info": info, "results": rows}))
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
        let title = perftest_title(test);
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
            )?;
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
            &perftest_name(test),
            Some(&ep),
            Some(cq),
            Some(test == BenchTest::ReadBw),
        );
        drop(lmr);
        Ok(json!({"test": test.name(), "test_info": info, "results": rows}))
    }
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

/// One size of a bandwidth test.
#[derive(Debug, Clone, Copy)]
pub struct BwPlan {
    pub iters: u64,
    pub depth: u64,
    pub cq_mod: u64,
    /// Record every post and completion time for perftest's peak.
    pub peak: bool,
    /// `-D`: (seconds, margin) instead of `iters`.
    pub duration: Option<(f64, f64)>,
}

/// Posts requests on every QP of `eps` (perftest's `-q`), keeping `plan.depth` outstanding on
/// each, signalling every `plan.cq_mod`-th and the last, for `plan.iters` requests per QP or `-D`
/// seconds; returns perftest's figures over all QPs (average over the first post to the last
/// completion, or over the middle of a `-D` run; peak as [`stats::peak_time_per_msg`], with posts
/// and completions counted across QPs as perftest counts them).
fn run_bw(
    eps: &mut [Endpoint],
    op: Op,
    lkey: u32,
    addr: u64,
    size: u64,
    plan: &BwPlan,
) -> Result<BwResult, BenchError> {
    let (m, endless, nq) = (plan.cq_mod, plan.duration.is_some(), eps.len() as u64);
    // Per QP: requests posted, requests known complete.
    let mut posted = vec![0u64; eps.len()];
    let mut done = vec![0u64; eps.len()];
    let mut total_done = 0u64;
    let mut tposted: Vec<f64> = Vec::with_capacity(if plan.peak {
        (plan.iters * nq) as usize
    } else {
        0
    });
    let mut tcompleted: Vec<(u64, f64)> = Vec::new();
    let mut cs = Vec::new();
    let start = Instant::now();
    // -D: when the measured middle began (and the completions by then), and what it measured.
    let mut sample: Option<(Instant, u64)> = None;
    let mut measured: Option<(f64, u64)> = None;
    loop {
        let mut any_posting = false;
        for (k, ep) in eps.iter_mut().enumerate() {
            let t = start.elapsed().as_secs_f64();
            // A -D run stops posting once its time is up and its last request was a signalled one.
            let posting = match plan.duration {
                Some((d, _)) => t < d || !posted[k].is_multiple_of(m),
                None => posted[k] < plan.iters,
            };
            any_posting |= posting;
            while posting && posted[k] - done[k] < plan.depth && (endless || posted[k] < plan.iters)
            {
                let n = posted[k];
                let signaled = (n + 1).is_multiple_of(m) || (!endless && n + 1 == plan.iters);
                if plan.peak {
                    tposted.push(start.elapsed().as_secs_f64());
                }
                ep.post_flagged(op, n, lkey, addr, size, signaled)
                    .map_err(be("post"))?;
                posted[k] += 1;
                if endless
                    && posted[k].is_multiple_of(m)
                    && start.elapsed().as_secs_f64() >= plan.duration.map_or(0.0, |d| d.0)
                {
                    break;
                }
            }
        }
        cs.clear();
        for (k, ep) in eps.iter().enumerate() {
            let from = cs.len();
            ep.poll_now(64, &mut cs).map_err(be("poll"))?;
            for c in &cs[from..] {
                if !c.ok() {
                    return Err(BenchError(format!(
                        "{} of {size} bytes completed with '{}'",
                        op.name(),
                        verbs::wc_status_name(c.status)
                    )));
                }
                // wr_id is the index of the signalled request: everything up to it is done.
                if c.wr_id + 1 > done[k] {
                    total_done += c.wr_id + 1 - done[k];
                    done[k] = c.wr_id + 1;
                    if plan.peak {
                        tcompleted.push((total_done - 1, start.elapsed().as_secs_f64()));
                    }
                }
            }
        }
        let all_done = posted.iter().zip(&done).all(|(p, d)| p == d);
        if let Some((d, margin)) = plan.duration {
            let t = start.elapsed().as_secs_f64();
            if sample.is_none() && measured.is_none() && t >= margin {
                sample = Some((Instant::now(), total_done));
            }
            if let Some((s0, d0)) = sample {
                if t >= d - margin {
                    measured = Some((s0.elapsed().as_secs_f64(), total_done - d0));
                    sample = None;
                }
            }
            if !any_posting && all_done && measured.is_some() {
                break;
            }
        } else if total_done >= plan.iters * nq {
            break;
        }
        if cs.is_empty()
            && start.elapsed()
                > POLL * 4 + Duration::from_secs(plan.duration.map_or(0, |d| d.0 as u64))
        {
            return Err(BenchError("timed out waiting for completions".into()));
        }
    }
    Ok(match measured {
        Some((secs, n)) => stats::bandwidth(size, n, secs, None),
        None => {
            let peak = if plan.peak {
                stats::peak_time_per_msg(&tposted, &tcompleted)
            } else {
                None
            };
            stats::bandwidth(size, plan.iters * nq, start.elapsed().as_secs_f64(), peak)
        }
    })
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
        assert_eq!(perftest_name(BenchTest::WriteBw), "RDMA_Write_BW_Test");
        assert_eq!(perftest_name(BenchTest::ReadBw), "RDMA_Read_BW_Test");
    }
}
