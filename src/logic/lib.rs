// SPDX-License-Identifier: GPL-2.0

//! Host-side build of nvpeer's pure logic, for `cargo test`.
//!
//! The modules are declared in `mod.rs`, which the kernel crate includes as `mod logic`; nothing
//! there may depend on `std` or on the `kernel` crate. Items are `pub(crate)` so the kernel
//! build's `unreachable_pub` lint stays quiet; this host crate is their tests only (its library
//! is empty outside `cargo test`).
#![cfg_attr(not(test), no_std)]

#[cfg(test)]
#[path = "mod.rs"]
mod logic;
