// SPDX-License-Identifier: GPL-2.0

//! nvpeer's pure logic: no `kernel`, no `std`, no `unsafe`.
//!
//! Declared here once: the module crate includes this directory as `mod logic`, the host crate
//! (`src/logic/Cargo.toml`, `cargo test`) and the KUnit test module
//! (`testbench/kunit/nvpeer_logic_kunit.rs`) through `#[path]`.

pub(crate) mod errno;
pub(crate) mod params;
pub(crate) mod range;
pub(crate) mod sgl;
pub(crate) mod state;
pub(crate) mod version;
