// SPDX-License-Identifier: GPL-2.0

//! nvpeer: GPUDirect RDMA peer-memory client (successor of nv_peer_mem / nvidia-peermem).
//!
//! Registers the `nv_mem` (and optionally `nv_mem_nc`) client with the MLNX_OFED / DOCA-OFED
//! peer-memory core and serves HCA registrations of NVIDIA GPU memory through NVIDIA's P2P API.
//! Design, lifetimes and locking: `docs/design.md`.

use kernel::prelude::*;

mod abi;
mod client;
mod compat;
mod debugfs;
mod ffi;
mod footprint;
mod modref;
mod mr;
mod p2p;
mod registry;
mod sg;
mod stats;

/// Pure logic shared with the host test crate (`src/logic/Cargo.toml`).
mod logic {
    #[path = "errno.rs"]
    pub(crate) mod errno;
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
        let pas = compat::param_value(&module_parameters::persistent_api_support);
        let pds = compat::param_value(&module_parameters::peerdirect_support);
        let cfg = params::config(pas, pds).map_err(|e| {
            pr_err!("invalid {} value {} (allowed: 0 or 1)\n", e.name, e.value);
            EINVAL
        })?;
        client::refuse_other_nv_mem_module()?;
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
            pr_info!("registered peer-memory client {} ({}), version {}\n", w.name().1, w.describe(), client::VERSION);
        }
        Ok(NvPeer {
            _clients: clients,
            _debugfs: debugfs,
        })
    }
}

/// In-kernel checks of the shared logic, run by KUnit when the module loads on a kernel with
/// `CONFIG_KUNIT=y` (the bench); compiled out elsewhere. Results: KTAP lines `nvpeer_logic` in
/// the kernel log. The host `cargo test` in `src/logic` covers the same files more thoroughly.
#[kunit_tests(nvpeer_logic)]
mod kunit {
    use super::logic::params::{config, Layout};
    use super::logic::range::cover;
    use super::logic::sgl::{entry, plan};
    use super::logic::state::{step, Action, Event, State};
    use super::logic::version::{dma_mapping_compatible, page_table_abi, PtAbi};

    #[test]
    fn cover_aligns_to_64k() {
        let c = cover(0x1_0001, 0x1_0000);
        assert_eq!(c.map(|c| (c.start(), c.len())), Some((0x1_0000, 0x2_0000)));
        assert!(cover(u64::MAX, 1).is_none());
        assert!(cover(0, 0).is_none());
    }

    #[test]
    fn sgl_matches_cover() {
        let c = cover(0, 0x3_0000).unwrap_or_else(|| unreachable!());
        assert_eq!(plan(&c, 3), Ok(3));
        assert!(plan(&c, 2).is_err());
        assert!(entry(0x1000, 4096).is_ok());
        assert!(entry(0x1800, 4096).is_err());
    }

    #[test]
    fn versions() {
        assert_eq!(page_table_abi(0x0001_0002), Some(PtAbi::V1));
        assert_eq!(page_table_abi(0x0002_0000), Some(PtAbi::V2));
        assert_eq!(page_table_abi(0x0003_0000), None);
        assert!(dma_mapping_compatible(0x0002_0003));
        assert!(!dma_mapping_compatible(0x0001_0003));
    }

    #[test]
    fn params() {
        assert_eq!(config(1, 0).map(|c| c.persistent_name), Ok("nv_mem"));
        assert_eq!(config(0, 1).map(|c| c.invalidating), Ok(Some(Layout::Legacy)));
        assert!(config(2, 0).is_err());
    }

    #[test]
    fn callback_only_notifies_mapped() {
        assert_eq!(step(State::Mapped, Event::Callback), Ok((State::Invalidating, Action::NotifyCore)));
        assert_eq!(step(State::Mapping, Event::Callback), Ok((State::Revoked, Action::None)));
        assert_eq!(step(State::Invalidating, Event::Unpin { foreign: false }), Ok((State::Invalidating, Action::None)));
    }
}
