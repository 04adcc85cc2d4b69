//! The registration path under test: the raw floor or the core with its loaded client.

use super::cli::MeasureArgs;
use super::document::Via;
use super::floor::Floor;
use crate::error::{EmuError, Result};
use crate::peer_mem::{Core, RegParams};

/// The registration path under test: one handle, shared by the measuring threads.
pub(super) enum Path {
    Floor(Floor),
    Core(Core),
}

/// One live registration of either path.
#[derive(Clone, Copy)]
pub(super) enum Handle {
    Floor(u32),
    Core(u32),
}

impl Path {
    pub(super) fn reg(&self, va: u64, len: u64) -> Result<Handle> {
        match self {
            Path::Floor(f) => Ok(Handle::Floor(f.reg(va, len)?.id)),
            Path::Core(c) => Ok(Handle::Core(c.register(RegParams::mr(va, len))?.handle)),
        }
    }

    pub(super) fn dereg(&self, h: Handle) -> Result<()> {
        match (self, h) {
            (Path::Floor(f), Handle::Floor(id)) => f.dereg(id).map(|_| ()),
            (Path::Core(c), Handle::Core(id)) => c.deregister(id, false),
            _ => Err(EmuError::Invalid(
                "registration handle of another path".into(),
            )),
        }
    }

    /// Time spent inside client callbacks so far (the core's counter), for core paths.
    pub(super) fn client_ns(&self) -> Result<Option<u64>> {
        match self {
            Path::Core(c) => Ok(Some(c.stats()?.client_ns)),
            Path::Floor(_) => Ok(None),
        }
    }

    /// What a free under this live registration left behind (for the invalidation table).
    pub(super) fn state_after_free(&self, h: Handle) -> String {
        match (self, h) {
            (Path::Core(c), Handle::Core(id)) => match c.query(id) {
                Ok(q) => crate::peer_mem::state::name(q.state).to_string(),
                Err(e) => format!("query failed: {e}"),
            },
            _ => "n/a".into(),
        }
    }
}

pub(super) fn open_path(m: &MeasureArgs) -> Result<Path> {
    Ok(if m.via == Via::Floor {
        Path::Floor(Floor::open(m.persistent)?)
    } else {
        Path::Core(Core::open()?)
    })
}
