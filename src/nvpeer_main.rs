// SPDX-License-Identifier: GPL-2.0

//! nvpeer: GPUDirect RDMA peer-memory client (successor of nv_peer_mem / nvidia-peermem).
//!
//! Registers the `nv_mem` (and optionally `nv_mem_nc`) client with the MLNX_OFED / DOCA-OFED
//! peer-memory core and serves HCA registrations of NVIDIA GPU memory through NVIDIA's P2P API.
//! Design, lifetimes and locking: `docs/design.md`.

use kernel::prelude::*;

// First: its macros (`cstr!`, `err_once!`, `warn_once!`) serve the modules below.
#[macro_use]
mod compat;
mod abi;
mod client_registration;
mod client_tables;
mod debugfs;
mod ffi;
mod invalidate;
mod logic;
mod modref;
mod mr;
mod overtaken;
mod p2p;
mod peer_ops;
mod registry;
mod sg;
mod stats;

use client_registration::ClientRegistration;
use logic::params;

// Kernels whose module! takes no parameters (before 6.19): the C shim declares the same two
// (src/nvpeer_shim.c, src/compat.rs).
#[cfg(not(nvpeer_has_module_params))]
module! {
    type: NvPeer,
    name: "nvpeer",
    authors: ["nvpeer developers"],
    description: "GPUDirect RDMA peer-memory client for NVIDIA GPUs (nv_mem)",
    license: "GPL",
}

#[cfg(nvpeer_has_module_params)]
module! {
    type: NvPeer,
    name: "nvpeer",
    authors: ["nvpeer developers"],
    description: "GPUDirect RDMA peer-memory client for NVIDIA GPUs (nv_mem)",
    license: "GPL",
    params: {
        persistent_api_support: i32 {
            default: 1,
            description: "1: one persistent client named nv_mem (default); \
                          0: invalidating nv_mem + persistent nv_mem_nc",
        },
        peerdirect_support: i32 {
            default: 0,
            description: "1: invalidating client in the MLNX_OFED 4.x layout (OFED 4.9 LTS); \
                          0: extended client",
        },
    },
}

struct NvPeer {
    // Dropped in this order (after `Drop::drop` stopped new claims): the clients first (each
    // unregistration waits until the core released every registration acquired through it),
    // then the debugfs files.
    _clients: KVec<ClientRegistration>,
    _debugfs: debugfs::DebugFs,
}

impl kernel::Module for NvPeer {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let (persistent_api_support, peerdirect_support) = compat::params();
        let config = params::config(persistent_api_support, peerdirect_support).map_err(|e| {
            pr_err!("invalid {} value {} (allowed: 0 or 1)\n", e.name, e.value);
            EINVAL
        })?;
        client_registration::refuse_other_nv_mem_module()?;
        // SAFETY: called once, before any client can call into the registry.
        unsafe { registry::init() };
        // SAFETY: called once, before any client can pin or put.
        unsafe { overtaken::init() };
        let kinds = config.clients();
        let debugfs = debugfs::DebugFs::new(debugfs::ConfigInfo {
            persistent_api_support,
            peerdirect_support,
            clients: kinds,
        })?;
        let mut clients = KVec::with_capacity(kinds.len(), GFP_KERNEL)?;
        // The clients come last: nothing after them can fail, and `acquire` claims nothing until
        // all of them are registered. On error, those registered so far are unregistered when
        // `clients` drops, before any registration could be claimed through them.
        for kind in kinds.into_iter().flatten() {
            clients
                .push_within_capacity(ClientRegistration::register(kind)?)
                .map_err(|_| ENOMEM)?;
        }
        peer_ops::start_serving();
        for kind in clients.iter().map(ClientRegistration::kind) {
            pr_info!(
                "registered peer-memory client {} ({}), version {}\n",
                kind.name(),
                kind.describe(),
                client_tables::VERSION
            );
        }
        Ok(NvPeer {
            _clients: clients,
            _debugfs: debugfs,
        })
    }
}

impl Drop for NvPeer {
    fn drop(&mut self) {
        peer_ops::stop_serving();
        // `rmmod` got here because no registration holds a module reference; a free callback
        // may still be returning from dropping the last one.
        p2p::wait_for_callbacks();
    }
}
