// SPDX-License-Identifier: GPL-2.0

//! Bench smoke test: the smallest out-of-tree Rust module; proves the toolchain and kernel fit.

use kernel::prelude::*;

module! {
    type: NvpeerHello,
    name: "nvpeer_hello",
    authors: ["nvpeer developers"],
    description: "nvpeer bench smoke test: a Rust module that loads, logs and unloads",
    license: "GPL",
}

struct NvpeerHello;

impl kernel::Module for NvpeerHello {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        pr_info!("nvpeer_hello: loaded\n");
        Ok(NvpeerHello)
    }
}

impl Drop for NvpeerHello {
    fn drop(&mut self) {
        pr_info!("nvpeer_hello: unloaded\n");
    }
}
