//! `node.profile`: the node under test held to the node profile `--profile` names, by the
//! doctor's own check (`nvpeer doctor --profile`), so that a qualification run fails on a node of
//! the wrong kind (a rail missing, a GPU of another model) as the health check would drain it.

use super::Suite;
use crate::report::CaseResult;
use nvpeer_doctor::report::Status;
use std::path::Path;

/// The case's name, which is also its fault code's family (`NVP-V023`).
pub const NAME: &str = "node.profile";

/// The case for the node under `root` against the profile `arg` names (a file, or a built-in
/// profile's name).
pub fn case(root: &Path, arg: &Path) -> CaseResult {
    let profile = match nvpeer_doctor::profile::resolve(arg) {
        Ok(p) => p,
        Err(e) => {
            return CaseResult::fail(
                NAME,
                e.to_string(),
                "give --profile a node profile file, or a built-in profile's name",
            )
        }
    };
    let c = nvpeer_doctor::profile_check(root, profile);
    match c.status {
        Status::Pass => CaseResult::pass(NAME, c.summary),
        Status::Fail => CaseResult::fail(
            NAME,
            c.summary,
            c.fix
                .unwrap_or_else(|| "replace or reseat what differs".into()),
        ),
        // What the doctor could not read here is not a match: the run cannot say the node is of
        // the profile's kind.
        _ => CaseResult::fail(
            NAME,
            format!("{}: {}", c.summary, c.details.join("; ")),
            "run as root on a node whose CUDA driver and NVML load, or leave the items that need \
             them (a GPU's name, BAR1) out of the profile",
        ),
    }
}

impl Suite {
    /// `node.profile`, with `--profile`.
    pub(super) fn node_profile(&mut self) {
        let Some(arg) = self.args.profile.clone() else {
            return;
        };
        self.case(NAME, |_| case(Path::new("/"), &arg));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Status;

    #[test]
    fn the_node_is_held_to_its_profile_by_the_doctors_check() {
        let root = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        // An empty tree: no GPU, no RDMA device.
        let none = write("none.toml", "name = \"no GPU\"\n[gpu]\ncount = 0\n");
        let r = case(root.path(), &none);
        assert_eq!(r.status, Status::Pass, "{r:?}");
        assert!(r.detail.starts_with("matches no GPU"), "{}", r.detail);
        let r = case(root.path(), Path::new("dgx-h100"));
        assert_eq!(r.status, Status::Fail, "{r:?}");
        assert!(
            r.detail.contains("0 NVIDIA GPU(s), the profile says 8"),
            "{}",
            r.detail
        );
        assert_eq!(nvpeer_verdict::codes::validate(NAME), Some("NVP-V023"));
        // A name the doctor needs CUDA for, on a tree that is not this machine: not a match.
        let named = write("named.toml", "[gpu]\nname_contains = \"H200\"\n");
        let r = case(root.path(), &named);
        assert_eq!(r.status, Status::Fail, "{r:?}");
        assert!(
            r.detail.contains("not read: the GPUs' names"),
            "{}",
            r.detail
        );
        let r = case(root.path(), &dir.path().join("absent.toml"));
        assert_eq!(r.status, Status::Fail);
        assert!(r.detail.contains("nor a built-in profile"), "{}", r.detail);
    }
}
