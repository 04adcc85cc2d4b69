//! Invalidation (`inval.*`): freeing memory under a live MR, idle and with transfers in flight.

use super::after_free::{AfterFree, Landed, PostAfterFree};
use super::peer_path::{self, Snapshot};
use super::{Suite, POLL};

use crate::peer::Req;
use crate::reg::RegPath;
use crate::report::CaseResult;
use crate::verbs::Op;

/// The work request posted on the MR after the free (the in-flight batch's are 0..32).
const AFTER_FREE_WR: u64 = 999;

impl Suite {
    /// NVIDIA free callbacks the peer client counted since `before` (`num_free_callbacks` of the
    /// core's counters, or nvpeer's `callbacks`); `None` when nothing here counts them.
    fn callbacks_since(&self, before: &Option<Snapshot>) -> Option<u64> {
        let after = self.counters()?;
        peer_path::moved(before.as_ref()?, &after).map(|m| m.callbacks)
    }

    pub(super) fn inval_cases(&mut self, path: RegPath) {
        for inflight in [false, true] {
            let name = format!(
                "inval.{}[{}]",
                if inflight {
                    "free-inflight"
                } else {
                    "free-idle"
                },
                path.label()
            );
            self.case(&name.clone(), |s| {
                if !s.gpu() {
                    return CaseResult::skip(&name, "host memory stays pinned by its MR; invalidation applies to GPU memory");
                }
                if let Some(w) = s.no_regs(path) {
                    return CaseResult::skip(&name, w);
                }
                #[cfg(feature = "bench")]
                if path == RegPath::EmuCore {
                    if inflight {
                        return CaseResult::skip(&name, "no DMA engine behind the emulated core; see the emulator scenario suites");
                    }
                    return s.inval_emu(&name);
                }
                match s.inval_verbs(&name, path, inflight) {
                    Ok(r) | Err(r) => r,
                }
            });
        }
    }

    #[cfg(feature = "bench")]
    fn inval_emu(&mut self, name: &str) -> CaseResult {
        let reg = self.registrar(RegPath::EmuCore);
        let mut buf = match self.alloc(1 << 20) {
            Ok(b) => b,
            Err(e) => return CaseResult::fail(name, e.to_string(), "allocation failed"),
        };
        let before = self.counters();
        let mr = match self.try_reg(name, &reg, buf.as_ref(), 4096, 300_000) {
            Ok(m) => m,
            Err(r) => return r,
        };
        if let Err(e) = buf.release() {
            return CaseResult::fail(name, e.to_string(), "emulated cudaFree failed");
        }
        let q = match mr.emu().map(|m| m.query()) {
            Some(Ok(q)) => q,
            Some(Err(e)) => return CaseResult::fail(name, e.to_string(), "cannot query the MR"),
            None => return CaseResult::fail(name, "not an emulated MR", "internal"),
        };
        use crate::mem::emu::{qflags, state};
        let stopped = q.state != state::MAPPED || q.flags & qflags::REVOKED != 0;
        // What the case expects comes from what the loaded module publishes (as on a real node,
        // where no emulator tells); the emulated core's record of the client that took the MR
        // is checked against it.
        let registered_invalidating = q.flags & qflags::INVALIDATING != 0;
        let (invalidating, mode) = match self.facts.persistent {
            Some(persistent) if persistent == registered_invalidating => {
                return CaseResult::fail(
                    name,
                    format!(
                        "the loaded module publishes persistent_api_support={}, but the core \
                         registered the MR with {} client",
                        u8::from(persistent),
                        if registered_invalidating {
                            "an invalidating"
                        } else {
                            "a persistent"
                        }
                    ),
                    "the client mode the module publishes is not the one it registered",
                );
            }
            Some(persistent) => (
                !persistent,
                format!(
                    "client mode from the loaded module: persistent_api_support={}",
                    u8::from(persistent)
                ),
            ),
            None => (
                registered_invalidating,
                "client mode not published (no nvpeer debugfs config or persistent_api_support \
                 parameter): taken from the emulated core"
                    .to_string(),
            ),
        };
        drop(mr);
        let cb = self.callbacks_since(&before).unwrap_or(0);
        if !invalidating {
            // A persistent client: the provider keeps the pages until the pin is put at dereg.
            if q.state != state::MAPPED {
                return CaseResult::fail(
                    name,
                    format!(
                        "persistent registration became {} after free",
                        state::name(q.state)
                    ),
                    "a client without an invalidate callback had its MR torn down",
                );
            }
            return CaseResult::pass(name, format!("persistent client: the MR stays mapped after the free (pages pinned until dereg, by design), num_free_callbacks +{cb}, dereg afterwards ok; {mode}"));
        }
        if !stopped {
            return CaseResult::fail(
                name,
                format!(
                    "MR still {} after free (flags {:#x})",
                    state::name(q.state),
                    q.flags
                ),
                "the peer client did not invalidate on the free callback",
            );
        }
        if cb == 0 && self.facts.peer_sysfs {
            return CaseResult::fail(
                name,
                "num_free_callbacks did not move",
                "the client did not call the core's invalidate from the free callback",
            );
        }
        if !self.facts.peer_sysfs && q.invalidations == 0 {
            return CaseResult::fail(
                name,
                format!(
                    "MR {} after free but the core saw no invalidation",
                    state::name(q.state)
                ),
                "the client did not call the core's invalidate from the free callback",
            );
        }
        let cbs = if self.facts.peer_sysfs {
            format!(", num_free_callbacks +{cb}")
        } else {
            " (this core keeps no counters in sysfs)".into()
        };
        CaseResult::pass(
            name,
            format!(
                "freed under a live MR: state {}, {} invalidation(s){cbs}, dereg afterwards ok; {mode}",
                state::name(q.state),
                q.invalidations
            ),
        )
    }

    fn inval_verbs(
        &mut self,
        name: &str,
        path: RegPath,
        inflight: bool,
    ) -> Result<CaseResult, CaseResult> {
        let len = self.args.xfer_size;
        let fail = |d: String, c: &str| CaseResult::fail(name, d, c);
        let (mut lbuf, lmr) = self.local_buf(name, true, path, len)?;
        let rbuf = self
            .peer
            .as_mut()
            .ok_or_else(|| CaseResult::skip(name, "no peer"))?
            .alloc(len, true)
            .map_err(|e| fail(e.to_string(), "peer alloc failed"))?;
        let n_inflight: u32 = if inflight { 32 } else { 0 };
        let mut ep = self.connect(n_inflight + 8).map_err(|mut r| {
            r.name = name.into();
            r
        })?;
        let before = self.counters();
        let op = Op::Write {
            rkey: rbuf.rkey,
            raddr: rbuf.addr,
        };
        for i in 0..n_inflight {
            ep.post(op, i as u64, lmr.lkey(), lbuf.addr(), len)
                .map_err(|e| fail(e.to_string(), "post failed"))?;
        }
        // Free the GPU memory under the live MR (and, in-flight, under queued DMA).
        lbuf.release()
            .map_err(|e| fail(e.to_string(), "cuMemFree failed"))?;
        // (a poll that saw none of them in POLL leaves the batch short: AfterFree says how many
        // of those posted completed)
        let mut seen = Vec::new();
        if inflight {
            seen = ep.poll(n_inflight as usize, POLL).unwrap_or_default();
        }
        // The destination gets a known pattern, so that any byte the NIC still moves from the
        // freed MR shows up.
        let seed = self.seed ^ 0xf7ee_af7e;
        let filled = self.peer.as_mut().map(|p| {
            p.unit(Req::Fill {
                id: rbuf.id,
                off: 0,
                len,
                seed,
            })
        });
        // The MR must stop working: a new transfer from it must not succeed.
        let post = PostAfterFree::wait(
            &mut ep,
            (op, AFTER_FREE_WR),
            (lmr.lkey(), lmr.addr, len),
            &mut seen,
        );
        let landed = match (filled, self.peer.as_mut()) {
            (Some(Ok(())), Some(p)) => match p.verify(rbuf.id, 0, len, seed) {
                Ok(None) => Landed::Untouched,
                Ok(Some(at)) => Landed::Changed(at),
                Err(e) => Landed::Unknown(format!("the peer could not check: {e}")),
            },
            (Some(Err(e)), _) => Landed::Unknown(format!("the peer could not fill: {e}")),
            _ => Landed::Unknown("no peer".into()),
        };
        drop(lmr);
        let _ = self
            .peer
            .as_mut()
            .map(|p| p.unit(Req::Drop { id: rbuf.id }));
        let cb = self.callbacks_since(&before);
        let seen = AfterFree {
            inflight_posted: n_inflight,
            inflight: seen,
            post,
            landed,
        };
        Ok(self.verdict(name, path, &seen, cb))
    }

    /// The verdict on what the NIC did after the free (`seen`), given the free callbacks the peer
    /// client counted (`cb`).
    fn verdict(&self, name: &str, path: RegPath, seen: &AfterFree, cb: Option<u64>) -> CaseResult {
        let fail = |d: String, c: &str| CaseResult::fail(name, d, c);
        let what = seen.text();
        let cbs = cb
            .map(|c| format!("; free callbacks counted by the peer client +{c}"))
            .unwrap_or_default();
        if let PostAfterFree::NoCompletion(_) = seen.post {
            return fail(
                format!("{what}{cbs}"),
                "the NIC neither completed nor failed a request on a revoked or freed MR: the QP \
                 is stuck (expected: the post refused, or a completion with an error such as \
                 'local protection error'); look at the driver's handling of invalidated MRs",
            );
        }
        if seen.kept_working() {
            return match path {
                RegPath::DmaBuf => CaseResult::pass(
                    name,
                    format!("{what}: the dma-buf importer keeps the pages until dereg (no revoke, by design){cbs}; process alive"),
                ),
                _ if self.facts.persistent == Some(true) => CaseResult::pass(
                    name,
                    format!("{what}: persistent client (persistent_api_support=1) keeps the pages pinned until dereg, by design{cbs}; process alive"),
                ),
                _ if self.facts.persistent.is_none() => CaseResult::skip(
                    name,
                    format!("{what}, and the client mode is unknown: a persistent client \
                             keeps the pages by design, an invalidating one must revoke; nothing published it (nvpeer's \
                             debugfs config needs debugfs mounted and root, NVIDIA's module its persistent_api_support \
                             parameter), so this case cannot judge"),
                ),
                _ => fail(
                    format!("{what}{cbs}"),
                    "the MR kept working on freed GPU memory: the peer client did not invalidate, or the NIC \
                     did not honour the invalidation (the NIC may DMA into reused memory); expected only for \
                     a persistent client (persistent_api_support=1)",
                ),
            };
        }
        if let Landed::Changed(_) = seen.landed {
            return fail(
                format!("{what}{cbs}"),
                "the request failed, but the NIC had already fetched from the freed pages and sent \
                 them: the MR's translation must be gone before the free callback returns (the \
                 driver's invalidate must fence in-flight DMA)",
            );
        }
        if self.counted(path) && cb == Some(0) {
            return fail(
                format!("{what}, but no free callback was counted"),
                "revocation happened outside the peer client's free callback",
            );
        }
        CaseResult::pass(
            name,
            format!("{what}: the MR stopped working after the free{cbs}; process alive, dereg ok"),
        )
    }
}
