//! Data integrity (`xfer.*`): every operation in every direction between local and remote memory,
//! with the pattern checked at the destination.

use super::{Suite, POLL};
use crate::causes;
use crate::cli::MemKind;
use crate::mem::{host::HostBackend, Backend, Buffer};
use crate::pattern;
use crate::peer::{self, Peer, RemoteBuf, Req};
use crate::reg::{Mr, RegPath};
use crate::report::{CaseResult, Transfer};
use crate::sysfs::NodeFacts;
use crate::verbs::{self, Endpoint, Op};
use std::time::Instant;

/// (local is GPU, remote is GPU) pairs to test: GPU→GPU, GPU→host and host→GPU when either side
/// has GPU memory (each once), host→host only when neither has.
pub fn direction_pairs(local_gpu: bool, remote_gpu: bool) -> Vec<(bool, bool)> {
    let mut v = vec![
        (local_gpu, remote_gpu),
        (local_gpu, false),
        (false, remote_gpu),
    ];
    v.sort();
    v.dedup();
    v.reverse();
    v
}

impl Suite {
    /// Local and remote memory kinds to test (see [`direction_pairs`]).
    fn directions(&self) -> Vec<(bool, bool)> {
        direction_pairs(self.gpu(), self.remote_mem != "host")
    }

    fn side(&self, gpu: bool, remote: bool) -> String {
        if !gpu {
            "host".into()
        } else if remote {
            self.remote_mem.clone()
        } else {
            self.args.common.mem.to_string()
        }
    }

    pub(super) fn xfer_cases(&mut self, path: RegPath) {
        let ops = ["write", "write-imm", "read", "send-recv"];
        for (lg, rg) in self.directions() {
            for op in ops {
                let name = format!(
                    "xfer.{op}.{}->{}[{}]",
                    self.side(lg, false),
                    self.side(rg, true),
                    path.label()
                );
                self.case(&name.clone(), |s| {
                    if let Some(w) = s.no_verbs() {
                        return CaseResult::skip(&name, w);
                    }
                    if path.is_emu_core() {
                        return CaseResult::skip(
                            &name,
                            "rxe cannot DMA emulated GPU pages: registration path only",
                        );
                    }
                    match s.xfer(&name, op, lg, rg, path) {
                        Ok((d, micros)) => CaseResult::pass(&name, d).with_transfer(Transfer {
                            op: op.to_string(),
                            from: s.side(lg, false),
                            to: s.side(rg, true),
                            path: path.label().to_string(),
                            bytes: s.args.xfer_size,
                            micros,
                        }),
                        Err(r) => r,
                    }
                });
            }
        }
    }

    /// Connects a fresh QP pair (local endpoint + the peer's).
    pub(super) fn connect(&mut self, depth: u32) -> Result<Endpoint, CaseResult> {
        let dev = self
            .dev
            .clone()
            .ok_or_else(|| CaseResult::skip("connect", "no RDMA device"))?;
        let mut ep = Endpoint::new(&dev, depth)
            .map_err(|e| CaseResult::fail("connect", e.to_string(), "QP creation failed"))?;
        let peer = self
            .peer
            .as_mut()
            .ok_or_else(|| CaseResult::skip("connect", "no peer"))?;
        let remote = peer.connect(ep.info(), depth).map_err(|e| {
            CaseResult::fail("connect", e.to_string(), "peer could not connect its QP")
        })?;
        ep.connect(&remote).map_err(|e| {
            CaseResult::fail(
                "connect",
                e.to_string(),
                "QP could not reach RTS: wrong GID index or port, or the peer is unreachable",
            )
        })?;
        Ok(ep)
    }

    pub(super) fn local_buf(
        &self,
        name: &str,
        gpu: bool,
        path: RegPath,
        len: u64,
    ) -> Result<(Box<dyn Buffer>, Mr), CaseResult> {
        let buf = if gpu {
            self.alloc(len)
        } else {
            HostBackend.alloc(len as usize)
        }
        .map_err(|e| CaseResult::fail(name, e.to_string(), "allocation failed"))?;
        let reg = self.registrar(if gpu { path } else { RegPath::VaMr });
        let mr = self.try_reg(name, &reg, buf.as_ref(), 0, len)?;
        Ok((buf, mr))
    }

    fn xfer(
        &mut self,
        name: &str,
        op: &str,
        lg: bool,
        rg: bool,
        path: RegPath,
    ) -> Result<(String, f64), CaseResult> {
        let len = self.args.xfer_size;
        let (mut lbuf, lmr) = self.local_buf(name, lg, path, len)?;
        let peer_err = |e: peer::PeerError| {
            let cause = match e.errno() {
                Some(n) => causes::registration(
                    if rg { MemKind::Cuda } else { MemKind::Host },
                    RegPath::VaMr,
                    Some(n),
                    len,
                    &NodeFacts::default(),
                ),
                None => "peer failed".to_string(),
            };
            CaseResult::fail(name, e.to_string(), cause)
        };
        let rbuf: RemoteBuf = self
            .peer
            .as_mut()
            .ok_or_else(|| CaseResult::skip(name, "no peer"))?
            .alloc(len, !rg)
            .map_err(peer_err)?;
        let mut ep = self.connect(8).map_err(|mut r| {
            r.name = name.into();
            r
        })?;
        let seed = self.seed ^ (len << 8) ^ op.len() as u64;
        let peer = self
            .peer
            .as_mut()
            .ok_or_else(|| CaseResult::skip(name, "no peer"))?;
        let mut x = Xfer {
            name,
            ep: &mut ep,
            peer,
            lbuf: lbuf.as_mut(),
            lkey: lmr.lkey(),
            rbuf,
        };
        // The whole buffer, then a range at offsets not aligned to pages on either side.
        let us = x.once(op, 0, 0, len, seed)?;
        let mut detail = format!("{len} bytes ({us:.0} us)");
        if len > 8192 {
            let (lo, ro, l) = (3, 4099, len - 8192);
            x.once(op, lo, ro, l, seed.rotate_left(17))?;
            detail.push_str(&format!(" + {l} bytes at offsets {lo} -> {ro}"));
        }
        let _ = x.peer.unit(Req::Drop { id: rbuf.id });
        drop(lmr);
        Ok((format!("{detail}, pattern verified at the destination"), us))
    }
}

/// One data-integrity transfer between a local MR and a peer buffer.
struct Xfer<'a> {
    name: &'a str,
    ep: &'a mut Endpoint,
    peer: &'a mut Peer,
    lbuf: &'a mut dyn Buffer,
    lkey: u32,
    rbuf: RemoteBuf,
}

impl Xfer<'_> {
    fn fail(&self, d: String, c: impl Into<String>) -> CaseResult {
        CaseResult::fail(self.name, d, c)
    }

    /// Moves `len` bytes between local offset `lo` and remote offset `ro` with `op`, then checks
    /// the pattern (keyed by the remote offsets) at the destination. Returns microseconds (the
    /// post to the completion, see [`Transfer`]).
    fn once(&mut self, op: &str, lo: u64, ro: u64, len: u64, seed: u64) -> Result<f64, CaseResult> {
        let (rkey, raddr) = (self.rbuf.rkey, self.rbuf.addr + ro);
        let imm = 0x5eed_0000 | (ro as u32 & 0xffff);
        let opv = match op {
            "write" => Op::Write { rkey, raddr },
            "write-imm" => Op::WriteImm { rkey, raddr, imm },
            "read" => Op::Read { rkey, raddr },
            _ => Op::Send,
        };
        let id = self.rbuf.id;
        if op == "read" {
            self.peer
                .unit(Req::Fill {
                    id,
                    off: ro,
                    len,
                    seed,
                })
                .map_err(|e| self.fail(e.to_string(), "peer could not fill its buffer"))?;
        } else {
            let p = pattern::generate(seed, ro, len as usize);
            self.lbuf
                .write(lo as usize, &p)
                .map_err(|e| self.fail(e.to_string(), "could not fill the local buffer"))?;
        }
        if matches!(op, "write-imm" | "send-recv") {
            let rlen = if op == "send-recv" { len } else { 0 };
            self.peer
                .unit(Req::PostRecv {
                    id,
                    off: ro,
                    len: rlen,
                    count: 1,
                })
                .map_err(|e| self.fail(e.to_string(), "peer could not post a receive"))?;
        }
        let t = Instant::now();
        self.ep
            .post(opv, 7, self.lkey, self.lbuf.addr() + lo, len)
            .map_err(|e| self.fail(e.to_string(), "post failed"))?;
        let cs = self.ep.poll(1, POLL).map_err(|e| {
            self.fail(
                e.to_string(),
                "no completion: the NIC never finished the request",
            )
        })?;
        if let Some(c) = cs.iter().find(|c| !c.ok()) {
            return Err(self.fail(
                format!(
                    "{} completed with '{}' (vendor err {:#x})",
                    opv.name(),
                    verbs::wc_status_name(c.status),
                    c.vendor_err
                ),
                causes::completion(c.status, false),
            ));
        }
        if matches!(op, "write-imm" | "send-recv") {
            let rc = self
                .peer
                .wait_recv(1, POLL.as_millis() as u64)
                .map_err(|e| self.fail(e.to_string(), "peer receive failed"))?;
            let Some(r) = rc.first() else {
                return Err(self.fail(
                    "no receive completion at the peer".into(),
                    "the peer's QP got nothing",
                ));
            };
            if !r.ok() {
                return Err(self.fail(
                    format!(
                        "peer receive completed with '{}'",
                        verbs::wc_status_name(r.status)
                    ),
                    causes::completion(r.status, false),
                ));
            }
            if op == "write-imm" && r.imm != imm {
                return Err(self.fail(
                    format!("immediate {:#x}, expected {imm:#x}", r.imm),
                    "immediate data corrupted",
                ));
            }
            if op == "send-recv" && r.byte_len as u64 != len {
                return Err(self.fail(
                    format!("received {} bytes, expected {len}", r.byte_len),
                    "message truncated",
                ));
            }
        }
        let us = t.elapsed().as_secs_f64() * 1e6;
        let mismatch = if op == "read" {
            let mut v = vec![0u8; len as usize];
            self.lbuf
                .read(lo as usize, &mut v)
                .map_err(|e| self.fail(e.to_string(), "could not read back"))?;
            pattern::first_mismatch(seed, ro, &v).map(|i| i as u64)
        } else {
            self.peer
                .verify(id, ro, len, seed)
                .map_err(|e| self.fail(e.to_string(), "peer could not verify"))?
        };
        if let Some(i) = mismatch {
            return Err(self.fail(
                format!("data mismatch at byte {i} of {len} (local offset {lo}, remote offset {ro})"),
                "payload corrupted between the NIC and memory (wrong DMA address or SGL trimming, PCIe ordering, IOMMU)",
            ));
        }
        Ok(us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_cover_every_pairing_once() {
        assert_eq!(
            direction_pairs(true, true),
            vec![(true, true), (true, false), (false, true)]
        );
        assert_eq!(direction_pairs(false, false), vec![(false, false)]);
        // Host client against a GPU server: host→GPU and host→host.
        assert_eq!(
            direction_pairs(false, true),
            vec![(false, true), (false, false)]
        );
        assert_eq!(
            direction_pairs(true, false),
            vec![(true, false), (false, false)]
        );
    }
}
