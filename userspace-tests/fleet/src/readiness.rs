//! Each rank's doctor verdict, as it travels to rank 0: ready or not, and the root causes (the
//! checks to fix first, after the doctor followed each failure to where it comes from).

use serde::{Deserialize, Serialize};
use std::path::Path;

/// One root cause: the doctor check, its finding and its fix.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RootCause {
    pub check: String,
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// A rank's doctor verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readiness {
    pub ready: bool,
    /// The doctor's verdict word (`ready`, `not_ready`, `could_not_check`).
    pub verdict: String,
    pub causes: Vec<RootCause>,
}

impl Readiness {
    /// A node the fleet takes as ready without asking the doctor (tests; `--skip-doctor`).
    pub fn assumed() -> Self {
        Readiness {
            ready: true,
            verdict: "ready".into(),
            causes: Vec::new(),
        }
    }
}

/// Runs the doctor on `root` (`/`, or a fixture tree) about the path `require` names, with the
/// live probes when `root` is the running system.
pub fn check(root: &Path, require: nvpeer_doctor::report::Require) -> Readiness {
    if !root.is_dir() {
        return Readiness {
            ready: false,
            verdict: "could_not_check".into(),
            causes: vec![RootCause {
                check: "doctor.root".into(),
                summary: format!("{}: not a directory", root.display()),
                fix: None,
            }],
        };
    }
    let args = nvpeer_doctor::Args {
        json: true,
        ..nvpeer_doctor::Args::new(root.to_path_buf(), require)
    };
    of_report(&nvpeer_doctor::diagnose(
        &args,
        nvpeer_doctor::probes_for(root, false),
    ))
}

/// The verdict and root causes of a doctor report: the root cause of every path the verdict is
/// about that is not ready (all paths for `--require any`), each check once.
pub fn of_report(r: &nvpeer_doctor::report::Report) -> Readiness {
    use nvpeer_doctor::report::{Require, Verdict};
    let ready = r.verdict == Verdict::Ready;
    let mut causes: Vec<RootCause> = Vec::new();
    if !ready {
        let wanted = |p: nvpeer_doctor::paths::Path| match r.require {
            Require::Any => true,
            Require::Nvpeer => p == nvpeer_doctor::paths::Path::Nvpeer,
            Require::NvidiaPeermem => p == nvpeer_doctor::paths::Path::NvidiaPeermem,
            Require::Dmabuf => p == nvpeer_doctor::paths::Path::Dmabuf,
        };
        for v in r.paths.iter().filter(|v| wanted(v.path)) {
            let Some(id) = v.root_cause else { continue };
            if causes.iter().any(|c| c.check == id) {
                continue;
            }
            let (summary, fix) = r.get(id).map_or((String::new(), None), |c| {
                (c.summary.clone(), c.fix.clone())
            });
            causes.push(RootCause {
                check: id.to_string(),
                summary,
                fix,
            });
        }
    }
    let verdict = serde_json::to_value(r.verdict)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    Readiness {
        ready,
        verdict,
        causes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_root_is_not_ready_and_says_why() {
        let dir = std::env::temp_dir().join(format!("nvpeer-fleet-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let r = check(&dir, nvpeer_doctor::report::Require::Any);
        std::fs::remove_dir_all(&dir).ok();
        assert!(!r.ready, "{r:?}");
        assert!(!r.causes.is_empty(), "{r:?}");
        let ids: std::collections::HashSet<_> = r.causes.iter().map(|c| &c.check).collect();
        assert_eq!(ids.len(), r.causes.len(), "each cause once: {r:?}");
        let r = check(
            Path::new("/nonexistent/nvpeer-fleet"),
            nvpeer_doctor::report::Require::Any,
        );
        assert_eq!(r.verdict, "could_not_check");
    }
}
