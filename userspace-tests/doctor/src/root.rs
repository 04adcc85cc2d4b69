//! Every file the doctor reads goes through [`SysRoot`], so tests can point it at a fixture tree.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// A filesystem root (normally `/`) under which all absolute paths are resolved.
#[derive(Debug, Clone)]
pub struct SysRoot {
    base: PathBuf,
}

impl SysRoot {
    /// Uses `base` as the root directory.
    pub fn new(base: impl Into<PathBuf>) -> Self {
        Self { base: base.into() }
    }

    /// The root directory itself (what the `nvpeer_uapi` readers take).
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// True when the doctor looks at the running system (`/`), which enables live probes.
    pub fn is_live(&self) -> bool {
        self.base == Path::new("/")
    }

    /// Maps an absolute path of the inspected system to a path on this machine.
    pub fn path(&self, abs: &str) -> PathBuf {
        self.base.join(abs.trim_start_matches('/'))
    }

    /// Maps a path on this machine back to the inspected system's absolute path.
    pub fn unroot(&self, real: &Path) -> String {
        let base = fs::canonicalize(&self.base).unwrap_or_else(|_| self.base.clone());
        match real.strip_prefix(&base) {
            Ok(rel) => format!("/{}", rel.display()),
            Err(_) => real.display().to_string(),
        }
    }

    /// Reads a whole text file; `None` when it does not exist or cannot be read.
    pub fn read(&self, abs: &str) -> Option<String> {
        fs::read(self.path(abs))
            .ok()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// Reads a text file and trims surrounding whitespace.
    pub fn read_trim(&self, abs: &str) -> Option<String> {
        self.read(abs).map(|s| s.trim().to_string())
    }

    /// Reads up to `max` bytes of a binary file (sysfs `config` files are read this way).
    pub fn read_bytes(&self, abs: &str, max: usize) -> Option<Vec<u8>> {
        let f = fs::File::open(self.path(abs)).ok()?;
        let mut buf = Vec::new();
        f.take(max as u64).read_to_end(&mut buf).ok()?;
        Some(buf)
    }

    /// Whether `abs` exists (following links).
    pub fn exists(&self, abs: &str) -> bool {
        self.path(abs).exists()
    }

    /// Sorted names of the entries of a directory; empty when it is missing.
    pub fn list(&self, abs: &str) -> Vec<String> {
        let mut v: Vec<String> = match fs::read_dir(self.path(abs)) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        };
        v.sort();
        v
    }

    /// Whether a directory can be listed at all (distinguishes "empty" from "unreadable").
    pub fn is_dir(&self, abs: &str) -> bool {
        self.path(abs).is_dir()
    }

    /// Resolves links (e.g. `/sys/bus/pci/devices/<bdf>`) and returns the system's absolute path.
    pub fn resolve(&self, abs: &str) -> Option<String> {
        let real = fs::canonicalize(self.path(abs)).ok()?;
        Some(self.unroot(&real))
    }

    /// Reads a file as a number; accepts decimal and `0x` hexadecimal.
    pub fn read_num(&self, abs: &str) -> Option<u64> {
        parse_num(&self.read_trim(abs)?)
    }
}

/// Parses decimal or `0x`-prefixed hexadecimal.
pub fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}
