// SPDX-License-Identifier: GPL-2.0

//! The peer-memory client tables handed to the core, one `static` per [`ClientKind`].
//!
//! Each table is fully built in `const` (the core keeps a pointer to it until unregistration
//! returns, and nothing mutates it); its operations are the trampolines of `peer_ops.rs`, which
//! only [`peer_ops::client_table`] hands out.
//!
//! Client names: the core shows each client under `/sys/kernel/mm/memory_peers/<name>/` where it
//! has that directory. NCCL, NVSHMEM and UCC enable GPUDirect RDMA when `.../nv_mem/version` (or
//! `nv_mem_nc`) exists, so nvpeer registers the same names as nvidia-peermem.

use crate::ffi::{self, PeerMemoryClient, PeerMemoryClientEx, PEER_NAME_MAX, PEER_VER_MAX};
use crate::logic::params::Layout;
use crate::peer_ops;
use kernel::ffi::c_char;
use kernel::prelude::*;

pub(crate) use crate::logic::params::ClientKind;

/// Version string of the module (modinfo `version=`, sysfs `version` of each client): Kbuild's
/// `NVPEER_VERSION`. At most 14 characters: byte 15 of the client's version field is the
/// "extended" marker.
pub(crate) use crate::abi::VERSION;
const _: () = assert!(VERSION.len() <= PEER_VER_MAX - 2);

/// `s` as a NUL-padded C array of `N` bytes, with `marker` in the last byte.
const fn c_array<const N: usize>(s: &str, marker: bool) -> [c_char; N] {
    let b = s.as_bytes();
    let mut out = [0 as c_char; N];
    let mut i = 0;
    while i < b.len() && i < N - 1 {
        out[i] = b[i] as c_char;
        i += 1;
    }
    if marker {
        out[N - 1] = 1;
    }
    out
}

const fn table(kind: ClientKind, extended: bool) -> PeerMemoryClient {
    peer_ops::client_table(
        c_array::<PEER_NAME_MAX>(kind.name(), false),
        c_array::<PEER_VER_MAX>(VERSION, extended),
        kind.invalidates(),
    )
}

/// Persistent client, default name. `ex_size`/`flags` stay zero: it never invalidates, and a
/// MLNX_OFED 4.x core reads those words as private-data hooks that must be NULL.
static NV_MEM_PERSISTENT: PeerMemoryClientEx = PeerMemoryClientEx {
    client: table(ClientKind::Persistent, false),
    ex_size: 0,
    flags: 0,
};

/// Persistent client next to an invalidating `nv_mem` (`persistent_api_support=0`).
static NV_MEM_NC: PeerMemoryClientEx = PeerMemoryClientEx {
    client: table(ClientKind::PersistentNc, false),
    ex_size: 0,
    flags: 0,
};

/// Invalidating extended client: the core does not unmap inside invalidate.
static NV_MEM_INVALIDATING: PeerMemoryClientEx = PeerMemoryClientEx {
    client: table(ClientKind::Invalidating(Layout::Extended), true),
    ex_size: core::mem::size_of::<PeerMemoryClientEx>(),
    flags: ffi::PEER_MEM_INVALIDATE_UNMAPS,
};

/// Invalidating client in the MLNX_OFED 4.x layout (`peerdirect_support=1`).
static NV_MEM_INVALIDATING_LEGACY: PeerMemoryClientEx = PeerMemoryClientEx {
    client: table(ClientKind::Invalidating(Layout::Legacy), false),
    ex_size: 0,
    flags: 0,
};

/// The table registered for `kind`.
pub(crate) fn table_of(kind: ClientKind) -> &'static PeerMemoryClientEx {
    match kind {
        ClientKind::Persistent => &NV_MEM_PERSISTENT,
        ClientKind::PersistentNc => &NV_MEM_NC,
        ClientKind::Invalidating(Layout::Extended) => &NV_MEM_INVALIDATING,
        ClientKind::Invalidating(Layout::Legacy) => &NV_MEM_INVALIDATING_LEGACY,
    }
}

/// The client's name as a C string.
pub(crate) fn c_name(kind: ClientKind) -> &'static CStr {
    match kind {
        ClientKind::PersistentNc => cstr!(c"nv_mem_nc"),
        ClientKind::Persistent | ClientKind::Invalidating(_) => cstr!(c"nv_mem"),
    }
}
