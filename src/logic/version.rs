// SPDX-License-Identifier: GPL-2.0

//! Runtime checks of the structure versions NVIDIA's P2P API hands back.
//!
//! Page tables come in two incompatible majors (v1 = 0x0001xxxx up to driver 575, v2 =
//! 0x0002xxxx from 580, which adds `flags`); the DMA mapping has been 0x00020003 in every open
//! release. A module built against one header must not assume the other's layout, so the version
//! is classified at runtime and `flags` is only read from a v2 table.

/// Page-table ABI of a table returned by `nvidia_p2p_get_pages*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PtAbi {
    /// 0x00010001.. (no `flags`; `gpu_uuid` from minor 2).
    V1,
    /// 0x00020000.. (adds `flags`).
    V2,
}

const fn major(v: u32) -> u32 {
    v >> 16
}

const fn minor(v: u32) -> u32 {
    v & 0xffff
}

/// Oldest v1 page table we accept: 0x00010001 lacks `gpu_uuid`, which `dma_map_pages` needs.
pub(crate) const PT_V1_MIN: u32 = 0x0001_0002;
/// DMA mapping version we were written for (`entries` + `dma_addresses` at their v2 offsets).
pub(crate) const DMA_MAPPING_MIN: u32 = 0x0002_0003;

/// Classifies a page-table version; `None` = unsupported (refuse the table).
pub(crate) fn page_table_abi(version: u32) -> Option<PtAbi> {
    match major(version) {
        1 if minor(version) >= minor(PT_V1_MIN) => Some(PtAbi::V1),
        2 => Some(PtAbi::V2),
        _ => None,
    }
}

/// Whether a DMA mapping of this version has the layout we read (same major, minor at least ours).
pub(crate) fn dma_mapping_compatible(version: u32) -> bool {
    major(version) == major(DMA_MAPPING_MIN) && minor(version) >= minor(DMA_MAPPING_MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_table_versions() {
        assert_eq!(page_table_abi(0x0001_0001), None);
        assert_eq!(page_table_abi(0x0001_0002), Some(PtAbi::V1));
        assert_eq!(page_table_abi(0x0001_0003), Some(PtAbi::V1));
        assert_eq!(page_table_abi(0x0002_0000), Some(PtAbi::V2));
        assert_eq!(page_table_abi(0x0002_0007), Some(PtAbi::V2));
        assert_eq!(page_table_abi(0x0003_0000), None);
        assert_eq!(page_table_abi(0), None);
    }

    #[test]
    fn dma_mapping_versions() {
        assert!(dma_mapping_compatible(0x0002_0003));
        assert!(dma_mapping_compatible(0x0002_0004));
        assert!(!dma_mapping_compatible(0x0002_0002));
        assert!(!dma_mapping_compatible(0x0001_0003));
        assert!(!dma_mapping_compatible(0x0003_0003));
    }
}
