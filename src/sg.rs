// SPDX-License-Identifier: GPL-2.0

//! The scatter-gather table dma_map fills in the core's `sg_head`.
//!
//! nvpeer allocates the table in dma_map and frees it exactly once: in put_pages when the core
//! hands the same table back (the header's rule), or in release when it never does (after an
//! invalidation under `PEER_MEM_INVALIDATE_UNMAPS` the core calls neither dma_unmap nor
//! put_pages). A copy of the table header is kept so release can free it without the core's struct.

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
pub(crate) struct CoreSgt<'a>(NonNull<bindings::sg_table>, PhantomData<&'a mut bindings::sg_table>);

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

/// A table nvpeer allocated (a copy of its header: the chain pointer and counts). Kept in 16 bytes
/// (the chain pointer is non-null, so `Option<SgRecord>` costs nothing more): it lives in every
/// registration's record (`src/footprint.rs`).
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

impl SgRecord {
    /// Allocates `addrs.len()` entries in `sgt` and fills one 64 KiB DMA-only entry per address.
    pub(crate) fn build(sgt: &CoreSgt<'_>, addrs: &[u64]) -> Result<Self> {
        let n = u32::try_from(addrs.len()).map_err(|_| EINVAL)?;
        let p = sgt.0.as_ptr();
        // SAFETY: `p` is the core's table (type invariant of `CoreSgt`), zeroed by the core.
        to_result(unsafe { bindings::sg_alloc_table(p, n, bindings::GFP_KERNEL) })?;
        // SAFETY: `p` now holds `n` entries; `addrs` has `n` elements.
        let rc = unsafe { ffi::nvpeer_shim_sg_fill(p, addrs.as_ptr(), n, GPU_PAGE_SIZE as u32) };
        if rc != 0 {
            // SAFETY: allocated just above and not handed to anyone.
            unsafe { bindings::sg_free_table(p) };
            return Err(Error::from_errno(rc));
        }
        // SAFETY: `p` is valid for reads.
        let (sgl, nents, orig_nents) = unsafe { ((*p).sgl, (*p).nents, (*p).orig_nents) };
        let Some(sgl) = NonNull::new(sgl) else {
            // A successful `sg_alloc_table` leaves a chain; checked, not assumed.
            // SAFETY: allocated just above and not handed to anyone.
            unsafe { bindings::sg_free_table(p) };
            return Err(EINVAL);
        };
        // INVARIANT: the chain was allocated above; the record shares it.
        Ok(Self { sgl, nents, orig_nents })
    }

    /// Number of entries.
    pub(crate) fn nents(&self) -> u32 {
        self.nents
    }

    /// Frees the chain. When `sgt` is the same table the core got from dma_map, it is freed through
    /// the core's struct (which is then cleared); otherwise through our copy. Returns whether the
    /// core's table matched.
    pub(crate) fn free(self, sgt: Option<&CoreSgt<'_>>) -> bool {
        let mine = self.sgl.as_ptr();
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
        sgt.is_none()
    }
}
