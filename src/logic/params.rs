// SPDX-License-Identifier: GPL-2.0

//! Module parameters -> which peer-memory clients to register.
//!
//! Same meaning as nvidia-peermem 560+ (so existing modprobe.d files keep working):
//! - `persistent_api_support=1` (default): one persistent client named `nv_mem`;
//! - `persistent_api_support=0`: invalidating `nv_mem` + persistent `nv_mem_nc`;
//! - `peerdirect_support=1`: the invalidating client uses the MLNX_OFED 4.x layout (no extended
//!   fields, no `PEER_MEM_INVALIDATE_UNMAPS`), as OFED 4.9 LTS requires.

/// The layout handed to the core for the invalidating client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Extended client with `PEER_MEM_INVALIDATE_UNMAPS` (MLNX_OFED 5.1+ with the #2696789 fix).
    Extended,
    /// MLNX_OFED 4.x: `ex_size` and `flags` zero, no extended marker.
    Legacy,
}

/// A peer-memory client nvpeer can register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClientKind {
    /// Persistent `nv_mem` (the default, alone).
    Persistent,
    /// Persistent `nv_mem_nc`, beside an invalidating `nv_mem`.
    PersistentNc,
    /// Invalidating `nv_mem` with this layout.
    Invalidating(Layout),
}

impl ClientKind {
    /// The name the core lists the client under.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            ClientKind::PersistentNc => "nv_mem_nc",
            ClientKind::Persistent | ClientKind::Invalidating(_) => "nv_mem",
        }
    }

    /// Short description for logs and debugfs.
    pub(crate) const fn describe(self) -> &'static str {
        match self {
            ClientKind::Persistent | ClientKind::PersistentNc => "persistent",
            ClientKind::Invalidating(Layout::Extended) => "invalidating, INVALIDATE_UNMAPS",
            ClientKind::Invalidating(Layout::Legacy) => "invalidating, MLNX_OFED 4.x layout",
        }
    }

    /// Whether the client pins with a free callback (and may have to invalidate).
    pub(crate) const fn invalidates(self) -> bool {
        matches!(self, ClientKind::Invalidating(_))
    }
}

/// What `init` registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    /// The invalidating `nv_mem` client, when one is registered (then the persistent client is
    /// `nv_mem_nc`).
    pub(crate) invalidating: Option<Layout>,
}

impl Config {
    /// The clients to register, in order: the invalidating one first (the core offers a
    /// registration to clients in registration order), then the persistent one.
    pub(crate) const fn clients(self) -> [Option<ClientKind>; 2] {
        match self.invalidating {
            Some(layout) => [
                Some(ClientKind::Invalidating(layout)),
                Some(ClientKind::PersistentNc),
            ],
            None => [Some(ClientKind::Persistent), None],
        }
    }
}

/// A parameter outside its allowed values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ParamError {
    /// Parameter name.
    pub(crate) name: &'static str,
    /// The rejected value.
    pub(crate) value: i32,
}

/// Validates the two parameters (each must be 0 or 1).
pub(crate) fn config(
    persistent_api_support: i32,
    peerdirect_support: i32,
) -> Result<Config, ParamError> {
    let persistent = match persistent_api_support {
        0 => false,
        1 => true,
        value => {
            return Err(ParamError {
                name: "persistent_api_support",
                value,
            })
        }
    };
    let layout = match peerdirect_support {
        0 => Layout::Extended,
        1 => Layout::Legacy,
        value => {
            return Err(ParamError {
                name: "peerdirect_support",
                value,
            })
        }
    };
    Ok(Config {
        invalidating: (!persistent).then_some(layout),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_name_and_describe_themselves() {
        // The names NCCL, NVSHMEM and UCC probe under /sys/kernel/mm/memory_peers/.
        assert_eq!(ClientKind::Persistent.name(), "nv_mem");
        assert_eq!(ClientKind::Invalidating(Layout::Legacy).name(), "nv_mem");
        assert_eq!(ClientKind::PersistentNc.name(), "nv_mem_nc");
        assert!(!ClientKind::Persistent.invalidates());
        assert!(!ClientKind::PersistentNc.invalidates());
        assert!(ClientKind::Invalidating(Layout::Extended).invalidates());
        assert!(ClientKind::Invalidating(Layout::Legacy).invalidates());
        assert_eq!(ClientKind::PersistentNc.describe(), "persistent");
        assert_ne!(
            ClientKind::Invalidating(Layout::Extended).describe(),
            ClientKind::Invalidating(Layout::Legacy).describe()
        );
    }

    #[test]
    fn defaults_register_one_persistent_nv_mem() {
        assert_eq!(config(1, 0), Ok(Config { invalidating: None }));
        assert_eq!(
            config(1, 0).map(Config::clients),
            Ok([Some(ClientKind::Persistent), None])
        );
        assert_eq!(ClientKind::Persistent.name(), "nv_mem");
        // peerdirect_support only affects the invalidating client.
        assert_eq!(config(1, 1), config(1, 0));
    }

    #[test]
    fn legacy_pair() {
        assert_eq!(
            config(0, 0).map(Config::clients),
            Ok([
                Some(ClientKind::Invalidating(Layout::Extended)),
                Some(ClientKind::PersistentNc)
            ])
        );
        assert_eq!(ClientKind::PersistentNc.name(), "nv_mem_nc");
        assert_eq!(ClientKind::Invalidating(Layout::Legacy).name(), "nv_mem");
        assert_eq!(config(0, 1).unwrap().invalidating, Some(Layout::Legacy));
    }

    #[test]
    fn other_values_are_rejected_with_the_name() {
        assert_eq!(
            config(2, 0),
            Err(ParamError {
                name: "persistent_api_support",
                value: 2
            })
        );
        assert_eq!(
            config(1, -1),
            Err(ParamError {
                name: "peerdirect_support",
                value: -1
            })
        );
    }
}
