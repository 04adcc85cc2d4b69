//! `write_lat`: WRITE_WITH_IMM ping-pong latency, and its two halves (waiting for the pong, a local
//! target's pong).

use super::doc::{BenchTestDoc, LatRow, Row};
use super::{be, perftest_name, sizes, Bench, BenchError, POLL};
use crate::cli::BenchTest;
use crate::peer::{self, Peer, Req, Target};
use crate::report;
use crate::stats;
use crate::verbs::{self, Completion, Endpoint, Op};
use std::time::Instant;

impl Bench {
    /// WRITE_WITH_IMM ping-pong latency (valid on GPU memory: nobody polls the payload).
    pub(super) fn lat(&mut self) -> Result<BenchTestDoc, BenchError> {
        let sz = sizes(&self.args, BenchTest::WriteLat);
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
                rows.push(Row::Latency(LatRow::new(s, iters as u64, &st)));
            }
            pb.inc(1);
        }
        pb.finish_and_clear();
        self.say(&report::table(&report::lat_header(), &cells));
        let info = self.info(
            &perftest_name(BenchTest::WriteLat, false),
            Some(&ep),
            None,
            None,
            None,
        );
        drop(lmr);
        let _ = self.peer.as_mut().map(|p| p.unit(Req::Drop { id: rb.id }));
        Ok(BenchTestDoc::ran(BenchTest::WriteLat.name(), info, rows))
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
