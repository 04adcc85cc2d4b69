//! Emulated GPU memory from the bench's provider emulator (`/dev/nvp2p_emu`), registered through
//! the peer-memory core emulator's consumer (`/dev/peer_mem_emu`), which calls whatever peer client
//! is loaded (nvpeer, or the classic C baseline) exactly like `ib_umem_get_peer` would.
//!
//! Upstream ib_core (and so rxe) has no peer-memory core, which is why registrations of this
//! backend do not go through `ibv_reg_mr`. Data cannot be moved with it (rxe cannot DMA into
//! emulated GPU pages), so only the registration and invalidation cases use it.
//!
//! The ioctl layouts below follow `testbench/emu/include/nvp2p_emu_ioctl.h` and
//! `peer_mem_emu_ioctl.h`; this is a minimal wrapper of the calls the harness needs, kept here
//! until the `emu-ctl` crate publishes both devices.

use super::{Backend, Buffer, MemError};
use crate::cli::MemKind;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::rc::Rc;

pub const NVP2P_DEVICE: &str = "/dev/nvp2p_emu";
pub const PME_DEVICE: &str = "/dev/peer_mem_emu";
const MAGIC: u64 = 0xE7;

const fn ioc(dir: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | (MAGIC << 8) | nr
}
const W: u64 = 1;
const R: u64 = 2;

#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct NvAlloc {
    size: u64,
    flags: u32,
    reserved: u32,
    va: u64,
    handle: u64,
    p2p_token: u64,
    va_space: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct NvFree {
    va: u64,
    handle: u64,
    callbacks: u32,
    pad: u32,
}

/// `struct pme_reg`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct PmeReg {
    addr: u64,
    length: u64,
    access: u32,
    peer_flags: u32,
    device: u32,
    flags: u32,
    handle: u32,
    state: u32,
    core_context: u64,
    client_index: u32,
    reserved: u32,
}

#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct PmeHandleOp {
    handle: u32,
    flags: u32,
}

/// `struct pme_query`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct PmeQuery {
    pub handle: u32,
    pub state: u32,
    pub flags: u32,
    pub nmap: u32,
    pub core_context: u64,
    pub page_size: u64,
    pub dma_stopped_ns: u64,
    pub addr: u64,
    pub length: u64,
    pub invalidations: u32,
    pub owner_pid: u32,
    pub client_index: u32,
    pub reserved: u32,
}

const NV_ALLOC: u64 = ioc(W | R, 0x00, std::mem::size_of::<NvAlloc>());
const NV_FREE: u64 = ioc(W | R, 0x01, std::mem::size_of::<NvFree>());
const PME_REGISTER: u64 = ioc(W | R, 0x01, std::mem::size_of::<PmeReg>());
const PME_DEREGISTER: u64 = ioc(W, 0x03, std::mem::size_of::<PmeHandleOp>());
const PME_QUERY: u64 = ioc(W | R, 0x04, std::mem::size_of::<PmeQuery>());

const PME_ACCESS_LOCAL_WRITE: u32 = 1;
const PME_PEER_ALLOW: u32 = 1;
const PME_PEER_INVAL_SUPP: u32 = 2;
const PME_DEV_PCI: u32 = 0;
/// `pme_state` values.
pub const PME_ST_HOST: u32 = 1;
pub const PME_ST_MAPPED: u32 = 2;
pub const PME_ST_INVALIDATED: u32 = 4;
pub const PME_ST_TORN_DOWN: u32 = 5;
/// `pme_query.flags`: the fake HW revoke happened.
pub const PME_QF_REVOKED: u32 = 1 << 2;

fn open_dev(path: &str) -> Result<File, MemError> {
    OpenOptions::new().read(true).write(true).open(path).map_err(|err| MemError::Os {
        what: format!("open {path} (is the emulator module loaded? modprobe nvp2p_emu peer_mem_emu)"),
        err,
    })
}

/// Runs one ioctl with a `#[repr(C)]` argument.
fn ioctl<T>(f: &File, req: u64, what: &str, arg: &mut T) -> Result<(), MemError> {
    // SAFETY: `arg` is an exclusively borrowed #[repr(C)] struct laid out as the header declares
    // for `req` (the size is encoded in `req` itself); the fd is open for the call's duration.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), req as _, arg as *mut T) };
    if r < 0 {
        return Err(MemError::Os { what: what.to_string(), err: std::io::Error::last_os_error() });
    }
    Ok(())
}

/// The provider emulator (allocations) plus the core emulator (registrations).
pub struct EmuBackend {
    gpu: Rc<File>,
    core: Option<Rc<File>>,
}

impl EmuBackend {
    pub fn open() -> Result<Self, MemError> {
        let gpu = Rc::new(open_dev(NVP2P_DEVICE)?);
        let core = open_dev(PME_DEVICE).ok().map(Rc::new);
        Ok(EmuBackend { gpu, core })
    }

    /// The core emulator's consumer, if `peer_mem_emu` is loaded.
    pub fn core(&self) -> Option<EmuCore> {
        self.core.clone().map(|f| EmuCore { f })
    }
}

impl Backend for EmuBackend {
    fn kind(&self) -> MemKind {
        MemKind::Emu
    }
    fn facts(&self) -> Vec<(String, String)> {
        vec![
            ("provider".into(), NVP2P_DEVICE.into()),
            ("core".into(), if self.core.is_some() { PME_DEVICE.into() } else { "absent (peer_mem_emu not loaded)".into() }),
        ]
    }
    fn alloc(&self, size: usize) -> Result<Box<dyn Buffer>, MemError> {
        let mut a = NvAlloc { size: size.max(1) as u64, ..Default::default() };
        ioctl(&self.gpu, NV_ALLOC, "nvp2p_emu ALLOC", &mut a)?;
        Ok(Box::new(EmuBuffer { gpu: self.gpu.clone(), va: a.va, handle: a.handle, len: size, released: false }))
    }
    fn cpu_access(&self) -> bool {
        false
    }
}

/// One emulated GPU allocation.
pub struct EmuBuffer {
    gpu: Rc<File>,
    va: u64,
    handle: u64,
    len: usize,
    released: bool,
}

impl EmuBuffer {
    /// Frees it through the emulator ("cudaFree"); returns the free callbacks that ran.
    pub fn free_counting(&mut self) -> Result<u32, MemError> {
        if self.released {
            return Ok(0);
        }
        self.released = true;
        let mut f = NvFree { va: self.va, handle: self.handle, ..Default::default() };
        ioctl(&self.gpu, NV_FREE, "nvp2p_emu FREE", &mut f)?;
        Ok(f.callbacks)
    }
}

impl Buffer for EmuBuffer {
    fn addr(&self) -> u64 {
        self.va
    }
    fn len(&self) -> usize {
        self.len
    }
    fn write(&mut self, _: usize, _: &[u8]) -> Result<(), MemError> {
        Err(MemError::Unsupported("emulated GPU memory has no CPU copy path in the harness".into()))
    }
    fn read(&self, _: usize, _: &mut [u8]) -> Result<(), MemError> {
        Err(MemError::Unsupported("emulated GPU memory has no CPU copy path in the harness".into()))
    }
    fn release(&mut self) -> Result<(), MemError> {
        self.free_counting().map(|_| ())
    }
    fn is_released(&self) -> bool {
        self.released
    }
    fn emu_handle(&self) -> Option<u64> {
        Some(self.handle)
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
    f: Rc<File>,
}

/// A registration made through the core emulator; deregistered on drop.
pub struct EmuMr {
    f: Rc<File>,
    pub handle: u32,
    pub state: u32,
    pub core_context: u64,
}

impl EmuCore {
    /// Registers `[addr, addr+len)` writable, with invalidation support, for the PCI test device.
    pub fn register(&self, addr: u64, len: u64) -> Result<EmuMr, MemError> {
        let mut r = PmeReg {
            addr,
            length: len,
            access: PME_ACCESS_LOCAL_WRITE,
            peer_flags: PME_PEER_ALLOW | PME_PEER_INVAL_SUPP,
            device: PME_DEV_PCI,
            ..Default::default()
        };
        ioctl(&self.f, PME_REGISTER, "peer_mem_emu REGISTER", &mut r)?;
        Ok(EmuMr { f: self.f.clone(), handle: r.handle, state: r.state, core_context: r.core_context })
    }
}

impl EmuMr {
    pub fn query(&self) -> Result<PmeQuery, MemError> {
        let mut q = PmeQuery { handle: self.handle, ..Default::default() };
        ioctl(&self.f, PME_QUERY, "peer_mem_emu QUERY", &mut q)?;
        Ok(q)
    }
}

impl Drop for EmuMr {
    fn drop(&mut self) {
        let mut op = PmeHandleOp { handle: self.handle, flags: 0 };
        let _ = ioctl(&self.f, PME_DEREGISTER, "peer_mem_emu DEREGISTER", &mut op);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_sizes_match_the_headers() {
        assert_eq!(std::mem::size_of::<NvAlloc>(), 48);
        assert_eq!(std::mem::size_of::<NvFree>(), 24);
        assert_eq!(std::mem::size_of::<PmeReg>(), 56);
        assert_eq!(std::mem::size_of::<PmeHandleOp>(), 8);
        assert_eq!(std::mem::size_of::<PmeQuery>(), 72);
        // _IOWR(0xe7, 0, 48) as the kernel computes it.
        assert_eq!(NV_ALLOC, 0xC030_E700);
        assert_eq!(PME_DEREGISTER, 0x4008_E703);
    }
}
