// SPDX-License-Identifier: GPL-2.0

//! KUnit suite `nvpeer_logic`: nvpeer's pure logic (`src/logic/`) as the kernel compiles it.
//!
//! A test module of its own, so that the product module carries no tests: it runs when loaded on
//! a kernel with `CONFIG_KUNIT=y` (the bench: `20-nvpeer-load`), results as KTAP lines in the
//! kernel log. The host `cargo test` in `src/logic` covers the same files more thoroughly.

use kernel::prelude::*;

// The suite exercises a sample of each file; the host tests cover every item.
#[allow(dead_code)]
#[path = "../../src/logic/mod.rs"]
mod logic;

module! {
    type: NvPeerLogicKunit,
    name: "nvpeer_logic_kunit",
    authors: ["nvpeer developers"],
    description: "KUnit tests of nvpeer's pure logic (bench only)",
    license: "GPL",
}

struct NvPeerLogicKunit;

impl kernel::Module for NvPeerLogicKunit {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        Ok(Self)
    }
}

#[kunit_tests(nvpeer_logic)]
mod tests {
    use super::logic::errno::{user_errno, EIO, ENOTSUPP, EOPNOTSUPP};
    use super::logic::params::{config, ClientKind, Config, Layout};
    use super::logic::range::cover;
    use super::logic::sgl::{check_address, check_entry_count};
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
        assert_eq!(check_entry_count(&c, 3), Ok(()));
        assert!(check_entry_count(&c, 2).is_err());
        assert!(check_address(0x1000, 4096).is_ok());
        assert!(check_address(0x1800, 4096).is_err());
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
        assert_eq!(
            config(1, 0).map(Config::clients),
            Ok([Some(ClientKind::Persistent), None])
        );
        assert_eq!(
            config(0, 1).map(|c| c.invalidating),
            Ok(Some(Layout::Legacy))
        );
        assert_eq!(ClientKind::PersistentNc.name(), "nv_mem_nc");
        assert!(config(2, 0).is_err());
    }

    #[test]
    fn internal_errnos_never_reach_user_space() {
        assert_eq!(user_errno(ENOTSUPP), EOPNOTSUPP);
        assert_eq!(user_errno(527), EIO);
        assert_eq!(user_errno(12), 12);
    }

    #[test]
    fn callback_only_notifies_mapped() {
        assert_eq!(
            step(State::Mapped, Event::Callback),
            Ok((State::Invalidating, Action::NotifyCore))
        );
        assert_eq!(
            step(State::Mapping, Event::Callback),
            Ok((State::Revoked, Action::Overtaken))
        );
        assert_eq!(
            step(State::Unpinning, Event::Callback),
            Ok((State::Revoked, Action::Overtaken))
        );
        assert_eq!(
            step(State::Held, Event::Callback),
            Ok((State::Revoked, Action::None))
        );
        assert_eq!(
            step(State::Invalidating, Event::Unpin { foreign: false }),
            Ok((State::Invalidating, Action::None))
        );
    }
}
