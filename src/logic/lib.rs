// SPDX-License-Identifier: GPL-2.0

//! Host-side build of nvpeer's pure logic, for `cargo test`.
//!
//! The kernel crate pulls the same files in with `#[path = "logic/<file>.rs"]`; nothing here may
//! depend on `std` or on the `kernel` crate. Items are `pub(crate)` so the kernel build's
//! `unreachable_pub` lint stays quiet; in this host crate they are only used by the tests.
#![cfg_attr(not(test), no_std)]
#![allow(dead_code)]

#[path = "errno.rs"]
mod errno;
#[path = "params.rs"]
mod params;
#[path = "range.rs"]
mod range;
#[path = "sgl.rs"]
mod sgl;
#[path = "state.rs"]
mod state;
#[path = "version.rs"]
mod version;
