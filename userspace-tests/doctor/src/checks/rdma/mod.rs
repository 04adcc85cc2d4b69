//! RDMA stack: peer-memory API, devices, nvpeer itself (under its drop-in name `nvidia_peermem` or
//! its own), who serves `nv_mem`, conflicts, what the communication libraries will detect, dma-buf.
//!
//! One file per check: `peer_api`, `devices`, `nvpeer_module`, `nvidia_peermem`, `peer_clients`,
//! `conflicts`, `consumers` (what the communication libraries will detect), `dmabuf`,
//! `gpu_initiated` (GIN, IBGDA and `rc_gda` prerequisites), `nic_paths`
//! (which way GPU memory reaches each NIC by its driver family);
//! `nv_mem_owner` holds what several of them ask: which module serves `nv_mem` and how nvpeer is
//! installed.

mod conflicts;
mod consumers;
mod devices;
mod dmabuf;
mod gpu_initiated;
mod nic_paths;
mod nv_mem_owner;
mod nvidia_peermem;
mod nvpeer_module;
mod peer_api;
mod peer_clients;

pub use conflicts::conflicts;
pub use consumers::{consumers, CONSUMERS};
pub use devices::devices;
pub use dmabuf::dmabuf;
pub use gpu_initiated::gpu_initiated;
pub use nic_paths::nic_paths;
pub use nv_mem_owner::{nv_mem_providers, nvpeer_name, NvMemProvider};
pub use nvidia_peermem::nvidia_peermem;
pub use nvpeer_module::nvpeer_module;
pub use peer_api::peer_api;
pub use peer_clients::peer_clients;

/// The peer-memory core's client list (uapi/interfaces.md).
const PEERS: &str = nvpeer_uapi::memory_peers::DIR;
