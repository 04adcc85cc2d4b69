//! The benchmark's JSON documents on disk.

use crate::error::{EmuError, Result};
use serde_json::Value;
use std::path::PathBuf;

pub(super) fn read_json(p: &PathBuf) -> Result<Value> {
    let text = std::fs::read_to_string(p).map_err(|source| EmuError::File {
        path: p.display().to_string(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| EmuError::Invalid(format!("{}: {e}", p.display())))
}

pub(super) fn write_json(path: &PathBuf, v: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|e| EmuError::Invalid(e.to_string()))?;
    std::fs::write(path, text + "\n").map_err(|source| EmuError::File {
        path: path.display().to_string(),
        source,
    })
}
