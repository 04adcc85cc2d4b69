//! The report as data: what rank 0 names (not ready, lost, outliers, failures), the matrices,
//! and the verdict and counts that follow from them.

use super::analysis::*;
use super::*;

/// A root cause and the nodes it holds back.
#[derive(Debug, Clone, Serialize)]
pub struct NotReady {
    /// The doctor's fault code of the cause's check (docs/operations.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<&'static str>,
    pub cause: RootCause,
    pub nodes: Vec<String>,
}

/// A node lost during the run.
#[derive(Debug, Clone, Serialize)]
pub struct LostNode {
    /// Its fault code (`lost.<kind>`, docs/operations.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<&'static str>,
    pub node: String,
    pub kind: LostKind,
    pub round: Option<u32>,
    pub why: String,
}

/// An outlier, named.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outlier {
    Link {
        /// Its fault code (docs/operations.md).
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<&'static str>,
        test: String,
        a: String,
        b: String,
        value: f64,
        threshold: f64,
        median: f64,
        unit: Unit,
    },
    Node {
        /// Its fault code (docs/operations.md).
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<&'static str>,
        test: String,
        node: String,
        /// Its links' figures.
        values: Vec<f64>,
        threshold: f64,
        median: f64,
        unit: Unit,
    },
}

/// A link or node whose test failed (integrity, a test that errored, a pair that did not finish).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Failure {
    Link {
        /// Its fault code (docs/operations.md).
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<&'static str>,
        test: String,
        a: String,
        b: String,
        detail: String,
    },
    Node {
        /// Its fault code (docs/operations.md).
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<&'static str>,
        test: String,
        node: String,
        links: usize,
        detail: String,
    },
}

/// One cell of a matrix.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Cell {
    /// The diagonal, or a link the schedule does not measure (`--pairs ring`).
    None,
    Value {
        value: f64,
        slow: bool,
        /// The threshold this link is held to: the fleet's, raised to its port's line-rate
        /// minimum for bandwidth (none when neither applies).
        threshold: Option<f64>,
    },
    Pass,
    Fail {
        detail: String,
    },
    Skipped {
        why: String,
    },
}

/// A node × node matrix of one test.
#[derive(Debug, Clone, Serialize)]
pub struct Matrix {
    pub test: String,
    pub unit: Unit,
    pub median: Option<f64>,
    pub threshold: Option<f64>,
    /// Row and column labels, in rank order.
    pub nodes: Vec<String>,
    /// `cells[row][col]`, every pair (in memory: N × N). In the JSON, only the cells that hold
    /// something, each with its `row` and `col`: a pair not listed is `none` (the diagonal, or a
    /// link the schedule does not measure), so that a ring of 1,000 nodes writes its 2,000
    /// cells, not a million.
    #[serde(serialize_with = "sparse_cells")]
    pub cells: Vec<Vec<Cell>>,
}

/// A cell of the JSON's sparse list.
#[derive(Serialize)]
struct Placed<'a> {
    row: usize,
    col: usize,
    #[serde(flatten)]
    cell: &'a Cell,
}

fn sparse_cells<S: serde::Serializer>(cells: &[Vec<Cell>], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(cells.iter().enumerate().flat_map(|(row, r)| {
        r.iter()
            .enumerate()
            .filter(|(_, c)| !matches!(c, Cell::None))
            .map(move |(col, cell)| Placed { row, col, cell })
    }))
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct FleetReport {
    pub tool: String,
    pub version: &'static str,
    /// `pass`: every node ready and joined, no outlier, no failure; else `fail`.
    pub verdict: &'static str,
    pub world: u32,
    pub pairing: Pairing,
    pub rounds: u32,
    pub links: usize,
    pub elapsed_s: f64,
    pub messages: u64,
    pub thresholds: Thresholds,
    pub not_ready: Vec<NotReady>,
    pub lost: Vec<LostNode>,
    pub outliers: Vec<Outlier>,
    pub failures: Vec<Failure>,
    pub matrices: Vec<Matrix>,
    pub run: FleetRun,
}

impl FleetReport {
    /// Builds the report of `run` under `th`.
    pub fn new(tool: &str, run: FleetRun, th: Thresholds) -> Self {
        let label = labels(&run);
        let not_ready = not_ready(&run, &label);
        let lost = lost(&run, &label);
        // Tests in the order first seen, with their unit.
        let mut tests: Vec<(String, Unit)> = Vec::new();
        for m in run.pairs.iter().flat_map(|p| &p.measurements) {
            if !tests.iter().any(|(t, _)| *t == m.test) {
                tests.push((m.test.clone(), m.unit));
            }
        }
        let mut named = Vec::new();
        let mut failures = Vec::new();
        let mut matrices = Vec::new();
        for (test, unit) in &tests {
            let mut t = TestLinks::of(&run, test, *unit);
            let (med, limit, sus) = outliers(&t.values, *unit, &th);
            named.extend(name_outliers(
                &mut t,
                test,
                *unit,
                &label,
                (med, limit),
                sus,
            ));
            failures.extend(name_failures(&t, test, &label));
            matrices.push(Matrix {
                test: test.clone(),
                unit: *unit,
                median: med,
                threshold: limit,
                nodes: label.clone(),
                cells: t.cells,
            });
        }
        let links = {
            let s: BTreeSet<(u32, u32)> = run
                .pairs
                .iter()
                .map(|p| (p.server.min(p.client), p.server.max(p.client)))
                .collect();
            s.len()
        };
        let mut r = FleetReport {
            tool: tool.to_string(),
            version: env!("CARGO_PKG_VERSION"),
            verdict: "pass",
            world: run.world,
            pairing: run.pairing,
            rounds: run.rounds,
            links,
            elapsed_s: run.elapsed_s,
            messages: run.messages,
            thresholds: th,
            not_ready,
            lost,
            outliers: named,
            failures,
            matrices,
            run,
        };
        if !r.clean() {
            r.verdict = "fail";
        }
        r
    }

    pub(super) fn clean(&self) -> bool {
        self.not_ready.is_empty()
            && self.lost.is_empty()
            && self.outliers.is_empty()
            && self.failures.is_empty()
    }

    /// The fleet's verdict: passed when clean, failed when anything is named.
    pub fn verdict(&self) -> Verdict {
        Verdict::failed_if(!self.clean())
    }

    /// Pair × test results: (passed, failed, skipped), the closing line's figures.
    pub fn counts(&self) -> (usize, usize, usize) {
        let (mut p, mut f, mut s) = (0, 0, 0);
        for m in &self.matrices {
            for (i, row) in m.cells.iter().enumerate() {
                for c in &row[i + 1..] {
                    match c {
                        Cell::None => {}
                        Cell::Pass | Cell::Value { slow: false, .. } => p += 1,
                        Cell::Fail { .. } | Cell::Value { slow: true, .. } => f += 1,
                        Cell::Skipped { .. } => s += 1,
                    }
                }
            }
        }
        (p, f, s)
    }
}
