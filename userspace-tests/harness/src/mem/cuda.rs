//! CUDA device memory through cudarc's dynamically loaded driver API: `cuMemAlloc` buffers with
//! `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` set, optionally exported as a dma-buf fd through
//! `cuMemGetHandleForAddressRange`.
//!
//! All raw driver calls are in this file. cudarc panics when libcuda or one of its symbols is
//! missing; `present()` is checked before anything else and every call runs under `guarded` so a
//! missing symbol becomes an error, not an abort.

pub mod kinds;

use super::{check_range, page_size, round_up, Backend, Buffer, DmaBuf, MemError};
use crate::cli::{GpuSelector, MemKind};
use cudarc::driver::{result, sys};
use std::ffi::{c_void, CString};

/// GPU page size: registrations and dma-buf exports are done in 64 KiB units.
pub const GPU_PAGE: usize = 64 << 10;

/// Runs a driver call, turning a cudarc panic (missing library symbol) into an error.
fn guarded<T>(
    call: &'static str,
    f: impl FnOnce() -> Result<T, result::DriverError>,
) -> Result<T, MemError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(MemError::Cuda {
            call,
            msg: e
                .error_string()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|_| format!("{:?}", e.0)),
            code: e.0 as u32,
        }),
        Err(_) => Err(MemError::Cuda {
            call,
            msg: "entry point missing from libcuda (driver too old?)".into(),
            code: u32::MAX,
        }),
    }
}

/// Whether libcuda can be loaded at all.
pub fn present() -> bool {
    // SAFETY: only tries to dlopen the library candidates; no symbol is called.
    unsafe { sys::is_culib_present() }
}

/// A GPU opened through its primary context.
pub struct CudaBackend {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    dmabuf: bool,
    /// The dma-bufs map the memory through the PCIe BAR
    /// (`CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`: [`CudaBackend::with_pcie_mapping`]).
    pcie_mapping: bool,
    name: String,
    bus_id: String,
}

impl CudaBackend {
    /// Opens the GPU picked by `sel`. With `dmabuf`, buffers are also exported as dma-bufs.
    pub fn open(sel: &GpuSelector, dmabuf: bool) -> Result<Self, MemError> {
        if !present() {
            return Err(MemError::NoLibcuda);
        }
        guarded("cuInit", result::init)?;
        let dev = match sel {
            GpuSelector::Index(i) => {
                let n = guarded("cuDeviceGetCount", result::device::get_count)?;
                if *i as i64 >= n as i64 {
                    return Err(MemError::NoSuchGpu(
                        sel.to_string(),
                        format!("{n} CUDA device(s) visible"),
                    ));
                }
                guarded("cuDeviceGet", || result::device::get(*i as i32))?
            }
            GpuSelector::BusId(b) => {
                let c = CString::new(b.as_str())
                    .map_err(|_| MemError::NoSuchGpu(b.clone(), "bad bus id".into()))?;
                let mut dev: sys::CUdevice = 0;
                // SAFETY: `dev` is a valid out pointer, `c` a NUL-terminated string.
                guarded("cuDeviceGetByPCIBusId", || unsafe {
                    sys::cuDeviceGetByPCIBusId(&mut dev, c.as_ptr()).result()
                })
                .map_err(|e| MemError::NoSuchGpu(b.clone(), e.to_string()))?;
                dev
            }
        };
        // SAFETY: `dev` came from the driver above.
        let ctx = guarded("cuDevicePrimaryCtxRetain", || unsafe {
            result::primary_ctx::retain(dev)
        })?;
        // SAFETY: `ctx` is the retained primary context of `dev`.
        guarded("cuCtxSetCurrent", || unsafe {
            result::ctx::set_current(ctx)
        })?;
        let name = guarded("cuDeviceGetName", || result::device::get_name(dev)).unwrap_or_default();
        let mut buf = [0u8; 32];
        // SAFETY: buffer and its length passed together.
        let bus_id = guarded("cuDeviceGetPCIBusId", || unsafe {
            sys::cuDeviceGetPCIBusId(buf.as_mut_ptr().cast(), buf.len() as i32, dev).result()
        })
        .map(|_| {
            String::from_utf8_lossy(buf.split(|b| *b == 0).next().unwrap_or(&[])).to_lowercase()
        })
        .unwrap_or_default();
        let be = CudaBackend {
            dev,
            ctx,
            dmabuf,
            pcie_mapping: false,
            name,
            bus_id,
        };
        if dmabuf
            && be.attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED) == Some(0)
        {
            return Err(MemError::Unsupported(format!(
                "GPU {} reports DMA_BUF_SUPPORTED=0 (proprietary kernel module flavour, old driver, or kernel without dma-buf)",
                be.bus_id
            )));
        }
        Ok(be)
    }

    /// Exports every buffer's dma-buf with `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`, as
    /// perftest's `--use_cuda_pcie_mapping` does (cuda_memory.c): the NIC reaches the memory
    /// through the GPU's PCIe BAR even where the GPU has a coherent link to the CPU (the mapping
    /// Grace-class nodes need for GPUDirect RDMA over dma-buf). Refused with the reason where the
    /// buffers have no dma-buf, or the CUDA driver API is older than 12.8, which added the flag.
    pub fn with_pcie_mapping(mut self) -> Result<Self, MemError> {
        if !self.dmabuf {
            return Err(MemError::Unsupported(
                "--use_cuda_pcie_mapping maps dma-bufs: it needs --mem cuda-dmabuf".into(),
            ));
        }
        let mut ver = 0i32;
        // SAFETY: valid out pointer.
        guarded("cuDriverGetVersion", || unsafe {
            sys::cuDriverGetVersion(&mut ver).result()
        })?;
        if ver < 12080 {
            return Err(MemError::Unsupported(format!(
                "CUDA driver API {}.{} has no CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE (12.8 or later has)",
                ver / 1000,
                (ver % 1000) / 10
            )));
        }
        self.pcie_mapping = true;
        Ok(self)
    }

    fn attr(&self, a: sys::CUdevice_attribute) -> Option<i32> {
        // SAFETY: `self.dev` is a device handle from the driver.
        guarded("cuDeviceGetAttribute", || unsafe {
            result::device::get_attribute(self.dev, a)
        })
        .ok()
    }

    fn make_current(&self) -> Result<(), MemError> {
        // SAFETY: the primary context is retained for the life of `self`.
        guarded("cuCtxSetCurrent", || unsafe {
            result::ctx::set_current(self.ctx)
        })
    }

    /// PCI bus id of the GPU (lower case), for topology facts.
    pub fn bus_id(&self) -> &str {
        &self.bus_id
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // SAFETY: releases the reference taken in `open`.
        let _ = guarded("cuDevicePrimaryCtxRelease", || unsafe {
            result::primary_ctx::release(self.dev)
        });
    }
}

impl Backend for CudaBackend {
    fn kind(&self) -> MemKind {
        if self.dmabuf {
            MemKind::CudaDmabuf
        } else {
            MemKind::Cuda
        }
    }

    fn facts(&self) -> Vec<(String, String)> {
        use sys::CUdevice_attribute as A;
        let mut v = vec![
            ("gpu".to_string(), self.name.clone()),
            ("pci bus id".into(), self.bus_id.clone()),
        ];
        let mut ver = 0i32;
        // SAFETY: valid out pointer.
        if guarded("cuDriverGetVersion", || unsafe {
            sys::cuDriverGetVersion(&mut ver).result()
        })
        .is_ok()
        {
            v.push((
                "cuda driver api".into(),
                format!("{}.{}", ver / 1000, (ver % 1000) / 10),
            ));
        }
        for (label, a) in [
            (
                "GPU_DIRECT_RDMA_SUPPORTED",
                A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED,
            ),
            (
                "DMA_BUF_SUPPORTED",
                A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
            ),
            (
                "GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED",
                A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
            ),
            (
                "GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS",
                A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
            ),
            (
                "GPU_DIRECT_RDMA_WRITES_ORDERING",
                A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING,
            ),
        ] {
            v.push((
                label.into(),
                self.attr(a)
                    .map(|x| x.to_string())
                    .unwrap_or_else(|| "?".into()),
            ));
        }
        v
    }

    fn probe_kind(
        &self,
        kind: kinds::AllocKind,
        size: usize,
        seed: u64,
    ) -> Option<kinds::KindProbe> {
        Some(self.probe(kind, size, seed))
    }

    fn alloc(&self, size: usize) -> Result<Box<dyn Buffer>, MemError> {
        self.make_current()?;
        let alloc_len = round_up(size.max(1), GPU_PAGE)
            .ok_or_else(|| MemError::Unsupported(format!("size {size} is too large")))?;
        // SAFETY: plain allocation; the pointer is owned by the returned buffer.
        let ptr = guarded("cuMemAlloc", || unsafe { result::malloc_sync(alloc_len) })?;
        let mut buf = CudaBuffer {
            ctx: self.ctx,
            ptr,
            len: size,
            alloc_len,
            dmabuf: None,
            released: false,
        };
        let one: u32 = 1;
        // SAFETY: `one` outlives the call; `ptr` is a live allocation of this context.
        guarded("cuPointerSetAttribute(SYNC_MEMOPS)", || unsafe {
            sys::cuPointerSetAttribute(
                (&one as *const u32).cast::<c_void>(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                ptr,
            )
            .result()
        })?;
        if self.dmabuf {
            let flags = if self.pcie_mapping {
                sys::CUmemRangeFlags::CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE as u64
            } else {
                0
            };
            buf.dmabuf = Some(buf.export(flags)?);
        }
        Ok(Box::new(buf))
    }
}

/// One `cuMemAlloc` allocation.
///
/// # Invariants
/// Until `released`, `ptr` is a live allocation of `alloc_len` bytes in context `ctx`, and
/// `dmabuf.fd`, when set, is an fd this buffer owns.
pub struct CudaBuffer {
    ctx: sys::CUcontext,
    ptr: sys::CUdeviceptr,
    len: usize,
    alloc_len: usize,
    dmabuf: Option<DmaBuf>,
    released: bool,
}

impl CudaBuffer {
    fn current(&self) -> Result<(), MemError> {
        // SAFETY: the context is retained by the backend that outlives its buffers' use.
        guarded("cuCtxSetCurrent", || unsafe {
            result::ctx::set_current(self.ctx)
        })
    }

    /// Exports the page-aligned range covering the allocation as a dma-buf fd (`flags`: its
    /// `CUmemRangeFlags`).
    fn export(&self, flags: u64) -> Result<DmaBuf, MemError> {
        let (fd, offset) = export_range(self.ptr, self.alloc_len, flags)?;
        Ok(DmaBuf { fd, offset })
    }
}

/// Exports the page-aligned range covering `len` bytes at `ptr` as a dma-buf (`flags`: the
/// `CUmemRangeFlags` of the mapping); returns the fd, which the caller owns, and where `ptr` lies in
/// it.
fn export_range(ptr: sys::CUdeviceptr, len: usize, flags: u64) -> Result<(i32, u64), MemError> {
    let pg = page_size() as u64;
    let start = ptr & !(pg - 1);
    let end = round_up((ptr + len as u64) as usize, pg as usize).unwrap_or(usize::MAX) as u64;
    let mut fd: i32 = -1;
    // SAFETY: `fd` is a valid out pointer of the size the API writes (an int).
    guarded("cuMemGetHandleForAddressRange(DMA_BUF_FD)", || unsafe {
        sys::cuMemGetHandleForAddressRange(
            (&mut fd as *mut i32).cast::<c_void>(),
            start,
            (end - start) as usize,
            sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
            flags,
        )
        .result()
    })?;
    if fd < 0 {
        return Err(MemError::Unsupported(
            "cuMemGetHandleForAddressRange returned no fd".into(),
        ));
    }
    Ok((fd, ptr - start))
}

impl Buffer for CudaBuffer {
    fn addr(&self) -> u64 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn write(&mut self, offset: usize, data: &[u8]) -> Result<(), MemError> {
        if self.released {
            return Err(MemError::Released);
        }
        check_range(offset, data.len(), self.len)?;
        self.current()?;
        // SAFETY: destination range checked inside the live allocation.
        guarded("cuMemcpyHtoD", || unsafe {
            result::memcpy_htod_sync(self.ptr + offset as u64, data)
        })
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), MemError> {
        if self.released {
            return Err(MemError::Released);
        }
        check_range(offset, out.len(), self.len)?;
        self.current()?;
        // SAFETY: source range checked inside the live allocation.
        guarded("cuMemcpyDtoH", || unsafe {
            result::memcpy_dtoh_sync(out, self.ptr + offset as u64)
        })
    }
    fn dmabuf(&self) -> Option<DmaBuf> {
        if self.released {
            None
        } else {
            self.dmabuf
        }
    }
    fn release(&mut self) -> Result<(), MemError> {
        if self.released {
            return Ok(());
        }
        self.released = true;
        self.current()?;
        // SAFETY: frees the allocation made in `alloc`, exactly once (guarded by `released`).
        let r = guarded("cuMemFree", || unsafe { result::free_sync(self.ptr) });
        if let Some(d) = self.dmabuf.take() {
            // SAFETY: the fd was returned by the export and is owned by this buffer.
            unsafe { libc::close(d.fd) };
        }
        r
    }
    fn is_released(&self) -> bool {
        self.released
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        let _ = self.release();
    }
}
