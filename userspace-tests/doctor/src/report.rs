//! Check results, the overall verdict, and the two output formats (table and JSON).

use serde::Serialize;
use serde_json::Value;

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The requirement is met.
    Pass,
    /// Works, but slower or fragile; does not make the node "not ready".
    Warn,
    /// GPUDirect RDMA through nvpeer cannot work until this is fixed.
    Fail,
    /// The doctor could not read what it needs (permissions, missing library).
    Unknown,
    /// Not applicable on this node (e.g. no RDMA device to probe).
    Skip,
}

impl Status {
    /// The symbol shown in the table.
    pub fn symbol(self) -> &'static str {
        match self {
            Status::Pass => "✔",
            Status::Warn => "!",
            Status::Fail => "✘",
            Status::Unknown => "?",
            Status::Skip => "-",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Stable identifier (`nvidia.flavour`, `pci.acs`, ...); docs/doctor.md lists them.
    pub id: &'static str,
    /// Short human title.
    pub title: &'static str,
    /// Result.
    pub status: Status,
    /// One-line finding.
    pub summary: String,
    /// Further lines (per device, per pair, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// One actionable sentence when the status is not `pass`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// Whether a `fail`/`unknown` here decides the exit status.
    pub gate: bool,
    /// Machine-readable facts behind the finding.
    #[serde(skip_serializing_if = "Value::is_null")]
    pub data: Value,
}

impl Check {
    /// A check result; `gate` says whether it decides readiness.
    pub fn new(id: &'static str, title: &'static str, gate: bool, status: Status, summary: impl Into<String>) -> Self {
        Self { id, title, status, summary: summary.into(), details: Vec::new(), fix: None, gate, data: Value::Null }
    }

    /// Adds the actionable sentence.
    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    /// Adds detail lines.
    pub fn details(mut self, d: Vec<String>) -> Self {
        self.details = d;
        self
    }

    /// Adds machine-readable data.
    pub fn data(mut self, v: Value) -> Self {
        self.data = v;
        self
    }
}

/// Overall answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Exit 0.
    Ready,
    /// Exit 1: at least one gating check failed.
    NotReady,
    /// Exit 2: nothing failed, but a gating check could not be evaluated.
    CouldNotCheck,
}

impl Verdict {
    /// Process exit status for this verdict.
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Ready => 0,
            Verdict::NotReady => 1,
            Verdict::CouldNotCheck => 2,
        }
    }
}

/// All results plus the verdict.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Root the files were read from.
    pub root: String,
    /// Overall verdict.
    pub verdict: Verdict,
    /// Same as the process exit status.
    pub exit_code: u8,
    /// Every check, in display order.
    pub checks: Vec<Check>,
}

impl Report {
    /// Builds the report and decides the verdict: any gating `fail` ⇒ not ready; otherwise any
    /// gating `unknown` ⇒ could not check; otherwise ready.
    pub fn new(root: String, checks: Vec<Check>) -> Self {
        let verdict = verdict_of(&checks);
        Self { root, verdict, exit_code: verdict.exit_code(), checks }
    }

    /// Finds a check by id.
    pub fn get(&self, id: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.id == id)
    }

    /// The human-readable table.
    pub fn render_table(&self, verbose: bool) -> String {
        let w = self.checks.iter().map(|c| c.title.chars().count()).max().unwrap_or(10);
        let mut out = String::new();
        out.push_str(&format!("nvpeer doctor (root {})\n\n", self.root));
        for c in &self.checks {
            out.push_str(&format!(" {}  {:<w$}  {}\n", c.status.symbol(), c.title, c.summary, w = w));
            let show_details = verbose || matches!(c.status, Status::Fail | Status::Warn | Status::Unknown);
            if show_details {
                for d in &c.details {
                    out.push_str(&format!("    {:<w$}  {}\n", "", d, w = w));
                }
            }
            if c.status != Status::Pass {
                if let Some(f) = &c.fix {
                    out.push_str(&format!("    {:<w$}  → {}\n", "", f, w = w));
                }
            }
        }
        let count = |s: Status| self.checks.iter().filter(|c| c.status == s).count();
        out.push_str(&format!(
            "\n{} passed, {} warnings, {} failed, {} unknown, {} not applicable\n",
            count(Status::Pass),
            count(Status::Warn),
            count(Status::Fail),
            count(Status::Unknown),
            count(Status::Skip)
        ));
        out.push_str(match self.verdict {
            Verdict::Ready => "verdict: READY for GPUDirect RDMA through nvpeer (exit 0)\n",
            Verdict::NotReady => "verdict: NOT READY — fix the ✘ lines above (exit 1)\n",
            Verdict::CouldNotCheck => "verdict: COULD NOT CHECK everything — see the ? lines (exit 2)\n",
        });
        out
    }
}

fn verdict_of(checks: &[Check]) -> Verdict {
    if checks.iter().any(|c| c.gate && c.status == Status::Fail) {
        Verdict::NotReady
    } else if checks.iter().any(|c| c.gate && c.status == Status::Unknown) {
        Verdict::CouldNotCheck
    } else {
        Verdict::Ready
    }
}
