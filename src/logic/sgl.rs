// SPDX-License-Identifier: GPL-2.0

//! Scatter-gather list planning for `dma_map`.
//!
//! The core wants one SG entry per DMA-contiguous chunk, each PAGE_SIZE aligned and a whole number
//! of host pages long, and reads the granule back with `get_page_size`. nvpeer emits exactly one
//! 64 KiB entry per GPU page (what every peer-memory core and HCA driver has been tested with),
//! after checking that the mapping NVIDIA returned really covers the pinned range.

use super::range::{Cover, GPU_PAGE_SIZE};

/// Why a DMA mapping cannot be turned into an SG list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SglError {
    /// The mapping's entry count differs from the number of pinned GPU pages.
    EntryCount,
    /// A bus address is not aligned to the host page size or its chunk would wrap.
    Address,
}

/// One SG entry: DMA address and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SgEntry {
    /// Bus address for the HCA.
    pub(crate) addr: u64,
    /// Length in bytes (always one GPU page).
    pub(crate) len: u32,
}

/// Number of SG entries to allocate for a mapping of `entries` pages over `cover`.
pub(crate) fn plan(cover: &Cover, entries: u32) -> Result<u32, SglError> {
    if entries == 0 || u64::from(entries) != cover.pages() {
        return Err(SglError::EntryCount);
    }
    Ok(entries)
}

/// The SG entry for one GPU page mapped at bus address `dma`.
pub(crate) fn entry(dma: u64, host_page_size: u64) -> Result<SgEntry, SglError> {
    if host_page_size == 0 || dma % host_page_size != 0 || dma.checked_add(GPU_PAGE_SIZE).is_none()
    {
        return Err(SglError::Address);
    }
    Ok(SgEntry {
        addr: dma,
        len: GPU_PAGE_SIZE as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::super::range::cover;
    use super::*;

    #[test]
    fn entry_count_must_match_cover() {
        let c = cover(0x1_0001, 0x1_0000).unwrap(); // two pages
        assert_eq!(plan(&c, 2), Ok(2));
        assert_eq!(plan(&c, 1), Err(SglError::EntryCount));
        assert_eq!(plan(&c, 3), Err(SglError::EntryCount));
        assert_eq!(plan(&c, 0), Err(SglError::EntryCount));
    }

    #[test]
    fn entries_are_one_gpu_page_each() {
        assert_eq!(
            entry(0xf000_0000, 4096),
            Ok(SgEntry {
                addr: 0xf000_0000,
                len: 0x1_0000
            })
        );
    }

    #[test]
    fn misaligned_or_wrapping_addresses_are_refused() {
        assert_eq!(entry(0xf000_0800, 4096), Err(SglError::Address));
        assert_eq!(entry(!0xfff, 4096), Err(SglError::Address));
        assert_eq!(entry(0x1000, 0), Err(SglError::Address));
    }
}
