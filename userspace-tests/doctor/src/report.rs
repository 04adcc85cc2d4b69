//! Check results, the overall verdict, and the two output formats (table and JSON).

use crate::checks::data::CheckData;
use crate::paths::{LibraryUse, Path, PathVerdict, State};
use serde::{Serialize, Serializer};
use tabled::builder::Builder;
use tabled::settings::object::Columns;
use tabled::settings::{Padding, Style};

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The requirement is met.
    Pass,
    /// Works, but slower or fragile; does not make the node "not ready".
    Warn,
    /// A GPUDirect RDMA path (`paths`) cannot work until this is fixed.
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
    /// Its fault code (`NVP-D025`; nvpeer_verdict::codes, docs/operations.md): what a drained
    /// node's reason, a ticket or an alert names when this check does not pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<&'static str>,
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
    /// Whether a `fail`/`unknown` here blocks a GPUDirect RDMA path (`paths` says which).
    pub gate: bool,
    /// The paths a `fail`/`unknown` here blocks.
    pub paths: Vec<crate::paths::Path>,
    /// An earlier check whose failure this one follows from (its fix comes first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub because_of: Option<&'static str>,
    /// Machine-readable facts behind the finding: one typed document per check kind
    /// ([`CheckData`]); absent when the check has none.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "sorted")]
    pub data: Option<CheckData>,
}

/// `data` with the keys of every object in alphabetical order, at every level: the order the
/// doctor has always printed (users' tools and testbench/suites/40-doctor.sh read this JSON), kept
/// whatever order a data struct declares its fields in.
fn sorted<S: Serializer>(data: &Option<CheckData>, s: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(data)
        .map_err(serde::ser::Error::custom)?
        .serialize(s)
}

impl Check {
    /// A check result; `gate` says whether it decides readiness.
    pub fn new(
        id: &'static str,
        title: &'static str,
        gate: bool,
        status: Status,
        summary: impl Into<String>,
    ) -> Self {
        Self {
            id,
            code: nvpeer_verdict::codes::doctor(id),
            title,
            status,
            summary: summary.into(),
            details: Vec::new(),
            fix: None,
            gate,
            paths: Vec::new(),
            because_of: None,
            data: None,
        }
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

    /// Adds the machine-readable facts.
    pub fn data(mut self, d: impl Into<CheckData>) -> Self {
        self.data = Some(d.into());
        self
    }
}

/// Overall answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Exit 0.
    Ready,
    /// Exit 1: the required path (or, by default, every path) is blocked by a failed check.
    NotReady,
    /// Exit 2: no path is ready, and a check one of them needs could not be evaluated.
    CouldNotCheck,
}

/// The doctor's answer as every nvpeer command's verdict, whose exit status it exits with.
impl From<Verdict> for nvpeer_verdict::Verdict {
    fn from(v: Verdict) -> Self {
        match v {
            Verdict::Ready => nvpeer_verdict::Verdict::Passed,
            Verdict::NotReady => nvpeer_verdict::Verdict::Failed,
            Verdict::CouldNotCheck => nvpeer_verdict::Verdict::CouldNotRun,
        }
    }
}

/// What the verdict asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Require {
    /// Any GPUDirect RDMA path (the default).
    Any,
    /// Peer memory through nvpeer (the strict answer of earlier releases).
    Nvpeer,
    /// Peer memory through NVIDIA's nvidia-peermem.
    NvidiaPeermem,
    /// dma-buf.
    Dmabuf,
}

impl Require {
    /// The path the verdict is about; `None` for any path.
    pub fn path(self) -> Option<Path> {
        match self {
            Require::Any => None,
            Require::Nvpeer => Some(Path::Nvpeer),
            Require::NvidiaPeermem => Some(Path::NvidiaPeermem),
            Require::Dmabuf => Some(Path::Dmabuf),
        }
    }
}

/// All results plus the verdict.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Root the files were read from.
    pub root: String,
    /// The distribution (os-release's PRETTY_NAME), when known.
    pub os: Option<String>,
    /// The running kernel's release, when known.
    pub kernel: Option<String>,
    /// What the verdict was asked for (`--require`).
    pub require: Require,
    /// Overall verdict.
    pub verdict: Verdict,
    /// Same as the process exit status.
    pub exit_code: u8,
    /// One verdict per GPUDirect RDMA path.
    pub paths: Vec<PathVerdict>,
    /// Which path each library takes here.
    pub libraries: Vec<LibraryUse>,
    /// Every check, in display order.
    pub checks: Vec<Check>,
    /// NCCL's own answer, read from its log (`--nccl-log`), beside the doctor's prediction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl_log: Option<crate::nccl_log::NcclReading>,
}

impl Report {
    /// Builds the report: judges every path (see [`crate::paths`]), then the verdict: with
    /// `require` a path, that path's state; with `any`, ready when some path is ready, otherwise
    /// could not check when some path could not be checked, otherwise not ready.
    pub fn new(root: String, mut checks: Vec<Check>, require: Require) -> Self {
        let paths = crate::paths::assess(&mut checks);
        let verdict = verdict_of(&paths, require);
        Self {
            root,
            os: None,
            kernel: None,
            require,
            verdict,
            exit_code: nvpeer_verdict::Verdict::from(verdict).exit_status(),
            paths,
            libraries: Vec::new(),
            checks,
            nccl_log: None,
        }
    }

    /// The check that explains a verdict other than ready: the root cause of the required path
    /// (`--require`), else the first path's that has one.
    pub fn root_cause(&self) -> Option<&Check> {
        self.paths
            .iter()
            .filter(|v| self.require.path().is_none_or(|p| v.path == p))
            .find_map(|v| v.root_cause)
            .and_then(|id| self.get(id))
    }

    /// Finds a check by id.
    pub fn get(&self, id: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.id == id)
    }

    /// A path's verdict.
    pub fn path(&self, p: Path) -> &PathVerdict {
        // `assess` judges every path of `paths::ALL`.
        self.paths
            .iter()
            .find(|v| v.path == p)
            .unwrap_or(&self.paths[0])
    }

    fn title_of<'a>(&'a self, id: &'a str) -> &'a str {
        self.get(id).map(|c| c.title).unwrap_or(id)
    }

    /// The human-readable report: the checks (symbol, title, finding with its details and fix),
    /// the paths, which path each library takes, and the verdict. Columns through tabled, so a
    /// long title or library name widens its column instead of breaking it.
    pub fn render_table(&self, verbose: bool) -> String {
        let mut out = format!("nvpeer doctor (root {}", self.root);
        for part in [&self.os, &self.kernel].into_iter().flatten() {
            out.push_str(&format!(", {part}"));
        }
        out.push_str(")\n\n");
        let mut rows = Builder::default();
        for c in &self.checks {
            let mut cell = vec![c.summary.clone()];
            if verbose || matches!(c.status, Status::Fail | Status::Warn | Status::Unknown) {
                cell.extend(c.details.iter().cloned());
            }
            let code = c.code.map(|k| format!("[{k}] ")).unwrap_or_default();
            if let Some(dep) = c.because_of {
                cell.push(format!(
                    "↳ {code}follows from \"{}\" above: fix that first",
                    self.title_of(dep)
                ));
            } else if let Some(f) = c.fix.as_ref().filter(|_| c.status != Status::Pass) {
                cell.push(format!("→ {code}{f}"));
            }
            rows.push_record([
                c.status.symbol().to_string(),
                c.title.to_string(),
                cell.join("\n"),
            ]);
        }
        out.push_str(&columns(rows));
        let count = |s: Status| self.checks.iter().filter(|c| c.status == s).count();
        out.push_str(&format!(
            "\n{} passed, {} warnings, {} failed, {} unknown, {} not applicable\n",
            count(Status::Pass),
            count(Status::Warn),
            count(Status::Fail),
            count(Status::Unknown),
            count(Status::Skip)
        ));
        out.push_str("\nGPUDirect RDMA paths:\n");
        let mut rows = Builder::default();
        let mut named: Vec<&str> = Vec::new();
        for v in &self.paths {
            let (sym, state) = match v.state {
                State::Ready => ("✔", "ready"),
                State::NotReady => ("✘", "not ready"),
                State::CouldNotCheck => ("?", "could not check"),
                State::NotInUse => ("-", "not in use"),
            };
            let why = match v.root_cause {
                None => String::new(),
                Some(id) if v.state == State::NotInUse => format!(
                    ": {}",
                    self.get(id).map(|c| c.summary.as_str()).unwrap_or(id)
                ),
                Some(id) if named.contains(&id) => format!(": same root cause as above ({id})"),
                Some(id) => {
                    named.push(id);
                    let summary = self.get(id).map(|c| c.summary.as_str()).unwrap_or("");
                    format!(": root cause {id} ({}): {summary}", self.title_of(id))
                }
            };
            rows.push_record([
                sym.to_string(),
                v.path.title().to_string(),
                format!("{state}{why}"),
            ]);
        }
        out.push_str(&columns(rows));
        if !self.libraries.is_empty() {
            out.push_str("\nWhich path each library takes here:\n");
            let mut rows = Builder::default();
            for l in &self.libraries {
                let path = l.path.map(Path::title).unwrap_or("none");
                rows.push_record([
                    String::new(),
                    l.library.to_string(),
                    format!("{path}: {}", l.why),
                ]);
            }
            out.push_str(&columns(rows));
        }
        if let Some(n) = &self.nccl_log {
            out.push_str(&n.render());
        }
        out.push('\n');
        let through = match self.require.path() {
            Some(p) => p.title().to_string(),
            None => {
                let ready: Vec<&str> = self
                    .paths
                    .iter()
                    .filter(|v| v.state == State::Ready)
                    .map(|v| v.path.title())
                    .collect();
                if ready.is_empty() {
                    "any path".to_string()
                } else {
                    ready.join(" and ")
                }
            }
        };
        out.push_str(&match self.verdict {
            Verdict::Ready => format!("verdict: READY for GPUDirect RDMA through {through} (exit 0)\n"),
            Verdict::NotReady => format!("verdict: NOT READY for GPUDirect RDMA through {through} — fix the root causes above (exit 1)\n"),
            Verdict::CouldNotCheck => format!("verdict: COULD NOT CHECK GPUDirect RDMA through {through} — see the ? lines (exit 2)\n"),
        });
        out
    }
}

/// Three borderless columns (symbol, name, text), one space before the symbol and two between
/// columns; continuation lines of the text stay in its column.
fn columns(rows: Builder) -> String {
    let mut t = rows.build();
    t.with(Style::empty()).with(Padding::new(0, 0, 0, 0));
    t.modify(Columns::first(), Padding::new(1, 2, 0, 0));
    t.modify(Columns::single(1), Padding::new(0, 2, 0, 0));
    // Without the trailing spaces of padded short lines.
    t.to_string()
        .lines()
        .map(|l| l.trim_end().to_string() + "\n")
        .collect()
}

fn verdict_of(paths: &[PathVerdict], require: Require) -> Verdict {
    let of = |s: State| match s {
        State::Ready => Verdict::Ready,
        State::CouldNotCheck => Verdict::CouldNotCheck,
        State::NotReady | State::NotInUse => Verdict::NotReady,
    };
    match require.path() {
        Some(p) => paths
            .iter()
            .find(|v| v.path == p)
            .map(|v| of(v.state))
            .unwrap_or(Verdict::CouldNotCheck),
        None if paths.iter().any(|v| v.state == State::Ready) => Verdict::Ready,
        None if paths.iter().any(|v| v.state == State::CouldNotCheck) => Verdict::CouldNotCheck,
        None => Verdict::NotReady,
    }
}
