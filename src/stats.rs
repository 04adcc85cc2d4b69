// SPDX-License-Identifier: GPL-2.0

//! Global counters, shown in `/sys/kernel/debug/nvpeer/stats` (format: `uapi/debugfs.md`).
//!
//! Plain relaxed atomics: each counter is exact, but a read of the whole file is not a snapshot.

use kernel::fmt;
use kernel::sync::atomic::{Atomic, Relaxed};

/// A monotonically increasing event counter, or a gauge when it is also decremented.
pub(crate) struct Counter(Atomic<u64>);

impl Counter {
    const fn new() -> Self {
        Self(Atomic::new(0))
    }

    /// Adds one.
    pub(crate) fn inc(&self) {
        self.0.add(1u64, Relaxed);
    }

    /// Adds `n`.
    pub(crate) fn add(&self, n: u64) {
        self.0.add(n, Relaxed);
    }

    /// Subtracts `n` (gauges only; callers pair every `sub` with an earlier `add`).
    pub(crate) fn sub(&self, n: u64) {
        crate::compat::fetch_sub(&self.0, n, Relaxed);
    }

    /// Current value.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Every counter of the module; the field names are the names printed in debugfs.
        pub(crate) struct Stats {
            $($(#[$doc])* pub(crate) $name: Counter,)*
        }

        /// The module's counters.
        pub(crate) static STATS: Stats = Stats { $($name: Counter::new(),)* };

        impl Stats {
            /// Writes `name value` lines.
            pub(crate) fn render(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                $(writeln!(f, "{} {}", stringify!($name), self.$name.get())?;)*
                Ok(())
            }
        }
    };
}

counters! {
    /// acquire() calls from the core.
    acquire_calls,
    /// acquire() that returned 1 (range is GPU memory, pinned).
    acquire_claimed,
    /// acquire() that returned 0 (not ours).
    acquire_declined,
    /// get_pages() calls.
    get_pages_calls,
    /// dma_map() calls.
    dma_map_calls,
    /// dma_unmap() calls.
    dma_unmap_calls,
    /// put_pages() calls.
    put_pages_calls,
    /// get_page_size() calls.
    get_page_size_calls,
    /// release() calls.
    release_calls,
    /// dma_map() successes (MRs handed to the HCA).
    registrations,
    /// Registration objects alive now.
    live_mrs,
    /// Bytes pinned through NVIDIA now.
    pinned_bytes,
    /// Bytes ever pinned.
    pinned_bytes_total,
    /// get_pages() with a range other than acquire's (pin replaced).
    repins,
    /// NVIDIA free callbacks received.
    callbacks,
    /// Callbacks that told the core to invalidate a mapped MR.
    invalidations,
    /// Callbacks on registrations not mapped (yet or any more).
    callbacks_unmapped,
    /// Callbacks whose ticket matched no live pin (ignored).
    callbacks_stale,
    /// Non-persistent pins put from a foreign process, left to the callback.
    orphaned_pins,
    /// nvidia_p2p_get_pages calls.
    provider_get_pages,
    /// nvidia_p2p_get_pages_persistent calls.
    provider_get_pages_persistent,
    /// nvidia_p2p_put_pages calls.
    provider_put_pages,
    /// nvidia_p2p_put_pages_persistent calls.
    provider_put_pages_persistent,
    /// nvidia_p2p_dma_map_pages calls.
    provider_dma_map_pages,
    /// nvidia_p2p_dma_unmap_pages calls.
    provider_dma_unmap_pages,
    /// nvidia_p2p_free_page_table calls.
    provider_free_page_table,
    /// nvidia_p2p_free_dma_mapping calls.
    provider_free_dma_mapping,
    /// Pin calls that failed (includes host memory probed by acquire).
    err_pin,
    /// Ranges refused before calling NVIDIA (empty or overflowing).
    err_range,
    /// Page tables with an unsupported version.
    err_page_table_version,
    /// Page tables whose page size is not 64 KiB.
    err_page_size,
    /// Page tables or mappings whose entry count does not match the range.
    err_entries,
    /// dma_map() for a DMA device that is not PCI.
    err_not_pci,
    /// nvidia_p2p_dma_map_pages failures.
    err_dma_map,
    /// DMA mappings with an unsupported version.
    err_dma_mapping_version,
    /// Allocation failures (context, SG table, registry).
    err_nomem,
    /// DMA addresses unusable for an SG table.
    err_sgl,
    /// put_pages* failures (logged, pin considered gone).
    err_put,
    /// dma_unmap_pages failures (logged).
    err_unmap,
    /// Operations that failed because NVIDIA revoked the pin first.
    err_revoked,
    /// Core calls out of order (refused, nothing changed).
    err_order,
    /// sg_table handed back that is not the one dma_map filled.
    err_sg_mismatch,
    /// Free callbacks that overtook a put_pages or dma_map_pages of ours in flight.
    overtaken_calls,
    /// Pins that waited for such a call to return before calling NVIDIA.
    pin_waits,
}
