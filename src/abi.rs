// SPDX-License-Identifier: GPL-2.0

//! Load-time check of the hand-written layouts in `ffi.rs` against the C headers.
//!
//! The C shim was compiled against the very `peer_mem.h` / `nv-p2p.h` this build used and reports
//! `sizeof`/`offsetof` facts; any difference refuses the load with one line naming the fact, so a
//! header drift can never turn into a silent memory corruption.

use crate::client::VERSION;
use crate::ffi::{
    self, NvidiaP2pDmaMapping, NvidiaP2pPage, NvidiaP2pPageTable, PeerMemoryClient,
    PeerMemoryClientEx,
};
use crate::logic::version::{DMA_MAPPING_MIN, PAGE_SIZE_64KB};
use core::mem::{offset_of, size_of};
use kernel::prelude::*;

/// (shim fact number, our value, what it is). Numbers: `enum nvpeer_layout_fact`.
const FACTS: [(u32, u64, &str); 18] = [
    (
        0,
        size_of::<PeerMemoryClient>() as u64,
        "sizeof(struct peer_memory_client)",
    ),
    (
        1,
        offset_of!(PeerMemoryClient, version) as u64,
        "offsetof(peer_memory_client, version)",
    ),
    (
        2,
        offset_of!(PeerMemoryClient, acquire) as u64,
        "offsetof(peer_memory_client, acquire)",
    ),
    (
        3,
        offset_of!(PeerMemoryClient, release) as u64,
        "offsetof(peer_memory_client, release)",
    ),
    (
        4,
        size_of::<PeerMemoryClientEx>() as u64,
        "sizeof(struct peer_memory_client_ex)",
    ),
    (
        5,
        offset_of!(PeerMemoryClientEx, ex_size) as u64,
        "offsetof(peer_memory_client_ex, ex_size)",
    ),
    (
        6,
        offset_of!(PeerMemoryClientEx, flags) as u64,
        "offsetof(peer_memory_client_ex, flags)",
    ),
    (
        7,
        ffi::PEER_MEM_INVALIDATE_UNMAPS as u64,
        "PEER_MEM_INVALIDATE_UNMAPS",
    ),
    (8, ffi::PEER_NAME_MAX as u64, "IB_PEER_MEMORY_NAME_MAX"),
    (9, ffi::PEER_VER_MAX as u64, "IB_PEER_MEMORY_VER_MAX"),
    (
        10,
        offset_of!(NvidiaP2pPageTable, entries) as u64,
        "offsetof(nvidia_p2p_page_table, entries)",
    ),
    (
        11,
        offset_of!(NvidiaP2pPageTable, gpu_uuid) as u64,
        "offsetof(nvidia_p2p_page_table, gpu_uuid)",
    ),
    (
        12,
        size_of::<NvidiaP2pPage>() as u64,
        "sizeof(struct nvidia_p2p_page)",
    ),
    (
        13,
        offset_of!(NvidiaP2pDmaMapping, entries) as u64,
        "offsetof(nvidia_p2p_dma_mapping, entries)",
    ),
    (
        14,
        offset_of!(NvidiaP2pDmaMapping, dma_addresses) as u64,
        "offsetof(nvidia_p2p_dma_mapping, dma_addresses)",
    ),
    (
        15,
        size_of::<NvidiaP2pDmaMapping>() as u64,
        "sizeof(struct nvidia_p2p_dma_mapping)",
    ),
    (16, PAGE_SIZE_64KB as u64, "NVIDIA_P2P_PAGE_SIZE_64KB"),
    (17, DMA_MAPPING_MIN as u64, "NVIDIA_P2P_DMA_MAPPING_VERSION"),
];

/// Compares every fact and the version string of both halves of the module.
pub(crate) fn check() -> Result {
    for (fact, ours, what) in FACTS {
        // SAFETY: a pure function of its argument.
        let theirs = unsafe { ffi::nvpeer_shim_layout(fact) };
        if theirs != ours {
            pr_err!(
                "ABI mismatch: {} is {} in the C headers but {} in src/ffi.rs; run 'make \
                 ffi-check' and rebuild\n",
                what,
                theirs,
                ours
            );
            return Err(EINVAL);
        }
    }
    // SAFETY: the shim returns a static NUL-terminated string.
    let c = unsafe { CStr::from_char_ptr(ffi::nvpeer_shim_version()) };
    if c.to_bytes() != VERSION.as_bytes() {
        pr_err!("version mismatch between the C shim and the Rust code; rebuild from one tree\n");
        return Err(EINVAL);
    }
    Ok(())
}
