//! The enumerated fields of an `mrs` line: `state=` and `core=`.

use serde::{Deserialize, Serialize};

/// The values of `state=` (uapi/debugfs.md, `NVPEER_MR_STATES` in uapi/nvpeer.h), in the order
/// of [`MrState`].
pub const MR_STATES: [&str; 11] = [
    "idle",
    "pinned",
    "held",
    "mapping",
    "mapped",
    "unmapped",
    "unpinning",
    "invalidating",
    "revoked",
    "orphaned",
    "released",
];

/// Where a registration object is in its life (docs/design.md, "State machine").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MrState {
    /// Created, nothing pinned yet.
    Idle,
    /// Pinned through NVIDIA.
    Pinned,
    /// Pinned and held by the core between `get_pages` and `dma_map`.
    Held,
    /// `dma_map` in progress.
    Mapping,
    /// Mapped: handed to the HCA.
    Mapped,
    /// Unmapped, still pinned.
    Unmapped,
    /// The pin is being put.
    Unpinning,
    /// A free callback is invalidating it.
    Invalidating,
    /// NVIDIA revoked the pin.
    Revoked,
    /// Released from another process, pin left to NVIDIA's callback.
    Orphaned,
    /// Done.
    Released,
}

impl MrState {
    const ALL: [MrState; 11] = [
        MrState::Idle,
        MrState::Pinned,
        MrState::Held,
        MrState::Mapping,
        MrState::Mapped,
        MrState::Unmapped,
        MrState::Unpinning,
        MrState::Invalidating,
        MrState::Revoked,
        MrState::Orphaned,
        MrState::Released,
    ];

    /// The name the module prints.
    pub fn name(self) -> &'static str {
        MR_STATES[self as usize]
    }

    /// The state named `s`, if it is one.
    pub fn from_name(s: &str) -> Option<MrState> {
        MR_STATES
            .iter()
            .position(|n| *n == s)
            .and_then(|i| Self::ALL.get(i).copied())
    }
}

/// `core=`: whether the peer-memory core still holds the registration (acquire..release).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CoreHold {
    /// Between `acquire` and `release`.
    Live,
    /// After `release`.
    Released,
}

impl CoreHold {
    /// The value named `s`, if it is one.
    pub fn from_name(s: &str) -> Option<CoreHold> {
        match s {
            "live" => Some(CoreHold::Live),
            "released" => Some(CoreHold::Released),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips() {
        for (i, n) in MR_STATES.iter().enumerate() {
            let s = MrState::from_name(n);
            assert_eq!(s, MrState::ALL.get(i).copied());
            assert_eq!(s.map(MrState::name), Some(*n));
        }
        assert_eq!(MrState::from_name("gone"), None);
        assert_eq!(CoreHold::from_name("live"), Some(CoreHold::Live));
        assert_eq!(CoreHold::from_name("x"), None);
    }

    #[test]
    fn states_match_the_module() {
        assert_eq!(
            crate::repo_sources::header_list("NVPEER_MR_STATES"),
            MR_STATES
        );
    }
}
