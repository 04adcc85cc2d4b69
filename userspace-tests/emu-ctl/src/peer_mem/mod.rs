//! `/dev/peer_mem_emu`: the OFED peer-memory core emulator's control device.
//!
//! Mirrors `testbench/emu/include/peer_mem_emu_ioctl.h` (layouts checked by `tests/layout.rs`).
//! Registrations (emulated MRs) belong to the open file: dropping a [`Core`] deregisters them.

pub mod abi;
mod handle;

pub use handle::{ClientRecord, Core, Mr, RegParams, ViolationRecord};

use crate::error::{EmuError, Result};

/// Device path.
pub const DEVICE: &str = "/dev/peer_mem_emu";
/// The ABI version this crate speaks.
pub const ABI_VERSION: u32 = 1;

/// Core models, by the names the CLI accepts.
pub const MODELS: [(&str, u32, &str); 5] = [
    (
        "4.9",
        1,
        "MLNX_OFED 4.0-4.9 LTS: tickets, dereg inside invalidate",
    ),
    (
        "5.1",
        2,
        "OFED 5.1-5.4: no INVALIDATE_UNMAPS (lock inversion #2696789)",
    ),
    (
        "5.4hf",
        3,
        "OFED 5.1-2.5.8 hotfix / 5.4-3: INVALIDATE_UNMAPS, page_shift",
    ),
    (
        "5.5",
        4,
        "OFED 5.5-23.10: INVALIDATE_UNMAPS, SGL trimming, memory_peers in sysfs",
    ),
    (
        "doca3",
        5,
        "DOCA-OFED 3.x / OFED 24.04+ on 6.x/7.x: as 5.5, no memory_peers, no name check",
    ),
];

/// Configuration flags.
pub mod cfg_flags {
    /// Pre-25.04 inverted lock condition in stop_invalidation_notifier.
    pub const STOP_NOTIFIER_BUG: u32 = 1 << 0;
    /// sysfs counters under /sys/kernel/mm/memory_peers.
    pub const SYSFS: u32 = 1 << 1;
    /// num_dereg_pages reads the zeroed table.
    pub const DEREG_PAGES_QUIRK: u32 = 1 << 2;
    /// Header rule: put_pages frees the sg_table.
    pub const STRICT_SG: u32 = 1 << 3;
    /// Annotate invalidate's mapping_lock wait for lockdep.
    pub const LOCKDEP_INVAL: u32 = 1 << 4;
    /// Planted lock inversion: invalidate calls the client's acquire for the same range.
    pub const ACQUIRE_IN_INVAL: u32 = 1 << 5;
}

/// Registration access flags.
pub mod access {
    /// Writable (get_pages force = 0).
    pub const LOCAL_WRITE: u32 = 1 << 0;
    /// On-demand paging (rejected).
    pub const ON_DEMAND: u32 = 1 << 1;
}

/// Peer flags of a registration (`enum ib_peer_mem_flags`).
pub mod peer_flags {
    /// Peer clients may claim the range.
    pub const ALLOW: u32 = 1 << 0;
    /// The caller supports invalidation (MRs; not CQ/QP buffers).
    pub const INVAL_SUPP: u32 = 1 << 1;
}

/// Registration flags.
pub mod reg_flags {
    /// Block after dma_map holding mapping_lock until ACTIVATE.
    pub const HOLD: u32 = 1 << 0;
    /// Emulate HW object creation failure after dma_map.
    pub const FAIL_HW: u32 = 1 << 1;
    /// Skip pin_user_pages_fast.
    pub const NO_GUP: u32 = 1 << 2;
}

/// dma_device of a registration.
pub mod device {
    /// The QEMU edu PCI device.
    pub const PCI: u32 = 0;
    /// A faux, non-PCI device (hazard H6).
    pub const NONPCI: u32 = 1;
}

/// Registration states.
pub mod state {
    /// Host memory pinned by GUP.
    pub const HOST: u32 = 1;
    /// Mapped through a peer client.
    pub const MAPPED: u32 = 2;
    /// Unmapped (dereg or legacy invalidation).
    pub const UNMAPPED: u32 = 3;
    /// Invalidated under INVALIDATE_UNMAPS.
    pub const INVALIDATED: u32 = 4;
    /// 4.9: deregistered inside invalidate.
    pub const TORN_DOWN: u32 = 5;

    /// Name of a state.
    pub fn name(s: u32) -> &'static str {
        match s {
            HOST => "host",
            MAPPED => "mapped",
            UNMAPPED => "unmapped",
            INVALIDATED => "invalidated",
            TORN_DOWN => "torn-down",
            _ => "unknown",
        }
    }
}

/// Query flags.
pub mod qflags {
    /// Served by a peer client.
    pub const PEER: u32 = 1 << 0;
    /// Activation happened.
    pub const ACTIVATED: u32 = 1 << 1;
    /// Fake HW revoke happened.
    pub const REVOKED: u32 = 1 << 2;
    /// Invalidated before activation.
    pub const INVAL_BEFORE_ACT: u32 = 1 << 3;
    /// SGL trimmed.
    pub const TRIMMED: u32 = 1 << 4;
    /// Waiting in HOLD.
    pub const HELD: u32 = 1 << 5;
    /// The client has an invalidate callback.
    pub const INVALIDATING: u32 = 1 << 6;
}

/// Client flags.
pub mod client_flags {
    /// Registered with an invalidate pointer.
    pub const INVALIDATING: u32 = 1 << 0;
    /// Detected as peer_memory_client_ex.
    pub const EX: u32 = 1 << 1;
    /// ex + INVALIDATE_UNMAPS.
    pub const UNMAPS: u32 = 1 << 2;
    /// Unregister refused (called from a callback).
    pub const ZOMBIE: u32 = 1 << 3;
    /// 4.9 view: private-data hooks non-NULL.
    pub const HOOKS_49: u32 = 1 << 4;
    /// Has a sysfs directory.
    pub const SYSFS: u32 = 1 << 5;
}

/// Fault points (index = ABI value).
pub const FAULT_POINTS: [&str; 7] = [
    "umem_alloc",
    "peer_umem_alloc",
    "xa_alloc",
    "client_alloc",
    "sysfs",
    "handle_alloc",
    "mkey",
];

/// Delay points (index = ABI value).
pub const DELAY_POINTS: [&str; 8] = [
    "after_acquire",
    "after_get_pages",
    "after_dma_map",
    "before_activate",
    "dereg_before_stop",
    "in_stop",
    "stop_to_release",
    "invalidate_locked",
];

/// Violation rules (index = ABI value - 1).
pub const RULES: [&str; 18] = [
    "client_modified",
    "unregister_in_callback",
    "register_in_callback",
    "invalidate_in_callback",
    "invalidate_bad_handle",
    "invalidate_noninv",
    "invalidate_atomic",
    "sg_entry",
    "sg_nmap",
    "sg_modified",
    "sg_not_freed",
    "page_size",
    "deadlock",
    "core_relock",
    "unregister_bad_handle",
    "core_internal",
    "live_at_unload",
    "sg_dma",
];

/// Name of a violation rule number.
pub fn rule_name(rule: u32) -> &'static str {
    RULES
        .get((rule as usize).wrapping_sub(1))
        .copied()
        .unwrap_or("unknown")
}

/// Index of a named point in `table`.
pub fn point_index(table: &[&str], name: &str, what: &str) -> Result<u32> {
    let want = name.replace('-', "_");
    table
        .iter()
        .position(|p| *p == want)
        .map(|i| i as u32)
        .ok_or_else(|| {
            EmuError::Invalid(format!(
                "unknown {what} '{name}' (one of {})",
                table.join(", ")
            ))
        })
}

/// Model value by name.
pub fn model_by_name(name: &str) -> Result<u32> {
    MODELS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, v, _)| *v)
        .ok_or_else(|| {
            EmuError::Invalid(format!(
                "unknown OFED model '{name}' (one of 4.9, 5.1, 5.4hf, 5.5, doca3)"
            ))
        })
}

/// Model name by value.
pub fn model_name(v: u32) -> &'static str {
    MODELS
        .iter()
        .find(|(_, m, _)| *m == v)
        .map(|(n, _, _)| *n)
        .unwrap_or("unknown")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(model_by_name("5.1").unwrap(), 2);
        assert_eq!(model_name(4), "5.5");
        assert!(model_by_name("6.0").is_err());
        assert_eq!(rule_name(1), "client_modified");
        assert_eq!(rule_name(13), "deadlock");
        assert_eq!(rule_name(0), "unknown");
        assert_eq!(
            point_index(&DELAY_POINTS, "in-stop", "delay point").unwrap(),
            5
        );
        assert_eq!(
            point_index(&FAULT_POINTS, "xa_alloc", "fault point").unwrap(),
            2
        );
    }
}
