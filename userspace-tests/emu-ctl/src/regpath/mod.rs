//! `nvpeer emu regpath`: the registration-path benchmark (issue 8, docs/performance.md).
//!
//! `measure` drives one path in this process and writes its numbers as JSON:
//! - `--via floor`: `/dev/nvpeer_rawfloor` (testbench/bench/rawfloor), the NVIDIA P2P API called
//!   directly: get_pages + dma_map_pages per registration, dma_unmap_pages + put_pages per
//!   deregistration, one syscall each (the 1.0x floor);
//! - `--via core`: `/dev/peer_mem_emu` REGISTER / DEREGISTER, i.e. the emulated OFED core and
//!   whichever client is loaded (the classic C client or nvpeer).
//!
//! Per registration size and thread count it records registration and deregistration latency
//! (median, p99), cycles per second and provider calls per registration (the provider emulator's
//! counters); per size the latency of a free ("cudaFree") under a live MR, which runs the
//! invalidation; kernel slab memory per live MR; and a live-MR scale test. `report` merges the
//! paths' files into one JSON document with ratios to the floor and prints markdown tables.
//! The documents' types are in `document`: the writers build them, `report`, `table` and `check`
//! read them back with them.
//!
//! These are benchmark numbers: nothing here asserts a target.

mod cell;
mod check;
mod cli;
mod document;
#[cfg(test)]
mod fixture_tests;
mod floor;
mod inval_scale;
mod invalidation;
mod json_file;
mod live_mrs;
mod measure;
mod memory;
mod path;
mod query;
mod report;
mod slab;
mod stats;
mod tables;

pub use cli::{run, Args};
pub use floor::FLOOR_DEVICE;
