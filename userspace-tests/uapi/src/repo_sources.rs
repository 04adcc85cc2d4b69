//! Test-only access to the repository's module source and uapi header, so that the constant lists
//! of this crate are checked against what the module prints. The crate lives in the repository:
//! a file that is not there fails the test that needs it.

use std::path::Path;

/// The text of `rel` (relative to the repository root).
pub(crate) fn repo_file(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the crate's tests read the repository)",
            path.display()
        )
    })
}

/// The quoted strings of the `#define <name>` list in `uapi/nvpeer.h` (continuation lines
/// included).
pub(crate) fn header_list(name: &str) -> Vec<String> {
    let h = repo_file("uapi/nvpeer.h");
    let start = h
        .find(&format!("#define {name} "))
        .unwrap_or_else(|| panic!("uapi/nvpeer.h has no #define {name}"));
    let mut body = String::new();
    for line in h[start..].lines() {
        body.push_str(line.trim_end_matches('\\'));
        if !line.ends_with('\\') {
            break;
        }
    }
    body.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::repo_file;

    /// The value after `key` on the line that starts with it, unquoted.
    fn value_after(text: &str, file: &str, key: &str) -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("{file}: no line starting with {key}"))
            .trim()
            .trim_matches('"')
            .to_string()
    }

    /// One version for everything the project ships: Kbuild's `NVPEER_VERSION` is the source
    /// (the module's `modinfo`, its debugfs `config`); dkms.conf, the CLI's crates (this one's
    /// version is the workspace's) and the GPU Operator image's default must say the same.
    #[test]
    fn every_version_is_kbuilds() {
        let kbuild = value_after(&repo_file("Kbuild"), "Kbuild", "NVPEER_VERSION :=");
        let others = [
            (
                "dkms.conf",
                value_after(&repo_file("dkms.conf"), "dkms.conf", "PACKAGE_VERSION="),
            ),
            (
                "the CLI's workspace (Cargo.toml)",
                env!("CARGO_PKG_VERSION").to_string(),
            ),
            (
                "packaging/gpu-operator/Containerfile",
                value_after(
                    &repo_file("packaging/gpu-operator/Containerfile"),
                    "Containerfile",
                    "ARG NVPEER_VERSION=",
                ),
            ),
        ];
        for (what, v) in others {
            assert_eq!(
                v, kbuild,
                "{what} says {v}, Kbuild's NVPEER_VERSION {kbuild}"
            );
        }
    }
}
