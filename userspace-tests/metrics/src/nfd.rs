//! The Node Feature Discovery feature file: `<label>=<value>` lines that nfd-worker's `local`
//! source reads from `/etc/kubernetes/node-feature-discovery/features.d/` and turns into node
//! labels, so a pod can ask for a node where GPUDirect RDMA works (a `nodeSelector` or node
//! affinity on them). Names carry NFD's own namespace in full (`feature.node.kubernetes.io/`), so
//! they need neither NFD's automatic prefix nor an extra allowed namespace. A
//! `# +expiry-time=<RFC 3339>` directive (NFD ≥ 0.14) makes NFD drop the labels when the file is
//! not rewritten in time: a node whose timer stopped does not keep saying it is ready.

use crate::exposition::{path_name, state_name};
use crate::snapshot::Snapshot;
use nvpeer_doctor::report::Verdict;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The prefix of every label name: NFD's namespace, then `nvpeer-`.
pub const PREFIX: &str = "feature.node.kubernetes.io/nvpeer-";

/// Kubernetes' limit on a label name (after the prefix) and on a label value.
pub const MAX_LEN: usize = 63;

/// The labels of a snapshot, names without [`PREFIX`], in the order they are written:
///
/// - `gpudirect-rdma.ready`: `true` when some GPUDirect RDMA path is ready (the doctor's exit 0);
/// - `path.nvpeer`, `path.nvidia_peermem`, `path.dmabuf`: each path's state (`ready`, `not_ready`,
///   `could_not_check`, `not_in_use`);
/// - `gpudirect-rdma.fault`: while no path is ready, the fault code (docs/operations.md) of the
///   check that explains it;
/// - `nv_mem.owner`: who serves `nv_mem` (`nvpeer`, `nvidia`, `mellanox`, `unknown`; `none`, or
///   `conflict` when two modules do);
/// - `version`: the loaded nvpeer's version, only while nvpeer is loaded and has one.
pub fn labels(s: &Snapshot) -> Vec<(String, String)> {
    let mut v = vec![(
        "gpudirect-rdma.ready".to_string(),
        (s.report.verdict == Verdict::Ready).to_string(),
    )];
    for p in &s.report.paths {
        v.push((
            format!("path.{}", path_name(p.path)),
            state_name(p.state).to_string(),
        ));
    }
    let owner = match s.providers.as_slice() {
        [] => "none",
        [one] => one.owner,
        _ => "conflict",
    };
    v.push(("nv_mem.owner".to_string(), owner.to_string()));
    if s.report.verdict != Verdict::Ready {
        if let Some(code) = s.report.root_cause().and_then(|c| c.code) {
            v.push(("gpudirect-rdma.fault".to_string(), code.to_string()));
        }
    }
    if let Some(version) = s
        .nvpeer()
        .and_then(|p| p.version.as_deref())
        .and_then(label_value)
    {
        v.push(("version".to_string(), version));
    }
    v
}

/// `raw` as a valid label value: characters other than letters, digits, `-`, `_` and `.` become
/// `_`, the ends are trimmed to a letter or digit, at most [`MAX_LEN`] characters; `None` when
/// nothing is left.
pub fn label_value(raw: &str) -> Option<String> {
    let mapped: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_LEN)
        .collect();
    let trimmed = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    (!trimmed.is_empty()).then(|| trimmed.to_string())
}

/// Whether `s` is a valid label name segment or value: at most [`MAX_LEN`] characters, letters,
/// digits, `-`, `_`, `.`, beginning and ending with a letter or digit (a value may be empty).
pub fn valid(s: &str) -> bool {
    s.len() <= MAX_LEN
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.chars().next().is_none_or(|c| c.is_ascii_alphanumeric())
        && s.chars().last().is_none_or(|c| c.is_ascii_alphanumeric())
}

/// The text of the feature file; with `expires` an expiry directive for that time.
pub fn feature_file(labels: &[(String, String)], expires: Option<SystemTime>) -> String {
    let mut out = format!(
        "# nvpeer labels (nvpeer-tools {}): nvpeer doctor's GPUDirect RDMA verdicts for Node\n\
         # Feature Discovery's local source; rewritten by nvpeer-metrics.timer (docs/install.md).\n",
        env!("CARGO_PKG_VERSION")
    );
    if let Some(t) = expires {
        out.push_str(&format!("# +expiry-time={}\n", rfc3339(t)));
    }
    for (name, value) in labels {
        out.push_str(&format!("{PREFIX}{name}={value}\n"));
    }
    out
}

/// When labels written now expire, `ttl` from now; `None` for a zero `ttl` (no expiry).
pub fn expiry(ttl: Duration) -> Option<SystemTime> {
    (!ttl.is_zero()).then(|| SystemTime::now() + ttl)
}

/// `t` in UTC as RFC 3339 with whole seconds (`2026-11-27T14:05:00Z`), what NFD's directive
/// parses. Times before 1970 are written as the epoch.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01: counted in 400-year eras of 146097
/// days, each year starting on 1 March so that the leap day falls at its end.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Days since 0000-03-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097; // day of the era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // year of the era, 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of the March-based year, 0..=365
    let mp = (5 * doy + 2) / 153; // month from March, 0..=11
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> String {
        rfc3339(UNIX_EPOCH + Duration::from_secs(secs))
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(951_868_799), "2000-02-29T23:59:59Z");
        assert_eq!(at(951_868_800), "2000-03-01T00:00:00Z");
        assert_eq!(at(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(at(4_107_542_399), "2100-02-28T23:59:59Z");
        assert_eq!(at(4_107_542_400), "2100-03-01T00:00:00Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00Z"
        );
    }

    /// Every day from 1970 to 2400 follows the one before it.
    #[test]
    fn days_follow_each_other() {
        let mut prev = civil_from_days(0);
        for day in 1..157_000 {
            let cur = civil_from_days(day);
            let next_day = (prev.0, prev.1, prev.2 + 1);
            let next_month = (prev.0, prev.1 + 1, 1);
            let next_year = (prev.0 + 1, 1, 1);
            assert!(
                cur == next_day || cur == next_month || cur == next_year,
                "{prev:?} -> {cur:?}"
            );
            let leap = cur.0.is_multiple_of(4)
                && (!cur.0.is_multiple_of(100) || cur.0.is_multiple_of(400));
            if cur.1 == 2 && cur.2 == 29 {
                assert!(leap, "{cur:?}");
            }
            prev = cur;
        }
    }

    #[test]
    fn values_are_made_valid() {
        assert_eq!(label_value("0.1.0").as_deref(), Some("0.1.0"));
        assert_eq!(label_value("0.1.0+git~1").as_deref(), Some("0.1.0_git_1"));
        assert_eq!(label_value("-v1-").as_deref(), Some("v1"));
        assert_eq!(label_value("+++"), None);
        assert_eq!(label_value(&"9".repeat(80)).map(|v| v.len()), Some(MAX_LEN));
        for v in ["0.1.0", "a", "", "not_ready"] {
            assert!(valid(v), "{v}");
        }
        for v in ["-a", "a-", "a b", "ü"] {
            assert!(!valid(v), "{v}");
        }
    }

    #[test]
    fn file_lines() {
        let l = vec![
            ("gpudirect-rdma.ready".to_string(), "true".to_string()),
            ("version".to_string(), "0.1.0".to_string()),
        ];
        let t = feature_file(&l, Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000)));
        let lines: Vec<&str> = t.lines().filter(|l| !l.starts_with("# ")).collect();
        assert_eq!(
            lines,
            [
                "feature.node.kubernetes.io/nvpeer-gpudirect-rdma.ready=true",
                "feature.node.kubernetes.io/nvpeer-version=0.1.0"
            ]
        );
        // The comments are not directives: NFD warns about an unknown "# +" line.
        let directives: Vec<&str> = t.lines().filter(|l| l.starts_with("# +")).collect();
        assert_eq!(directives, ["# +expiry-time=2023-11-14T22:13:20Z"]);
        assert!(!feature_file(&l, None).contains("# +"));
        assert!(expiry(Duration::ZERO).is_none());
    }
}
