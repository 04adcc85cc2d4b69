//! Userspace driver of the bench emulators (`/dev/nvp2p_emu`, `/dev/peer_mem_emu`).

pub mod cli;
