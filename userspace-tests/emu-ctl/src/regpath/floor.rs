//! The raw floor: `/dev/nvpeer_rawfloor` (testbench/bench/rawfloor), NVIDIA's P2P API called
//! directly, one syscall per registration; its ABI, an open handle and its kernel-side timings.

use super::document::FloorBreakdown;
use super::stats::summary;
use crate::error::{ioctl_res, EmuError, Result};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;

/// Control device of rawfloor.ko.
pub const FLOOR_DEVICE: &str = "/dev/nvpeer_rawfloor";

/// rawfloor.ko's ioctl ABI (testbench/bench/rawfloor/rawfloor_ioctl.h).
pub(super) mod rf {
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Reg {
        pub va: u64,
        pub len: u64,
        pub flags: u32,
        pub id: u32,
        pub get_ns: u64,
        pub map_ns: u64,
        pub entries: u32,
        pub pad: u32,
    }
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Dereg {
        pub id: u32,
        pub revoked: u32,
        pub unmap_ns: u64,
        pub put_ns: u64,
    }
    pub const PERSISTENT: u32 = 1;
    const MAGIC: u8 = 0xE9;
    nix::ioctl_readwrite!(reg, MAGIC, 0x01, Reg);
    nix::ioctl_readwrite!(dereg, MAGIC, 0x02, Dereg);
}

/// An open `/dev/nvpeer_rawfloor` (its registrations die with it).
pub(super) struct Floor {
    file: File,
    persistent: bool,
}

impl Floor {
    pub(super) fn open(persistent: bool) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(FLOOR_DEVICE)
            .map_err(|source| EmuError::Open {
                path: FLOOR_DEVICE.into(),
                source,
            })?;
        Ok(Floor { file, persistent })
    }

    pub(super) fn reg(&self, va: u64, len: u64) -> Result<rf::Reg> {
        let mut r = rf::Reg {
            va,
            len,
            flags: if self.persistent { rf::PERSISTENT } else { 0 },
            ..Default::default()
        };
        // SAFETY: `r` is a live #[repr(C)] struct laid out as rawfloor_ioctl.h's struct rf_reg
        // (checked by the size test below); the fd is open.
        ioctl_res("rawfloor REG", unsafe {
            rf::reg(self.file.as_raw_fd(), &mut r)
        })?;
        Ok(r)
    }

    pub(super) fn dereg(&self, id: u32) -> Result<rf::Dereg> {
        let mut d = rf::Dereg {
            id,
            ..Default::default()
        };
        // SAFETY: as in `reg`, for struct rf_dereg.
        ioctl_res("rawfloor DEREG", unsafe {
            rf::dereg(self.file.as_raw_fd(), &mut d)
        })?;
        Ok(d)
    }
}

/// Kernel-side provider times of the floor (rawfloor's own ktime around each NVIDIA call).
pub(super) fn floor_breakdown(f: &Floor, va: u64, size: u64, n: u32) -> Result<FloorBreakdown> {
    let (mut get, mut map, mut unmap, mut put) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let reg = f.reg(va, size)?;
        let dereg = f.dereg(reg.id)?;
        get.push(reg.get_ns);
        map.push(reg.map_ns);
        unmap.push(dereg.unmap_ns);
        put.push(dereg.put_ns);
    }
    Ok(FloorBreakdown {
        size,
        get_pages: summary(get),
        dma_map_pages: summary(map),
        dma_unmap_pages: summary(unmap),
        put_pages: summary(put),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rawfloor_abi_sizes() {
        // rawfloor_ioctl.h: struct rf_reg 48 bytes, struct rf_dereg 24 bytes, no padding.
        assert_eq!(std::mem::size_of::<rf::Reg>(), 48);
        assert_eq!(std::mem::size_of::<rf::Dereg>(), 24);
    }
}
