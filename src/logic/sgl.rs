// SPDX-License-Identifier: GPL-2.0

//! Scatter-gather list checks for `dma_map`.
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

/// Checks that a mapping of `entries` GPU pages covers `cover` exactly (one SG entry each).
pub(crate) fn check_entry_count(cover: &Cover, entries: u32) -> Result<(), SglError> {
    if entries == 0 || u64::from(entries) != cover.pages() {
        return Err(SglError::EntryCount);
    }
    Ok(())
}

/// Checks that the GPU page mapped at bus address `dma` makes an entry the core accepts: host-page
/// aligned, and one GPU page long without wrapping.
pub(crate) fn check_address(dma: u64, host_page_size: u64) -> Result<(), SglError> {
    if host_page_size == 0 || dma % host_page_size != 0 || dma.checked_add(GPU_PAGE_SIZE).is_none()
    {
        return Err(SglError::Address);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::range::cover;
    use super::*;

    #[test]
    fn entry_count_must_match_cover() {
        let c = cover(0x1_0001, 0x1_0000).unwrap(); // two pages
        assert_eq!(check_entry_count(&c, 2), Ok(()));
        assert_eq!(check_entry_count(&c, 1), Err(SglError::EntryCount));
        assert_eq!(check_entry_count(&c, 3), Err(SglError::EntryCount));
        assert_eq!(check_entry_count(&c, 0), Err(SglError::EntryCount));
    }

    #[test]
    fn aligned_addresses_are_accepted() {
        assert_eq!(check_address(0xf000_0000, 4096), Ok(()));
        assert_eq!(check_address(0xffff_ffff_fffe_0000, 4096), Ok(()));
    }

    #[test]
    fn misaligned_or_wrapping_addresses_are_refused() {
        assert_eq!(check_address(0xf000_0800, 4096), Err(SglError::Address));
        assert_eq!(check_address(!0xfff, 4096), Err(SglError::Address));
        assert_eq!(check_address(0x1000, 0), Err(SglError::Address));
    }
}
