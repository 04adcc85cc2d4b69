// SPDX-License-Identifier: GPL-2.0

//! How much kernel memory nvpeer itself keeps per live registration.
//!
//! A registration owns exactly two allocations for as long as it is live: its record (the
//! `Arc<Mr>`, state and lock included) and its node in the ticket registry. Both are reported as
//! the slab allocator hands them out (`kmalloc_size_roundup`), so the figure is what a live MR
//! costs in this kernel's `kmalloc-N` caches. Not ours and not counted: the core's SG table and
//! its chain, NVIDIA's page table and DMA mapping. Debug options (lockdep, mutex debugging)
//! enlarge the record's lock; the figure is computed for the kernel the module was built for.
//! Shown in debugfs `config` (`uapi/debugfs.md`).

use crate::mr::Mr;
use core::alloc::Layout;
use core::mem::size_of;
use kernel::bindings;
use kernel::fmt;
use kernel::sync::Arc;

/// Requested and allocated bytes of one allocation.
#[derive(Clone, Copy)]
pub(crate) struct Alloc {
    pub(crate) requested: usize,
    pub(crate) allocated: usize,
}

impl Alloc {
    fn of(requested: usize) -> Self {
        // SAFETY: `kmalloc_size_roundup` only computes the size class of its argument; it takes
        // no pointer and no lock and may be called from any context.
        let allocated = unsafe { bindings::kmalloc_size_roundup(requested) };
        Self { requested, allocated }
    }
}

/// The two allocations of a live registration.
pub(crate) struct Footprint {
    /// The `Arc<Mr>` allocation: a `refcount_t` followed by the record (the kernel crate's
    /// `ArcInner` is `#[repr(C)]`).
    pub(crate) record: Alloc,
    /// The registry's red-black tree node: links, ticket, one `Arc<Mr>`.
    pub(crate) node: Alloc,
}

impl Footprint {
    /// This build's figures.
    pub(crate) fn get() -> Self {
        let record = Layout::new::<bindings::refcount_t>()
            .extend(Layout::new::<Mr>())
            .map_or(size_of::<bindings::refcount_t>() + size_of::<Mr>(), |(l, _)| {
                l.pad_to_align().size()
            });
        let node = size_of::<bindings::rb_node>() + size_of::<u64>() + size_of::<Arc<Mr>>();
        Self {
            record: Alloc::of(record),
            node: Alloc::of(node),
        }
    }

    /// Bytes allocated per live registration.
    pub(crate) fn total(&self) -> usize {
        self.record.allocated + self.node.allocated
    }

    /// The `config` line.
    pub(crate) fn render(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "mr_footprint_bytes {} record {}/{} node {}/{}",
            self.total(),
            self.record.requested,
            self.record.allocated,
            self.node.requested,
            self.node.allocated
        )
    }
}
