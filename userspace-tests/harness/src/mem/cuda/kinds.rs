//! The kinds of GPU memory users register, allocated as their libraries allocate them, and what the
//! CUDA driver says about each: whether the pointer is GPUDirect RDMA capable
//! (`CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE`), what memory type it is, whether a dma-buf
//! can be exported for it (`cuMemGetHandleForAddressRange`, with the default mapping and with
//! `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`), and whether bytes written read back. None of
//! this needs a NIC.

use super::{export_range, guarded, CudaBackend, GPU_PAGE};
use crate::mem::{round_up, MemError};
use crate::pattern;
use cudarc::driver::sys;
use std::ffi::c_void;

/// How a buffer of GPU memory was allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllocKind {
    /// `cuMemAlloc` (what `cudaMalloc` calls).
    #[value(name = "mem-alloc")]
    MemAlloc,
    /// `cuMemAllocFromPoolAsync` from the device's default pool (what `cudaMallocAsync` calls).
    Pool,
    /// `cuMemCreate` with `allocFlags.gpuDirectRDMACapable = 1`, mapped with `cuMemMap`.
    #[value(name = "vmm-rdma")]
    VmmRdma,
    /// `cuMemCreate` without that flag, mapped with `cuMemMap`.
    Vmm,
    /// `cuMemAllocManaged` (unified memory).
    Managed,
    /// `cuMemHostAlloc` with `CU_MEMHOSTALLOC_DEVICEMAP` (pinned host memory), through its device
    /// pointer.
    #[value(name = "host-pinned")]
    HostPinned,
}

impl AllocKind {
    /// Every kind, in the order the matrix runs them.
    pub const ALL: [AllocKind; 6] = [
        AllocKind::MemAlloc,
        AllocKind::Pool,
        AllocKind::VmmRdma,
        AllocKind::Vmm,
        AllocKind::Managed,
        AllocKind::HostPinned,
    ];

    /// The name on the command line and in case names.
    pub fn name(self) -> &'static str {
        match self {
            AllocKind::MemAlloc => "mem-alloc",
            AllocKind::Pool => "pool",
            AllocKind::VmmRdma => "vmm-rdma",
            AllocKind::Vmm => "vmm",
            AllocKind::Managed => "managed",
            AllocKind::HostPinned => "host-pinned",
        }
    }

    /// Whether the CUDA driver registers memory of this kind for third-party P2P, so that
    /// `nvidia_p2p_get_pages` pins it: the GPUDirect RDMA capable kinds
    /// (`CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE`; validate's `alloc_kinds::P2P_SOURCE`).
    pub fn p2p_registered(self) -> bool {
        matches!(self, AllocKind::MemAlloc | AllocKind::VmmRdma)
    }

    /// The driver call that allocates it.
    pub fn call(self) -> &'static str {
        match self {
            AllocKind::MemAlloc => "cuMemAlloc",
            AllocKind::Pool => "cuMemAllocFromPoolAsync",
            AllocKind::VmmRdma => "cuMemCreate(gpuDirectRDMACapable=1)+cuMemMap",
            AllocKind::Vmm => "cuMemCreate+cuMemMap",
            AllocKind::Managed => "cuMemAllocManaged",
            AllocKind::HostPinned => "cuMemHostAlloc(DEVICEMAP)",
        }
    }
}

impl std::fmt::Display for AllocKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The memory type the driver reports for a pointer (`CU_POINTER_ATTRIBUTE_MEMORY_TYPE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryType {
    Host,
    Device,
    Array,
    Unified,
    Other(u32),
}

impl MemoryType {
    fn from_raw(v: u32) -> Self {
        match v {
            1 => MemoryType::Host,
            2 => MemoryType::Device,
            3 => MemoryType::Array,
            4 => MemoryType::Unified,
            n => MemoryType::Other(n),
        }
    }
}

/// What the driver said about one allocation of one kind. An `Err` holds the driver's message.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KindProbe {
    pub kind: AllocKind,
    pub size: usize,
    /// The allocation itself; nothing else is probed when it failed.
    pub alloc: Result<(), String>,
    pub memory_type: Option<MemoryType>,
    /// `CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE`.
    pub rdma_capable: Result<bool, String>,
    /// A dma-buf of the range, default mapping.
    pub dmabuf: Result<(), String>,
    /// A dma-buf of the range with `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`.
    pub dmabuf_pcie: Result<(), String>,
    /// A pattern written through the device pointer and read back.
    pub roundtrip: Result<(), String>,
    /// The allocation's release.
    pub free: Result<(), String>,
}

/// How one allocation is held, and so how it is freed.
enum Held {
    Device,
    Pool,
    Vmm {
        handle: sys::CUmemGenericAllocationHandle,
        reserved: usize,
    },
    Host(*mut c_void),
}

/// One allocation of a kind, freed once.
///
/// # Invariants
/// Until `free` runs, `ptr` is a device pointer of `size` usable bytes of context `ctx`, allocated
/// as `held` says (for `Vmm`, `reserved` bytes of address space mapped to `handle`; for `Host`,
/// the host allocation whose device pointer `ptr` is).
struct KindAlloc {
    ctx: sys::CUcontext,
    ptr: sys::CUdeviceptr,
    size: usize,
    held: Option<Held>,
}

fn err_text(e: MemError) -> String {
    e.to_string()
}

impl KindAlloc {
    fn new(be: &CudaBackend, kind: AllocKind, size: usize) -> Result<Self, MemError> {
        be.make_current()?;
        let mut a = KindAlloc {
            ctx: be.ctx,
            ptr: 0,
            size,
            held: None,
        };
        match kind {
            AllocKind::MemAlloc => {
                let mut p: sys::CUdeviceptr = 0;
                // SAFETY: `p` is a valid out pointer.
                guarded("cuMemAlloc", || unsafe {
                    sys::cuMemAlloc_v2(&mut p, size).result()
                })?;
                a.ptr = p;
                a.held = Some(Held::Device);
            }
            AllocKind::Pool => {
                let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
                // SAFETY: `pool` is a valid out pointer; `be.dev` is a device of the driver.
                guarded("cuDeviceGetDefaultMemPool", || unsafe {
                    sys::cuDeviceGetDefaultMemPool(&mut pool, be.dev).result()
                })?;
                let mut p: sys::CUdeviceptr = 0;
                // SAFETY: `p` is a valid out pointer, `pool` the device's pool, the null stream
                // the context's legacy default stream (synchronised below).
                guarded("cuMemAllocFromPoolAsync", || unsafe {
                    sys::cuMemAllocFromPoolAsync(&mut p, size, pool, std::ptr::null_mut()).result()
                })?;
                a.ptr = p;
                a.held = Some(Held::Pool);
                // SAFETY: no arguments; waits for the allocation's stream.
                guarded("cuCtxSynchronize", || unsafe {
                    sys::cuCtxSynchronize().result()
                })?;
            }
            AllocKind::VmmRdma | AllocKind::Vmm => a.vmm(be, kind == AllocKind::VmmRdma)?,
            AllocKind::Managed => {
                let mut p: sys::CUdeviceptr = 0;
                // SAFETY: `p` is a valid out pointer.
                guarded("cuMemAllocManaged", || unsafe {
                    sys::cuMemAllocManaged(
                        &mut p,
                        size,
                        sys::CUmemAttach_flags_enum::CU_MEM_ATTACH_GLOBAL as u32,
                    )
                    .result()
                })?;
                a.ptr = p;
                a.held = Some(Held::Device);
            }
            AllocKind::HostPinned => {
                let mut h: *mut c_void = std::ptr::null_mut();
                // SAFETY: `h` is a valid out pointer.
                guarded("cuMemHostAlloc", || unsafe {
                    sys::cuMemHostAlloc(
                        &mut h,
                        size,
                        sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
                    )
                    .result()
                })?;
                a.held = Some(Held::Host(h));
                let mut p: sys::CUdeviceptr = 0;
                // SAFETY: `p` is a valid out pointer, `h` the mapped host allocation above.
                guarded("cuMemHostGetDevicePointer", || unsafe {
                    sys::cuMemHostGetDevicePointer_v2(&mut p, h, 0).result()
                })?;
                a.ptr = p;
            }
        }
        Ok(a)
    }

    /// `cuMemCreate` of physical memory on the device, reserved address space, `cuMemMap` and
    /// read-write access for the device.
    fn vmm(&mut self, be: &CudaBackend, rdma: bool) -> Result<(), MemError> {
        // SAFETY: the property struct is plain data; every field the driver reads is set below.
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = be.dev;
        prop.allocFlags.gpuDirectRDMACapable = u8::from(rdma);
        let mut gran = 0usize;
        // SAFETY: valid out pointer and property struct.
        guarded("cuMemGetAllocationGranularity", || unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut gran,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
            .result()
        })?;
        let reserved = round_up(self.size.max(1), gran.max(GPU_PAGE))
            .ok_or_else(|| MemError::Unsupported(format!("size {} is too large", self.size)))?;
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: valid out pointer and property struct.
        guarded("cuMemCreate", || unsafe {
            sys::cuMemCreate(&mut handle, reserved, &prop, 0).result()
        })?;
        let mut va: sys::CUdeviceptr = 0;
        // SAFETY: valid out pointer; no fixed address or alignment asked for.
        if let Err(e) = guarded("cuMemAddressReserve", || unsafe {
            sys::cuMemAddressReserve(&mut va, reserved, 0, 0, 0).result()
        }) {
            // SAFETY: `handle` came from cuMemCreate above and is mapped nowhere.
            let _ = unsafe { sys::cuMemRelease(handle) };
            return Err(e);
        }
        self.ptr = va;
        self.held = Some(Held::Vmm { handle, reserved });
        // SAFETY: `va` is reserved for `reserved` bytes, `handle` is that size.
        guarded("cuMemMap", || unsafe {
            sys::cuMemMap(va, reserved, 0, handle, 0).result()
        })?;
        // SAFETY: the struct is plain data; its fields are set below.
        let mut desc: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
        desc.location = prop.location;
        desc.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        // SAFETY: the range is mapped above; one descriptor.
        guarded("cuMemSetAccess", || unsafe {
            sys::cuMemSetAccess(va, reserved, &desc, 1).result()
        })
    }

    fn attr_u32(&self, a: sys::CUpointer_attribute) -> Result<u32, MemError> {
        let mut v: u32 = 0;
        // SAFETY: `v` is large enough for the attributes asked here (an int or a bool).
        guarded("cuPointerGetAttribute", || unsafe {
            sys::cuPointerGetAttribute((&mut v as *mut u32).cast::<c_void>(), a, self.ptr).result()
        })?;
        Ok(v)
    }

    /// A dma-buf of the page-aligned range covering the allocation, closed at once.
    fn export(&self, flags: u64) -> Result<(), MemError> {
        let (fd, _) = export_range(self.ptr, self.size, flags)?;
        let link =
            std::fs::read_link(format!("/proc/self/fd/{fd}")).map(|p| p.display().to_string());
        // SAFETY: the fd was just returned to this process and is closed once.
        unsafe { libc::close(fd) };
        match link {
            Ok(l) if l.contains("dmabuf") => Ok(()),
            Ok(l) => Err(MemError::Unsupported(format!(
                "the fd is '{l}', not a dma-buf"
            ))),
            Err(e) => Err(MemError::Os {
                what: "readlink of the exported fd".into(),
                err: e,
            }),
        }
    }

    fn roundtrip(&self, seed: u64) -> Result<(), MemError> {
        let p = pattern::generate(seed, 0, self.size);
        // SAFETY: `self.size` bytes at `ptr` are usable device memory of this context.
        guarded("cuMemcpyHtoD", || unsafe {
            sys::cuMemcpyHtoD_v2(self.ptr, p.as_ptr().cast(), p.len()).result()
        })?;
        let mut back = vec![0u8; self.size];
        // SAFETY: as above, into a host buffer of the same length.
        guarded("cuMemcpyDtoH", || unsafe {
            sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), self.ptr, back.len()).result()
        })?;
        match pattern::first_mismatch(seed, 0, &back) {
            None => Ok(()),
            Some(i) => Err(MemError::Unsupported(format!(
                "pattern mismatch at byte {i}"
            ))),
        }
    }

    fn free(&mut self) -> Result<(), MemError> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        // SAFETY: the backend keeps its primary context retained while probes run.
        guarded("cuCtxSetCurrent", || unsafe {
            sys::cuCtxSetCurrent(self.ctx).result()
        })?;
        let ptr = self.ptr;
        match held {
            // SAFETY: `ptr` came from cuMemAlloc/cuMemAllocManaged and is freed once (`held`).
            Held::Device => guarded("cuMemFree", || unsafe { sys::cuMemFree_v2(ptr).result() }),
            Held::Pool => {
                // SAFETY: `ptr` came from the pool and is freed once; then the stream drains.
                guarded("cuMemFreeAsync", || unsafe {
                    sys::cuMemFreeAsync(ptr, std::ptr::null_mut()).result()
                })?;
                // SAFETY: no arguments.
                guarded("cuCtxSynchronize", || unsafe {
                    sys::cuCtxSynchronize().result()
                })
            }
            Held::Vmm { handle, reserved } => {
                // SAFETY: the range and handle are this allocation's, unmapped, freed and released
                // once each; an unmap of a range never mapped fails harmlessly.
                let r = if ptr == 0 {
                    Ok(())
                } else {
                    let _ = unsafe { sys::cuMemUnmap(ptr, reserved) };
                    guarded("cuMemAddressFree", || unsafe {
                        sys::cuMemAddressFree(ptr, reserved).result()
                    })
                };
                // SAFETY: see above.
                guarded("cuMemRelease", || unsafe {
                    sys::cuMemRelease(handle).result()
                })?;
                r
            }
            // SAFETY: `h` came from cuMemHostAlloc and is freed once.
            Held::Host(h) => guarded("cuMemFreeHost", || unsafe {
                sys::cuMemFreeHost(h).result()
            }),
        }
    }
}

impl Drop for KindAlloc {
    fn drop(&mut self) {
        let _ = self.free();
    }
}

impl CudaBackend {
    /// Allocates `size` bytes of `kind` on this GPU and reports what the driver says about them;
    /// frees them before returning.
    pub fn probe(&self, kind: AllocKind, size: usize, seed: u64) -> KindProbe {
        let mut p = KindProbe {
            kind,
            size,
            alloc: Ok(()),
            memory_type: None,
            rdma_capable: Err("not probed".into()),
            dmabuf: Err("not probed".into()),
            dmabuf_pcie: Err("not probed".into()),
            roundtrip: Err("not probed".into()),
            free: Err("not probed".into()),
        };
        let mut a = match KindAlloc::new(self, kind, size) {
            Ok(a) => a,
            Err(e) => {
                p.alloc = Err(err_text(e));
                return p;
            }
        };
        p.memory_type = a
            .attr_u32(sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
            .ok()
            .map(MemoryType::from_raw);
        p.rdma_capable = a
            .attr_u32(sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE)
            .map(|v| v != 0)
            .map_err(err_text);
        p.dmabuf = a.export(0).map_err(err_text);
        p.dmabuf_pcie = a
            .export(sys::CUmemRangeFlags::CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE as u64)
            .map_err(err_text);
        p.roundtrip = a.roundtrip(seed).map_err(err_text);
        p.free = a.free().map_err(err_text);
        p
    }
}
