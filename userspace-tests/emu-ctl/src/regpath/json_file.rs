//! The benchmark's JSON documents on disk.

use crate::error::{EmuError, Result};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::Path;

/// Reads a document; one that is not JSON, or not of type `T` (a field missing or of another
/// type), is [`EmuError::Invalid`] naming the file and serde's line and column.
pub(super) fn read_json<T: DeserializeOwned>(p: &Path) -> Result<T> {
    let text = std::fs::read_to_string(p).map_err(|source| EmuError::File {
        path: p.display().to_string(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| EmuError::Invalid(format!("{}: {e}", p.display())))
}

/// Writes a document, pretty-printed, its keys in alphabetical order as in every document so far
/// (the order of `serde_json::Value`'s maps, not the order of the types' fields).
pub(super) fn write_json(path: &Path, doc: &impl Serialize) -> Result<()> {
    let text = serde_json::to_value(doc)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .map_err(|e| EmuError::Invalid(e.to_string()))?;
    std::fs::write(path, text + "\n").map_err(|source| EmuError::File {
        path: path.display().to_string(),
        source,
    })
}
