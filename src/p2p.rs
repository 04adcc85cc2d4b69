// SPDX-License-Identifier: GPL-2.0

//! Safe wrapper over NVIDIA's P2P API (`nvidia_p2p_*`).
//!
//! Handles here are copies of pointers NVIDIA owns. Their validity is a protocol, not a Rust
//! lifetime: NVIDIA frees a page table (and every DMA mapping made from it) only in `put_pages*`
//! or right after the free callback returns. nvpeer keeps each handle inside its registration
//! (`mr.rs`) under the registration lock, takes it out before calling `put_pages*`, and the free
//! callback takes it out before returning to NVIDIA; so a handle found in a registration is live.
//! Every call is counted in [`STATS`].

use crate::ffi;
use crate::logic::version::{self, PtAbi};
use crate::stats::STATS;
use core::ptr::{null_mut, NonNull};
use kernel::bindings;
use kernel::ffi::c_void;
use kernel::error::to_result;
use kernel::prelude::*;

/// A page table returned by `nvidia_p2p_get_pages*`.
///
/// # Invariants
///
/// Points to a page table NVIDIA returned and has not freed; see the module documentation for
/// how nvpeer keeps that true.
#[derive(Clone, Copy)]
pub(crate) struct PageTable(NonNull<ffi::NvidiaP2pPageTable>);

// SAFETY: a page table is not tied to the thread that pinned it; NVIDIA serialises its own use.
unsafe impl Send for PageTable {}

/// A DMA mapping returned by `nvidia_p2p_dma_map_pages`.
///
/// # Invariants
///
/// Points to a mapping NVIDIA returned and has not freed (same protocol as [`PageTable`]).
#[derive(Clone, Copy)]
pub(crate) struct DmaMapping(NonNull<ffi::NvidiaP2pDmaMapping>);

// SAFETY: as for `PageTable`.
unsafe impl Send for DmaMapping {}

/// The PCI function an HCA DMAs from.
///
/// # Invariants
///
/// Points to a `struct pci_dev` that the core keeps alive while the registration exists (the
/// core's `ib_device` holds its DMA device for the lifetime of every umem).
#[derive(Clone, Copy)]
pub(crate) struct PciDev(NonNull<bindings::pci_dev>);

// SAFETY: a device pointer may be used from any thread.
unsafe impl Send for PciDev {}

/// What nvpeer reads from a page table.
#[derive(Clone, Copy)]
pub(crate) struct PtInfo {
    /// Raw version word.
    pub(crate) version: u32,
    /// Classified ABI (`None` = unsupported).
    pub(crate) abi: Option<PtAbi>,
    /// `enum nvidia_p2p_page_size_type`.
    pub(crate) page_size: u32,
    /// Number of pages.
    pub(crate) entries: u32,
    /// v2 `flags` (0 for v1 tables, which have none).
    pub(crate) flags: u32,
}

impl PageTable {
    /// Reads the header fields, `flags` only from a v2 table.
    pub(crate) fn info(&self) -> PtInfo {
        let p = self.0.as_ptr();
        // SAFETY: by the type invariant `p` points to a live page table; the common members exist
        // in every version.
        let (ver, page_size, entries) = unsafe { ((*p).version, (*p).page_size, (*p).entries) };
        let abi = version::page_table_abi(ver);
        let flags = if abi == Some(PtAbi::V2) {
            // SAFETY: the version says this is a v2 table, which has `flags` after the common part.
            unsafe { (*p.cast::<ffi::NvidiaP2pPageTableV2>()).flags }
        } else {
            0
        };
        PtInfo {
            version: ver,
            abi,
            page_size,
            entries,
            flags,
        }
    }
}

impl DmaMapping {
    /// `(version, entries)`.
    pub(crate) fn header(&self) -> (u32, u32) {
        let p = self.0.as_ptr();
        // SAFETY: by the type invariant `p` points to a live mapping.
        unsafe { ((*p).version, (*p).entries) }
    }

    /// The bus address of every page, `None` when NVIDIA gave no array. Only valid on a compatible
    /// mapping version, and only while the mapping stays live (the caller holds the registration
    /// lock, which NVIDIA's free callback needs before it frees the mapping).
    pub(crate) fn addresses(&self) -> Option<&[u64]> {
        let (_, entries) = self.header();
        let p = self.0.as_ptr();
        // SAFETY: live mapping (type invariant) with a compatible version (caller checked).
        let a = unsafe { (*p).dma_addresses };
        if a.is_null() {
            return None;
        }
        // SAFETY: a compatible mapping's `dma_addresses` array has `entries` elements, which
        // NVIDIA does not change or free while the mapping is live (see above).
        Some(unsafe { core::slice::from_raw_parts(a, entries as usize) })
    }
}

impl PciDev {
    /// The PCI function behind `dev`, or `None` when `dev` is not a PCI device (hazard H6).
    ///
    /// `dev` is the core's `dma_device` pointer; null is handled.
    pub(crate) fn from_dma_device(dev: *mut bindings::device) -> Option<Self> {
        // SAFETY: the shim checks for null and `dev_is_pci()` before `to_pci_dev()`; `dev` comes
        // from the core, which keeps it alive for the registration.
        NonNull::new(unsafe { ffi::nvpeer_shim_pci_dev(dev) }).map(PciDev)
    }
}

/// `nvidia_p2p_get_pages(0, 0, start, len, &pt, free_callback, ticket)`.
///
/// `ticket` (never 0) is what NVIDIA hands back to `free_callback`.
pub(crate) fn get_pages(start: u64, len: u64, ticket: u64, cb: ffi::FreeCallbackFn) -> Result<PageTable> {
    STATS.p_get_pages.inc();
    let mut pt = null_mut();
    // SAFETY: plain values and a valid out-pointer; `ticket as *mut c_void` is an integer, never
    // dereferenced by anyone (NVIDIA only passes it back).
    let rc = unsafe { ffi::nvidia_p2p_get_pages(0, 0, start, len, &mut pt, Some(cb), ticket as usize as *mut c_void) };
    to_result(rc)?;
    // INVARIANT: NVIDIA returned this table and keeps it until put or the callback.
    NonNull::new(pt).map(PageTable).ok_or(EIO)
}

/// `nvidia_p2p_get_pages_persistent(start, len, &pt, 0)`.
pub(crate) fn get_pages_persistent(start: u64, len: u64) -> Result<PageTable> {
    STATS.p_get_pages_persistent.inc();
    let mut pt = null_mut();
    // SAFETY: plain values and a valid out-pointer.
    let rc = unsafe { ffi::nvidia_p2p_get_pages_persistent(start, len, &mut pt, 0) };
    to_result(rc)?;
    // INVARIANT: NVIDIA returned this table and keeps it until put_pages_persistent.
    NonNull::new(pt).map(PageTable).ok_or(EIO)
}

/// `nvidia_p2p_put_pages(0, 0, start, pt)` (non-persistent) or
/// `nvidia_p2p_put_pages_persistent(start, pt, 0)`. Consumes the handle.
///
/// Never call from inside the free callback or with a registration lock held (hazard H3).
pub(crate) fn put_pages(persistent: bool, start: u64, pt: PageTable) -> Result {
    let rc = if persistent {
        STATS.p_put_pages_persistent.inc();
        // SAFETY: `pt` is live (type invariant) and taken out of its registration by the caller,
        // so no other path will use it again.
        unsafe { ffi::nvidia_p2p_put_pages_persistent(start, pt.0.as_ptr(), 0) }
    } else {
        STATS.p_put_pages.inc();
        // SAFETY: as above. If the free callback is running NVIDIA blocks us until it returns and
        // then finds nothing, without touching `pt`.
        unsafe { ffi::nvidia_p2p_put_pages(0, 0, start, pt.0.as_ptr()) }
    };
    to_result(rc)
}

/// `nvidia_p2p_dma_map_pages(pdev, pt, &map)`.
///
/// Takes NVIDIA's lock: never call with a registration lock held (hazard H3).
pub(crate) fn dma_map_pages(pdev: PciDev, pt: PageTable) -> Result<DmaMapping> {
    STATS.p_dma_map_pages.inc();
    let mut dm = null_mut();
    // SAFETY: `pdev` and `pt` are live by their invariants; valid out-pointer.
    let rc = unsafe { ffi::nvidia_p2p_dma_map_pages(pdev.0.as_ptr(), pt.0.as_ptr(), &mut dm) };
    to_result(rc)?;
    // INVARIANT: NVIDIA returned this mapping; it lives until unmapped or the table is freed.
    NonNull::new(dm).map(DmaMapping).ok_or(EIO)
}

/// `nvidia_p2p_dma_unmap_pages(pdev, pt, dm)`. Consumes the mapping handle.
///
/// Does not take NVIDIA's lock, so it may run under the registration lock; must not run from
/// inside the free callback.
pub(crate) fn dma_unmap_pages(pdev: PciDev, pt: PageTable, dm: DmaMapping) -> Result {
    STATS.p_dma_unmap_pages.inc();
    // SAFETY: all three live by their invariants; the caller gives up `dm`.
    to_result(unsafe { ffi::nvidia_p2p_dma_unmap_pages(pdev.0.as_ptr(), pt.0.as_ptr(), dm.0.as_ptr()) })
}

/// The two calls allowed inside the free callback: release our claims on `dm` and `pt`.
pub(crate) fn free_in_callback(pt: PageTable, dm: Option<DmaMapping>) {
    if let Some(dm) = dm {
        STATS.p_free_dma_mapping.inc();
        // SAFETY: inside the free callback the mapping is still live; we give up the handle.
        let rc = unsafe { ffi::nvidia_p2p_free_dma_mapping(dm.0.as_ptr()) };
        if rc != 0 {
            pr_warn!("nvidia_p2p_free_dma_mapping failed: {}\n", rc);
        }
    }
    STATS.p_free_page_table.inc();
    // SAFETY: inside the free callback the table is still live; we give up the handle.
    let rc = unsafe { ffi::nvidia_p2p_free_page_table(pt.0.as_ptr()) };
    if rc != 0 {
        pr_warn!("nvidia_p2p_free_page_table failed: {}\n", rc);
    }
}
