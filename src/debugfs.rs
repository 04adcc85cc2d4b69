// SPDX-License-Identifier: GPL-2.0

//! `/sys/kernel/debug/nvpeer/`: `stats`, `mrs`, `config` (formats: `uapi/debugfs.md`).

use crate::client_tables::{ClientKind, VERSION};
use crate::registry;
use crate::stats::STATS;
use kernel::debugfs::{Dir, File};
use kernel::fmt;
use kernel::prelude::*;

/// What `config` shows.
pub(crate) struct ConfigInfo {
    /// `persistent_api_support` as loaded.
    pub(crate) persistent_api_support: i32,
    /// `peerdirect_support` as loaded.
    pub(crate) peerdirect_support: i32,
    /// The clients registered, in registration order.
    pub(crate) clients: [Option<ClientKind>; 2],
}

/// The directory and its files; removed on drop.
pub(crate) struct DebugFs {
    _stats: Pin<KBox<File<()>>>,
    _mrs: Pin<KBox<File<()>>>,
    _config: Pin<KBox<File<ConfigInfo>>>,
    _dir: Dir,
}

fn render_config(config: &ConfigInfo, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "version {VERSION}")?;
    writeln!(
        f,
        "persistent_api_support {}",
        config.persistent_api_support
    )?;
    writeln!(f, "peerdirect_support {}", config.peerdirect_support)?;
    for kind in config.clients.iter().flatten() {
        writeln!(f, "client {} {}", kind.name(), kind.describe())?;
    }
    Ok(())
}

fn render_mrs(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let Ok(all) = registry::snapshot() else {
        return writeln!(f, "# out of memory");
    };
    for mr in all.iter() {
        mr.render(f)?;
    }
    Ok(())
}

fn render_stats(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    STATS.render(f)
}

impl DebugFs {
    /// Creates the directory (without debugfs this is inert and never fails).
    pub(crate) fn new(config: ConfigInfo) -> Result<Self> {
        let dir = Dir::new(cstr!(c"nvpeer"));
        let stats = KBox::pin_init(
            dir.read_callback_file(cstr!(c"stats"), (), &render_stats),
            GFP_KERNEL,
        )?;
        let mrs = KBox::pin_init(
            dir.read_callback_file(cstr!(c"mrs"), (), &render_mrs),
            GFP_KERNEL,
        )?;
        let config = dir.read_callback_file(cstr!(c"config"), config, &render_config);
        let config = KBox::pin_init(config, GFP_KERNEL)?;
        Ok(Self {
            _stats: stats,
            _mrs: mrs,
            _config: config,
            _dir: dir,
        })
    }
}
