//! `/sys/module/<name>/`: a loaded module's `version` and `parameters/` (uapi/interfaces.md).
//!
//! nvpeer is loaded as `nvidia_peermem` (the drop-in DKMS installs) or as `nvpeer`. Its Rust
//! `module!` parameters are not shown under `parameters/` (the values in effect are in debugfs
//! `config`); the C modules it replaces (`nvidia_peermem`, `nv_peer_mem`) show theirs there.

use crate::root::read_text;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the loaded modules are.
pub const DIR: &str = "/sys/module";

/// nvpeer's drop-in name and its own name.
pub const NVPEER_NAMES: [&str; 2] = ["nvidia_peermem", "nvpeer"];

/// nvpeer's `modinfo` description, in the `.modinfo` section of its `.ko` as
/// `description=<this>`: how a module file is told to be nvpeer's (a driver container's tree, a
/// DKMS install) without loading it.
pub const DESCRIPTION: &str = "GPUDirect RDMA peer-memory client for NVIDIA GPUs (nv_mem)";

/// Whether `ko` (the bytes of a module file) is nvpeer's build: its `.modinfo` holds nvpeer's
/// description.
pub fn is_nvpeer_ko(ko: &[u8]) -> bool {
    let want = format!("description={DESCRIPTION}\0");
    ko.windows(want.len()).any(|w| w == want.as_bytes())
}

/// The module parameters of nvpeer and of nvidia-peermem 560+ (same names and semantics).
pub const PARAMETERS: [&str; 2] = ["persistent_api_support", "peerdirect_support"];

/// The directory of module `name` under `root`.
pub fn module_dir(root: &Path, name: &str) -> PathBuf {
    crate::at(root, DIR).join(name)
}

/// Whether module `name` is loaded (its directory exists).
pub fn loaded(root: &Path, name: &str) -> bool {
    module_dir(root, name).exists()
}

/// The module's `version` (`MODULE_VERSION`): its first line, trimmed; `None` when the module
/// has none, or it is empty.
pub fn version(root: &Path, name: &str) -> Option<String> {
    let text = read_text(&module_dir(root, name).join("version")).ok()?;
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then(|| line.to_string())
}

/// One parameter's value, trimmed; `None` when the module does not show it.
pub fn parameter(root: &Path, name: &str, param: &str) -> Option<String> {
    let text = read_text(&module_dir(root, name).join("parameters").join(param)).ok()?;
    Some(text.trim().to_string())
}

/// Every parameter the module shows, by name: its value trimmed, or `None` when the file is
/// there but cannot be read. Empty for a module without a `parameters/` directory.
pub fn parameters(root: &Path, name: &str) -> BTreeMap<String, Option<String>> {
    let dir = module_dir(root, name).join("parameters");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return BTreeMap::new();
    };
    rd.flatten()
        .map(|e| {
            let p = e.file_name().to_string_lossy().into_owned();
            let v = read_text(&e.path()).ok().map(|t| t.trim().to_string());
            (p, v)
        })
        .collect()
}

/// A boolean parameter's value: `1`/`Y`/`y` (an `int` or `bool` parameter set) or `0`/`N`/`n`;
/// `None` for anything else.
pub fn parse_flag(v: &str) -> Option<bool> {
    match v.trim() {
        "1" | "Y" | "y" => Some(true),
        "0" | "N" | "n" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn description_is_the_modules() {
        let src = crate::repo_sources::repo_file("src/nvpeer_main.rs");
        assert!(
            src.contains(&format!("description: \"{DESCRIPTION}\",")),
            "src/nvpeer_main.rs's description is not DESCRIPTION"
        );
        let mut ko = b"\x7fELF...license=GPL\0".to_vec();
        ko.extend_from_slice(format!("description={DESCRIPTION}\0author=x\0").as_bytes());
        assert!(is_nvpeer_ko(&ko));
        assert!(!is_nvpeer_ko(
            b"description=NVIDIA GPUDirect RDMA peer memory client\0"
        ));
    }
    use crate::fake_root::FakeRoot;

    fn tree() -> FakeRoot {
        let r = FakeRoot::new();
        r.file("/sys/module/nvidia_peermem/version", "580.95.05\n")
            .file(
                "/sys/module/nvidia_peermem/parameters/persistent_api_support",
                "1\n",
            )
            .file(
                "/sys/module/nvidia_peermem/parameters/peerdirect_support",
                "0\n",
            )
            .file("/sys/module/nvpeer/version", "\n")
            .dir("/sys/module/nvpeer/holders");
        r
    }

    #[test]
    fn versions() {
        let r = tree();
        assert_eq!(
            version(r.path(), "nvidia_peermem").as_deref(),
            Some("580.95.05")
        );
        assert_eq!(version(r.path(), "nvpeer"), None);
        assert_eq!(version(r.path(), "gone"), None);
        assert!(loaded(r.path(), "nvpeer"));
        assert!(!loaded(r.path(), "gone"));
    }

    #[test]
    fn parameters_of_a_c_module_and_of_a_rust_one() {
        let r = tree();
        let p = parameters(r.path(), "nvidia_peermem");
        let names: Vec<&str> = p.keys().map(String::as_str).collect();
        assert_eq!(names, ["peerdirect_support", "persistent_api_support"]);
        assert_eq!(
            p.get("persistent_api_support"),
            Some(&Some("1".to_string()))
        );
        assert!(parameters(r.path(), "nvpeer").is_empty());
        assert_eq!(
            parameter(r.path(), "nvidia_peermem", "peerdirect_support").as_deref(),
            Some("0")
        );
        assert_eq!(parameter(r.path(), "nvpeer", "peerdirect_support"), None);
    }

    #[test]
    fn flags() {
        for (v, want) in [("1\n", Some(true)), ("Y", Some(true)), ("n", Some(false))] {
            assert_eq!(parse_flag(v), want);
        }
        assert_eq!(parse_flag("2"), None);
        assert_eq!(parse_flag(""), None);
    }
}
