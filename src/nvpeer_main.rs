// SPDX-License-Identifier: GPL-2.0

//! nvpeer: GPUDirect RDMA peer-memory client (successor of nv_peer_mem / nvidia-peermem).
//!
//! Registers the `nv_mem` (and optionally `nv_mem_nc`) client with the MLNX_OFED / DOCA-OFED
//! peer-memory core and serves HCA registrations of NVIDIA GPU memory through NVIDIA's P2P API.
//! Design, lifetimes and locking: `docs/design.md`.

use kernel::prelude::*;

mod abi;
mod client;
mod debugfs;
mod ffi;
mod modref;
mod mr;
mod p2p;
mod registry;
mod sg;
mod stats;

/// Pure logic shared with the host test crate (`src/logic/Cargo.toml`).
mod logic {
    #[path = "params.rs"]
    pub(crate) mod params;
    #[path = "range.rs"]
    pub(crate) mod range;
    #[path = "sgl.rs"]
    pub(crate) mod sgl;
    #[path = "state.rs"]
    pub(crate) mod state;
    #[path = "version.rs"]
    pub(crate) mod version;
}

use client::{Registration, Which};
use logic::params;

module! {
    type: NvPeer,
    name: "nvpeer",
    authors: ["nvpeer developers"],
    description: "GPUDirect RDMA peer-memory client for NVIDIA GPUs (nv_mem)",
    license: "GPL",
    params: {
        persistent_api_support: i32 {
            default: 1,
            description: "1: one persistent client named nv_mem (default); 0: invalidating nv_mem + persistent nv_mem_nc",
        },
        peerdirect_support: i32 {
            default: 0,
            description: "1: invalidating client in the MLNX_OFED 4.x layout (OFED 4.9 LTS); 0: extended client",
        },
    },
}

struct NvPeer {
    // Dropped in this order: clients first (waits until the core released everything), then
    // the debugfs files.
    _clients: KVec<Registration>,
    _debugfs: debugfs::DebugFs,
}

impl kernel::Module for NvPeer {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        abi::check()?;
        let pas = *module_parameters::persistent_api_support.value();
        let pds = *module_parameters::peerdirect_support.value();
        let cfg = params::config(pas, pds).map_err(|e| {
            pr_err!("nvpeer: invalid {} value {} (allowed: 0 or 1)\n", e.name, e.value);
            EINVAL
        })?;
        // SAFETY: called once, before any client can call into the registry.
        unsafe { registry::init() };

        let mut wanted = [None, None];
        if let Some(layout) = cfg.invalidating {
            wanted[0] = Some(Which::Invalidating(layout));
        }
        wanted[1] = Some(Which::Persistent {
            nc: cfg.persistent_name == "nv_mem_nc",
        });
        let mut clients = KVec::new();
        for w in wanted.iter().flatten() {
            // On error, the clients registered so far are unregistered when `clients` drops.
            clients.push(Registration::register(*w)?, GFP_KERNEL)?;
        }
        let debugfs = debugfs::DebugFs::new(debugfs::ConfigInfo {
            persistent_api_support: pas,
            peerdirect_support: pds,
            clients: wanted,
        })?;
        for r in clients.iter() {
            let w = r.which();
            pr_info!("nvpeer {}: registered peer-memory client {} ({})\n", client::VERSION, w.name().1, w.describe());
        }
        Ok(NvPeer {
            _clients: clients,
            _debugfs: debugfs,
        })
    }
}
