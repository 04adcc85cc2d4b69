//! `/dev/nvp2p_emu`: the NVIDIA P2P provider emulator's control device.
//!
//! Mirrors `testbench/emu/include/nvp2p_emu_ioctl.h` (layouts are checked against the header by
//! `cargo test`, see `tests/layout.rs`). Memory allocated through a [`Gpu`] belongs to the calling
//! process and stays mapped at [`Alloc::va`] while the [`Gpu`] handle (its file descriptor) lives;
//! dropping the handle frees it, with free callbacks, like a process's exit.

use crate::error::{ioctl_res, EmuError, Result};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;

/// Device path.
pub const DEVICE: &str = "/dev/nvp2p_emu";
/// Size of one emulated GPU page.
pub const GPU_PAGE_SIZE: u64 = 0x10000;

/// Allocation flags.
pub mod alloc_flags {
    /// Grace/C2C-like coherent memory.
    pub const COHERENT: u32 = 1 << 0;
    /// A MIG instance: persistent pins with FORCE_BAR1 fail with -ENOTSUPP (others are pinned).
    pub const MIG: u32 = 1 << 1;
    /// vGPU: persistent pins fail with -ENOTSUPP.
    pub const VGPU: u32 = 1 << 2;
    /// A range the CUDA driver never registered for third-party P2P (memory that is not
    /// GPUDirect RDMA capable): every get_pages flavour fails with -EINVAL.
    pub const NO_P2P: u32 = 1 << 3;
}

/// Allocation states (`AllocInfo::state`).
pub mod alloc_state {
    /// Not freed.
    pub const LIVE: u32 = 0;
    /// Freed, still backing persistent pins.
    pub const FREED: u32 = 1;
}

/// Provider entry points, in the order of the ABI's per-call arrays.
pub const OPS: [&str; 14] = [
    "get_pages",
    "get_pages_persistent",
    "put_pages",
    "put_pages_persistent",
    "dma_map_pages",
    "dma_unmap_pages",
    "free_page_table",
    "free_dma_mapping",
    "init_mapping",
    "destroy_mapping",
    "register_rsync_driver",
    "unregister_rsync_driver",
    "get_rsync_registers",
    "put_rsync_registers",
];
/// Entry points that accept injected faults (indices `0..FAULT_OPS`).
pub const FAULT_OPS: usize = 6;

/// The errnos (negative) that entry point `op` of the real driver can return on a call with valid
/// arguments (NVIDIA 595.45.04, `kernel-open/nvidia/nv-p2p.c`), which are the ones the emulator
/// accepts as an injected fault: the two `get_pages` pass RM's status through
/// `nvidia_p2p_map_status` (six errnos), the two puts fail only with `-ENOMEM` or `-EIO`,
/// `dma_map_pages` adds `-EINVAL` and `-ENOTSUPP`, `dma_unmap_pages` fails on NULL arguments only
/// (none).
pub fn real_errnos(op: u32) -> &'static [i32] {
    match op {
        0 | 1 => &[-5, -12, -22, -524, -16, -19],
        2 | 3 => &[-12, -5],
        4 => &[-12, -5, -22, -524],
        _ => &[],
    }
}

/// Contract violations the provider records, by index.
pub const VIOLATIONS: [(&str, &str); 17] = [
    ("call_in_callback", "get/put/map (an RM-lock call) from inside a free callback"),
    ("unmap_in_callback", "retired: dma_unmap_pages inside a free callback is legal"),
    ("freed_table", "call with a page table that was torn down (poisoned)"),
    ("unknown_table", "call with a pointer that never was a page table"),
    ("wrong_peer", "dma_unmap peer is not the mapping's pci_dev"),
    ("wrong_process_put", "put_pages from a process other than the pinning one"),
    ("double_put", "second put of the same pin"),
    ("leaked_pin", "pin still alive at unload / leak check"),
    ("stale_mapping", "dma_unmap of a mapping already unmapped or torn down"),
    ("reserved9", "unused"),
    ("unmap_races_teardown", "dma_unmap still running when teardown freed the table"),
    ("dma_not_stopped", "free callback returned while the core still had DMA live"),
    ("table_modified", "client changed a field of a live page table"),
    ("put_va_mismatch", "put with a VA different from the pinned one"),
    (
        "dma_map_uaf",
        "dma_map_pages on a table another thread's free callback freed (real driver: use-after-free read and write)",
    ),
    (
        "put_persistent_on_nonpersistent",
        "put_pages_persistent on a table of get_pages (real driver: NULL dereference)",
    ),
    (
        "dangling_out_param",
        "the *page_table a failed get_pages left behind passed back (real driver: a freed table)",
    ),
];
/// Index in [`VIOLATIONS`] of `dma_map_uaf`: the NVIDIA API's own window (docs/design.md).
pub const V_DMA_MAP_UAF: usize = 14;

/// Fault modes.
pub mod fault_mode {
    /// Clear the fault of this op.
    pub const OFF: u32 = 0;
    /// Let `skip` calls pass, fail the next one, then off.
    pub const ONCE: u32 = 1;
    /// After `skip` calls, fail every n-th call.
    pub const EVERY_N: u32 = 2;
}

/// In-kernel test client operations.
pub mod client_op {
    /// get_pages(_persistent) in the caller's context.
    pub const PIN: u32 = 0;
    /// dma_map_pages for the peer.
    pub const MAP: u32 = 1;
    /// dma_unmap_pages.
    pub const UNMAP: u32 = 2;
    /// put_pages(_persistent).
    pub const UNPIN: u32 = 3;
    /// Refresh the out fields.
    pub const STATUS: u32 = 4;
    /// Drop the record.
    pub const CLOSE: u32 = 5;
}

/// Flags of the in-kernel test client.
pub mod client_flags {
    /// PIN with the persistent API.
    pub const PERSISTENT: u32 = 1 << 0;
    /// The callback calls put_pages (bad client).
    pub const PUT_IN_CB: u32 = 1 << 1;
    /// The callback calls dma_unmap_pages (bad client).
    pub const UNMAP_IN_CB: u32 = 1 << 2;
    /// PIN with a NULL callback.
    pub const NULL_CB: u32 = 1 << 3;
    /// PIN with NULL data.
    pub const NULL_DATA: u32 = 1 << 4;
    /// Persistent PIN with FORCE_BAR1_MAPPING.
    pub const FORCE_BAR1: u32 = 1 << 5;
    /// PIN with the allocation's legacy token.
    pub const TOKEN: u32 = 1 << 6;
    /// UNMAP with a different pci_dev than mapped.
    pub const WRONG_PEER: u32 = 1 << 7;
    /// The callback calls free_dma_mapping/free_page_table.
    pub const FREE_IN_CB: u32 = 1 << 8;
}

/// ABI structures (`#[repr(C)]`, fixed-size members, no implicit padding).
pub mod abi {
    #![allow(missing_docs)]
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Alloc {
        pub size: u64,
        pub flags: u32,
        pub reserved: u32,
        pub va: u64,
        pub handle: u64,
        pub p2p_token: u64,
        pub va_space: u32,
        pub pad: u32,
    }
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Free {
        pub va: u64,
        pub handle: u64,
        pub callbacks: u32,
        pub pad: u32,
    }
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct PidOp {
        pub tgid: i32,
        pub callbacks: u32,
        pub allocs: u32,
        pub pad: u32,
    }
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy, serde::Serialize)]
    pub struct AllocInfo {
        pub handle: u64,
        pub va: u64,
        pub size: u64,
        pub tgid: i32,
        pub flags: u32,
        pub state: u32,
        pub pins: u32,
        pub first_phys: u64,
    }
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy, serde::Serialize)]
    pub struct PinInfo {
        pub id: u64,
        pub alloc_handle: u64,
        pub va: u64,
        pub len: u64,
        pub tgid: i32,
        pub persistent: u32,
        pub state: u32,
        pub mappings: u32,
    }
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct List {
        pub kind: u32,
        pub cap: u32,
        pub buf: u64,
        pub count: u32,
        pub pad: u32,
    }
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Fault {
        pub op: u32,
        pub mode: u32,
        pub err: i32,
        pub n: u32,
        pub skip: u32,
        pub pad: u32,
        pub injected: u64,
    }
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy, serde::Serialize, serde::Deserialize)]
    pub struct Config {
        pub pt_abi: u32,
        pub reserved0: u32,
        pub bar1_budget: u64,
        pub cb_delay_ns: u64,
        pub cb_after_delay_ns: u64,
        pub reg_window_delay_ns: u64,
        pub get_cost_ns: u64,
        pub get_page_cost_ns: u64,
        pub unmap_delay_ns: u64,
        pub map_cost_ns: u64,
        pub map_page_cost_ns: u64,
        pub put_cost_ns: u64,
        pub put_page_cost_ns: u64,
    }
    #[repr(C)]
    #[derive(Debug, Clone, Copy)]
    pub struct Stats {
        pub calls: [u64; 16],
        pub failures: [u64; 16],
        pub violations: [u64; 32],
        pub violations_total: u64,
        pub live_allocs: u64,
        pub live_pins: u64,
        pub live_persistent_pins: u64,
        pub pinned_pages: u64,
        pub live_mappings: u64,
        pub callbacks: u64,
        pub put_after_teardown: u64,
        pub bar1_used: u64,
        pub quarantined: u64,
        pub free_calls_in_callback: u64,
        pub api_window_hits: u64,
        pub api_ns: u64,
        /// Modelled RM time asked for (cost model).
        pub model_ns: u64,
        /// Time the model's waits took (`model_ns` plus their overshoot).
        pub delay_ns: u64,
        pub reserved: [u64; 1],
    }
    impl Default for Stats {
        fn default() -> Self {
            // SAFETY: Stats is plain old data (integers only); all-zero is a valid value.
            unsafe { std::mem::zeroed() }
        }
    }
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Client {
        pub op: u32,
        pub flags: u32,
        pub handle: u64,
        pub va: u64,
        pub len: u64,
        pub peer_bdf: u32,
        pub peer_domain: u32,
        pub ret: i32,
        pub callbacks: u32,
        pub pt_version: u32,
        pub pt_entries: u32,
        pub pt_page_size: u32,
        pub pt_flags: u32,
        pub phys0: u64,
        pub phys1: u64,
        pub map_version: u32,
        pub map_entries: u32,
        pub dma0: u64,
        pub dma1: u64,
        pub state: u32,
        pub pad: u32,
    }
}

mod ioc {
    use super::abi;
    const MAGIC: u8 = 0xE7;
    nix::ioctl_readwrite!(alloc, MAGIC, 0x00, abi::Alloc);
    nix::ioctl_readwrite!(free, MAGIC, 0x01, abi::Free);
    nix::ioctl_readwrite!(list, MAGIC, 0x02, abi::List);
    nix::ioctl_readwrite!(destroy_context, MAGIC, 0x03, abi::PidOp);
    nix::ioctl_readwrite!(process_exit, MAGIC, 0x04, abi::PidOp);
    nix::ioctl_readwrite!(gpu_teardown, MAGIC, 0x05, abi::PidOp);
    nix::ioctl_readwrite!(set_fault, MAGIC, 0x06, abi::Fault);
    nix::ioctl_readwrite!(get_config, MAGIC, 0x07, abi::Config);
    nix::ioctl_readwrite!(set_config, MAGIC, 0x08, abi::Config);
    nix::ioctl_readwrite!(stats, MAGIC, 0x09, abi::Stats);
    nix::ioctl_none!(reset, MAGIC, 0x0a);
    nix::ioctl_readwrite!(client, MAGIC, 0x0b, abi::Client);
    nix::ioctl_none!(check_leaks, MAGIC, 0x0c);
}

/// One emulated GPU allocation of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alloc {
    /// User VA (64 KiB aligned) in this process.
    pub va: u64,
    /// Size in bytes (multiple of 64 KiB).
    pub size: u64,
    /// Allocation id.
    pub handle: u64,
}

/// Result of a revocation trigger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Revoked {
    /// Free callbacks run.
    pub callbacks: u32,
    /// Allocations freed.
    pub allocs: u32,
}

/// An open handle on `/dev/nvp2p_emu` ("the GPU driver of this process").
#[derive(Debug)]
pub struct Gpu {
    file: File,
}

/// Runs one `_IOWR` ioctl on `fd` with `arg`.
macro_rules! rw {
    ($self:expr, $f:ident, $op:expr, $arg:expr) => {{
        let arg = $arg;
        // SAFETY: `arg` is a live, exclusively borrowed #[repr(C)] struct whose layout matches the
        // ioctl's declared argument type (checked by tests/layout.rs); the fd is open.
        ioctl_res($op, unsafe {
            ioc::$f($self.file.as_raw_fd(), arg as *mut _)
        })
    }};
}

impl Gpu {
    /// Opens the control device.
    pub fn open() -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(DEVICE)
            .map_err(|source| EmuError::Open {
                path: DEVICE.into(),
                source,
            })?;
        Ok(Gpu { file })
    }

    /// Allocates `size` bytes (rounded up to 64 KiB) of emulated GPU memory in this process.
    pub fn alloc(&self, size: u64, flags: u32) -> Result<Alloc> {
        let mut a = abi::Alloc {
            size,
            flags,
            ..Default::default()
        };
        rw!(self, alloc, "nvp2p ALLOC", &mut a)?;
        Ok(Alloc {
            va: a.va,
            size: round_up(size),
            handle: a.handle,
        })
    }

    /// Frees the allocation at `va` ("cudaFree"); returns the number of free callbacks run.
    pub fn free(&self, va: u64) -> Result<u32> {
        let mut f = abi::Free {
            va,
            ..Default::default()
        };
        rw!(self, free, "nvp2p FREE", &mut f)?;
        Ok(f.callbacks)
    }

    /// Frees the allocation with this handle.
    pub fn free_handle(&self, handle: u64) -> Result<u32> {
        let mut f = abi::Free {
            handle,
            ..Default::default()
        };
        rw!(self, free, "nvp2p FREE", &mut f)?;
        Ok(f.callbacks)
    }

    fn pid_op(&self, which: u8, tgid: i32) -> Result<Revoked> {
        let mut p = abi::PidOp {
            tgid,
            ..Default::default()
        };
        match which {
            0 => rw!(self, destroy_context, "nvp2p DESTROY_CONTEXT", &mut p)?,
            1 => rw!(self, process_exit, "nvp2p PROCESS_EXIT", &mut p)?,
            _ => rw!(self, gpu_teardown, "nvp2p GPU_TEARDOWN", &mut p)?,
        };
        Ok(Revoked {
            callbacks: p.callbacks,
            allocs: p.allocs,
        })
    }

    /// Frees every allocation of `tgid` (0 = this process), like cuCtxDestroy.
    pub fn destroy_context(&self, tgid: i32) -> Result<Revoked> {
        self.pid_op(0, tgid)
    }

    /// Simulates the exit of `tgid` (0 = this process).
    pub fn process_exit(&self, tgid: i32) -> Result<Revoked> {
        self.pid_op(1, tgid)
    }

    /// Frees every allocation of every process.
    pub fn gpu_teardown(&self) -> Result<Revoked> {
        self.pid_op(2, 0)
    }

    fn list<T: Default + Copy>(&self, kind: u32) -> Result<Vec<T>> {
        let mut cap = 64usize;
        loop {
            let mut buf = vec![T::default(); cap];
            let mut l = abi::List {
                kind,
                cap: cap as u32,
                buf: buf.as_mut_ptr() as u64,
                ..Default::default()
            };
            rw!(self, list, "nvp2p LIST", &mut l)?;
            let count = l.count as usize;
            if count <= cap {
                buf.truncate(count);
                return Ok(buf);
            }
            cap = count + 16;
        }
    }

    /// Every allocation known to the emulator (all processes).
    pub fn list_allocs(&self) -> Result<Vec<abi::AllocInfo>> {
        self.list(0)
    }

    /// Every live pin (all processes).
    pub fn list_pins(&self) -> Result<Vec<abi::PinInfo>> {
        self.list(1)
    }

    /// Sets (or clears, with mode OFF) the injected fault of one entry point.
    pub fn set_fault(&self, op: u32, mode: u32, err: i32, n: u32, skip: u32) -> Result<u64> {
        let mut f = abi::Fault {
            op,
            mode,
            err,
            n,
            skip,
            ..Default::default()
        };
        rw!(self, set_fault, "nvp2p SET_FAULT", &mut f)?;
        Ok(f.injected)
    }

    /// Current configuration.
    pub fn config(&self) -> Result<abi::Config> {
        let mut c = abi::Config::default();
        rw!(self, get_config, "nvp2p GET_CONFIG", &mut c)?;
        Ok(c)
    }

    /// Replaces the configuration.
    pub fn set_config(&self, mut c: abi::Config) -> Result<()> {
        rw!(self, set_config, "nvp2p SET_CONFIG", &mut c)?;
        Ok(())
    }

    /// Counters and violations.
    pub fn stats(&self) -> Result<abi::Stats> {
        let mut s = abi::Stats::default();
        rw!(self, stats, "nvp2p STATS", &mut s)?;
        Ok(s)
    }

    /// Clears faults, counters, violations and the quarantine; restores the default config.
    pub fn reset(&self) -> Result<()> {
        // SAFETY: _IO ioctl without argument on an open fd.
        ioctl_res("nvp2p RESET", unsafe { ioc::reset(self.file.as_raw_fd()) })?;
        Ok(())
    }

    /// Records a leaked-pin violation per live pin; returns the number of live pins.
    pub fn check_leaks(&self) -> Result<u32> {
        // SAFETY: _IO ioctl without argument on an open fd.
        let n = ioctl_res("nvp2p CHECK_LEAKS", unsafe {
            ioc::check_leaks(self.file.as_raw_fd())
        })?;
        Ok(n as u32)
    }

    /// Runs one operation of the emulator's in-kernel test client.
    pub fn client(&self, mut c: abi::Client) -> Result<abi::Client> {
        rw!(self, client, "nvp2p CLIENT", &mut c)?;
        Ok(c)
    }
}

/// Rounds up to a whole number of GPU pages.
pub fn round_up(size: u64) -> u64 {
    size.div_ceil(GPU_PAGE_SIZE) * GPU_PAGE_SIZE
}

/// Named, non-zero violation counters of a stats snapshot.
pub fn violations(s: &abi::Stats) -> Vec<(&'static str, u64)> {
    VIOLATIONS
        .iter()
        .enumerate()
        .filter(|(i, _)| s.violations[*i] != 0)
        .map(|(i, (name, _))| (*name, s.violations[i]))
        .collect()
}

/// Index of a provider entry point by name (e.g. `get_pages`, `dma_map_pages`).
pub fn op_index(name: &str) -> Result<u32> {
    OPS.iter()
        .position(|o| *o == name || o.trim_end_matches("_pages") == name)
        .map(|i| i as u32)
        .ok_or_else(|| {
            EmuError::Invalid(format!(
                "unknown provider op '{name}' (one of {})",
                OPS.join(", ")
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_names_resolve() {
        assert_eq!(op_index("get_pages").unwrap(), 0);
        assert_eq!(op_index("dma_map_pages").unwrap(), 4);
        assert_eq!(op_index("dma_map").unwrap(), 4);
        assert!(op_index("nope").is_err());
    }

    #[test]
    fn injected_errnos_are_the_real_calls() {
        // The two puts fail only on an allocation or in RM; dma_unmap_pages never on valid
        // arguments; every get_pages errno is one of nvidia_p2p_map_status's six.
        for op in [2, 3] {
            assert_eq!(real_errnos(op), &[-12, -5]);
        }
        assert!(real_errnos(5).is_empty());
        let status_map = [-5, -12, -22, -524, -16, -19];
        for op in 0..FAULT_OPS as u32 {
            assert!(
                real_errnos(op).iter().all(|e| status_map.contains(e)),
                "op {op}"
            );
        }
    }

    #[test]
    fn rounding() {
        assert_eq!(round_up(1), GPU_PAGE_SIZE);
        assert_eq!(round_up(GPU_PAGE_SIZE), GPU_PAGE_SIZE);
        assert_eq!(round_up(GPU_PAGE_SIZE + 1), 2 * GPU_PAGE_SIZE);
    }
}
