//! `/dev/peer_mem_emu`: the OFED peer-memory core emulator's control device.
//!
//! Mirrors `testbench/emu/include/peer_mem_emu_ioctl.h` (layouts checked by `tests/layout.rs`).
//! Registrations (emulated MRs) belong to the open file: dropping a [`Core`] deregisters them.

use crate::error::{ioctl_res, EmuError, Result};
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, OwnedFd};

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
pub const RULES: [&str; 17] = [
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

/// ABI structures.
pub mod abi {
    #![allow(missing_docs)]
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy, serde::Serialize)]
    pub struct Config {
        pub model: u32,
        pub flags: u32,
        pub hang_timeout_ms: u32,
        pub hold_timeout_ms: u32,
    }
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Reg {
        pub addr: u64,
        pub length: u64,
        pub access: u32,
        pub peer_flags: u32,
        pub device: u32,
        pub flags: u32,
        pub handle: u32,
        pub state: u32,
        pub core_context: u64,
        pub client_index: u32,
        pub reserved: u32,
    }
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct HandleOp {
        pub handle: u32,
        pub flags: u32,
    }
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy, serde::Serialize)]
    pub struct Query {
        pub handle: u32,
        pub state: u32,
        pub flags: u32,
        pub nmap: u32,
        pub core_context: u64,
        pub page_size: u64,
        pub dma_stopped_ns: u64,
        pub addr: u64,
        pub length: u64,
        pub invalidations: u32,
        pub owner_pid: u32,
        pub client_index: u32,
        pub reserved: u32,
    }
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Fault {
        pub point: u32,
        pub error: u32,
        pub nth: u32,
        pub times: u32,
    }
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Delay {
        pub point: u32,
        pub delay_ms: u32,
    }
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy, serde::Serialize)]
    pub struct Stats {
        pub violations: u64,
        pub deadlocks: u64,
        pub core_bug_hits: u64,
        pub rejected_clients: u64,
        pub live_clients: u64,
        pub live_mrs: u64,
        pub regs_ok: u64,
        pub regs_failed: u64,
        pub deregs: u64,
        pub invalidate_calls: u64,
        pub invalidate_unknown: u64,
        pub hw_revokes: u64,
        pub acquires: u64,
        pub releases: u64,
        pub delay_hits: [u64; 16],
        pub fault_fired: [u64; 16],
        pub client_calls: u64,
        pub client_ns: u64,
    }
    #[repr(C)]
    #[derive(Debug, Clone, Copy)]
    pub struct Violation {
        pub index: u32,
        pub rule: u32,
        pub pid: u32,
        pub total: u32,
        pub ts_ns: u64,
        pub text: [u8; 192],
    }
    impl Default for Violation {
        fn default() -> Self {
            Violation {
                index: 0,
                rule: 0,
                pid: 0,
                total: 0,
                ts_ns: 0,
                text: [0; 192],
            }
        }
    }
    #[repr(C)]
    #[derive(Debug, Clone, Copy)]
    pub struct ClientInfo {
        pub index: u32,
        pub flags: u32,
        pub usecnt: u64,
        pub reg_id: u64,
        pub name: [u8; 64],
        pub version: [u8; 16],
    }
    impl Default for ClientInfo {
        fn default() -> Self {
            ClientInfo {
                index: 0,
                flags: 0,
                usecnt: 0,
                reg_id: 0,
                name: [0; 64],
                version: [0; 16],
            }
        }
    }
}

mod ioc {
    use super::abi;
    const MAGIC: u8 = 0xE8; // peer_mem_emu_ioctl.h PME_IOC_MAGIC (0xE7 is nvp2p_emu)
    nix::ioctl_read!(abi_version, MAGIC, 0x00, u32);
    nix::ioctl_readwrite!(register, MAGIC, 0x01, abi::Reg);
    nix::ioctl_write_ptr!(activate, MAGIC, 0x02, abi::HandleOp);
    nix::ioctl_write_ptr!(deregister, MAGIC, 0x03, abi::HandleOp);
    nix::ioctl_readwrite!(query, MAGIC, 0x04, abi::Query);
    nix::ioctl_write_ptr!(set_config, MAGIC, 0x05, abi::Config);
    nix::ioctl_read!(get_config, MAGIC, 0x06, abi::Config);
    nix::ioctl_write_ptr!(set_fault, MAGIC, 0x07, abi::Fault);
    nix::ioctl_write_ptr!(set_delay, MAGIC, 0x08, abi::Delay);
    nix::ioctl_read!(get_stats, MAGIC, 0x09, abi::Stats);
    nix::ioctl_readwrite!(get_violation, MAGIC, 0x0a, abi::Violation);
    nix::ioctl_readwrite!(get_client, MAGIC, 0x0b, abi::ClientInfo);
    nix::ioctl_none!(reset, MAGIC, 0x0c);
}

/// Parameters of one emulated MR registration.
#[derive(Debug, Clone, Copy)]
pub struct RegParams {
    /// User VA (any alignment).
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// `access::*`.
    pub access: u32,
    /// `peer_flags::*`.
    pub peer_flags: u32,
    /// `device::*`.
    pub device: u32,
    /// `reg_flags::*`.
    pub flags: u32,
}

impl RegParams {
    /// An MR registration as mlx5 does it: writable, peer allowed, invalidation supported.
    pub fn mr(addr: u64, length: u64) -> Self {
        RegParams {
            addr,
            length,
            access: access::LOCAL_WRITE,
            peer_flags: peer_flags::ALLOW | peer_flags::INVAL_SUPP,
            device: device::PCI,
            flags: 0,
        }
    }
}

/// A successful registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    /// Handle (unique per open file).
    pub handle: u32,
    /// State after registration.
    pub state: u32,
    /// core_context handed to get_pages.
    pub core_context: u64,
    /// Registration index of the client that claimed it.
    pub client_index: u32,
}

/// One violation record.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ViolationRecord {
    /// Rule name.
    pub rule: &'static str,
    /// Process that triggered it.
    pub pid: u32,
    /// Log text.
    pub text: String,
}

/// One registered client, as the core sees it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClientRecord {
    /// Position in registration order.
    pub index: u32,
    /// Client name.
    pub name: String,
    /// Version string (up to the first NUL).
    pub version: String,
    /// Registered with an invalidate callback.
    pub invalidating: bool,
    /// Detected as an ex client.
    pub ex: bool,
    /// ex + INVALIDATE_UNMAPS.
    pub unmaps: bool,
    /// Acquired, unreleased contexts.
    pub usecnt: u64,
    /// Raw `client_flags::*`.
    pub flags: u32,
}

/// An open handle on `/dev/peer_mem_emu` ("the uverbs fd").
#[derive(Debug)]
pub struct Core {
    file: File,
}

macro_rules! call {
    ($self:expr, $f:ident, $op:expr, $arg:expr) => {{
        // SAFETY: `$arg` points to a live #[repr(C)] value whose layout matches the ioctl's declared
        // argument (checked by tests/layout.rs); the fd is open for the duration of the call.
        ioctl_res($op, unsafe { ioc::$f($self.file.as_raw_fd(), $arg) })
    }};
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

impl Core {
    /// Opens the control device and checks its ABI version.
    pub fn open() -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(DEVICE)
            .map_err(|source| EmuError::Open {
                path: DEVICE.into(),
                source,
            })?;
        let core = Core { file };
        let mut v = 0u32;
        call!(core, abi_version, "peer_mem ABI_VERSION", &mut v)?;
        if v != ABI_VERSION {
            return Err(EmuError::Invalid(format!(
                "{DEVICE} speaks ABI {v}, this nvpeer speaks {ABI_VERSION}: rebuild one of them"
            )));
        }
        Ok(core)
    }

    /// A second handle on the same open file (shares its registrations).
    pub fn try_clone(&self) -> Result<Self> {
        let file = self.file.try_clone().map_err(|source| EmuError::File {
            path: DEVICE.into(),
            source,
        })?;
        Ok(Core { file })
    }

    /// Gives up the handle's file descriptor (for explicit close ordering).
    pub fn into_fd(self) -> OwnedFd {
        self.file.into()
    }

    /// Registers an emulated MR (runs the whole ib_umem_get_peer sequence in this thread).
    pub fn register(&self, p: RegParams) -> Result<Mr> {
        let mut r = abi::Reg {
            addr: p.addr,
            length: p.length,
            access: p.access,
            peer_flags: p.peer_flags,
            device: p.device,
            flags: p.flags,
            ..Default::default()
        };
        call!(self, register, "peer_mem REGISTER", &mut r)?;
        Ok(Mr {
            handle: r.handle,
            state: r.state,
            core_context: r.core_context,
            client_index: r.client_index,
        })
    }

    /// Releases held registrations (`handle` 0: all of this file); `fail` makes them fail instead.
    pub fn activate(&self, handle: u32, fail: bool) -> Result<()> {
        let op = abi::HandleOp {
            handle,
            flags: u32::from(fail),
        };
        call!(self, activate, "peer_mem ACTIVATE", &op)?;
        Ok(())
    }

    /// Deregisters an MR; `kworker` runs the teardown in a kworker (uverbs disassociate).
    pub fn deregister(&self, handle: u32, kworker: bool) -> Result<()> {
        let op = abi::HandleOp {
            handle,
            flags: u32::from(kworker),
        };
        call!(self, deregister, "peer_mem DEREGISTER", &op)?;
        Ok(())
    }

    /// State of one MR.
    pub fn query(&self, handle: u32) -> Result<abi::Query> {
        let mut q = abi::Query {
            handle,
            ..Default::default()
        };
        call!(self, query, "peer_mem QUERY", &mut q)?;
        Ok(q)
    }

    /// Current configuration.
    pub fn config(&self) -> Result<abi::Config> {
        let mut c = abi::Config::default();
        call!(self, get_config, "peer_mem GET_CONFIG", &mut c)?;
        Ok(c)
    }

    /// Replaces the configuration.
    pub fn set_config(&self, c: abi::Config) -> Result<()> {
        call!(self, set_config, "peer_mem SET_CONFIG", &c)?;
        Ok(())
    }

    /// Arms a fault (`error` positive errno, 0 = ENOMEM); `nth`=0 and `times`=0 disarm.
    pub fn set_fault(&self, point: u32, error: u32, nth: u32, times: u32) -> Result<()> {
        let f = abi::Fault {
            point,
            error,
            nth,
            times,
        };
        call!(self, set_fault, "peer_mem SET_FAULT", &f)?;
        Ok(())
    }

    /// Arms (or, with 0 ms, disarms) a delay point.
    pub fn set_delay(&self, point: u32, delay_ms: u32) -> Result<()> {
        let d = abi::Delay { point, delay_ms };
        call!(self, set_delay, "peer_mem SET_DELAY", &d)?;
        Ok(())
    }

    /// Counters.
    pub fn stats(&self) -> Result<abi::Stats> {
        let mut s = abi::Stats::default();
        call!(self, get_stats, "peer_mem GET_STATS", &mut s)?;
        Ok(s)
    }

    /// Every kept violation record (oldest first).
    pub fn violations(&self) -> Result<Vec<ViolationRecord>> {
        let mut out = Vec::new();
        let mut index = 0;
        loop {
            let mut v = abi::Violation {
                index,
                ..Default::default()
            };
            match call!(self, get_violation, "peer_mem GET_VIOLATION", &mut v) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.errno(),
                        Some(nix::errno::Errno::ENOENT | nix::errno::Errno::EINVAL)
                    ) =>
                {
                    break
                }
                Err(e) => return Err(e),
            }
            if v.total == 0 {
                break;
            }
            out.push(ViolationRecord {
                rule: rule_name(v.rule),
                pid: v.pid,
                text: cstr(&v.text),
            });
            index += 1;
            if index >= v.total {
                break;
            }
        }
        Ok(out)
    }

    /// Registered clients in registration order.
    pub fn clients(&self) -> Result<Vec<ClientRecord>> {
        let mut out = Vec::new();
        for index in 0.. {
            let mut c = abi::ClientInfo {
                index,
                ..Default::default()
            };
            match call!(self, get_client, "peer_mem GET_CLIENT", &mut c) {
                Ok(_) => {}
                Err(e) if e.errno() == Some(nix::errno::Errno::ENOENT) => break,
                Err(e) => return Err(e),
            }
            out.push(ClientRecord {
                index,
                name: cstr(&c.name),
                version: cstr(&c.version),
                invalidating: c.flags & client_flags::INVALIDATING != 0,
                ex: c.flags & client_flags::EX != 0,
                unmaps: c.flags & client_flags::UNMAPS != 0,
                usecnt: c.usecnt,
                flags: c.flags,
            });
        }
        Ok(out)
    }

    /// Clears counters, violations, faults and delays.
    pub fn reset(&self) -> Result<()> {
        // SAFETY: _IO ioctl without argument on an open fd.
        ioctl_res("peer_mem RESET", unsafe {
            ioc::reset(self.file.as_raw_fd())
        })?;
        Ok(())
    }
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
