// SPDX-License-Identifier: GPL-2.0

//! Host-side build of nvpeer's pure logic, for `cargo test`.
//!
//! The modules are declared in `mod.rs`, which the kernel crate includes as `mod logic`; nothing
//! there may depend on `std` or on the `kernel` crate. Items are `pub(crate)` so the kernel
//! build's `unreachable_pub` lint stays quiet; in this host crate they are only used by the tests.
#![cfg_attr(not(test), no_std)]
#![allow(dead_code)]

#[path = "mod.rs"]
mod logic;
