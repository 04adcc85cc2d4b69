//! Userspace driver of the bench emulators (`/dev/nvp2p_emu`, `/dev/peer_mem_emu`): safe wrappers
//! of both ioctl ABIs, the concurrency scenarios (docs/emulators.md), and the `nvpeer emu` CLI.

pub mod cli;
pub mod cost_model;
pub mod error;
pub mod nvp2p;
pub mod peer_mem;
pub mod regpath;
pub mod scenario;
pub mod sysfs;

pub use error::{EmuError, Result};
