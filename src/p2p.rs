// SPDX-License-Identifier: GPL-2.0

//! NVIDIA's P2P API (`nvidia_p2p_*`): the handles it returns and the calls on them.
//!
//! A [`PageTable`] or [`DmaMapping`] names an object NVIDIA owns and frees on its own schedule:
//! a table on `put_pages*` or, for a non-persistent pin, right after the free callback returned
//! (with every mapping made from it). Whether a handle is still live is therefore a protocol of
//! its owner, not a property of the handle: the handles are neither `Copy` nor `Clone`, and every
//! function that makes NVIDIA (or us) read through one is an `unsafe fn` whose `# Safety` section
//! states what must hold. nvpeer's owner is the registration (`mr.rs`), which keeps the handles
//! under its lock and states the protocol as the invariant of its locked state.
//!
//! NVIDIA's free callback reaches the owner through [`FreeCallback`]: the C-ABI trampoline is
//! private here and only ever passes a ticket on. Every call is counted in [`STATS`].

use crate::ffi;
use crate::logic::version::{self, PtAbi};
use crate::overtaken;
use crate::stats::STATS;
use core::ptr::{null_mut, NonNull};
use kernel::bindings;
use kernel::device;
use kernel::error::to_result;
use kernel::ffi::c_void;
use kernel::pci;
use kernel::prelude::*;
use kernel::sync::aref::ARef;
use kernel::sync::atomic::{Acquire, Atomic, Relaxed, Release};
use kernel::time::{delay::fsleep, Delta};

/// A page table returned by `nvidia_p2p_get_pages*`: nvpeer's claim on one pin.
///
/// Dropping the handle gives nothing back: the pin ends with [`put_pages`] or
/// [`free_in_callback`], both of which consume it.
///
/// # Invariants
///
/// `0` is a page table NVIDIA returned. It says nothing about whether NVIDIA has freed it since
/// (see the module documentation).
#[must_use]
pub(crate) struct PageTable(NonNull<ffi::NvidiaP2pPageTable>);

// SAFETY: a page table is not tied to the thread that pinned it; NVIDIA serialises its own use.
unsafe impl Send for PageTable {}

/// A DMA mapping returned by `nvidia_p2p_dma_map_pages`.
///
/// Dropping the handle gives nothing back: the mapping ends with [`dma_unmap_pages`] or
/// [`free_in_callback`], or NVIDIA frees it with its table.
///
/// # Invariants
///
/// `0` is a mapping NVIDIA returned for a page table (same caveat as [`PageTable`]).
#[must_use]
pub(crate) struct DmaMapping(NonNull<ffi::NvidiaP2pDmaMapping>);

// SAFETY: as for `PageTable`.
unsafe impl Send for DmaMapping {}

/// The PCI function an HCA DMAs from, with a device reference of its own (the kernel crate's
/// [`ARef`]; dropping it calls `pci_dev_put`, never the last put: the core holds the HCA's device
/// while it can call `dma_map`, so no release runs there, whatever lock the dropper holds).
pub(crate) struct PciDev(ARef<pci::Device>);

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

/// What nvpeer reads from a DMA mapping.
pub(crate) struct DmaInfo<'a> {
    /// Raw version word.
    pub(crate) version: u32,
    /// Bus address of every page (none when NVIDIA gave no array); `None` on a version this
    /// build does not know the layout of.
    pub(crate) addresses: Option<&'a [u64]>,
}

impl PageTable {
    /// The table's address, for [`dma_map_pages`], which runs without the owner's lock.
    pub(crate) fn as_raw(&self) -> NonNull<ffi::NvidiaP2pPageTable> {
        self.0
    }

    /// Reads the header fields, `flags` only from a v2 table.
    ///
    /// # Safety
    ///
    /// NVIDIA has not freed the table and does not free it before this returns.
    pub(crate) unsafe fn info(&self) -> PtInfo {
        let p = self.0.as_ptr();
        // SAFETY: live by the function contract; the common members exist in every version.
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
    /// The version and, on a compatible version, the bus address of every page.
    ///
    /// # Safety
    ///
    /// NVIDIA has not freed the mapping and does not free it while `'a` lasts.
    pub(crate) unsafe fn info<'a>(&'a self) -> DmaInfo<'a> {
        let p = self.0.as_ptr();
        // SAFETY: live by the function contract; `version` exists in every version.
        let version = unsafe { (*p).version };
        if !version::dma_mapping_compatible(version) {
            return DmaInfo {
                version,
                addresses: None,
            };
        }
        // SAFETY: live, with a layout this build knows (version checked above).
        let (a, entries) = unsafe { ((*p).dma_addresses, (*p).entries) };
        let addresses: &[u64] = if a.is_null() {
            &[]
        } else {
            // SAFETY: a compatible mapping's `dma_addresses` array has `entries` elements, which
            // NVIDIA does not change or free while the mapping is live (function contract).
            unsafe { core::slice::from_raw_parts(a, entries as usize) }
        };
        DmaInfo {
            version,
            addresses: Some(addresses),
        }
    }
}

impl PciDev {
    /// The PCI function behind `dev`, referenced, or `None` when `dev` is null or not a PCI
    /// device (hazard H6).
    ///
    /// # Safety
    ///
    /// `dev` is null or points to a `struct device` with a reference held for the call (the
    /// core's `dma_device`: its `ib_device` holds it).
    pub(crate) unsafe fn from_dma_device(dev: *mut bindings::device) -> Option<Self> {
        if dev.is_null() {
            return None;
        }
        // SAFETY: not null, so valid and referenced for the call (function contract).
        let dev = unsafe { device::Device::from_raw(dev) };
        // `dev_is_pci()` first; the reference taken here keeps the device for this value's life.
        let pdev = <&pci::Device>::try_from(dev).ok()?;
        Some(Self(pdev.into()))
    }

    /// The C `struct pci_dev`, for NVIDIA's calls (live while `self` is).
    fn as_raw(&self) -> *mut bindings::pci_dev {
        let pdev: &pci::Device = &self.0;
        // `pci::Device` is `#[repr(transparent)]` over the C structure (checked below).
        core::ptr::from_ref(pdev).cast_mut().cast()
    }
}

// The cast in `PciDev::as_raw`: the kernel's `pci::Device` wraps exactly one `struct pci_dev`.
const _: () = assert!(
    core::mem::size_of::<pci::Device>() == core::mem::size_of::<bindings::pci_dev>()
        && core::mem::align_of::<pci::Device>() == core::mem::align_of::<bindings::pci_dev>()
);

// A ticket (u64) travels in NVIDIA's `void *data` word and comes back through it whole: nvpeer
// builds for 64-bit kernels only (NVIDIA's open modules support no other).
const _: () = assert!(core::mem::size_of::<usize>() == core::mem::size_of::<u64>());

/// Whoever owns non-persistent pins: NVIDIA's free callback for the pin with `ticket` calls
/// [`FreeCallback::on_free`] (under NVIDIA's lock; it may sleep).
pub(crate) trait FreeCallback {
    /// The pin with `ticket` is being revoked; NVIDIA frees its table when this returns.
    fn on_free(ticket: u64);
}

/// Free callbacks executing nvpeer code now (see [`wait_for_callbacks`]).
static CALLBACKS_RUNNING: Atomic<u64> = Atomic::new(0);

/// The C-ABI free callback: `data` is a ticket, never a pointer, and is never dereferenced.
///
/// # Safety
///
/// Called by NVIDIA only, with the `data` word [`get_pages`] registered.
unsafe extern "C" fn free_callback<T: FreeCallback>(data: *mut c_void) {
    CALLBACKS_RUNNING.add(1u64, Relaxed);
    T::on_free(data as usize as u64);
    // Everything `on_free` dropped (the last module reference among it) is gone by now.
    crate::compat::fetch_sub(&CALLBACKS_RUNNING, 1, Release);
}

/// Waits until no free callback executes nvpeer code any more, for module exit.
///
/// NVIDIA holds no reference on this module: a registration's module reference keeps `rmmod`
/// away while a pin exists, but the callback that drops the last one still runs here for a few
/// instructions after it. Module exit waits for that; what remains is the callback's return from
/// this trampoline after the counter dropped (docs/design.md, "Limits").
pub(crate) fn wait_for_callbacks() {
    while CALLBACKS_RUNNING.load(Acquire) != 0 {
        fsleep(Delta::from_millis(1));
    }
}

/// `nvidia_p2p_get_pages(0, 0, start, len, &pt, free_callback, ticket)`.
///
/// `ticket` (never 0) is what NVIDIA hands back, through `T::on_free`, when it revokes the pin.
pub(crate) fn get_pages<T: FreeCallback>(start: u64, len: u64, ticket: u64) -> Result<PageTable> {
    STATS.provider_get_pages.inc();
    let mut pt = null_mut();
    let data = ticket as usize as *mut c_void;
    // SAFETY: plain values and a valid out-pointer; `data` is an integer, never dereferenced by
    // anyone (NVIDIA only passes it back to `free_callback::<T>`, which is `'static` code).
    let rc = unsafe {
        ffi::nvidia_p2p_get_pages(0, 0, start, len, &mut pt, Some(free_callback::<T>), data)
    };
    to_result(rc)?;
    // INVARIANT: NVIDIA returned this table.
    NonNull::new(pt).map(PageTable).ok_or(EIO)
}

/// `nvidia_p2p_get_pages_persistent(start, len, &pt, 0)`.
pub(crate) fn get_pages_persistent(start: u64, len: u64) -> Result<PageTable> {
    STATS.provider_get_pages_persistent.inc();
    let mut pt = null_mut();
    // SAFETY: plain values and a valid out-pointer.
    let rc = unsafe { ffi::nvidia_p2p_get_pages_persistent(start, len, &mut pt, 0) };
    to_result(rc)?;
    // INVARIANT: NVIDIA returned this table.
    NonNull::new(pt).map(PageTable).ok_or(EIO)
}

/// `nvidia_p2p_put_pages(0, 0, start, pt)` (non-persistent) or
/// `nvidia_p2p_put_pages_persistent(start, pt, 0)`. Consumes the handle when the put succeeds.
///
/// A put that fails gives the handle back with the error: NVIDIA frees a table only when its RM
/// call released the pin (open-gpu-kernel-modules, `nv_p2p_put_pages` in nv-p2p.c; an early
/// failure such as `-ENOMEM` for its stack touches nothing), so after a failure NVIDIA still holds
/// the pin, and for a non-persistent one its free callback, which it calls when the memory is
/// freed. (A pin whose callback already ran is not found, which NVIDIA reports as success.)
///
/// Never call from inside the free callback or with a registration lock held (hazard H3).
///
/// # Safety
///
/// `pt` was live when its owner gave it up for this call, and nothing else uses it again. A
/// persistent table stays live until this call. A non-persistent one may meanwhile have been
/// freed by NVIDIA after its free callback: NVIDIA looks the pin up by process, address and
/// table address and finds none (the put window, docs/design.md, is that lookup matching a new
/// pin at a reused table address).
pub(crate) unsafe fn put_pages(
    persistent: bool,
    start: u64,
    pt: PageTable,
) -> core::result::Result<(), (Error, PageTable)> {
    let rc = if persistent {
        STATS.provider_put_pages_persistent.inc();
        // SAFETY: live and given up by the caller (function contract).
        unsafe { ffi::nvidia_p2p_put_pages_persistent(start, pt.0.as_ptr(), 0) }
    } else {
        STATS.provider_put_pages.inc();
        // SAFETY: function contract. If the free callback is running, NVIDIA blocks us until it
        // returns and then finds nothing.
        overtaken::overtakable(|| unsafe { ffi::nvidia_p2p_put_pages(0, 0, start, pt.0.as_ptr()) })
    };
    to_result(rc).map_err(|e| (e, pt))
}

/// `nvidia_p2p_dma_map_pages(pdev, pt, &map)`.
///
/// Takes NVIDIA's lock: never call with a registration lock held (hazard H3).
///
/// # Safety
///
/// `pt` stays live until this returns, and `pdev` is the DMA device of the registration. NVIDIA
/// reads the table before it takes its own lock; a free callback running on another thread
/// before that can free it. No client of the non-persistent API can exclude that (the H4 window,
/// docs/design.md); a persistent table has no callback and is only freed by [`put_pages`].
pub(crate) unsafe fn dma_map_pages(
    pdev: &PciDev,
    pt: NonNull<ffi::NvidiaP2pPageTable>,
) -> Result<DmaMapping> {
    STATS.provider_dma_map_pages.inc();
    let mut dm = null_mut();
    // SAFETY: `pdev` referenced while it lives, `pt` live by the function contract; valid
    // out-pointer.
    let rc = overtaken::overtakable(|| unsafe {
        ffi::nvidia_p2p_dma_map_pages(pdev.as_raw(), pt.as_ptr(), &mut dm)
    });
    to_result(rc)?;
    // INVARIANT: NVIDIA returned this mapping.
    NonNull::new(dm).map(DmaMapping).ok_or(EIO)
}

/// `nvidia_p2p_dma_unmap_pages(pdev, pt, dm)`. Consumes the mapping handle.
///
/// Does not take NVIDIA's lock, so it may run under the registration lock; must not run from
/// inside the free callback.
///
/// # Safety
///
/// `pt` and `dm` (made from `pt`, for `pdev`) are live until this returns.
pub(crate) unsafe fn dma_unmap_pages(pdev: &PciDev, pt: &PageTable, dm: DmaMapping) -> Result {
    STATS.provider_dma_unmap_pages.inc();
    // SAFETY: all three live (function contract; `pdev` referenced); `dm` is given up.
    to_result(unsafe {
        ffi::nvidia_p2p_dma_unmap_pages(pdev.as_raw(), pt.0.as_ptr(), dm.0.as_ptr())
    })
}

/// The two calls allowed inside the free callback: release our claims on `dm` and `pt`.
///
/// # Safety
///
/// Called from inside NVIDIA's free callback for `pt`'s pin, before it returns; `dm` was made
/// from `pt`.
pub(crate) unsafe fn free_in_callback(pt: PageTable, dm: Option<DmaMapping>) {
    if let Some(dm) = dm {
        STATS.provider_free_dma_mapping.inc();
        // SAFETY: inside the free callback the mapping is still live; we give up the handle.
        let rc = unsafe { ffi::nvidia_p2p_free_dma_mapping(dm.0.as_ptr()) };
        if rc != 0 {
            pr_warn!("nvidia_p2p_free_dma_mapping failed: {}\n", rc);
        }
    }
    STATS.provider_free_page_table.inc();
    // SAFETY: inside the free callback the table is still live; we give up the handle.
    let rc = unsafe { ffi::nvidia_p2p_free_page_table(pt.0.as_ptr()) };
    if rc != 0 {
        pr_warn!("nvidia_p2p_free_page_table failed: {}\n", rc);
    }
}
