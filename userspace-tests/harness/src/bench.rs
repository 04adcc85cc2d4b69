//! `nvpeer bench`: registration latency per size, and bandwidth/latency sweeps with perftest's
//! columns (`ib_write_bw -a`, `ib_read_bw`, `ib_send_bw`, `ib_write_lat --write_with_imm`).

use crate::cli::{BenchArgs, BenchTest, MemKind, Role};
use crate::mem::{self, Backend};
use crate::peer::{self, Peer, Req, Target};
use crate::reg::{RegPath, Registrar};
use crate::report;
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
        let iters = self.args.iters;
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
        Ok(json!({"test": "reg", "path": self.reg.path.label(), "results": rows}))
    }

    fn connect(&mut self, depth: u32) -> Result<Endpoint, BenchError> {
        let dev = self
            .dev
            .clone()
            .ok_or_else(|| BenchError("no RDMA device".into()))?;
        let mut ep = Endpoint::new(&dev, depth).map_err(be("QP"))?;
        let p = self
            .peer
            .as_mut()
            .ok_or_else(|| BenchError("no peer".into()))?;
        let info = p.connect(ep.info(), depth).map_err(be("peer connect"))?;
        ep.connect(&info).map_err(be("connect"))?;
        Ok(ep)
    }

    /// Bandwidth of one operation over all sizes.
    fn bw(&mut self, test: BenchTest) -> Result<Value, BenchError> {
        let sz = sizes(&self.args);
        let max = *sz.iter().max().unwrap_or(&2);
        let iters = self.args.iters as u64;
        let depth = if test == BenchTest::SendBw {
            self.args.tx_depth.max(self.args.iters)
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
        let mut ep = self.connect(depth)?;
        let title = match test {
            BenchTest::ReadBw => "RDMA_Read BW Test",
            BenchTest::SendBw => "Send BW Test",
            _ => "RDMA_Write BW Test",
        };
        self.say(&format!(
            "\n {title} (mem {}, {} outstanding)",
            self.args.common.mem,
            depth.min(self.args.tx_depth.max(1))
        ));
        let mut cells = Vec::new();
        let pb = report::progress(
            sz.len() as u64,
            title,
            self.args.no_progress || self.args.common.json,
        );
        let mut rows = Vec::new();
        for s in sz {
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
                    count: iters as u32,
                })
                .map_err(be("peer post_recv"))?;
            }
            let r = run_bw(
                &mut ep,
                op,
                lmr.lkey(),
                lbuf.addr(),
                s,
                iters,
                self.args.tx_depth as u64,
            )?;
            if test == BenchTest::SendBw {
                let p = self
                    .peer
                    .as_mut()
                    .ok_or_else(|| BenchError("no peer".into()))?;
                let mut got = 0usize;
                while (got as u64) < iters {
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
        drop(lmr);
        let _ = self.peer.as_mut().map(|p| p.unit(Req::Drop { id: rb.id }));
        Ok(json!({"test": test.name(), "results": rows}))
    }

    /// WRITE_WITH_IMM ping-pong latency (valid on GPU memory: nobody polls the payload).
    fn lat(&mut self) -> Result<Value, BenchError> {
        let sz = sizes(&self.args);
        let max = *sz.iter().max().unwrap_or(&2);
        let iters = self.args.iters;
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
        let mut ep = self.connect(iters.min(1024) + 4)?;
        self.say(&format!(
            "\n RDMA_Write Latency Test, WRITE_WITH_IMM ping-pong (mem {})",
            self.args.common.mem
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
        drop(lmr);
        let _ = self.peer.as_mut().map(|p| p.unit(Req::Drop { id: rb.id }));
        Ok(json!({"test": "write_lat", "results": rows}))
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

/// How many requests one signalled completion stands for: perftest's default `--cq-mod` of 100,
/// bounded by the depth so the queue never stalls.
pub fn cq_mod(depth: u64) -> u64 {
    depth.clamp(1, 100)
}

/// Posts `iters` requests keeping `depth` outstanding, signalling every `cq_mod(depth)`-th and
/// the last; returns perftest-style figures.
fn run_bw(
    ep: &mut Endpoint,
    op: Op,
    lkey: u32,
    addr: u64,
    size: u64,
    iters: u64,
    depth: u64,
) -> Result<BwResult, BenchError> {
    let m = cq_mod(depth);
    let (mut posted, mut done) = (0u64, 0u64);
    let mut windows = Vec::new();
    let mut cs = Vec::new();
    let start = Instant::now();
    let mut win_start = start;
    let mut win_n = 0u64;
    while done < iters {
        while posted < iters && posted - done < depth {
            let signaled = (posted + 1) % m == 0 || posted + 1 == iters;
            ep.post_flagged(op, posted, lkey, addr, size, signaled)
                .map_err(be("post"))?;
            posted += 1;
        }
        cs.clear();
        ep.poll_now(64, &mut cs).map_err(be("poll"))?;
        for c in &cs {
            if !c.ok() {
                return Err(BenchError(format!(
                    "{} of {size} bytes completed with '{}'",
                    op.name(),
                    verbs::wc_status_name(c.status)
                )));
            }
            // wr_id is the index of the signalled request: everything up to it is done.
            let upto = c.wr_id + 1;
            if upto > done {
                win_n += upto - done;
                done = upto;
            }
        }
        if win_n >= 64 || (done == iters && win_n > 0) {
            let now = Instant::now();
            windows.push((win_n, (now - win_start).as_secs_f64()));
            win_start = now;
            win_n = 0;
        }
        if cs.is_empty() && start.elapsed() > POLL * 4 {
            return Err(BenchError("timed out waiting for completions".into()));
        }
    }
    Ok(stats::bandwidth(
        size,
        iters,
        start.elapsed().as_secs_f64(),
        &windows,
    ))
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
    let c = args.common.clone();
    let path = match c.mem {
        MemKind::CudaDmabuf => RegPath::DmaBuf,
        MemKind::Emu => RegPath::EmuCore,
        _ => RegPath::VaMr,
    };
    if c.server {
        return peer::run_server("nvpeer bench --server", &c, path);
    }
    // A sweep of the transfer tests sends messages of up to --max-size (registrations may be
    // larger).
    if args.all && args.tests.iter().any(|t| *t != BenchTest::Reg) {
        if let Err(e) = figures::size::check_message(args.max_size) {
            eprintln!("nvpeer bench: --max-size: {e}");
            return 2;
        }
    }
    let backend: Rc<dyn Backend> = match mem::open(c.mem, &c.gpu) {
        Ok(b) => Rc::from(b),
        Err(e) => {
            eprintln!("nvpeer bench: {e}");
            return 2;
        }
    };
    let dev = match Device::open(c.ib_dev.as_deref(), c.ib_port, c.gid_index) {
        Ok(d) => Some(Rc::new(d)),
        Err(e) if c.mem == MemKind::Emu && !c.server => {
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
        (Some(d), Role::Client(h)) => {
            match crate::oob::Channel::connect(&h, c.port, Duration::from_secs(30)) {
                Ok(ch) => {
                    let mut p = Peer::Remote(ch);
                    if let Err(e) = p.call(peer::hello(&c)) {
                        eprintln!("nvpeer bench: {e}");
                        return 2;
                    }
                    let _ = d;
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
        let r = match t {
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
    if c.json || b.args.out_json_file.is_some() {
        env.doctor = crate::environment::doctor_snapshot(std::path::Path::new("/"));
    }
    b.say(&format!("\n{}", env.text()));
    let doc = json!({
        "tool": "nvpeer bench",
        "version": env!("CARGO_PKG_VERSION"),
        "mem": c.mem.to_string(),
        "device": b.dev.as_ref().map(|d| d.name.clone()),
        "environment": env,
        "tests": out,
    });
    let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    if c.json {
        report::say(&text);
    }
    if let Some(f) = &b.args.out_json_file {
        if let Err(e) = std::fs::write(f, &text) {
            eprintln!("nvpeer bench: writing {}: {e}", f.display());
            could_not_run = true;
        }
    }
    if could_not_run {
        2
    } else {
        u8::from(failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signalling_period() {
        assert_eq!(cq_mod(128), 100);
        assert_eq!(cq_mod(8), 8);
        assert_eq!(cq_mod(0), 1);
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
