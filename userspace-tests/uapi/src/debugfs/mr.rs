//! One line of `mrs`: a registration object, `key=value` fields separated by one space.
//!
//! ```text
//! id=7 kind=invalidating state=mapped va=0x7f3a12350000 size=262144 start=0x7f3a12350000 len=262144 pages=4 tgid=812 core=live core_context=3 pt_version=0x00020000 pt_flags=0x0 sg_entries=4 pinned_bytes=262144
//! ```

use super::mr_state::{CoreHold, MrState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The fields of an `mrs` line, in line order (uapi/debugfs.md, `Mr::render` in src/mr.rs).
pub const MR_FIELDS: [&str; 15] = [
    "id",
    "kind",
    "state",
    "va",
    "size",
    "start",
    "len",
    "pages",
    "tgid",
    "core",
    "core_context",
    "pt_version",
    "pt_flags",
    "sg_entries",
    "pinned_bytes",
];

/// `kind=`: how the registration pins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MrKind {
    /// `nvidia_p2p_get_pages_persistent` (client `nv_mem` by default, or `nv_mem_nc`).
    Persistent,
    /// `nvidia_p2p_get_pages` with a free callback (`nv_mem` with `persistent_api_support=0`).
    Invalidating,
}

/// One registration object as `mrs` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mr {
    /// Ticket: registry key and the value NVIDIA hands back to the free callback.
    pub id: u64,
    /// How it pins.
    pub kind: MrKind,
    /// Where it is in its life.
    pub state: MrState,
    /// Start of the raw user range the core asked for.
    pub va: u64,
    /// Length of that range, bytes.
    pub size: u64,
    /// Start of the 64 KiB aligned range pinned.
    pub start: u64,
    /// Length of the range pinned, bytes.
    pub len: u64,
    /// 64 KiB pages pinned.
    pub pages: u64,
    /// The pinning process, as a tgid of the initial PID namespace.
    pub tgid: u64,
    /// Whether the core still holds it.
    pub core: CoreHold,
    /// The core's id for invalidation (`-`: persistent, or before `get_pages`).
    pub core_context: Option<u64>,
    /// Version of the NVIDIA page table held (`-`: none held).
    pub pt_version: Option<u64>,
    /// Flags of that page table (`-`: none held).
    pub pt_flags: Option<u64>,
    /// SG entries handed to the core (0 when not mapped).
    pub sg_entries: u64,
    /// Bytes counted in `stats`' `pinned_bytes`.
    pub pinned_bytes: u64,
}

/// What is wrong with a line of `mrs`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MrLineError {
    /// A field the record always has is missing.
    #[error("no {0}=")]
    Missing(&'static str),
    /// A field holds something that is not one of its values.
    #[error("{key}={value} is not valid")]
    Invalid { key: &'static str, value: String },
}

impl Mr {
    /// Parses one line; the error says which field is missing or malformed. Unknown fields are
    /// ignored (a newer module may append some).
    pub fn parse(line: &str) -> Result<Mr, MrLineError> {
        let fields: BTreeMap<&str, &str> = line
            .split_whitespace()
            .filter_map(|f| f.split_once('='))
            .collect();
        let text = |k: &'static str| fields.get(k).copied().ok_or(MrLineError::Missing(k));
        let bad = |k: &'static str, v: &str| MrLineError::Invalid {
            key: k,
            value: v.to_string(),
        };
        let num = |k: &'static str| text(k).and_then(|v| number(v).ok_or_else(|| bad(k, v)));
        let opt = |k: &'static str| {
            text(k).and_then(|v| match v {
                "-" => Ok(None),
                _ => number(v).map(Some).ok_or_else(|| bad(k, v)),
            })
        };
        let kind = match text("kind")? {
            "persistent" => MrKind::Persistent,
            "invalidating" => MrKind::Invalidating,
            v => return Err(bad("kind", v)),
        };
        let state = text("state")?;
        let core = text("core")?;
        Ok(Mr {
            id: num("id")?,
            kind,
            state: MrState::from_name(state).ok_or_else(|| bad("state", state))?,
            va: num("va")?,
            size: num("size")?,
            start: num("start")?,
            len: num("len")?,
            pages: num("pages")?,
            tgid: num("tgid")?,
            core: CoreHold::from_name(core).ok_or_else(|| bad("core", core))?,
            core_context: opt("core_context")?,
            pt_version: opt("pt_version")?,
            pt_flags: opt("pt_flags")?,
            sg_entries: num("sg_entries")?,
            pinned_bytes: num("pinned_bytes")?,
        })
    }

    /// A pin left to NVIDIA's callback: the core released it but the pin is not gone
    /// (uapi/debugfs.md; it keeps the module loaded until the owner frees the memory or exits).
    pub fn left_to_callback(&self) -> bool {
        self.core == CoreHold::Released
            && !matches!(self.state, MrState::Revoked | MrState::Released)
    }
}

/// A decimal number, or a hexadecimal one with `0x`.
fn number(v: &str) -> Option<u64> {
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPPED: &str = "id=7 kind=invalidating state=mapped va=0x7f3a12350000 size=262144 start=0x7f3a12350000 len=262144 pages=4 tgid=812 core=live core_context=3 pt_version=0x00020000 pt_flags=0x0 sg_entries=4 pinned_bytes=262144";

    #[test]
    fn the_documented_line() {
        let m = Mr::parse(MAPPED);
        let m = m.as_ref().ok();
        assert_eq!(m.map(|m| m.id), Some(7));
        assert_eq!(m.map(|m| m.kind), Some(MrKind::Invalidating));
        assert_eq!(m.map(|m| m.state), Some(MrState::Mapped));
        assert_eq!(m.map(|m| m.va), Some(0x7f3a12350000));
        assert_eq!(m.map(|m| m.pages), Some(4));
        assert_eq!(m.and_then(|m| m.core_context), Some(3));
        assert_eq!(m.and_then(|m| m.pt_version), Some(0x20000));
        assert_eq!(m.and_then(|m| m.pt_flags), Some(0));
        assert_eq!(m.map(Mr::left_to_callback), Some(false));
    }

    #[test]
    fn dashes_unknown_fields_and_orphans() {
        let line = "id=9 kind=persistent state=orphaned va=0x10000 size=65536 start=0x10000 len=65536 pages=1 tgid=1 core=released core_context=- pt_version=- pt_flags=- sg_entries=0 pinned_bytes=65536 later=1";
        let m = Mr::parse(line);
        assert_eq!(m.as_ref().map(|m| m.core_context), Ok(None));
        assert_eq!(m.as_ref().map(|m| m.pt_version), Ok(None));
        assert_eq!(m.as_ref().map(Mr::left_to_callback), Ok(true));
    }

    #[test]
    fn what_is_wrong_is_named() {
        assert_eq!(
            Mr::parse(&MAPPED.replace(" tgid=812", "")),
            Err(MrLineError::Missing("tgid"))
        );
        assert_eq!(
            Mr::parse(&MAPPED.replace("state=mapped", "state=gone"))
                .unwrap_err()
                .to_string(),
            "state=gone is not valid"
        );
        assert_eq!(
            Mr::parse(&MAPPED.replace("va=0x7f3a12350000", "va=0xzz"))
                .unwrap_err()
                .to_string(),
            "va=0xzz is not valid"
        );
        assert!(Mr::parse(&MAPPED.replace("kind=invalidating", "kind=x")).is_err());
    }

    /// The fields are those src/mr.rs prints, in its order .
    #[test]
    fn fields_match_the_module() {
        let src = crate::repo_sources::repo_file("src/mr.rs");
        let mut at = 0;
        for f in MR_FIELDS {
            let pos = src[at..].find(&format!("{f}="));
            assert!(pos.is_some(), "{f}= not printed by src/mr.rs");
            at += pos.unwrap_or(0);
        }
    }
}
