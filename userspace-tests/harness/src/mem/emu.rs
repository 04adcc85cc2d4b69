//! Emulated GPU memory from the bench's provider emulator (`/dev/nvp2p_emu`), registered through
//! the peer-memory core emulator's consumer (`/dev/peer_mem_emu`), which calls whatever peer client
//! is loaded (nvpeer, or the classic C baseline) exactly like `ib_umem_get_peer` would. Both
//! devices are driven through the `nvpeer-emu` crate (`userspace-tests/emu-ctl`).
//!
//! Upstream ib_core (and so rxe) has no peer-memory core, which is why registrations of this
//! backend do not go through `ibv_reg_mr`. Data cannot be moved with it (rxe cannot DMA into
//! emulated GPU pages), so only the registration and invalidation cases use it.

use super::{Backend, Buffer, MemError};
use crate::cli::MemKind;
use crate::mem::cuda::kinds::AllocKind;
use nvpeer_emu::nvp2p::{self, Gpu};
use nvpeer_emu::peer_mem::{self as pme, Core, RegParams};
use nvpeer_emu::EmuError;
use std::rc::Rc;

pub use nvpeer_emu::peer_mem::abi::Query as PmeQuery;
pub use nvpeer_emu::peer_mem::{qflags, state};

fn emu_err(e: EmuError) -> MemError {
    match e {
        EmuError::Ioctl { op, errno } => MemError::Os {
            what: op.to_string(),
            err: std::io::Error::from_raw_os_error(errno as i32),
        },
        e => MemError::Unsupported(format!(
            "{e} (is the emulator loaded? modprobe nvp2p_emu peer_mem_emu)"
        )),
    }
}

/// The provider emulator (allocations) plus the core emulator (registrations).
pub struct EmuBackend {
    gpu: Rc<Gpu>,
    core: Option<Rc<Core>>,
}

impl EmuBackend {
    pub fn open() -> Result<Self, MemError> {
        let gpu = Rc::new(Gpu::open().map_err(emu_err)?);
        let core = Core::open().ok().map(Rc::new);
        Ok(EmuBackend { gpu, core })
    }

    /// A kind that NVIDIA's P2P API pins is an ordinary emulated allocation; any other is one
    /// the CUDA driver never registered for third-party P2P (`NO_P2P`: get_pages fails -EINVAL).
    pub fn alloc_kind(&self, kind: AllocKind, size: usize) -> Result<Box<dyn Buffer>, MemError> {
        let flags = if kind.p2p_registered() {
            0
        } else {
            nvp2p::alloc_flags::NO_P2P
        };
        self.alloc_flags(size, flags)
    }

    fn alloc_flags(&self, size: usize, flags: u32) -> Result<Box<dyn Buffer>, MemError> {
        let a = self.gpu.alloc(size.max(1) as u64, flags).map_err(emu_err)?;
        Ok(Box::new(EmuBuffer {
            gpu: self.gpu.clone(),
            va: a.va,
            len: size,
            released: false,
        }))
    }

    /// The provider emulator's counters (per-call failures, live pins).
    pub fn provider_stats(&self) -> Result<nvp2p::abi::Stats, MemError> {
        self.gpu.stats().map_err(emu_err)
    }

    /// The pins the provider emulator holds on this process's live allocation at `va` (an
    /// earlier allocation at the same address, freed but still backing persistent pins, or
    /// another process's, is not this one).
    pub fn pins_at(&self, va: u64) -> Result<u32, MemError> {
        let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
        let allocs = self.gpu.list_allocs().map_err(emu_err)?;
        Ok(allocs
            .iter()
            .filter(|a| a.va == va && a.tgid == me && a.state == nvp2p::alloc_state::LIVE)
            .map(|a| a.pins)
            .sum())
    }

    /// The core emulator's consumer, if `peer_mem_emu` is loaded.
    pub fn core(&self) -> Option<EmuCore> {
        self.core.clone().map(|c| EmuCore { core: c })
    }
}

impl Backend for EmuBackend {
    fn kind(&self) -> MemKind {
        MemKind::Emu
    }
    fn facts(&self) -> Vec<(String, String)> {
        vec![
            ("provider".into(), nvp2p::DEVICE.into()),
            (
                "core".into(),
                if self.core.is_some() {
                    pme::DEVICE.into()
                } else {
                    "absent (peer_mem_emu not loaded)".into()
                },
            ),
        ]
    }
    fn alloc(&self, size: usize) -> Result<Box<dyn Buffer>, MemError> {
        self.alloc_flags(size, 0)
    }
    fn cpu_access(&self) -> bool {
        false
    }
}

/// One emulated GPU allocation; freed ("cudaFree", with free callbacks) on release or drop.
pub struct EmuBuffer {
    gpu: Rc<Gpu>,
    va: u64,
    len: usize,
    released: bool,
}

impl Buffer for EmuBuffer {
    fn addr(&self) -> u64 {
        self.va
    }
    fn len(&self) -> usize {
        self.len
    }
    fn write(&mut self, _: usize, _: &[u8]) -> Result<(), MemError> {
        Err(MemError::Unsupported(
            "emulated GPU memory has no CPU copy path in the harness".into(),
        ))
    }
    fn read(&self, _: usize, _: &mut [u8]) -> Result<(), MemError> {
        Err(MemError::Unsupported(
            "emulated GPU memory has no CPU copy path in the harness".into(),
        ))
    }
    fn release(&mut self) -> Result<(), MemError> {
        if self.released {
            return Ok(());
        }
        self.released = true;
        self.gpu.free(self.va).map(|_| ()).map_err(emu_err)
    }
    fn is_released(&self) -> bool {
        self.released
    }
}

impl Drop for EmuBuffer {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

/// The core emulator's MR consumer: `ib_umem_get_peer` and dereg as ioctls.
#[derive(Clone)]
pub struct EmuCore {
    core: Rc<Core>,
}

/// A registration made through the core emulator; deregistered on drop.
pub struct EmuMr {
    core: Rc<Core>,
    pub handle: u32,
    pub state: u32,
}

impl EmuCore {
    /// Registers `[addr, addr+len)` the way mlx5 registers an MR (writable, invalidation
    /// supported, for the PCI test device).
    pub fn register(&self, addr: u64, len: u64) -> Result<EmuMr, MemError> {
        let m = self
            .core
            .register(RegParams::mr(addr, len))
            .map_err(emu_err)?;
        Ok(EmuMr {
            core: self.core.clone(),
            handle: m.handle,
            state: m.state,
        })
    }
}

impl EmuMr {
    pub fn query(&self) -> Result<PmeQuery, MemError> {
        self.core.query(self.handle).map_err(emu_err)
    }
}

impl Drop for EmuMr {
    fn drop(&mut self) {
        let _ = self.core.deregister(self.handle, false);
    }
}
