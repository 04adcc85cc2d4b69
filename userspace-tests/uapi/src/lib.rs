//! Parsers of every interface the nvpeer kernel module publishes to users, as documented in
//! `uapi/debugfs.md` and `uapi/interfaces.md` at the repository root:
//!
//! - [`debugfs`]: `/sys/kernel/debug/nvpeer/{stats,mrs,config}` (nvpeer's own files, root only);
//! - [`memory_peers`]: `/sys/kernel/mm/memory_peers/<client>/` (the peer-memory core's counters of
//!   each registered client, where the core keeps them);
//! - [`module`]: `/sys/module/<name>/version` and `/sys/module/<name>/parameters/`.
//!
//! Every reader takes the root of the inspected filesystem (`/` on the running system, a fake
//! tree in tests) and resolves the documented absolute paths under it ([`at`]). File contents
//! never make a reader panic: what does not parse is reported, as an [`Error`] or as the lines a
//! lenient parser set aside.

pub mod debugfs;
mod error;
pub mod memory_peers;
pub mod module;
mod root;

#[cfg(any(test, feature = "fake-root"))]
pub mod fake_root;
#[cfg(test)]
mod repo_sources;

pub use error::Error;
pub use root::at;
