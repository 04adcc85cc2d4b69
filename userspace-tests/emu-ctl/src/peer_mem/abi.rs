//! The control device's ioctl structures, laid out as `peer_mem_emu_ioctl.h` (checked by
//! `tests/layout.rs`).
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
