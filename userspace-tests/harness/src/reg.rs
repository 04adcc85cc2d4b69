//! Memory registration over the three paths the harness compares: `ibv_reg_mr` on a VA (host
//! memory, or GPU memory through the peer-memory core), `ibv_reg_dmabuf_mr` on an exported
//! dma-buf, and the bench's emulated core (`/dev/peer_mem_emu`).

#[cfg(feature = "bench")]
use crate::mem::emu::{EmuCore, EmuMr};
use crate::mem::Buffer;
use crate::verbs::access;
use serde::Serialize;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use std::sync::Arc;

/// How a buffer is registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RegPath {
    /// `ibv_reg_mr` on the buffer's VA (host pages by GUP; GPU pages through a peer client).
    VaMr,
    /// `ibv_reg_dmabuf_mr` on the buffer's dma-buf.
    DmaBuf,
    /// The core emulator's consumer (test bench builds only: feature `bench`).
    #[cfg(feature = "bench")]
    EmuCore,
}

impl RegPath {
    pub fn label(self) -> &'static str {
        match self {
            RegPath::VaMr => "ibv_reg_mr",
            RegPath::DmaBuf => "ibv_reg_dmabuf_mr",
            #[cfg(feature = "bench")]
            RegPath::EmuCore => "peer_mem_emu",
        }
    }

    /// Whether this is the bench's emulated core (never, in a build without the bench).
    pub fn is_emu_core(self) -> bool {
        #[cfg(feature = "bench")]
        return self == RegPath::EmuCore;
        #[cfg(not(feature = "bench"))]
        false
    }
}

/// A failed registration with the errno behind it.
#[derive(Debug, Clone)]
pub struct RegFailure {
    pub errno: Option<i32>,
    pub msg: String,
}

impl std::fmt::Display for RegFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

enum Handle {
    Verbs(Arc<MemoryRegion>),
    #[cfg(feature = "bench")]
    Emu(EmuMr),
}

/// A live registration; deregistered on drop.
pub struct Mr {
    handle: Handle,
    pub addr: u64,
    pub len: usize,
}

impl Mr {
    pub fn lkey(&self) -> u32 {
        match &self.handle {
            Handle::Verbs(m) => m.lkey(),
            #[cfg(feature = "bench")]
            Handle::Emu(_) => 0,
        }
    }
    pub fn rkey(&self) -> u32 {
        match &self.handle {
            Handle::Verbs(m) => m.rkey(),
            #[cfg(feature = "bench")]
            Handle::Emu(_) => 0,
        }
    }
    /// The emulated-core registration, for state queries.
    #[cfg(feature = "bench")]
    pub fn emu(&self) -> Option<&EmuMr> {
        match &self.handle {
            Handle::Emu(e) => Some(e),
            Handle::Verbs(_) => None,
        }
    }
    /// Deregisters now (same as dropping).
    pub fn dereg(self) {}
}

/// The emulated core's handle in a test-bench build (feature `bench`).
#[cfg(feature = "bench")]
pub type EmuCoreHandle = EmuCore;
/// The emulated core's handle: none can exist in a build without the test bench.
#[cfg(not(feature = "bench"))]
#[derive(Clone)]
pub enum EmuCoreHandle {}

/// What registrations need: a protection domain, or the emulated core.
#[derive(Clone)]
pub struct Registrar {
    pub pd: Option<Arc<ProtectionDomain>>,
    pub core: Option<EmuCoreHandle>,
    pub path: RegPath,
    /// Register with PCIe relaxed ordering (`nvpeer bench` unless `--disable_pcie_relaxed`, as
    /// perftest); validate's cases register strictly ordered.
    pub relaxed: bool,
}

impl Registrar {
    /// Registers `len` bytes of `buf` starting at byte `off`.
    pub fn register(&self, buf: &dyn Buffer, off: usize, len: usize) -> Result<Mr, RegFailure> {
        if off.checked_add(len).is_none_or(|e| e > buf.len()) {
            return Err(RegFailure {
                errno: Some(libc::EINVAL),
                msg: format!("range {off}+{len} outside the buffer"),
            });
        }
        let addr = buf.addr() + off as u64;
        let fail = |what: &str, e: &(dyn std::error::Error + 'static)| {
            let errno = crate::verbs::errno_of(e);
            let detail = errno
                .map(|n| std::io::Error::from_raw_os_error(n).to_string())
                .unwrap_or_else(|| e.to_string());
            RegFailure {
                errno,
                msg: format!("{what} failed: {detail}"),
            }
        };
        match self.path {
            RegPath::VaMr => {
                let pd = self.pd.as_ref().ok_or_else(no_pd)?;
                // SAFETY: the range lies inside `buf`, which the caller keeps alive (or frees on
                // purpose, in invalidation cases) while the MR exists; the kernel validates it.
                let mr = unsafe { pd.reg_mr(addr as usize, len, access(self.relaxed)) }
                    .map_err(|e| fail("ibv_reg_mr", &e))?;
                Ok(Mr {
                    handle: Handle::Verbs(mr),
                    addr,
                    len,
                })
            }
            RegPath::DmaBuf => {
                let pd = self.pd.as_ref().ok_or_else(no_pd)?;
                let d = buf.dmabuf().ok_or_else(|| RegFailure {
                    errno: Some(libc::EBADF),
                    msg: "buffer has no dma-buf (use --mem cuda-dmabuf)".into(),
                })?;
                // SAFETY: fd is owned by the buffer and open; offset/len lie inside the export.
                let mr = unsafe {
                    pd.reg_dmabuf_mr(d.offset + off as u64, len, addr, d.fd, access(self.relaxed))
                }
                .map_err(|e| fail("ibv_reg_dmabuf_mr", &e))?;
                Ok(Mr {
                    handle: Handle::Verbs(mr),
                    addr,
                    len,
                })
            }
            #[cfg(feature = "bench")]
            RegPath::EmuCore => {
                let core = self.core.as_ref().ok_or_else(|| RegFailure {
                    errno: Some(libc::ENODEV),
                    msg: "peer_mem_emu is not loaded (modprobe peer_mem_emu)".into(),
                })?;
                let mr = core.register(addr, len as u64).map_err(|e| RegFailure {
                    errno: e.errno(),
                    msg: e.to_string(),
                })?;
                Ok(Mr {
                    handle: Handle::Emu(mr),
                    addr,
                    len,
                })
            }
        }
    }
}

fn no_pd() -> RegFailure {
    RegFailure {
        errno: Some(libc::ENODEV),
        msg: "no RDMA device".into(),
    }
}
