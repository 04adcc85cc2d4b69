// SPDX-License-Identifier: GPL-2.0

//! The scatter-gather table dma_map fills in the core's `sg_head`.
//!
//! nvpeer allocates the table in dma_map, before it takes the registration lock, and frees it
//! exactly once: in put_pages when the core hands the same table back (the header's rule), or in
//! release when it never does (after an invalidation under `PEER_MEM_INVALIDATE_UNMAPS` the core
//! calls neither dma_unmap nor put_pages). A copy of the table header is kept so release can
//! free it without the core's struct.

use crate::ffi;
use crate::logic::range::GPU_PAGE_SIZE;
use core::marker::PhantomData;
use core::ptr::NonNull;
use kernel::bindings;
use kernel::error::to_result;
use kernel::prelude::*;

/// The core's `sg_head` for the duration of one callback.
///
/// # Invariants
///
/// Points to a `struct sg_table` the core owns and keeps valid for `'a`.
pub(crate) struct CoreSgt<'a>(
    NonNull<bindings::sg_table>,
    PhantomData<&'a mut bindings::sg_table>,
);

impl CoreSgt<'_> {
    /// Wraps the core's pointer.
    ///
    /// # Safety
    ///
    /// `p` is null or points to a `struct sg_table` valid (and not used by anyone else) for the
    /// returned lifetime.
    pub(crate) unsafe fn from_raw(p: *mut bindings::sg_table) -> Option<Self> {
        // INVARIANT: guaranteed by the caller.
        NonNull::new(p).map(|p| Self(p, PhantomData))
    }
}

/// A table nvpeer allocated and filled (a copy of its header: the chain pointer and counts).
///
/// # Invariants
///
/// `sgl` heads a chain of `orig_nents` entries allocated by `sg_alloc_table` that nothing has
/// freed; `nents` of them were filled.
pub(crate) struct SgRecord {
    sgl: NonNull<bindings::scatterlist>,
    nents: u32,
    orig_nents: u32,
}

// SAFETY: the chain is plain memory owned by this record; no thread affinity.
unsafe impl Send for SgRecord {}

/// A table allocated in the core's `sg_head` and not filled yet; freed on drop.
///
/// Allocated before the registration lock is taken (NVIDIA's free callback waits for that lock
/// while it holds NVIDIA's), filled under it without allocating.
///
/// # Invariants
///
/// The core's table holds `n` entries allocated by `sg_alloc_table`, which nothing has freed.
pub(crate) struct SgAlloc<'a, 'b> {
    sgt: &'a mut CoreSgt<'b>,
    n: u32,
}

impl<'b> CoreSgt<'b> {
    /// Allocates `n` entries in the core's table (`GFP_KERNEL`: may sleep).
    ///
    /// The allocation borrows the table mutably until it is filled or dropped: a second one over
    /// the same table (which would overwrite the first's header and free its chain twice) does
    /// not compile.
    pub(crate) fn alloc(&mut self, n: u32) -> Result<SgAlloc<'_, 'b>> {
        // SAFETY: the core's table (type invariant), zeroed by the core.
        to_result(unsafe { bindings::sg_alloc_table(self.0.as_ptr(), n, bindings::GFP_KERNEL) })?;
        // INVARIANT: allocated just above.
        Ok(SgAlloc { sgt: self, n })
    }
}

impl SgAlloc<'_, '_> {
    /// Fills one 64 KiB DMA-only entry per address (`addrs` must have as many as allocated);
    /// allocates nothing.
    pub(crate) fn fill(self, addrs: &[u64]) -> Result<SgRecord> {
        if addrs.len() != self.n as usize {
            return Err(EINVAL);
        }
        let p = self.sgt.0.as_ptr();
        // SAFETY: `p` holds `n` entries (type invariant); `addrs` has `n` elements.
        let rc =
            unsafe { ffi::nvpeer_shim_sg_fill(p, addrs.as_ptr(), self.n, GPU_PAGE_SIZE as u32) };
        if rc != 0 {
            return Err(Error::from_errno(rc));
        }
        // SAFETY: `p` is valid for reads.
        let (sgl, nents, orig_nents) = unsafe { ((*p).sgl, (*p).nents, (*p).orig_nents) };
        // A successful `sg_alloc_table` leaves a chain; checked, not assumed (else dropped).
        let sgl = NonNull::new(sgl).ok_or(EINVAL)?;
        core::mem::forget(self);
        // INVARIANT: the chain was allocated by `CoreSgt::alloc`; the record takes it over.
        Ok(SgRecord {
            sgl,
            nents,
            orig_nents,
        })
    }
}

impl Drop for SgAlloc<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: allocated by `CoreSgt::alloc` (type invariant), not handed to anyone.
        unsafe { bindings::sg_free_table(self.sgt.0.as_ptr()) };
    }
}

impl SgRecord {
    /// Number of entries.
    pub(crate) fn nents(&self) -> u32 {
        self.nents
    }

    /// Frees the chain. When `sgt` is the same table the core got from dma_map, it is freed through
    /// the core's struct (which is then cleared); otherwise through our copy. Returns whether the
    /// core's table matched.
    pub(crate) fn free(self, sgt: Option<&mut CoreSgt<'_>>) -> bool {
        let mine = self.sgl.as_ptr();
        let given = sgt.is_some();
        if let Some(s) = sgt {
            let p = s.0.as_ptr();
            // SAFETY: `p` is valid (type invariant of `CoreSgt`).
            if unsafe { (*p).sgl } == mine {
                // SAFETY: the core's table heads our chain (type invariant of `SgRecord`).
                unsafe { bindings::sg_free_table(p) };
                return true;
            }
        }
        let mut table = bindings::sg_table {
            sgl: mine,
            nents: self.nents,
            orig_nents: self.orig_nents,
        };
        // SAFETY: the rebuilt header heads our chain with its allocated count (type invariant),
        // freed exactly once here.
        unsafe { bindings::sg_free_table(&mut table) };
        !given
    }
}
