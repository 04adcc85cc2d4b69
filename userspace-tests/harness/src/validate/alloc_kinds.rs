//! The `mem.kind[...]` cases: every kind of GPU memory users register (`--alloc`), allocated as
//! their libraries allocate it, and what the CUDA driver says about it, against what is expected
//! of that kind and why. They need a GPU and no NIC; which kinds the peer-memory path and dma-buf
//! then register is the NIC's half (docs/validation.md, "Allocation kinds").

use super::Suite;
use crate::cli::MemKind;
use crate::mem::cuda::kinds::{AllocKind, KindProbe};
use crate::report::CaseResult;

/// What a kind is expected to show, and the source of that expectation.
pub struct Expect {
    /// `CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE`.
    pub rdma_capable: bool,
    /// A dma-buf export of the range (default mapping).
    pub dmabuf: bool,
    pub source: &'static str,
}

/// Where the expectations the CUDA documentation leaves open come from: what the driver did on the
/// GPU machine (bench-results/gpu/h200/: NVIDIA H200, open modules 580.159.04, CUDA driver API 13.0).
const RECORDED: &str = "recorded on an H200 with driver 580.159.04 (bench-results/gpu/h200/)";

/// Why NVIDIA's P2P API pins some kinds and refuses the others ([`AllocKind::p2p_registered`]),
/// as the `reg.kind[...]` cases on the bench's emulator model it.
#[cfg(feature = "bench")]
pub const P2P_SOURCE: &str = "nvidia_p2p_get_pages pins only video memory the CUDA driver \
     registered with RM's third-party P2P object: RM looks the address up \
     (CliGetThirdPartyP2PVidmemInfoFromAddress, open-gpu-kernel-modules \
     src/nvidia/src/kernel/gpu/bus/third_party_p2p.c) and the call fails with -EINVAL where it \
     finds none; the kinds registered are taken to be the GPUDirect RDMA capable ones (derived \
     from the attribute, not yet seen on a NIC)";

/// The expectations, per kind.
pub fn expect(kind: AllocKind) -> Expect {
    match kind {
        AllocKind::MemAlloc => Expect {
            rdma_capable: true,
            dmabuf: true,
            source: "CUDA driver API: cuMemAlloc memory is the memory GPUDirect RDMA (nv-p2p.h) and \
                     cuMemGetHandleForAddressRange export",
        },
        AllocKind::Pool => Expect {
            rdma_capable: false,
            dmabuf: true,
            source: "the device's default pool sets no gpuDirectRDMACapable (CUmemPoolProps, CUDA \
                     13.x); its memory exports as a dma-buf: recorded on an H200 with driver \
                     580.159.04 (bench-results/gpu/h200/)",
        },
        AllocKind::VmmRdma => Expect {
            rdma_capable: true,
            dmabuf: true,
            source: "CUDA driver API, CUmemAllocationProp::allocFlags.gpuDirectRDMACapable (on devices \
                     with GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED); dma-buf: recorded on an H200 with \
                     driver 580.159.04 (bench-results/gpu/h200/)",
        },
        AllocKind::Vmm => Expect {
            rdma_capable: false,
            dmabuf: true,
            source: "CUDA driver API, CUmemAllocationProp::allocFlags.gpuDirectRDMACapable not set: \
                     not GPUDirect RDMA capable, though it exports as a dma-buf (recorded on an H200 \
                     with driver 580.159.04, bench-results/gpu/h200/)",
        },
        AllocKind::Managed => Expect {
            rdma_capable: false,
            dmabuf: false,
            source: RECORDED,
        },
        AllocKind::HostPinned => Expect {
            rdma_capable: false,
            dmabuf: false,
            source: "host memory (CU_MEMORYTYPE_HOST) is registered by the NIC as host memory, not \
                     through GPUDirect RDMA; no dma-buf: recorded on an H200 with driver 580.159.04 \
                     (bench-results/gpu/h200/)",
        },
    }
}

fn yes_no(r: &Result<bool, String>) -> String {
    match r {
        Ok(true) => "yes".into(),
        Ok(false) => "no".into(),
        Err(e) => format!("? ({e})"),
    }
}

fn ok_text(r: &Result<(), String>) -> String {
    match r {
        Ok(()) => "yes".into(),
        Err(e) => format!("no ({e})"),
    }
}

/// The verdict of one probe against its expectation.
pub fn judge(p: &KindProbe, e: &Expect) -> CaseResult {
    let name = format!("mem.kind[{}]", p.kind);
    if let Err(err) = &p.alloc {
        return CaseResult::fail(
            &name,
            format!("{}: {err}", p.kind.call()),
            "the driver refused this kind of allocation",
        );
    }
    let detail = format!(
        "{} of {} bytes: memory type {}, GPUDirect RDMA capable {}, dma-buf {}, dma-buf (PCIe mapping) {}, pattern read back {}",
        p.kind.call(),
        p.size,
        p.memory_type.map(|t| format!("{t:?}").to_lowercase()).unwrap_or_else(|| "?".into()),
        yes_no(&p.rdma_capable),
        ok_text(&p.dmabuf),
        ok_text(&p.dmabuf_pcie),
        ok_text(&p.roundtrip),
    );
    let mut surprises = vec![];
    let yes = |b: bool| if b { "yes" } else { "no" };
    if p.rdma_capable.as_ref().ok() != Some(&e.rdma_capable) {
        surprises.push(format!(
            "GPUDirect RDMA capable: expected {}",
            yes(e.rdma_capable)
        ));
    }
    if p.dmabuf.is_ok() != e.dmabuf {
        surprises.push(format!("dma-buf export: expected {}", yes(e.dmabuf)));
    }
    if let Err(err) = &p.roundtrip {
        surprises.push(format!("pattern not read back: {err}"));
    }
    if let Err(err) = &p.free {
        surprises.push(format!("free failed: {err}"));
    }
    if surprises.is_empty() {
        CaseResult::pass(&name, format!("{detail} (expected: {})", e.source))
    } else {
        CaseResult::fail(
            &name,
            format!("{detail}; {}", surprises.join("; ")),
            format!("the driver differs from {}", e.source),
        )
    }
}

impl Suite {
    pub(super) fn kind_cases(&mut self) {
        // (CUDA memory only: the other backends have one kind of memory each)
        if !matches!(self.args.common.mem, MemKind::Cuda | MemKind::CudaDmabuf) {
            return;
        }
        let kinds = self.args.alloc.clone();
        let size = self.args.max_size.min(64 << 20) as usize;
        for kind in kinds {
            let name = format!("mem.kind[{kind}]");
            self.case(&name, |s| {
                let Some(be) = s.backend.clone() else {
                    return CaseResult::skip(&name, "no memory backend");
                };
                match be.probe_kind(kind, size, s.seed) {
                    Some(p) => judge(&p, &expect(kind)),
                    None => CaseResult::fail(
                        &name,
                        format!("--mem {} cannot allocate kinds", be.kind()),
                        "a memory backend without kinds was opened for CUDA memory",
                    ),
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kinds the emulator lets NVIDIA's API pin are the kinds the CUDA side expects to be
    /// GPUDirect RDMA capable.
    #[test]
    fn p2p_registration_follows_the_rdma_capable_attribute() {
        for k in AllocKind::ALL {
            assert_eq!(k.p2p_registered(), expect(k).rdma_capable, "{k}");
        }
    }
    use crate::mem::cuda::kinds::MemoryType;
    use crate::report::Status;

    fn probe(kind: AllocKind, rdma: bool, dmabuf: bool) -> KindProbe {
        KindProbe {
            kind,
            size: 4096,
            alloc: Ok(()),
            memory_type: Some(MemoryType::Device),
            rdma_capable: Ok(rdma),
            dmabuf: if dmabuf {
                Ok(())
            } else {
                Err("invalid argument".into())
            },
            dmabuf_pcie: Err("operation not supported".into()),
            roundtrip: Ok(()),
            free: Ok(()),
        }
    }

    #[test]
    fn expected_is_a_pass_with_its_source() {
        for kind in AllocKind::ALL {
            let e = expect(kind);
            let r = judge(&probe(kind, e.rdma_capable, e.dmabuf), &e);
            assert_eq!(r.status, Status::Pass, "{kind}: {}", r.detail);
            assert!(r.detail.contains(e.source), "{kind}");
        }
    }

    #[test]
    fn a_surprise_either_way_fails() {
        let e = expect(AllocKind::Vmm);
        let r = judge(&probe(AllocKind::Vmm, true, e.dmabuf), &e);
        assert_eq!(r.status, Status::Fail);
        assert!(
            r.detail.contains("GPUDirect RDMA capable: expected no"),
            "{}",
            r.detail
        );
        let e = expect(AllocKind::MemAlloc);
        let r = judge(&probe(AllocKind::MemAlloc, true, false), &e);
        assert_eq!(r.status, Status::Fail);
        assert!(
            r.detail.contains("dma-buf export: expected yes"),
            "{}",
            r.detail
        );
    }

    #[test]
    fn a_refused_allocation_or_lost_data_fails() {
        let e = expect(AllocKind::Pool);
        let mut p = probe(AllocKind::Pool, e.rdma_capable, e.dmabuf);
        p.alloc = Err("out of memory".into());
        let r = judge(&p, &e);
        assert_eq!(r.status, Status::Fail);
        assert!(
            r.detail.contains("cuMemAllocFromPoolAsync: out of memory"),
            "{}",
            r.detail
        );
        let mut p = probe(AllocKind::Pool, e.rdma_capable, e.dmabuf);
        p.roundtrip = Err("pattern mismatch at byte 7".into());
        assert_eq!(judge(&p, &e).status, Status::Fail);
    }
}
