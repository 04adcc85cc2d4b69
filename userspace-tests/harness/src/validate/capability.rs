//! The `cap.*` cases: the prerequisites every other case needs (memory backend, RDMA device,
//! dma-buf support, the peer client). A failed one blocks the rest of the suite.

use super::Suite;
use crate::causes;
use crate::cli::MemKind;
use crate::mem::{self, MemError};
use crate::reg::RegPath;
use crate::report::CaseResult;
use crate::sysfs::NodeFacts;
use crate::verbs::Device;
use nvpeer_uapi::memory_peers;
use std::path::Path;
use std::rc::Rc;

fn errno_text(e: Option<i32>) -> String {
    match e {
        Some(n) => std::io::Error::from_raw_os_error(n).to_string(),
        None => "no errno".into(),
    }
}

impl Suite {
    pub(super) fn cap_memory(&mut self) {
        let kind = self.args.common.mem;
        let gpu = self.args.common.gpu.clone();
        let both = self.args.both_paths;
        self.case("cap.memory", |s| {
            let open = if kind == MemKind::Cuda && both { mem::open(MemKind::CudaDmabuf, &gpu) } else { mem::open(kind, &gpu) };
            match open {
                Ok(b) => {
                    let facts = b.facts();
                    let d = facts.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ");
                    s.info.extend(facts);
                    s.backend = Some(Rc::from(b));
                    CaseResult::pass("cap.memory", format!("{kind}: {d}"))
                }
                Err(e) => {
                    let cause = match &e {
                        MemError::NoLibcuda => "install the NVIDIA driver (libcuda.so.1 comes with it)".to_string(),
                        MemError::NoSuchGpu(..) => "pick another --gpu (index or PCI bus id from nvidia-smi)".into(),
                        MemError::Os { .. } if kind.is_emu() => {
                            "load the bench emulators: modprobe nvp2p_emu peer_mem_emu".into()
                        }
                        MemError::Unsupported(m) if m.contains("DMA_BUF") => {
                            "dma-buf export needs the open NVIDIA kernel modules (>= 515) and a recent kernel".into()
                        }
                        _ => "see the message".into(),
                    };
                    CaseResult::fail("cap.memory", e.to_string(), cause)
                }
            }
        });
        #[cfg(feature = "bench")]
        if self.args.common.mem == MemKind::Emu {
            if let Ok(b) = mem::emu::EmuBackend::open() {
                self.emu_core = b.core();
            }
        }
    }

    pub(super) fn cap_device(&mut self) {
        let c = self.args.common.clone();
        let needs = !self.args.common.mem.is_emu() || c.ib_dev.is_some();
        self.case("cap.rdma-device", |s| {
            match Device::open(c.ib_dev.as_deref(), c.ib_port, c.gid_index) {
                Ok(d) => {
                    let detail = format!(
                        "{} port {} {} gid[{}]={} mtu={:?} max_mr_size={}",
                        d.name,
                        d.port,
                        d.link_layer,
                        d.gid_index,
                        sideway::ibverbs::address::Gid { raw: d.gid.raw },
                        d.mtu,
                        d.max_mr_size
                    );
                    // The port's line rate (speed × width), as `bench` judges bandwidth against
                    // it; validate's transfers are single messages, not a bandwidth figure.
                    let rate = match crate::line_rate::read(Path::new("/"), &d.name, d.port) {
                        Ok(r) => r.text,
                        Err(e) => format!("unknown ({e})"),
                    };
                    let detail = format!("{detail} line rate {rate}");
                    s.info.push(("line rate".into(), rate));
                    s.info.push(("rdma device".into(), d.name.clone()));
                    s.dev = Some(Rc::new(d));
                    CaseResult::pass("cap.rdma-device", detail)
                }
                Err(e) if !needs => CaseResult::skip(
                    "cap.rdma-device",
                    format!("{e} (not needed: --mem emu registers through peer_mem_emu)"),
                ),
                Err(e) => CaseResult::fail("cap.rdma-device", e.to_string(), causes::device(&e)),
            }
        });
    }

    pub(super) fn cap_dmabuf(&mut self) {
        let needed = self.paths().contains(&RegPath::DmaBuf);
        self.case("cap.dmabuf-import", |s| {
            let Some(d) = s.dev.as_ref() else {
                return CaseResult::skip("cap.dmabuf-import", "no RDMA device");
            };
            match d.dmabuf_probe() {
                Ok(()) => CaseResult::pass(
                    "cap.dmabuf-import",
                    "ibv_reg_dmabuf_mr(fd=-1) -> EBADF: kernel and provider import dma-bufs",
                ),
                Err(n) if needed => CaseResult::fail(
                    "cap.dmabuf-import",
                    format!("ibv_reg_dmabuf_mr(fd=-1) -> {}", errno_text(Some(n))),
                    causes::registration(
                        MemKind::CudaDmabuf,
                        RegPath::DmaBuf,
                        Some(n),
                        0,
                        &s.facts,
                    ),
                ),
                Err(n) => CaseResult::pass(
                    "cap.dmabuf-import",
                    format!(
                        "dma-buf import unsupported ({}); not needed for --mem {}",
                        errno_text(Some(n)),
                        s.args.common.mem
                    ),
                ),
            }
        });
    }

    pub(super) fn cap_peer_client(&mut self) {
        if !self.gpu() || !self.paths().iter().any(|p| *p != RegPath::DmaBuf) {
            return;
        }
        if !self.facts.peer_sysfs {
            self.case("cap.peer-client", |s| {
                let serving: Vec<&str> = s
                    .facts
                    .modules
                    .iter()
                    .map(String::as_str)
                    .filter(|m| matches!(*m, "nvpeer" | "nvidia_peermem" | "nv_peer_mem" | "classic_peer"))
                    .collect();
                if serving.is_empty() {
                    CaseResult::fail(
                        "cap.peer-client",
                        "no peer-memory module loaded (this core keeps no client list in sysfs)",
                        "load nvpeer: modprobe nvidia-peermem (NCCL/UCX/NVSHMEM look for /sys/module/nvidia_peermem)",
                    )
                } else {
                    CaseResult::pass(
                        "cap.peer-client",
                        format!(
                            "{} loaded; this core keeps no /sys/kernel/mm/memory_peers (DOCA-OFED on a kernel without the mm_kobj export): {}",
                            serving.join(", "),
                            s.proof.describe()
                        ),
                    )
                }
            });
            return;
        }
        self.case("cap.peer-client", |s| match memory_peers::main_client(Path::new("/")) {
            Some(c) => CaseResult::pass(
                "cap.peer-client",
                format!("/sys/kernel/mm/memory_peers/{}/version = {}", c.client, c.version),
            ),
            None => {
                let cause = if !s.facts.peer_api && !s.args.common.mem.is_emu() {
                    causes::registration(MemKind::Cuda, RegPath::VaMr, Some(libc::EFAULT), 0, &NodeFacts { peer_api: false, ..Default::default() })
                } else {
                    "no peer-memory client registered: load nvpeer (NCCL/UCX/NVSHMEM look for nv_mem)".into()
                };
                CaseResult::fail("cap.peer-client", "no client under /sys/kernel/mm/memory_peers", cause)
            }
        });
    }
}
