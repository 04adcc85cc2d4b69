//! An open handle on `/dev/peer_mem_emu` ("the uverbs fd"): the ioctls, what they take and what
//! they return. Registrations belong to the open file: dropping a [`Core`] deregisters them.

use super::{abi, access, client_flags, device, peer_flags, rule_name, ABI_VERSION, DEVICE};
use crate::error::{ioctl_res, EmuError, Result};
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, OwnedFd};

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
