//! The `reg.kind[KIND][peer_mem_emu]` cases (the bench's build, `--mem emu`): every `--alloc`
//! kind registered through the emulated core and the loaded peer client, the provider emulator
//! modelling what NVIDIA's P2P API does with that kind (`NVP2P_EMU_ALLOC_NO_P2P`). The kinds
//! NVIDIA's driver pins must register; the others must be refused by the provider's get_pages,
//! declined by the client, and leave no pin behind (docs/validation.md, "Allocation kinds").

use super::alloc_kinds::P2P_SOURCE;
use super::Suite;
use crate::causes;
use crate::cli::MemKind;
use crate::mem::cuda::kinds::AllocKind;
use crate::mem::emu::{state, EmuBackend};
use crate::reg::RegPath;
use crate::report::CaseResult;

/// Bytes registered per kind: 16 GPU pages.
const LEN: usize = 1 << 20;

/// `get_pages` and `get_pages_persistent` calls the provider failed, from its counters (the
/// indices of `nvpeer_emu::nvp2p::OPS`).
fn get_pages_failures(s: &nvpeer_emu::nvp2p::abi::Stats) -> u64 {
    s.failures[0] + s.failures[1]
}

impl Suite {
    pub(super) fn emu_kind_cases(&mut self) {
        if self.args.common.mem != MemKind::Emu {
            return;
        }
        for kind in self.args.alloc.clone() {
            let name = format!("reg.kind[{kind}][{}]", RegPath::EmuCore.label());
            self.case(&name.clone(), |s| s.emu_kind(&name, kind));
        }
    }

    fn emu_kind(&mut self, name: &str, kind: AllocKind) -> CaseResult {
        if let Some(why) = self.no_regs(RegPath::EmuCore) {
            return CaseResult::skip(name, why);
        }
        let be = match EmuBackend::open() {
            Ok(b) => b,
            Err(e) => return CaseResult::fail(name, e.to_string(), "the provider emulator"),
        };
        let expected = kind.p2p_registered();
        let what = format!(
            "{} of {LEN} bytes (emulated as a range {} for P2P)",
            kind.call(),
            if expected {
                "the CUDA driver registered"
            } else {
                "never registered"
            }
        );
        let mut buf = match be.alloc_kind(kind, LEN) {
            Ok(b) => b,
            Err(e) => {
                return CaseResult::fail(name, e.to_string(), "the provider emulator's allocation")
            }
        };
        let before = be.provider_stats().ok();
        let reg = self.registrar(RegPath::EmuCore);
        let verdict = match reg.register(buf.as_ref(), 0, LEN) {
            Ok(mr) => {
                let mapped = mr
                    .emu()
                    .and_then(|m| m.query().ok())
                    .map(|q| q.state == state::MAPPED);
                drop(mr);
                if !expected {
                    CaseResult::fail(
                        name,
                        format!("{what}: registered through the peer client"),
                        "memory NVIDIA's driver does not pin was registered: get_pages let the \
                         range through, or the registration did not go through get_pages",
                    )
                } else if mapped != Some(true) {
                    CaseResult::fail(
                        name,
                        format!("{what}: registered, but the MR is not mapped ({mapped:?})"),
                        "the core did not map what the client pinned",
                    )
                } else {
                    CaseResult::pass(
                        name,
                        format!(
                            "{what}: registered through the peer client, mapped, deregistered \
                             (expected: {P2P_SOURCE})"
                        ),
                    )
                }
            }
            Err(e) => {
                let refusals = match (&before, be.provider_stats().ok()) {
                    (Some(b), Some(a)) => {
                        Some(get_pages_failures(&a).saturating_sub(get_pages_failures(b)))
                    }
                    _ => None,
                };
                if expected {
                    CaseResult::fail(
                        name,
                        format!("{what}: {}", e.msg),
                        causes::registration(
                            self.args.common.mem,
                            RegPath::EmuCore,
                            e.errno,
                            LEN as u64,
                            &self.facts,
                        ),
                    )
                } else if refusals.is_none() {
                    CaseResult::fail(
                        name,
                        format!(
                            "{what}: refused ({}), but the provider's counters were not readable",
                            e.msg
                        ),
                        "cannot tell that NVIDIA's get_pages refused it, not something before it",
                    )
                } else if refusals == Some(0) {
                    CaseResult::fail(
                        name,
                        format!(
                            "{what}: refused ({}), but no get_pages call failed in the provider",
                            e.msg
                        ),
                        "the registration failed before the peer client asked NVIDIA's API: not \
                         the refusal the driver gives",
                    )
                } else {
                    let n = refusals.unwrap_or(0);
                    CaseResult::pass(
                        name,
                        format!(
                            "{what}: refused, as NVIDIA's driver refuses it: {} (get_pages failed \
                             in the provider {n} time(s); the client declined the range and the \
                             core's fallback to host pages failed) (expected: {P2P_SOURCE})",
                            e.msg
                        ),
                    )
                }
            }
        };
        // Whatever the verdict, the registration's end leaves no pin on the allocation.
        let pins = be.pins_at(buf.addr());
        let freed = buf.release();
        match (pins, freed) {
            (Ok(0), Ok(())) => verdict,
            (Ok(0), Err(e)) | (Err(e), _) => CaseResult::fail(
                name,
                format!("{}; the provider emulator: {e}", verdict.detail),
                "cannot check or free the allocation",
            ),
            (Ok(n), _) => CaseResult::fail(
                name,
                format!("{}; {n} pin(s) left on the allocation", verdict.detail),
                "a pin outlived its registration (leak)",
            ),
        }
    }
}
