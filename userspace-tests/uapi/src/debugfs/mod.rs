//! nvpeer's debugfs directory, `/sys/kernel/debug/nvpeer/` (uapi/debugfs.md, format version
//! [`FORMAT_VERSION`]): [`stats`](Stats), [`mrs`](Mr) and [`config`](Config). Root only, and only
//! while the module is loaded and debugfs is mounted.
//!
//! New keys and fields may be appended to any file without a version bump, so every parser here
//! keeps or ignores what it does not know instead of failing on it.

mod config;
mod lines;
mod mr;
mod mr_state;
mod mrs;
mod stats;

pub use config::{read_config, Config, ConfigClient, CLIENT_DESCRIPTIONS, CONFIG_KEYS};
pub use mr::{Mr, MrKind, MrLineError, MR_FIELDS};
pub use mr_state::{CoreHold, MrState, MR_STATES};
pub use mrs::{parse_mrs, read_mrs};
pub use stats::{read_stats, Stats, GAUGES, STATS_KEYS};

use std::path::Path;

/// The directory.
pub const DIR: &str = "/sys/kernel/debug/nvpeer";
/// Global counters, one `<key> <u64>` line each.
pub const STATS: &str = "/sys/kernel/debug/nvpeer/stats";
/// One `key=value ...` line per live registration object.
pub const MRS: &str = "/sys/kernel/debug/nvpeer/mrs";
/// The module's version, parameters in effect and registered clients.
pub const CONFIG: &str = "/sys/kernel/debug/nvpeer/config";

/// The format version these parsers follow (`NVPEER_UAPI_VERSION` in `uapi/nvpeer.h`).
pub const FORMAT_VERSION: u32 = 1;

/// Whether nvpeer's debugfs directory exists under `root`: nvpeer (under either module name) is
/// loaded and debugfs is mounted and readable.
pub fn present(root: &Path) -> bool {
    crate::at(root, DIR).is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;

    #[test]
    fn present_only_with_the_directory() {
        let r = FakeRoot::new();
        assert!(!present(r.path()));
        r.file(CONFIG, "version 0.1.0\n");
        assert!(present(r.path()));
    }

    /// The format version named here is the one `uapi/nvpeer.h` declares (checked only inside
    /// the repository, where the header is).
    #[test]
    fn format_version_matches_the_header() {
        let h = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../uapi/nvpeer.h");
        let Ok(text) = std::fs::read_to_string(h) else {
            return;
        };
        let declared = text.lines().find_map(|l| {
            l.trim()
                .strip_prefix("#define NVPEER_UAPI_VERSION")?
                .trim()
                .parse::<u32>()
                .ok()
        });
        assert_eq!(declared, Some(FORMAT_VERSION));
    }
}
