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

/// `(our value, what it is)`, indexed by the shim's fact number (`enum nvpeer_layout_fact`).
macro_rules! facts {
    ($($ours:expr => $what:literal,)*) => {
        [$(($ours as u64, $what),)*]
    };
}

const FACTS: [(u64, &str); 18] = facts![
    size_of::<PeerMemoryClient>() => "sizeof(struct peer_memory_client)",
    offset_of!(PeerMemoryClient, version) => "offsetof(peer_memory_client, version)",
    offset_of!(PeerMemoryClient, acquire) => "offsetof(peer_memory_client, acquire)",
    offset_of!(PeerMemoryClient, release) => "offsetof(peer_memory_client, release)",
    size_of::<PeerMemoryClientEx>() => "sizeof(struct peer_memory_client_ex)",
    offset_of!(PeerMemoryClientEx, ex_size) => "offsetof(peer_memory_client_ex, ex_size)",
    offset_of!(PeerMemoryClientEx, flags) => "offsetof(peer_memory_client_ex, flags)",
    ffi::PEER_MEM_INVALIDATE_UNMAPS => "PEER_MEM_INVALIDATE_UNMAPS",
    ffi::PEER_NAME_MAX => "IB_PEER_MEMORY_NAME_MAX",
    ffi::PEER_VER_MAX => "IB_PEER_MEMORY_VER_MAX",
    offset_of!(NvidiaP2pPageTable, entries) => "offsetof(nvidia_p2p_page_table, entries)",
    offset_of!(NvidiaP2pPageTable, gpu_uuid) => "offsetof(nvidia_p2p_page_table, gpu_uuid)",
    size_of::<NvidiaP2pPage>() => "sizeof(struct nvidia_p2p_page)",
    offset_of!(NvidiaP2pDmaMapping, entries) => "offsetof(nvidia_p2p_dma_mapping, entries)",
    offset_of!(NvidiaP2pDmaMapping, dma_addresses) =>
        "offsetof(nvidia_p2p_dma_mapping, dma_addresses)",
    size_of::<NvidiaP2pDmaMapping>() => "sizeof(struct nvidia_p2p_dma_mapping)",
    PAGE_SIZE_64KB => "NVIDIA_P2P_PAGE_SIZE_64KB",
    DMA_MAPPING_MIN => "NVIDIA_P2P_DMA_MAPPING_VERSION",
];

/// Compares every fact and the version string of both halves of the module.
pub(crate) fn check() -> Result {
    for (fact, (ours, what)) in (0u32..).zip(FACTS) {
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
