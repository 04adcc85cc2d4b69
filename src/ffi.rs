// SPDX-License-Identifier: GPL-2.0

//! Every raw foreign declaration of nvpeer, and nothing else.
//!
//! Three foreign APIs: the peer-memory core (`rdma/peer_mem.h`, MLNX_OFED / DOCA-OFED `ib_core`),
//! NVIDIA's P2P API (`nv-p2p.h`, `nvidia.ko`) and our own C shim (`nvpeer_shim.h`). Kernel types
//! (`sg_table`, `device`, `pci_dev`) come from `kernel::bindings`, so their layouts cannot drift.
//! The hand-written layouts below are checked twice, both before anything loads: in every build,
//! against `sizeof`/`offsetof` facts compiled from the same headers (`abi.rs`, a `const` assert
//! each), and against bindgen output of the headers (`scripts/ffi-check.sh`, `make ffi-check`).

use kernel::bindings;
use kernel::ffi::{c_char, c_int, c_ulong, c_void};

/// `IB_PEER_MEMORY_NAME_MAX`.
pub(crate) const PEER_NAME_MAX: usize = 64;
/// `IB_PEER_MEMORY_VER_MAX`.
pub(crate) const PEER_VER_MAX: usize = 16;
/// `PEER_MEM_INVALIDATE_UNMAPS`.
pub(crate) const PEER_MEM_INVALIDATE_UNMAPS: u32 = 1;
/// `NVIDIA_P2P_PAGE_SIZE_64KB` (enum `nvidia_p2p_page_size_type`): the page size nvpeer accepts.
pub(crate) const NVIDIA_P2P_PAGE_SIZE_64KB: u32 = 1;

/// `acquire` callback type.
pub(crate) type AcquireFn =
    unsafe extern "C" fn(c_ulong, usize, *mut c_void, *mut c_char, *mut *mut c_void) -> c_int;
/// `get_pages` callback type.
pub(crate) type GetPagesFn = unsafe extern "C" fn(
    c_ulong,
    usize,
    c_int,
    c_int,
    *mut bindings::sg_table,
    *mut c_void,
    u64,
) -> c_int;
/// `dma_map` callback type.
pub(crate) type DmaMapFn = unsafe extern "C" fn(
    *mut bindings::sg_table,
    *mut c_void,
    *mut bindings::device,
    c_int,
    *mut c_int,
) -> c_int;
/// `dma_unmap` callback type.
pub(crate) type DmaUnmapFn =
    unsafe extern "C" fn(*mut bindings::sg_table, *mut c_void, *mut bindings::device) -> c_int;
/// `put_pages` callback type.
pub(crate) type PutPagesFn = unsafe extern "C" fn(*mut bindings::sg_table, *mut c_void);
/// `get_page_size` callback type.
pub(crate) type GetPageSizeFn = unsafe extern "C" fn(*mut c_void) -> c_ulong;
/// `release` callback type.
pub(crate) type ReleaseFn = unsafe extern "C" fn(*mut c_void);
/// The core's invalidate entry point (`invalidate_peer_memory`).
pub(crate) type InvalidateFn = unsafe extern "C" fn(*mut c_void, u64) -> c_int;
/// NVIDIA's free callback type.
pub(crate) type FreeCallbackFn = unsafe extern "C" fn(*mut c_void);

/// `struct peer_memory_client` (136 bytes on LP64).
#[repr(C)]
pub(crate) struct PeerMemoryClient {
    pub(crate) name: [c_char; PEER_NAME_MAX],
    pub(crate) version: [c_char; PEER_VER_MAX],
    pub(crate) acquire: Option<AcquireFn>,
    pub(crate) get_pages: Option<GetPagesFn>,
    pub(crate) dma_map: Option<DmaMapFn>,
    pub(crate) dma_unmap: Option<DmaUnmapFn>,
    pub(crate) put_pages: Option<PutPagesFn>,
    pub(crate) get_page_size: Option<GetPageSizeFn>,
    pub(crate) release: Option<ReleaseFn>,
}

/// `struct peer_memory_client_ex` (152 bytes on LP64). Registered by its first member.
///
/// On a MLNX_OFED 4.x core the two trailing words are read as `get_context_private_data` /
/// `put_context_private_data`, which is why the legacy layout keeps them zero.
#[repr(C)]
pub(crate) struct PeerMemoryClientEx {
    pub(crate) client: PeerMemoryClient,
    pub(crate) ex_size: usize,
    pub(crate) flags: u32,
}

/// `struct nvidia_p2p_page` (32 bytes); only `physical_address` is meaningful.
#[repr(C)]
pub(crate) struct NvidiaP2pPage {
    pub(crate) physical_address: u64,
    pub(crate) registers: [u32; 6],
}

/// The members shared by page-table v1 (0x0001xxxx) and v2 (0x0002xxxx).
#[repr(C)]
pub(crate) struct NvidiaP2pPageTable {
    pub(crate) version: u32,
    pub(crate) page_size: u32,
    pub(crate) pages: *mut *mut NvidiaP2pPage,
    pub(crate) entries: u32,
    pub(crate) gpu_uuid: *mut u8,
}

/// A v2 page table (driver 580+): v1 plus `flags`. Only read through a pointer whose version
/// says v2.
#[repr(C)]
pub(crate) struct NvidiaP2pPageTableV2 {
    pub(crate) base: NvidiaP2pPageTable,
    pub(crate) flags: u32,
}

/// `struct nvidia_p2p_dma_mapping` (40 bytes, version 0x00020003).
#[repr(C)]
pub(crate) struct NvidiaP2pDmaMapping {
    pub(crate) version: u32,
    pub(crate) page_size_type: u32,
    pub(crate) entries: u32,
    pub(crate) dma_addresses: *mut u64,
    pub(crate) private: *mut c_void,
    pub(crate) pci_dev: *mut bindings::pci_dev,
}

// The kernel structs behind these pointers (`device`, `pci_dev`, `sg_table`) are only passed
// through, never accessed by value here; bindgen marks some of them as containing zero-sized
// arrays, which is what `improper_ctypes` objects to.
#[allow(improper_ctypes)]
extern "C" {
    // Peer-memory core (ib_core from MLNX_OFED / DOCA-OFED).
    pub(crate) fn ib_register_peer_memory_client(
        peer_client: *const PeerMemoryClient,
        invalidate_callback: *mut Option<InvalidateFn>,
    ) -> *mut c_void;
    pub(crate) fn ib_unregister_peer_memory_client(reg_handle: *mut c_void);

    // NVIDIA P2P API (nvidia.ko, open kernel modules).
    pub(crate) fn nvidia_p2p_get_pages(
        p2p_token: u64,
        va_space: u32,
        virtual_address: u64,
        length: u64,
        page_table: *mut *mut NvidiaP2pPageTable,
        free_callback: Option<FreeCallbackFn>,
        data: *mut c_void,
    ) -> c_int;
    pub(crate) fn nvidia_p2p_get_pages_persistent(
        virtual_address: u64,
        length: u64,
        page_table: *mut *mut NvidiaP2pPageTable,
        flags: u32,
    ) -> c_int;
    pub(crate) fn nvidia_p2p_dma_map_pages(
        peer: *mut bindings::pci_dev,
        page_table: *mut NvidiaP2pPageTable,
        dma_mapping: *mut *mut NvidiaP2pDmaMapping,
    ) -> c_int;
    pub(crate) fn nvidia_p2p_dma_unmap_pages(
        peer: *mut bindings::pci_dev,
        page_table: *mut NvidiaP2pPageTable,
        dma_mapping: *mut NvidiaP2pDmaMapping,
    ) -> c_int;
    pub(crate) fn nvidia_p2p_put_pages(
        p2p_token: u64,
        va_space: u32,
        virtual_address: u64,
        page_table: *mut NvidiaP2pPageTable,
    ) -> c_int;
    pub(crate) fn nvidia_p2p_put_pages_persistent(
        virtual_address: u64,
        page_table: *mut NvidiaP2pPageTable,
        flags: u32,
    ) -> c_int;
    pub(crate) fn nvidia_p2p_free_page_table(page_table: *mut NvidiaP2pPageTable) -> c_int;
    pub(crate) fn nvidia_p2p_free_dma_mapping(dma_mapping: *mut NvidiaP2pDmaMapping) -> c_int;

    // Our C shim (src/nvpeer_shim.c).
    pub(crate) fn nvpeer_shim_sg_fill(
        sgt: *mut bindings::sg_table,
        addrs: *const u64,
        n: u32,
        len: u32,
    ) -> c_int;
    pub(crate) fn nvpeer_shim_module_get() -> bool;
    pub(crate) fn nvpeer_shim_module_put();
    pub(crate) fn nvpeer_shim_peer_client_visible(name: *const c_char) -> bool;
    pub(crate) fn nvpeer_shim_other_nv_mem_module() -> *const c_char;
    pub(crate) fn nvpeer_shim_module_name() -> *const c_char;
    pub(crate) fn nvpeer_shim_ratelimit() -> bool;
    pub(crate) fn nvpeer_shim_overtaken_begin();
    pub(crate) fn nvpeer_shim_overtaken_end();
    pub(crate) fn nvpeer_shim_overtaken_wait() -> c_int;
    pub(crate) fn nvpeer_shim_overtakable_enter();
    pub(crate) fn nvpeer_shim_overtakable_exit();
    #[cfg(not(nvpeer_has_module_params))]
    pub(crate) fn nvpeer_shim_param(which: u32) -> c_int;
}

/// A module parameter the C shim declares where `module!` takes none (src/compat.rs); the numbers
/// are `enum nvpeer_param` of nvpeer_shim.h.
#[cfg(not(nvpeer_has_module_params))]
#[derive(Clone, Copy)]
pub(crate) enum Param {
    /// `persistent_api_support`.
    PersistentApiSupport = 0,
    /// `peerdirect_support`.
    PeerdirectSupport = 1,
}

/// The value of module parameter `which`, as the loader set it.
#[cfg(not(nvpeer_has_module_params))]
pub(crate) fn shim_param(which: Param) -> c_int {
    // SAFETY: no pointer crosses; the shim reads a static integer the loader wrote before init.
    unsafe { nvpeer_shim_param(which as u32) }
}

/// Whether a rate-limited kernel-log message may be printed now (`__ratelimit` with the kernel's
/// default interval and burst, one state for the module).
pub(crate) fn ratelimit() -> bool {
    // SAFETY: no arguments; the shim's rate-limit state is a static.
    unsafe { nvpeer_shim_ratelimit() }
}
