//! Kernel facts: release, symbol table, build configuration.

use crate::root::SysRoot;
use flate2::read::GzDecoder;
use std::collections::BTreeMap;
use std::io::Read;

/// `/proc/kallsyms`, reduced to name → owning module (`None` = built into vmlinux).
#[derive(Debug, Default)]
pub struct Kallsyms {
    syms: BTreeMap<String, Option<String>>,
    /// True when every address reads as zero (no root / kptr_restrict); names are still valid.
    pub addresses_hidden: bool,
}

impl Kallsyms {
    /// Reads `/proc/kallsyms`; `None` when it cannot be read.
    pub fn load(root: &SysRoot) -> Option<Self> {
        let text = root.read("/proc/kallsyms")?;
        Some(Self::parse(&text))
    }

    /// Parses kallsyms text (`ADDR TYPE NAME [\t[MODULE]]`).
    pub fn parse(text: &str) -> Self {
        let mut syms = BTreeMap::new();
        let mut nonzero = false;
        for line in text.lines() {
            let mut it = line.split_whitespace();
            let (Some(addr), Some(_ty), Some(name)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            if addr.chars().any(|c| c != '0') {
                nonzero = true;
            }
            let module = it
                .next()
                .map(|m| m.trim_matches(|c| c == '[' || c == ']').to_string());
            syms.entry(name.to_string()).or_insert(module);
        }
        Self {
            addresses_hidden: !nonzero && !syms.is_empty(),
            syms,
        }
    }

    /// `Some(owner)` when the symbol is present; the owner is `"vmlinux"` for built-in code.
    pub fn owner(&self, name: &str) -> Option<String> {
        self.syms
            .get(name)
            .map(|m| m.clone().unwrap_or_else(|| "vmlinux".to_string()))
    }

    /// Whether the symbol is present.
    pub fn has(&self, name: &str) -> bool {
        self.syms.contains_key(name)
    }
}

/// The running kernel's release (`uname -r`), read from procfs.
pub fn release(root: &SysRoot) -> Option<String> {
    root.read_trim("/proc/sys/kernel/osrelease")
}

/// A kernel `.config`.
#[derive(Debug)]
pub struct KernelConfig {
    /// Where it was read from.
    pub source: String,
    values: BTreeMap<String, String>,
}

impl KernelConfig {
    /// Reads `/boot/config-<release>`, then `/proc/config.gz`, then the build tree's `.config`.
    pub fn load(root: &SysRoot, release: Option<&str>) -> Option<Self> {
        if let Some(rel) = release {
            let p = format!("/boot/config-{rel}");
            if let Some(t) = root.read(&p) {
                return Some(Self::parse(p, &t));
            }
        }
        if let Some(gz) = root.read_bytes("/proc/config.gz", 16 << 20) {
            let mut s = String::new();
            if GzDecoder::new(&gz[..]).read_to_string(&mut s).is_ok() {
                return Some(Self::parse("/proc/config.gz".into(), &s));
            }
        }
        if let Some(rel) = release {
            let p = format!("/lib/modules/{rel}/build/.config");
            if let Some(t) = root.read(&p) {
                return Some(Self::parse(p, &t));
            }
        }
        None
    }

    /// Parses `CONFIG_X=value` lines.
    pub fn parse(source: String, text: &str) -> Self {
        let values = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .filter(|(k, _)| k.starts_with("CONFIG_"))
            .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
            .collect();
        Self { source, values }
    }

    /// `y` or `m`.
    pub fn enabled(&self, key: &str) -> bool {
        matches!(
            self.values.get(key).map(String::as_str),
            Some("y") | Some("m")
        )
    }

    /// Raw value.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }
}
