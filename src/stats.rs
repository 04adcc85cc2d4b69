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
        self.0.fetch_sub(n, Relaxed);
    }

    /// Current value.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

macro_rules! counters {
    ($($field:ident => $key:literal, $doc:literal;)*) => {
        /// Every counter of the module; names as printed in debugfs.
        pub(crate) struct Stats {
            $(#[doc = $doc] pub(crate) $field: Counter,)*
        }

        /// The module's counters.
        pub(crate) static STATS: Stats = Stats { $($field: Counter::new(),)* };

        impl Stats {
            /// Writes `key value` lines.
            pub(crate) fn render(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                $(writeln!(f, "{} {}", $key, self.$field.get())?;)*
                Ok(())
            }
        }
    };
}

counters! {
    acquire_calls => "acquire_calls", "acquire() calls from the core.";
    acquire_claimed => "acquire_claimed", "acquire() that returned 1 (range is GPU memory, pinned).";
    acquire_declined => "acquire_declined", "acquire() that returned 0 (not ours).";
    get_pages_calls => "get_pages_calls", "get_pages() calls.";
    dma_map_calls => "dma_map_calls", "dma_map() calls.";
    dma_unmap_calls => "dma_unmap_calls", "dma_unmap() calls.";
    put_pages_calls => "put_pages_calls", "put_pages() calls.";
    get_page_size_calls => "get_page_size_calls", "get_page_size() calls.";
    release_calls => "release_calls", "release() calls.";
    registrations => "registrations", "dma_map() successes (MRs handed to the HCA).";
    live_mrs => "live_mrs", "Registration objects alive now.";
    pinned_bytes => "pinned_bytes", "Bytes pinned through NVIDIA now.";
    pinned_total => "pinned_bytes_total", "Bytes ever pinned.";
    repins => "repins", "get_pages() with a range other than acquire's (pin replaced).";
    callbacks => "callbacks", "NVIDIA free callbacks received.";
    invalidations => "invalidations", "Callbacks that told the core to invalidate a mapped MR.";
    callbacks_unmapped => "callbacks_unmapped", "Callbacks on registrations not mapped (yet or any more).";
    callbacks_stale => "callbacks_stale", "Callbacks whose ticket matched no live pin (ignored).";
    orphaned_pins => "orphaned_pins", "Non-persistent pins put from a foreign process, left to the callback.";
    p_get_pages => "provider_get_pages", "nvidia_p2p_get_pages calls.";
    p_get_pages_persistent => "provider_get_pages_persistent", "nvidia_p2p_get_pages_persistent calls.";
    p_put_pages => "provider_put_pages", "nvidia_p2p_put_pages calls.";
    p_put_pages_persistent => "provider_put_pages_persistent", "nvidia_p2p_put_pages_persistent calls.";
    p_dma_map_pages => "provider_dma_map_pages", "nvidia_p2p_dma_map_pages calls.";
    p_dma_unmap_pages => "provider_dma_unmap_pages", "nvidia_p2p_dma_unmap_pages calls.";
    p_free_page_table => "provider_free_page_table", "nvidia_p2p_free_page_table calls.";
    p_free_dma_mapping => "provider_free_dma_mapping", "nvidia_p2p_free_dma_mapping calls.";
    err_pin => "err_pin", "Pin calls that failed (includes host memory probed by acquire).";
    err_range => "err_range", "Ranges refused before calling NVIDIA (empty or overflowing).";
    err_version => "err_page_table_version", "Page tables with an unsupported version.";
    err_page_size => "err_page_size", "Page tables whose page size is not 64 KiB.";
    err_entries => "err_entries", "Page tables or mappings whose entry count does not match the range.";
    err_not_pci => "err_not_pci", "dma_map() for a DMA device that is not PCI.";
    err_dma_map => "err_dma_map", "nvidia_p2p_dma_map_pages failures.";
    err_dma_version => "err_dma_mapping_version", "DMA mappings with an unsupported version.";
    err_nomem => "err_nomem", "Allocation failures (context, SG table, registry).";
    err_sgl => "err_sgl", "DMA addresses unusable for an SG table.";
    err_put => "err_put", "put_pages* failures (logged, pin considered gone).";
    err_unmap => "err_unmap", "dma_unmap_pages failures (logged).";
    err_gone => "err_revoked", "Operations that failed because NVIDIA revoked the pin first.";
    err_order => "err_order", "Core calls out of order (refused, nothing changed).";
    err_sg_mismatch => "err_sg_mismatch", "sg_table handed back that is not the one dma_map filled.";
}
