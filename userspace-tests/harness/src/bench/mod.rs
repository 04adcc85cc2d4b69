//! `nvpeer bench`: registration latency per size, and bandwidth/latency sweeps with perftest's
//! columns (`ib_write_bw -a`, `ib_read_bw`, `ib_send_bw`, `ib_write_lat --write_with_imm`).

use crate::cli::{BenchArgs, BenchTest, MemKind, Role};
use crate::mem::{self, Backend};
use crate::peer::{self, Peer, Req, Target};
use crate::perftest_peer::{self, PerftestServer};
use crate::perftest_wire::Report;
use crate::reg::{RegPath, Registrar};
use crate::report::{self, TestInfo};
use crate::stats::{self, BwResult};
use crate::verbs::{self, Completion, Device, Endpoint, Op};
use serde_json::{json, Value};
use std::rc::Rc;
use std::time::{Duration, Instant};

const POLL: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct BenchError(String);

fn be<E: std::fmt::Display>(ctx: &str) -> impl Fn(E) -> BenchError + '_ {
    move |e| BenchError(format!("{ctx}: {e}"))
}

struct Bench {
    args: BenchArgs,
    mem: MemKind,
    backend: Rc<dyn Backend>,
    dev: Option<Rc<Device>>,
    reg: Registrar,
    peer: Option<Peer>,
}

fn sizes(a: &BenchArgs) -> Vec<u64> {
    if a.all {
        stats::sweep_sizes(a.max_size)
    } else {
        vec![a.size]
    }
}

impl Bench {
    fn say(&self, s: &str) {
        if !self.args.common.json {
            report::say(s);
        }
    }

    /// reg / dereg / reg+dereg latency per size.
    fn reg(&mut self) -> Result<Value, BenchError> {
        let sz = if self.args.all {
            matrix(self.args.max_size)
        } else {
            vec![self.args.size]
        };
        let iters = self.args.iters_for(BenchTest::Reg);
        let max = *sz.iter().max().unwrap_or(&1);
        let buf = self.backend.alloc(max as usize).map_err(be("allocation"))?;
        self.say(&format!(
            "\n Registration latency ({}, {} iterations per size)",
            self.reg.path.label(),
            iters
        ));
        let header = [
            "#bytes",
            "#iterations",
            "reg med[us]",
            "reg p99[us]",
            "dereg med[us]",
            "dereg p99[us]",
            "reg+dereg med",
            "reg+dereg p99",
        ]
        .map(String::from);
        let mut cells = Vec::new();
        let pb = report::progress(
            sz.len() as u64 * iters as u64,
            "reg",
            self.args.no_progress || self.args.common.json,
        );
        let mut rows = Vec::new();
        for s in sz {
            let (mut r, mut d, mut rd) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..iters {
                let t0 = Instant::now();
                let mr = self
                    .reg
                    .register(buf.as_ref(), 0, s as usize)
                    .map_err(|e| BenchError(format!("{s} bytes: {}", e.msg)))?;
                let t1 = Instant::now();
                drop(mr);
                let t2 = Instant::now();
                r.push((t1 - t0).as_secs_f64() * 1e6);
                d.push((t2 - t1).as_secs_f64() * 1e6);
                rd.push((t2 - t0).as_secs_f64() * 1e6);
                pb.inc(1);
            }
            let (r, d, rd) = (
                stats::summarize(&r),
                stats::summarize(&d),
                stats::summarize(&rd),
            );
            if let (Some(r), Some(d), Some(rd)) = (r, d, rd) {
                let mut row = vec![s.to_string(), iters.to_string()];
                let figures = [r.t_typical, r.p99, d.t_typical, d.p99, rd.t_typical, rd.p99];
                row.extend(figures.map(|v| format!("{v:.2}")));
                cells.push(row);
                rows.push(json!({"MsgSize": s, "n_iterations": iters, "reg": r, "dereg": d, "reg_dereg": rd}));
            }
        }
        pb.finish_and_clear();
        self.say(&report::table(&header, &cells));
        let mut info = self.info("Registration_Latency_Test", None, None, None);
        if let Some(m) = info.as_object_mut() {
            m.insert("Registration_path".into(), self.reg.path.label().into());
        }
        Ok(json!({"test": "reg", "test_info": info, "results": rows}))
    }

    /// perftest's `test_info` for this run (`ep`: the connected endpoint, for the negotiated MTU
    /// and READ depth).
    fn info(
        &self,
        test: &str,
        ep: Option<&Endpoint>,
        cq_mod: Option<u64>,
        reads: Option<bool>,
    ) -> Value {
        let dev = self.dev.as_deref();
        let (mtu, out_reads) = ep.map_or((dev.map_or(0, |d| d.mtu as u8), 0), Endpoint::offer);
        report::test_info_json(&TestInfo {
            test: test.into(),
            device: dev.map(|d| d.name.clone()).unwrap_or_default(),
            link_layer: dev.map(|d| d.link_layer.clone()).unwrap_or_default(),
            tx_depth: cq_mod.map(|_| self.args.tx_depth),
            cq_mod,
            qps: if cq_mod.is_some() { self.args.qps } else { 1 },
            mtu: verbs::mtu_bytes(mtu),
            gid_index: dev.map_or(0, |d| u32::from(d.gid_index)),
            out_reads: reads.filter(|r| *r).map(|_| out_reads),
            mem: self.mem.to_string(),
            cuda_device: matches!(self.mem, MemKind::Cuda | MemKind::CudaDmabuf)
                .then(|| self.args.memory().1.to_string()),
            gbits: self.args.report_gbits,
        })
    }

    /// A QP connected to the far side's, with `-m` and `-o` applied before the negotiation; `more`:
    /// the far side keeps its earlier QPs (`-q`).
    fn connect(&mut self, depth: u32, more: bool) -> Result<Endpoint, BenchError> {
        let dev = self
            .dev
            .clone()
            .ok_or_else(|| BenchError("no RDMA device".into()))?;
        let mut ep = Endpoint::new(&dev, depth).map_err(be("QP"))?;
        self.limit(&mut ep);
        let p = self
            .peer
            .as_mut()
            .ok_or_else(|| BenchError("no peer".into()))?;
        let info = p
            .connect_more(ep.info(), depth, more)
            .map_err(be("peer connect"))?;
        ep.connect(&info).map_err(be("connect"))?;
        Ok(ep)
    }

    fn limit(&self, ep: &mut Endpoint) {
        if let Some(code) = self.args.mtu.and_then(verbs::mtu_code) {
            ep.limit_mtu(code);
        }
        if let Some(n) = self.args.out_reads {
            ep.limit_out_reads(n);
        }
    }

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
    fn bw(&mut self, test: BenchTest) -> Result<Value, BenchError> {
        let sz = sizes(&self.args);
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
    fn bw_perftest(&mut self, test: BenchTest, host: &str) -> Result<Value, BenchError> {
        let sz = sizes(&self.args);
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

    /// WRITE_WITH_IMM ping-pong latency (valid on GPU memory: nobody polls the payload).
    fn lat(&mut self) -> Result<Value, BenchError> {
        let sz = sizes(&self.args);
        let max = *sz.iter().max().unwrap_or(&2);
        let iters = self.args.iters_for(BenchTest::WriteLat);
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
        let mut ep = self.connect(iters.min(1024) + 4, false)?;
        self.say(&format!(
            "\n RDMA_Write Latency Test, WRITE_WITH_IMM ping-pong (mem {})",
            self.mem
        ));
        let mut cells = Vec::new();
        let mut rows = Vec::new();
        let pb = report::progress(
            sz.len() as u64,
            "write_lat",
            self.args.no_progress || self.args.common.json,
        );
        // The far side's first receive; every pong re-arms the next, across sizes too.
        let p = self
            .peer
            .as_mut()
            .ok_or_else(|| BenchError("no peer".into()))?;
        p.unit(Req::PostRecv {
            id: rb.id,
            off: 0,
            len: 0,
            count: 1,
        })
        .map_err(be("peer post_recv"))?;
        for s in sz {
            let mut samples = Vec::with_capacity(iters as usize);
            let local = self.peer.as_ref().is_some_and(Peer::is_local);
            if !local {
                let p = self
                    .peer
                    .as_mut()
                    .ok_or_else(|| BenchError("no peer".into()))?;
                if let Peer::Remote(ch) = p {
                    ch.send(&Req::Pong {
                        id: rb.id,
                        size: s,
                        iters,
                        rkey: lmr.rkey(),
                        raddr: lmr.addr,
                    })
                    .map_err(be("pong"))?;
                }
            }
            for i in 0..iters {
                ep.post_recv(i as u64, lmr.lkey(), lbuf.addr(), 0)
                    .map_err(be("post_recv"))?;
                let t0 = Instant::now();
                ep.post(
                    Op::WriteImm {
                        rkey: rb.rkey,
                        raddr: rb.addr,
                        imm: i,
                    },
                    1 << 32 | i as u64,
                    lmr.lkey(),
                    lbuf.addr(),
                    s,
                )
                .map_err(be("post"))?;
                if local {
                    // Drive the target's half in this thread.
                    let p = self
                        .peer
                        .as_mut()
                        .and_then(Peer::local)
                        .ok_or_else(|| BenchError("no local peer".into()))?;
                    pong_once(p, rb.id, s, lmr.rkey(), lmr.addr, i)?;
                }
                wait_recv(&ep, 1)?;
                samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
            if !local {
                if let Some(Peer::Remote(ch)) = self.peer.as_mut() {
                    let r: peer::Resp = ch.recv().map_err(be("pong end"))?;
                    if let peer::Resp::Err { msg, .. } = r {
                        return Err(BenchError(format!("peer: {msg}")));
                    }
                }
            }
            if let Some(st) = stats::summarize(&samples) {
                cells.push(report::lat_row(s, iters as u64, &st));
                rows.push(report::lat_json(s, iters as u64, &st));
            }
            pb.inc(1);
        }
        pb.finish_and_clear();
        self.say(&report::table(&report::lat_header(), &cells));
        let info = self.info(&perftest_name(BenchTest::WriteLat), Some(&ep), None, None);
        drop(lmr);
        let _ = self.peer.as_mut().map(|p| p.unit(Req::Drop { id: rb.id }));
        Ok(json!({"test": "write_lat", "test_info": info, "results": rows}))
    }
}

/// Waits until a receive completion arrives on `ep`; send completions are consumed on the way.
fn wait_recv(ep: &Endpoint, n: usize) -> Result<(), BenchError> {
    let mut got = 0;
    let start = Instant::now();
    let mut cs: Vec<Completion> = Vec::new();
    while got < n {
        cs.clear();
        ep.poll_now(16, &mut cs).map_err(be("poll"))?;
        for c in &cs {
            if !c.ok() {
                return Err(BenchError(format!(
                    "completion: {}",
                    verbs::wc_status_name(c.status)
                )));
            }
            if c.opcode & 128 != 0 {
                got += 1;
            }
        }
        if start.elapsed() > POLL {
            return Err(BenchError("timed out waiting for the pong".into()));
        }
    }
    Ok(())
}

fn pong_once(
    t: &mut Target,
    id: u32,
    size: u64,
    rkey: u32,
    raddr: u64,
    i: u32,
) -> Result<(), BenchError> {
    match t.handle(Req::Pong {
        id,
        size,
        iters: 1,
        rkey,
        raddr,
    }) {
        peer::Resp::Err { msg, .. } => Err(BenchError(format!("local pong {i}: {msg}"))),
        _ => Ok(()),
    }
}

/// perftest's title of a test's table.
fn perftest_title(test: BenchTest) -> &'static str {
    match test {
        BenchTest::ReadBw => "RDMA_Read BW Test",
        BenchTest::SendBw => "Send BW Test",
        BenchTest::WriteLat => "RDMA_Write_imm Latency Test",
        BenchTest::Reg => "Registration Latency Test",
        BenchTest::WriteBw => "RDMA_Write BW Test",
    }
}

/// perftest's `test_info.test` of a test (`RDMA_Write_BW_Test`, ...).
pub fn perftest_name(test: BenchTest) -> String {
    perftest_title(test).replace(' ', "_")
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

/// Registration sweep sizes: 4 KiB .. max in powers of four, plus max.
fn matrix(max: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = 4096u64;
    while s < max {
        v.push(s);
        match s.checked_mul(4) {
            Some(n) => s = n,
            None => break,
        }
    }
    v.push(max);
    v
}

/// Entry point of `nvpeer bench`.
pub fn run(args: BenchArgs) -> u8 {
    if let Err(e) = args.check() {
        eprintln!("nvpeer bench: {e}");
        return 2;
    }
    let mut c = args.common.clone();
    // perftest's --use_cuda* choose the memory as --mem/--gpu do.
    (c.mem, c.gpu) = args.memory();
    let path = match c.mem {
        MemKind::CudaDmabuf => RegPath::DmaBuf,
        MemKind::Emu => RegPath::EmuCore,
        _ => RegPath::VaMr,
    };
    if c.server {
        let opts = perftest_peer::ServeOpts {
            size: if args.all { args.max_size } else { args.size },
            gid_given: c.gid_index.is_some(),
            mtu: args.mtu.and_then(verbs::mtu_code),
        };
        return peer::run_server("nvpeer bench --server", &c, path, Some(opts));
    }
    // A sweep of the transfer tests sends messages of up to --max-size (registrations may be
    // larger).
    if args.all && args.tests.iter().any(|t| *t != BenchTest::Reg) {
        if let Err(e) = figures::size::check_message(args.max_size) {
            eprintln!("nvpeer bench: --max-size: {e}");
            return 2;
        }
    }
    let mem_kind = c.mem;
    let backend: Rc<dyn Backend> = match mem::open(c.mem, &c.gpu) {
        Ok(b) => Rc::from(b),
        Err(e) => {
            eprintln!("nvpeer bench: {e}");
            return 2;
        }
    };
    let dev = match Device::open(c.ib_dev.as_deref(), c.ib_port, c.gid_index) {
        Ok(d) => Some(Rc::new(d)),
        Err(e) if mem_kind == MemKind::Emu && !c.server => {
            if !c.json {
                eprintln!(
                    "nvpeer bench: {e}; --mem emu measures registration through peer_mem_emu only"
                );
            }
            None
        }
        Err(e) => {
            eprintln!(
                "nvpeer bench: {e}\n  probable cause: {}",
                crate::causes::device(&e)
            );
            return 2;
        }
    };
    let core = if c.mem == MemKind::Emu {
        mem::emu::EmuBackend::open().ok().and_then(|b| b.core())
    } else {
        None
    };
    let reg = Registrar {
        pd: dev.as_ref().map(|d| d.pd.clone()),
        core,
        path,
    };
    let peer = match (&dev, c.role()) {
        // perftest's server speaks only its own exchange (bw_perftest): no nvpeer channel to it.
        (Some(_), Role::Client(_)) if args.perftest => None,
        (Some(_), Role::Client(h)) => {
            match crate::oob::Channel::connect(&h, c.port, Duration::from_secs(30)) {
                Ok(ch) => {
                    let mut p = Peer::Remote(ch);
                    if let Err(e) = p.call(peer::hello(&c)) {
                        eprintln!("nvpeer bench: {e}");
                        return 2;
                    }
                    Some(p)
                }
                Err(e) => {
                    eprintln!("nvpeer bench: {e} (is `nvpeer bench --server` running there?)");
                    return 2;
                }
            }
        }
        (Some(d), _) => Some(Peer::Local(Box::new(Target::new(
            d.clone(),
            backend.clone(),
            path,
            c.serve.mem_limit,
        )))),
        (None, _) => None,
    };
    let mut b = Bench {
        args,
        mem: mem_kind,
        backend,
        dev,
        reg,
        peer,
    };
    let mut out = Vec::new();
    let mut failed = false;
    // A test this node cannot run at all makes the exit status 2 (could not run), not 1.
    let mut could_not_run = false;
    for t in b.args.tests.clone() {
        let r = match (t, c.role()) {
            (t, Role::Client(h)) if b.args.perftest => b.bw_perftest(t, &h),
            (t, _) => match t {
                BenchTest::Reg => b.reg(),
                _ if b.peer.is_none() || c.mem == MemKind::Emu => {
                    could_not_run = true;
                    Err(BenchError(
                        "needs an RDMA device and CPU-reachable memory (not available with --mem emu)"
                            .into(),
                    ))
                }
                BenchTest::WriteLat => b.lat(),
                t => b.bw(t),
            },
        };
        match r {
            Ok(v) => out.push(v),
            Err(e) => {
                failed = true;
                eprintln!("nvpeer bench: {}: {e}", t.name());
                out.push(json!({"test": t.name(), "error": e.to_string()}));
            }
        }
    }
    if let Some(Peer::Remote(_)) = b.peer.as_ref() {
        let _ = b.peer.as_mut().map(|p| p.unit(Req::Bye));
    }
    let gpu_bus = b
        .backend
        .facts()
        .into_iter()
        .find(|(k, _)| k == "pci bus id")
        .map(|(_, v)| v);
    let mut env = crate::environment::collect(
        std::path::Path::new("/"),
        b.dev.as_ref().map(|d| d.name.as_str()),
        gpu_bus.as_deref(),
        crate::environment::ofed_info(),
    );
    if c.json || b.args.json_file().is_some() {
        env.doctor = crate::environment::doctor_snapshot(std::path::Path::new("/"));
    }
    b.say(&format!("\n{}", env.text()));
    if !write_reports(&b.args, c.mem, b.dev.as_deref(), &env, &out) {
        could_not_run = true;
    }
    if could_not_run {
        2
    } else {
        u8::from(failed)
    }
}

/// Prints the `--json` document (nvpeer's: every test, the environment) and writes the
/// `--out_json` file (perftest's document of the one test); false when the file could not be
/// written or its test did not run.
fn write_reports(
    args: &BenchArgs,
    mem_kind: MemKind,
    dev: Option<&Device>,
    env: &crate::environment::Environment,
    tests: &[Value],
) -> bool {
    let mut ok = true;
    if args.common.json {
        let doc = json!({
            "tool": "nvpeer bench",
            "version": env!("CARGO_PKG_VERSION"),
            "mem": mem_kind.to_string(),
            "device": dev.map(|d| d.name.clone()),
            "environment": env,
            "tests": tests,
        });
        report::say(&serde_json::to_string_pretty(&doc).unwrap_or_default());
    }
    if let Some(f) = args.json_file() {
        // One test per file (BenchArgs::check); a failed test leaves no file, as in perftest.
        match tests.first() {
            Some(t) if t.get("error").is_none() => {
                let rows = t["results"].as_array().cloned().unwrap_or_default();
                let doc = report::perftest_doc(&t["test_info"], &rows);
                if let Err(e) =
                    std::fs::write(&f, serde_json::to_string_pretty(&doc).unwrap_or_default())
                {
                    eprintln!("nvpeer bench: writing {}: {e}", f.display());
                    ok = false;
                }
            }
            _ => ok = false,
        }
    }
    ok
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

    #[test]
    fn reg_matrix_sizes() {
        assert_eq!(matrix(4096), vec![4096]);
        assert_eq!(matrix(1 << 20), vec![4096, 16384, 65536, 262144, 1 << 20]);
        assert_eq!(matrix(100), vec![100]);
    }

    proptest::proptest! {
        /// Every maximum, up to 2^64 - 1, gives a finite, increasing sweep ending at it.
        #[test]
        fn reg_matrix_never_overflows(max in 1u64..=u64::MAX) {
            let m = matrix(max);
            proptest::prop_assert_eq!(m.last(), Some(&max));
            proptest::prop_assert!(m.windows(2).all(|w| w[0] < w[1]));
            proptest::prop_assert!(m.len() <= 33);
        }

        #[test]
        fn sweep_never_overflows(max in 0u64..=u64::MAX) {
            let v = stats::sweep_sizes(max);
            proptest::prop_assert!(v.iter().all(|s| *s <= max && s.is_power_of_two()));
            proptest::prop_assert!(v.len() <= 63);
        }
    }
}
