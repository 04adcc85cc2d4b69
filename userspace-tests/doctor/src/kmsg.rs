//! The kernel log as `/dev/kmsg` hands it out, and the module-loader errors users hit:
//! `disagrees about version of symbol` (built against another ib_core or nvidia.ko, CRC mismatch)
//! and `Unknown symbol` (the running kernel does not export what the module needs).

use crate::root::SysRoot;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;

/// `O_NONBLOCK` on Linux (every architecture nvpeer builds for).
const O_NONBLOCK: i32 = 0o4000;
/// Bytes read at most: the kernel's log buffer is at most a few MiB.
const MAX: usize = 32 << 20;

/// Which loader error a line reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SymbolErrorKind {
    /// `<module>: disagrees about version of symbol <sym>`.
    VersionMismatch,
    /// `<module>: Unknown symbol <sym> (err <n>)`.
    Unknown,
}

/// One loader error from the log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SymbolError {
    /// The module that failed to load.
    pub module: String,
    /// The symbol it could not resolve.
    pub symbol: String,
    /// Which error.
    pub kind: SymbolErrorKind,
}

/// Why the kernel log could not be read.
#[derive(Debug, thiserror::Error)]
#[error("/dev/kmsg: {0}")]
pub struct KmsgError(#[from] std::io::Error);

/// Reads the kernel log: `/dev/kmsg` records until the end of the buffer (non-blocking; a record
/// overwritten while reading is skipped). A fixture tree's `dev/kmsg` is a plain text file, read to
/// its end. `Err` carries why the log could not be read (`dmesg_restrict` for non-root users).
pub fn read(root: &SysRoot) -> Result<String, KmsgError> {
    let path = root.path("/dev/kmsg");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(&path)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 8192];
    while out.len() < MAX {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if out.last() != Some(&b'\n') {
                    out.push(b'\n');
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            // EPIPE: the record was overwritten while we read; the next read gets the next one.
            Err(e) if e.raw_os_error() == Some(32) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// The message of one log line: `/dev/kmsg` records are `prio,seq,usec,flags;message`, `dmesg`
/// lines may start with `[  12.345678] `; continuation lines (` KEY=value`) carry no message.
pub fn message(line: &str) -> Option<&str> {
    if line.starts_with(' ') {
        return None;
    }
    let msg = match line.split_once(';') {
        Some((head, rest))
            if head.split(',').count() >= 3
                && head
                    .split(',')
                    .take(3)
                    .all(|f| f.trim().parse::<u64>().is_ok()) =>
        {
            rest
        }
        _ => line,
    };
    let msg = match msg.strip_prefix('[').and_then(|r| r.split_once("] ")) {
        Some((ts, rest)) if ts.trim().parse::<f64>().is_ok() => rest,
        _ => msg,
    };
    Some(msg)
}

/// The loader error in one message, if it is one.
pub fn symbol_error(msg: &str) -> Option<SymbolError> {
    let (module, rest) = msg.split_once(": ")?;
    if module.is_empty() || module.contains(char::is_whitespace) {
        return None;
    }
    let (kind, sym) = if let Some(s) = rest.strip_prefix("disagrees about version of symbol ") {
        (SymbolErrorKind::VersionMismatch, s)
    } else if let Some(s) = rest.strip_prefix("Unknown symbol ") {
        (SymbolErrorKind::Unknown, s)
    } else {
        return None;
    };
    let symbol = sym.split_whitespace().next()?;
    Some(SymbolError {
        module: module.to_string(),
        symbol: symbol.to_string(),
        kind,
    })
}

/// Every distinct loader error in the log, in order of first appearance.
pub fn symbol_errors(log: &str) -> Vec<SymbolError> {
    let mut out: Vec<SymbolError> = Vec::new();
    for e in log.lines().filter_map(message).filter_map(symbol_error) {
        if !out.contains(&e) {
            out.push(e);
        }
    }
    out
}
