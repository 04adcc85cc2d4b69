//! Memory backends: where test buffers live. One trait, four implementations (host, CUDA,
//! CUDA + dma-buf export, and the bench's emulated GPU memory).

pub mod cuda;
#[cfg(feature = "bench")]
pub mod emu;
pub mod host;

use crate::cli::{GpuSelector, MemKind};
use std::os::fd::RawFd;

/// Errors of a memory backend. Each names what failed in words a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum MemError {
    #[error("libcuda.so is not installed on this node (no NVIDIA driver userspace); --mem cuda needs it")]
    NoLibcuda,
    #[error("CUDA: {call} failed: {msg}")]
    Cuda {
        call: &'static str,
        msg: String,
        code: u32,
    },
    #[error("no GPU matches '{0}' ({1})")]
    NoSuchGpu(String, String),
    #[error("{what}: {err}")]
    Os { what: String, err: std::io::Error },
    #[error("{0}")]
    Unsupported(String),
    #[error("access outside the buffer: offset {offset} + len {len} > size {size}")]
    OutOfRange {
        offset: usize,
        len: usize,
        size: usize,
    },
    #[error("the buffer was already freed")]
    Released,
}

impl MemError {
    /// errno behind an OS-level failure, when there is one (for cause analysis).
    pub fn errno(&self) -> Option<i32> {
        match self {
            MemError::Os { err, .. } => err.raw_os_error(),
            _ => None,
        }
    }
}

/// A dma-buf exported for a buffer: the fd and where the buffer's first byte lies in it.
#[derive(Debug, Clone, Copy)]
pub struct DmaBuf {
    pub fd: RawFd,
    pub offset: u64,
}

/// One allocation of test memory.
pub trait Buffer {
    /// The address used in work requests and registrations (a GPU VA for CUDA memory).
    fn addr(&self) -> u64;
    /// Usable length in bytes.
    fn len(&self) -> usize;
    /// Whether the buffer has no usable bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `data` into the buffer at `offset`.
    fn write(&mut self, offset: usize, data: &[u8]) -> Result<(), MemError>;
    /// Copies from the buffer at `offset` into `out`.
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), MemError>;
    /// The dma-buf of this buffer, for backends that export one.
    fn dmabuf(&self) -> Option<DmaBuf> {
        None
    }
    /// Frees the memory now, even while it is registered (invalidation tests). Idempotent.
    fn release(&mut self) -> Result<(), MemError>;
    /// Whether `release` already ran.
    fn is_released(&self) -> bool;
}

/// Checks an access against a buffer length.
pub fn check_range(offset: usize, len: usize, size: usize) -> Result<(), MemError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(MemError::OutOfRange { offset, len, size }),
    }
}

/// A source of buffers of one kind.
pub trait Backend {
    fn kind(&self) -> MemKind;
    /// Facts worth printing in a report (device name, capabilities, ...).
    fn facts(&self) -> Vec<(String, String)>;
    /// Allocates `size` bytes (rounded up as the backend requires).
    fn alloc(&self, size: usize) -> Result<Box<dyn Buffer>, MemError>;
    /// Whether a CPU-side pattern can be written/read (false for emulated GPU memory).
    fn cpu_access(&self) -> bool {
        true
    }
    /// Allocates `size` bytes of `kind`, reports what the driver says about them and frees them;
    /// `None` for a backend with one kind of memory only.
    fn probe_kind(
        &self,
        _kind: cuda::kinds::AllocKind,
        _size: usize,
        _seed: u64,
    ) -> Option<cuda::kinds::KindProbe> {
        None
    }
}

/// Opens the backend of `kind`, its dma-bufs mapped through the PCIe BAR when `pcie_mapping`
/// (`bench --use_cuda_pcie_mapping`; refused for memory without dma-bufs).
pub fn open_mapped(
    kind: MemKind,
    gpu: &GpuSelector,
    pcie_mapping: bool,
) -> Result<Box<dyn Backend>, MemError> {
    match (kind, pcie_mapping) {
        (_, false) => open(kind, gpu),
        (MemKind::CudaDmabuf, true) => Ok(Box::new(
            cuda::CudaBackend::open(gpu, true)?.with_pcie_mapping()?,
        )),
        (k, true) => Err(MemError::Unsupported(format!(
            "--use_cuda_pcie_mapping maps dma-bufs: it needs --mem cuda-dmabuf, not --mem {k}"
        ))),
    }
}

/// Opens the backend of `kind`.
pub fn open(kind: MemKind, gpu: &GpuSelector) -> Result<Box<dyn Backend>, MemError> {
    Ok(match kind {
        MemKind::Host => Box::new(host::HostBackend),
        MemKind::Cuda => Box::new(cuda::CudaBackend::open(gpu, false)?),
        MemKind::CudaDmabuf => Box::new(cuda::CudaBackend::open(gpu, true)?),
        #[cfg(feature = "bench")]
        MemKind::Emu => Box::new(emu::EmuBackend::open()?),
    })
}

/// Host page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as usize
    } else {
        4096
    }
}

/// Rounds `v` up to a multiple of `align` (a power of two); `None` on overflow.
pub fn round_up(v: usize, align: usize) -> Option<usize> {
    Some(v.checked_add(align - 1)? & !(align - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert!(check_range(0, 10, 10).is_ok());
        assert!(check_range(5, 6, 10).is_err());
        assert!(check_range(usize::MAX, 2, 10).is_err());
        assert_eq!(round_up(1, 4096), Some(4096));
        assert_eq!(round_up(65536, 65536), Some(65536));
        assert_eq!(round_up(usize::MAX, 4096), None);
    }

    /// `--use_cuda_pcie_mapping` maps dma-bufs: refused, with the reason, for memory without one
    /// (before any GPU is opened).
    #[test]
    fn the_pcie_mapping_needs_dma_bufs() {
        for kind in [MemKind::Host, MemKind::Cuda] {
            let e = open_mapped(kind, &GpuSelector::Index(0), true)
                .err()
                .expect("refused");
            assert!(e.to_string().contains("needs --mem cuda-dmabuf"), "{e}");
        }
        assert!(open_mapped(MemKind::Host, &GpuSelector::Index(0), false).is_ok());
    }
}
