//! Rank 0's report, the answer first: the nodes that are not ready and why (each doctor root
//! cause once, with the nodes it holds back), the nodes lost during the run, the outliers (a slow
//! link, or a node all of whose links are slow, named as the suspect instead of each link), the
//! failed links; then a node × node matrix per test. Written as text (stdout), JSON, JUnit XML
//! (one test case per pair and test) and an SVG heat map per test ([`crate::heatmap`]).

use crate::coordinator::{FleetRun, LostKind, PairStatus};
use crate::readiness::RootCause;
use crate::runner::Unit;
use crate::schedule::Pairing;
use nvpeer_verdict::Verdict;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// When a link is an outlier.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Thresholds {
    /// `--min-bw`: a bandwidth link below this many GB/s is slow.
    pub min_bw: Option<f64>,
    /// `--min-fraction`: a bandwidth link below this fraction of the test's fleet median is
    /// slow; a latency link above the median divided by it.
    pub fraction: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            min_bw: None,
            fraction: 0.8,
        }
    }
}

/// One link's figure for a test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkValue {
    pub a: u32,
    pub b: u32,
    pub value: f64,
    /// The least this link must reach by its port's line rate (`--bw-threshold` × the
    /// line rate its client judged against, GB/s); bandwidth only.
    pub line_rate_min: Option<f64>,
}

/// What the outlier rule names.
#[derive(Debug, Clone, PartialEq)]
pub enum Suspect {
    /// One slow link, and the threshold it missed (the fleet's, or its port's line rate's when
    /// that is higher).
    Link {
        a: u32,
        b: u32,
        value: f64,
        threshold: f64,
    },
    /// A node with at least two links, all of them slow: the node, not each link.
    Node { node: u32, values: Vec<f64> },
}

/// The median of `v` (none when empty).
pub fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// The fewest measured links of a test for which the fleet median says what a link should
/// reach. With two, the median is their mean and any spread over `2 (1 - f) / (1 + f)` names
/// the lower one (about 22 % at the default 0.8): that is the noise of the measurement, not a
/// verdict; with three, the median is a link the others are compared with.
pub const MIN_LINKS_FOR_MEDIAN: usize = 3;

/// The threshold of a test: a fraction of the median when `links` are enough for one
/// ([`MIN_LINKS_FOR_MEDIAN`]), and `--min-bw` for bandwidth; none when neither applies.
fn threshold(unit: Unit, median: f64, links: usize, th: &Thresholds) -> Option<f64> {
    let relative = links >= MIN_LINKS_FOR_MEDIAN;
    match unit {
        Unit::Micros => relative.then_some(median / th.fraction),
        _ => {
            let rel = relative.then_some(median * th.fraction);
            match (rel, th.min_bw) {
                (Some(r), Some(m)) => Some(m.max(r)),
                (r, m) => r.or(m),
            }
        }
    }
}

fn slow(unit: Unit, v: f64, limit: f64) -> bool {
    match unit {
        Unit::Micros => v > limit,
        _ => v < limit,
    }
}

/// The threshold link `l` is held to: the fleet's (`limit`), raised to its port's line-rate
/// minimum for bandwidth; none when neither applies.
fn link_limit(l: &LinkValue, unit: Unit, limit: Option<f64>) -> Option<f64> {
    match (unit, limit, l.line_rate_min) {
        (Unit::Micros, limit, _) => limit,
        (_, Some(x), Some(m)) => Some(x.max(m)),
        (_, x, m) => x.or(m),
    }
}

/// Names the slow links of one test, a node whose links (two or more) are all slow as a node,
/// and the links of such a node not again. A link is slow against the fleet's threshold and, for
/// bandwidth, against its port's line rate ([`LinkValue::line_rate_min`]). Returns the fleet
/// median, the fleet's threshold (none with fewer than [`MIN_LINKS_FOR_MEDIAN`] links and no
/// `--min-bw`) and the suspects.
pub fn outliers(
    links: &[LinkValue],
    unit: Unit,
    th: &Thresholds,
) -> (Option<f64>, Option<f64>, Vec<Suspect>) {
    let values: Vec<f64> = links.iter().map(|l| l.value).collect();
    let Some(med) = median(&values) else {
        return (None, None, Vec::new());
    };
    let limit = threshold(unit, med, links.len(), th);
    let bad: Vec<(&LinkValue, f64)> = links
        .iter()
        .filter_map(|l| {
            let x = link_limit(l, unit, limit)?;
            slow(unit, l.value, x).then_some((l, x))
        })
        .collect();
    let pairs: Vec<(u32, u32)> = links.iter().map(|l| (l.a, l.b)).collect();
    let bad_pairs: Vec<(u32, u32)> = bad.iter().map(|(l, _)| (l.a, l.b)).collect();
    let nodes = all_bad_nodes(&pairs, &bad_pairs);
    let mut out: Vec<Suspect> = nodes
        .iter()
        .map(|n| Suspect::Node {
            node: *n,
            values: bad
                .iter()
                .filter(|(l, _)| l.a == *n || l.b == *n)
                .map(|(l, _)| l.value)
                .collect(),
        })
        .collect();
    out.extend(
        bad.iter()
            .filter(|(l, _)| !nodes.contains(&l.a) && !nodes.contains(&l.b))
            .map(|(l, x)| Suspect::Link {
                a: l.a,
                b: l.b,
                value: l.value,
                threshold: *x,
            }),
    );
    (Some(med), limit, out)
}

/// The nodes with two or more links, all of them in `bad`.
fn all_bad_nodes(links: &[(u32, u32)], bad: &[(u32, u32)]) -> BTreeSet<u32> {
    let mut count: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
    for &(a, b) in links {
        let is_bad = bad.contains(&(a, b));
        for n in [a, b] {
            let e = count.entry(n).or_default();
            e.0 += 1;
            e.1 += usize::from(is_bad);
        }
    }
    count
        .into_iter()
        .filter(|(_, (all, bad))| *all >= 2 && all == bad)
        .map(|(n, _)| n)
        .collect()
}

/// A root cause and the nodes it holds back.
#[derive(Debug, Clone, Serialize)]
pub struct NotReady {
    pub cause: RootCause,
    pub nodes: Vec<String>,
}

/// A node lost during the run.
#[derive(Debug, Clone, Serialize)]
pub struct LostNode {
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
        test: String,
        a: String,
        b: String,
        value: f64,
        threshold: f64,
        median: f64,
        unit: Unit,
    },
    Node {
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
        test: String,
        a: String,
        b: String,
        detail: String,
    },
    Node {
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
    pub cells: Vec<Vec<Cell>>,
}

impl Matrix {
    /// The matrix as text: its title line (median, threshold) and its table.
    pub fn text(&self) -> String {
        let title = format!(
            "{} [{}]{}",
            self.test,
            self.unit.symbol(),
            match (self.median, self.threshold) {
                (Some(md), Some(t)) => format!(" median {} threshold {}", fmt(md), fmt(t)),
                (Some(md), None) if self.line_rate_held() => format!(
                    " median {} (no fleet threshold: fewer than {MIN_LINKS_FOR_MEDIAN} links \
                     measured; each link held to its port's line-rate minimum)",
                    fmt(md)
                ),
                (Some(md), None) => format!(
                    " median {} (no outlier threshold: fewer than {MIN_LINKS_FOR_MEDIAN} \
                     links measured{})",
                    fmt(md),
                    if self.unit == Unit::Micros {
                        ""
                    } else {
                        "; --min-bw gives an absolute one, --line-rate / --bw-threshold \
                         one by the ports' line rate"
                    }
                ),
                _ => String::new(),
            }
        );
        let mut header = vec![String::new()];
        header.extend(self.nodes.iter().cloned());
        let rows: Vec<Vec<String>> = self
            .cells
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let mut r = vec![self.nodes[i].clone()];
                r.extend(row.iter().map(cell_text));
                r
            })
            .collect();
        format!("{title}\n{}", nvpeer_harness::report::table(&header, &rows))
    }

    /// Whether a link of this matrix is held to a threshold although the fleet has none: its
    /// port's line-rate minimum.
    fn line_rate_held(&self) -> bool {
        self.threshold.is_none()
            && self.cells.iter().flatten().any(|c| {
                matches!(
                    c,
                    Cell::Value {
                        threshold: Some(_),
                        ..
                    }
                )
            })
    }
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

/// Labels of the ranks: their names, with the rank added where names repeat.
pub fn labels(run: &FleetRun) -> Vec<String> {
    let names: Vec<&str> = run.nodes.iter().map(|n| n.name.as_str()).collect();
    names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if names.iter().filter(|m| *m == n).count() > 1 {
                format!("{n}#{i}")
            } else {
                n.to_string()
            }
        })
        .collect()
}

/// Each root cause that holds nodes back, once, with its nodes.
fn not_ready(run: &FleetRun, label: &[String]) -> Vec<NotReady> {
    let mut by_cause: BTreeMap<RootCause, Vec<String>> = BTreeMap::new();
    for node in &run.nodes {
        if let Some(r) = node.readiness.as_ref().filter(|r| !r.ready) {
            let causes = if r.causes.is_empty() {
                vec![RootCause {
                    check: "doctor".into(),
                    summary: format!("verdict {}", r.verdict),
                    fix: Some("run `nvpeer doctor` on the node".into()),
                }]
            } else {
                r.causes.clone()
            };
            for c in causes {
                by_cause
                    .entry(c)
                    .or_default()
                    .push(label[node.rank as usize].clone());
            }
        }
    }
    by_cause
        .into_iter()
        .map(|(cause, nodes)| NotReady { cause, nodes })
        .collect()
}

/// The nodes lost during the run.
fn lost(run: &FleetRun, label: &[String]) -> Vec<LostNode> {
    run.nodes
        .iter()
        .filter_map(|node| {
            node.lost.as_ref().map(|l| LostNode {
                node: label[node.rank as usize].clone(),
                kind: l.kind,
                round: l.round,
                why: l.why.clone(),
            })
        })
        .collect()
}

/// One test's links: the matrix's cells, the figures of the links that measured one, the links
/// measured and those that failed.
struct TestLinks {
    cells: Vec<Vec<Cell>>,
    values: Vec<LinkValue>,
    measured: Vec<(u32, u32)>,
    failed: Vec<(u32, u32, String)>,
}

impl TestLinks {
    fn of(run: &FleetRun, test: &str, unit: Unit) -> Self {
        let n = run.world as usize;
        let mut cells = vec![vec![Cell::None; n]; n];
        let mut values = Vec::new();
        let mut measured = Vec::new();
        let mut failed = Vec::new();
        for p in &run.pairs {
            let (a, b) = (p.server.min(p.client), p.server.max(p.client));
            let cell = match &p.status {
                PairStatus::Skipped { why } => Cell::Skipped { why: why.clone() },
                PairStatus::Failed { why } => {
                    measured.push((a, b));
                    failed.push((a, b, why.clone()));
                    Cell::Fail {
                        detail: why.clone(),
                    }
                }
                PairStatus::Ran => match p.measurements.iter().find(|m| m.test == test) {
                    None => Cell::Skipped {
                        why: "not measured".into(),
                    },
                    Some(m) => {
                        measured.push((a, b));
                        match (m.passed, m.value) {
                            (false, _) => {
                                failed.push((a, b, m.detail.clone()));
                                Cell::Fail {
                                    detail: m.detail.clone(),
                                }
                            }
                            (true, Some(v)) if unit != Unit::PassFail => {
                                values.push(LinkValue {
                                    a,
                                    b,
                                    value: v,
                                    line_rate_min: m.line_rate_min,
                                });
                                Cell::Value {
                                    value: v,
                                    slow: false,
                                    threshold: None,
                                }
                            }
                            (true, _) => Cell::Pass,
                        }
                    }
                },
            };
            cells[a as usize][b as usize] = cell.clone();
            cells[b as usize][a as usize] = cell;
        }
        TestLinks {
            cells,
            values,
            measured,
            failed,
        }
    }
}

/// The outliers of one test, named, and their cells marked slow.
fn name_outliers(
    t: &mut TestLinks,
    test: &str,
    unit: Unit,
    label: &[String],
    (med, limit): (Option<f64>, Option<f64>),
    sus: Vec<Suspect>,
) -> Vec<Outlier> {
    let mut named = Vec::new();
    let cells = &mut t.cells;
    let values_of = &t.values;
    for l in values_of {
        let held_to = link_limit(l, unit, limit);
        for (x, y) in [(l.a, l.b), (l.b, l.a)] {
            if let Cell::Value { threshold, .. } = &mut cells[x as usize][y as usize] {
                *threshold = held_to;
            }
        }
    }
    for s in sus {
        let median = med.unwrap_or(0.0);
        match s {
            Suspect::Link {
                a,
                b,
                value,
                threshold,
            } => {
                for (x, y) in [(a, b), (b, a)] {
                    if let Cell::Value { slow, .. } = &mut cells[x as usize][y as usize] {
                        *slow = true;
                    }
                }
                named.push(Outlier::Link {
                    test: test.to_string(),
                    a: label[a as usize].clone(),
                    b: label[b as usize].clone(),
                    value,
                    threshold,
                    median,
                    unit,
                });
            }
            Suspect::Node { node, values } => {
                let threshold = limit
                    .into_iter()
                    .chain(
                        values_of
                            .iter()
                            .filter(|l| l.a == node || l.b == node)
                            .filter_map(|l| l.line_rate_min),
                    )
                    .fold(0.0, f64::max);
                for c in cells[node as usize].iter_mut() {
                    if let Cell::Value { slow, .. } = c {
                        *slow = true;
                    }
                }
                for row in cells.iter_mut() {
                    if let Cell::Value { slow, .. } = &mut row[node as usize] {
                        *slow = true;
                    }
                }
                named.push(Outlier::Node {
                    test: test.to_string(),
                    node: label[node as usize].clone(),
                    values,
                    threshold,
                    median,
                    unit,
                });
            }
        }
    }
    named
}

/// The failed links of one test, a node all of whose links failed named instead of each.
fn name_failures(t: &TestLinks, test: &str, label: &[String]) -> Vec<Failure> {
    let mut failures = Vec::new();
    let (measured, failed) = (&t.measured, &t.failed);
    // Failed links: a node all of whose (two or more) links failed is named instead.
    let bad: Vec<(u32, u32)> = failed.iter().map(|(a, b, _)| (*a, *b)).collect();
    let nodes = all_bad_nodes(measured, &bad);
    for node in &nodes {
        let links = bad.iter().filter(|(a, b)| a == node || b == node).count();
        let detail = failed
            .iter()
            .find(|(a, b, _)| a == node || b == node)
            .map(|f| f.2.clone())
            .unwrap_or_default();
        failures.push(Failure::Node {
            test: test.to_string(),
            node: label[*node as usize].clone(),
            links,
            detail,
        });
    }
    for (a, b, detail) in failed {
        if !nodes.contains(a) && !nodes.contains(b) {
            failures.push(Failure::Link {
                test: test.to_string(),
                a: label[*a as usize].clone(),
                b: label[*b as usize].clone(),
                detail: detail.clone(),
            });
        }
    }
    failures
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

    fn clean(&self) -> bool {
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

    /// The text report, the answer first.
    pub fn text(&self) -> String {
        let mut o = Vec::new();
        let named = self.not_ready.iter().map(|c| c.nodes.len()).sum::<usize>();
        o.push(format!(
            "{}: {} node(s), {} link(s) in {} round(s) ({:?} pairs), {:.1} s: {}",
            self.tool,
            self.world,
            self.links,
            self.rounds,
            self.pairing,
            self.elapsed_s,
            if self.clean() {
                "every node ready, every link passed".to_string()
            } else {
                format!(
                    "{} not ready, {} lost, {} outlier(s), {} failure(s)",
                    named,
                    self.lost.len(),
                    self.outliers.len(),
                    self.failures.len()
                )
            }
        ));
        for c in &self.not_ready {
            o.push(format!(
                "NOT READY  {}: {} — {}{}",
                c.nodes.join(", "),
                c.cause.check,
                c.cause.summary,
                c.cause
                    .fix
                    .as_ref()
                    .map_or_else(String::new, |f| format!("\n           fix: {f}"))
            ));
        }
        for l in &self.lost {
            let kind = match l.kind {
                LostKind::NeverJoined => "never joined",
                LostKind::Died => "died",
                LostKind::Hung => "hung",
            };
            let round = l
                .round
                .map_or_else(String::new, |r| format!(" in round {}", r + 1));
            o.push(format!(
                "LOST       {}: {kind}{round} ({}); its pairs were skipped",
                l.node, l.why
            ));
        }
        for x in &self.outliers {
            o.push(match x {
                Outlier::Link {
                    test,
                    a,
                    b,
                    value,
                    threshold,
                    median,
                    unit,
                } => format!(
                    "SLOW LINK  {a} <-> {b}: {test} {} {}, {} {} (fleet median {})",
                    fmt(*value),
                    unit.symbol(),
                    if *unit == Unit::Micros {
                        "above"
                    } else {
                        "below"
                    },
                    fmt(*threshold),
                    fmt(*median)
                ),
                Outlier::Node {
                    test,
                    node,
                    values,
                    threshold,
                    median,
                    unit,
                } => {
                    format!(
                    "SUSPECT    {node}: all {} of its {test} links {} {} {} (theirs: {}; fleet \
                     median {})",
                    values.len(),
                    if *unit == Unit::Micros { "above" } else { "below" },
                    fmt(*threshold),
                    unit.symbol(),
                    values.iter().map(|v| fmt(*v)).collect::<Vec<_>>().join(", "),
                    fmt(*median)
                )
                }
            });
        }
        for f in &self.failures {
            o.push(match f {
                Failure::Link { test, a, b, detail } => {
                    format!("FAIL       {a} <-> {b}: {test}: {detail}")
                }
                Failure::Node {
                    test,
                    node,
                    links,
                    detail,
                } => format!(
                    "FAIL       {node}: {test} failed on all {links} of its links ({detail})"
                ),
            });
        }
        for m in &self.matrices {
            o.push(String::new());
            o.push(m.text());
        }
        let (p, f, s) = self.counts();
        o.push(String::new());
        o.push(format!("{p} passed, {f} failed, {s} skipped"));
        o.join("\n")
    }

    /// The JUnit document: a test case per node's doctor verdict, and per pair and test.
    pub fn junit(&self) -> std::io::Result<Vec<u8>> {
        use nvpeer_harness::report::CaseResult;
        let mut cases = Vec::new();
        let mut not_run = Vec::new();
        let label = labels(&self.run);
        for n in &self.run.nodes {
            let name = format!("doctor {}", label[n.rank as usize]);
            match (&n.readiness, &n.lost) {
                (_, Some(l)) if l.kind == LostKind::NeverJoined => {
                    cases.push(CaseResult::fail(&name, "never joined", l.why.clone()))
                }
                (Some(r), _) if r.ready => cases.push(CaseResult::pass(&name, "ready")),
                (Some(r), _) => cases.push(CaseResult::fail(
                    &name,
                    r.verdict.clone(),
                    r.causes
                        .iter()
                        .map(|c| format!("{}: {}", c.check, c.summary))
                        .collect::<Vec<_>>()
                        .join("; "),
                )),
                (None, _) => cases.push(CaseResult::skip(&name, "no verdict")),
            }
        }
        for m in &self.matrices {
            for (i, row) in m.cells.iter().enumerate() {
                for (j, c) in row.iter().enumerate().skip(i + 1) {
                    let name = format!("{} {} <-> {}", m.test, m.nodes[i], m.nodes[j]);
                    match c {
                        Cell::None => {}
                        Cell::Pass => cases.push(CaseResult::pass(&name, "passed")),
                        Cell::Value {
                            value, slow: false, ..
                        } => cases.push(CaseResult::pass(
                            &name,
                            format!("{} {}", fmt(*value), m.unit.symbol()),
                        )),
                        Cell::Value {
                            value,
                            slow: true,
                            threshold,
                        } => cases.push(CaseResult::fail(
                            &name,
                            format!("{} {}", fmt(*value), m.unit.symbol()),
                            format!(
                                "outlier: {} (fleet median {})",
                                threshold.map_or("below its node's threshold".into(), |t| {
                                    format!("threshold {} {}", fmt(t), m.unit.symbol())
                                }),
                                fmt(m.median.unwrap_or(0.0))
                            ),
                        )),
                        Cell::Fail { detail } => {
                            cases.push(CaseResult::fail(&name, detail.clone(), detail.clone()))
                        }
                        Cell::Skipped { why } => not_run.push((name, why.clone())),
                    }
                }
            }
        }
        let props = vec![
            ("world".to_string(), self.world.to_string()),
            ("pairing".to_string(), format!("{:?}", self.pairing)),
            ("rounds".to_string(), self.rounds.to_string()),
        ];
        nvpeer_harness::junit::render(&self.tool, &cases, &not_run, &props)
    }

    /// Writes `fleet.json`, `fleet.xml` (JUnit) and `matrix-TEST.svg` per test into `dir`;
    /// returns the files written.
    /// The directory is this user's own (a link or another user's directory is refused) and each
    /// file is written whole, never through a link (nvpeer-files).
    pub fn write(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        use nvpeer_files::{report_dir, write_file, Error};
        report_dir(dir).map_err(Error::into_io)?;
        let mut out = Vec::new();
        let json = dir.join("fleet.json");
        let doc = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        write_file(&json, (doc + "\n").as_bytes()).map_err(Error::into_io)?;
        out.push(json);
        let xml = dir.join("fleet.xml");
        write_file(&xml, &self.junit()?).map_err(Error::into_io)?;
        out.push(xml);
        for m in &self.matrices {
            let f = dir.join(format!("matrix-{}.svg", file_safe(&m.test)));
            crate::heatmap::render(m, &f)?;
            out.push(f);
        }
        Ok(out)
    }
}

fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A figure with three significant digits.
pub fn fmt(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn cell_text(c: &Cell) -> String {
    match c {
        Cell::None => "·".into(),
        Cell::Value { value, slow, .. } => {
            format!("{}{}", fmt(*value), if *slow { "!" } else { "" })
        }
        Cell::Pass => "pass".into(),
        Cell::Fail { .. } => "FAIL".into(),
        Cell::Skipped { .. } => "skip".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::{Lost, NodeRecord, PairRecord};
    use crate::readiness::Readiness;
    use crate::runner::Measurement;

    fn lv(a: u32, b: u32, value: f64) -> LinkValue {
        LinkValue {
            a,
            b,
            value,
            line_rate_min: None,
        }
    }

    /// Every pair of `n` nodes at `fast`, except those `slow` names.
    fn mesh(n: u32, fast: f64, slow: &[(u32, u32, f64)]) -> Vec<LinkValue> {
        let mut v = Vec::new();
        for a in 0..n {
            for b in a + 1..n {
                let x = slow
                    .iter()
                    .find(|s| (s.0, s.1) == (a, b))
                    .map_or(fast, |s| s.2);
                v.push(lv(a, b, x));
            }
        }
        v
    }

    #[test]
    fn one_slow_link_is_named() {
        let links = mesh(4, 10.0, &[(1, 2, 2.0)]);
        let (med, th, s) = outliers(&links, Unit::GBps, &Thresholds::default());
        assert_eq!(med, Some(10.0));
        assert_eq!(th, Some(8.0));
        assert_eq!(
            s,
            vec![Suspect::Link {
                a: 1,
                b: 2,
                value: 2.0,
                threshold: 8.0
            }]
        );
    }

    /// ngc_multinode_perf's rule: a link below its share of the port's line rate is slow, even
    /// where the fleet's median says nothing (two links) or every link is as slow.
    #[test]
    fn a_link_below_its_line_rate_is_named() {
        let at = |a, b, value, min| LinkValue {
            a,
            b,
            value,
            line_rate_min: Some(min),
        };
        // One link at 10 GB/s, which the fleet's median rule (0.8 x 12) passes, under its
        // line-rate minimum of 11.25 (0.9 x 12.5 GB/s): named, with the threshold it missed.
        let all = [
            at(0, 1, 10.0, 11.25),
            at(2, 3, 12.0, 11.25),
            at(0, 2, 12.0, 11.25),
            at(1, 3, 12.0, 11.25),
        ];
        let (_, th, s) = outliers(&all, Unit::GBps, &Thresholds::default());
        assert!(th.is_some());
        assert_eq!(
            s,
            vec![Suspect::Link {
                a: 0,
                b: 1,
                value: 10.0,
                threshold: 11.25
            }]
        );
        // Two links, no median verdict: the line rate still names the slow one.
        let two = [at(0, 1, 12.0, 11.25), at(0, 2, 5.0, 11.25)];
        let (_, th, s) = outliers(&two, Unit::GBps, &Thresholds::default());
        assert_eq!(th, None);
        assert_eq!(
            s,
            vec![Suspect::Link {
                a: 0,
                b: 2,
                value: 5.0,
                threshold: 11.25
            }]
        );
        // Latency has no line rate.
        let (_, _, s) = outliers(&two, Unit::Micros, &Thresholds::default());
        assert!(s.is_empty());
    }

    #[test]
    fn a_node_with_every_link_slow_is_named_as_the_node() {
        let links = mesh(
            5,
            10.0,
            &[(0, 3, 1.0), (1, 3, 1.5), (2, 3, 1.2), (3, 4, 0.9)],
        );
        let (_, _, s) = outliers(&links, Unit::GBps, &Thresholds::default());
        assert_eq!(s.len(), 1, "{s:?}");
        assert!(matches!(&s[0], Suspect::Node { node: 3, values } if values.len() == 4));
        // Plus a slow link elsewhere: the node and that link, nothing else.
        let links = mesh(
            5,
            10.0,
            &[
                (0, 3, 1.0),
                (1, 3, 1.5),
                (2, 3, 1.2),
                (3, 4, 0.9),
                (0, 1, 3.0),
            ],
        );
        let (_, _, s) = outliers(&links, Unit::GBps, &Thresholds::default());
        assert_eq!(s.len(), 2, "{s:?}");
        assert!(s.contains(&Suspect::Link {
            a: 0,
            b: 1,
            value: 3.0,
            // the median of 0.9, 1.0, 1.2, 1.5, 3.0 and five links at 10: 6.5
            threshold: 0.8 * 6.5
        }));
    }

    #[test]
    fn a_node_with_one_link_is_not_a_suspect() {
        // Two nodes: one link; a slow one under --min-bw is the link, not both nodes.
        let th = Thresholds {
            min_bw: Some(5.0),
            fraction: 0.8,
        };
        let (_, _, s) = outliers(&[lv(0, 1, 2.0)], Unit::GBps, &th);
        assert_eq!(
            s,
            vec![Suspect::Link {
                a: 0,
                b: 1,
                value: 2.0,
                threshold: 5.0
            }]
        );
        let (_, _, s) = outliers(&[lv(0, 1, 2.0)], Unit::GBps, &Thresholds::default());
        assert!(s.is_empty());
    }

    /// Two links are not enough for a median verdict: their spread is the measurement's noise
    /// (the bench's 59-fleet saw 0.035 against 0.019 GB/s between healthy links under TCG).
    #[test]
    fn two_links_name_nothing_against_their_median() {
        let two = [lv(0, 1, 0.035), lv(0, 2, 0.019)];
        let (med, th, s) = outliers(&two, Unit::GBps, &Thresholds::default());
        assert!(
            (med.unwrap() - 0.027).abs() < 1e-12 && th.is_none(),
            "{med:?} {th:?}"
        );
        assert!(s.is_empty(), "{s:?}");
        let (_, th, s) = outliers(&two, Unit::Micros, &Thresholds::default());
        assert_eq!(th, None);
        assert!(s.is_empty());
        // --min-bw still applies.
        let th = Thresholds {
            min_bw: Some(0.03),
            fraction: 0.8,
        };
        let (_, limit, s) = outliers(&two, Unit::GBps, &th);
        assert_eq!(limit, Some(0.03));
        assert_eq!(
            s,
            vec![Suspect::Link {
                a: 0,
                b: 2,
                value: 0.019,
                threshold: 0.03
            }]
        );
        // Three links: the median is one of them, and the slow one is named.
        let three = [lv(0, 1, 0.035), lv(0, 2, 0.030), lv(1, 2, 0.010)];
        let (_, th, s) = outliers(&three, Unit::GBps, &Thresholds::default());
        assert!((th.unwrap() - 0.024).abs() < 1e-12);
        assert_eq!(
            s,
            vec![Suspect::Link {
                a: 1,
                b: 2,
                value: 0.010,
                threshold: 0.8 * 0.030
            }]
        );
    }

    #[test]
    fn latency_is_slow_above_the_median() {
        let links = mesh(4, 3.0, &[(0, 2, 9.0)]);
        let (_, th, s) = outliers(&links, Unit::Micros, &Thresholds::default());
        assert_eq!(th, Some(3.75));
        assert_eq!(
            s,
            vec![Suspect::Link {
                a: 0,
                b: 2,
                value: 9.0,
                threshold: 3.75
            }]
        );
    }

    fn node(rank: u32, ready: bool) -> NodeRecord {
        NodeRecord {
            rank,
            name: format!("n{rank}"),
            addr: Some(format!("10.0.0.{rank}")),
            readiness: Some(if ready {
                Readiness::assumed()
            } else {
                Readiness {
                    ready: false,
                    verdict: "not_ready".into(),
                    causes: vec![RootCause {
                        check: "peer.client".into(),
                        summary: "no peer-memory client".into(),
                        fix: Some("modprobe nvidia-peermem".into()),
                    }],
                }
            }),
            lost: None,
        }
    }

    fn bw(v: f64) -> Vec<Measurement> {
        vec![
            Measurement {
                test: "integrity".into(),
                unit: Unit::PassFail,
                value: None,
                passed: true,
                detail: "ok".into(),
                line_rate_min: None,
            },
            Measurement {
                test: "write_bw".into(),
                unit: Unit::GBps,
                value: Some(v),
                passed: true,
                detail: String::new(),
                line_rate_min: None,
            },
        ]
    }

    fn sample() -> FleetReport {
        let mut nodes: Vec<NodeRecord> = (0..5).map(|r| node(r, r != 3)).collect();
        nodes[4].lost = Some(Lost {
            kind: LostKind::Died,
            round: Some(1),
            why: "peer closed the connection".into(),
        });
        let mut pairs = Vec::new();
        for (a, b, v) in [(0, 1, 10.0), (0, 2, 10.0), (1, 2, 1.0)] {
            pairs.push(PairRecord {
                round: 0,
                server: a,
                client: b,
                status: PairStatus::Ran,
                measurements: bw(v),
            });
        }
        pairs.push(PairRecord {
            round: 1,
            server: 3,
            client: 0,
            status: PairStatus::Skipped {
                why: "rank 3 (n3) is not ready".into(),
            },
            measurements: Vec::new(),
        });
        let run = FleetRun {
            world: 5,
            pairing: Pairing::All,
            rounds: 5,
            nodes,
            pairs,
            elapsed_s: 1.0,
            messages: 40,
        };
        FleetReport::new("nvpeer validate --fleet", run, Thresholds::default())
    }

    #[test]
    fn report_json_has_the_answer_first() {
        let r = sample();
        let v = serde_json::to_value(&r).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        for k in [
            "verdict",
            "not_ready",
            "lost",
            "outliers",
            "failures",
            "matrices",
            "run",
        ] {
            assert!(keys.contains(&k), "{k} in {keys:?}");
        }
        assert_eq!(v["verdict"], "fail");
        assert_eq!(v["not_ready"][0]["nodes"], serde_json::json!(["n3"]));
        assert_eq!(v["not_ready"][0]["cause"]["check"], "peer.client");
        assert_eq!(v["lost"][0]["node"], "n4");
        assert_eq!(v["lost"][0]["kind"], "died");
        assert_eq!(v["outliers"].as_array().unwrap().len(), 1);
        assert_eq!(v["outliers"][0]["kind"], "link");
        assert_eq!(
            (
                v["outliers"][0]["a"].as_str(),
                v["outliers"][0]["b"].as_str()
            ),
            (Some("n1"), Some("n2"))
        );
        let m = &v["matrices"][1];
        assert_eq!(m["test"], "write_bw");
        assert_eq!(m["unit"], "g_bps");
        assert_eq!(m["cells"][1][2]["state"], "value");
        assert_eq!(m["cells"][1][2]["slow"], true);
        assert_eq!(m["cells"][2][1]["slow"], true);
        assert_eq!(m["cells"][0][3]["state"], "skipped");
        assert_eq!(m["cells"][0][0]["state"], "none");
        assert_eq!(r.verdict(), Verdict::Failed);
        let text = r.text();
        let first = text.lines().next().unwrap();
        assert!(first.contains("1 not ready, 1 lost, 1 outlier"), "{first}");
        assert!(text.contains("SLOW LINK  n1 <-> n2"), "{text}");
        assert!(text.contains("NOT READY  n3: peer.client"), "{text}");
        assert!(
            text.trim_end().ends_with("5 passed, 1 failed, 2 skipped"),
            "{text}"
        );
    }

    #[test]
    fn the_report_is_not_written_through_a_planted_link() {
        // (a shared working directory where another user made ./nvpeer-fleet a link)
        let d = tempfile::tempdir().unwrap();
        let elsewhere = d.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let dir = d.path().join("nvpeer-fleet");
        std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
        let e = sample().write(&dir).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        // and a real directory gets every file, whole
        let ok = d.path().join("real");
        let files = sample().write(&ok).unwrap();
        assert!(files.iter().all(|f| f.is_file()), "{files:?}");
        assert!(ok.join("fleet.json").is_file() && ok.join("fleet.xml").is_file());
    }

    #[test]
    fn junit_has_a_case_per_pair_and_test() {
        let x = String::from_utf8(sample().junit().unwrap()).unwrap();
        assert!(x.contains(r#"name="write_bw n1 &lt;-&gt; n2""#), "{x}");
        assert!(x.contains(r#"name="integrity n0 &lt;-&gt; n1""#), "{x}");
        assert!(x.contains(r#"name="doctor n3""#), "{x}");
        // 5 doctor cases + 3 links × 2 tests ran, 1 pair × 2 tests skipped.
        assert!(x.contains(r#"tests="13""#), "{x}");
    }

    /// Two links, too few for a fleet threshold, but both held to their ports' line rate: the
    /// slow one's JUnit case and the matrix's line say the threshold it missed.
    #[test]
    fn a_line_rate_outlier_reports_its_own_threshold() {
        let nodes: Vec<NodeRecord> = (0..3).map(|r| node(r, true)).collect();
        let pairs = [(0, 1, 10.0), (0, 2, 5.0)]
            .into_iter()
            .map(|(a, b, v)| PairRecord {
                round: 0,
                server: a,
                client: b,
                status: PairStatus::Ran,
                measurements: bw(v)
                    .into_iter()
                    .map(|m| Measurement {
                        line_rate_min: m.value.map(|_| 9.0),
                        ..m
                    })
                    .collect(),
            })
            .collect();
        let run = FleetRun {
            world: 3,
            pairing: Pairing::All,
            rounds: 3,
            nodes,
            pairs,
            elapsed_s: 1.0,
            messages: 12,
        };
        let r = FleetReport::new("nvpeer validate --fleet", run, Thresholds::default());
        let m = r.matrices.iter().find(|m| m.test == "write_bw").unwrap();
        assert_eq!(m.threshold, None);
        assert!(matches!(
            m.cells[0][2],
            Cell::Value {
                slow: true,
                threshold: Some(t),
                ..
            } if t == 9.0
        ));
        let text = r.text();
        assert!(
            text.contains("each link held to its port's line-rate minimum"),
            "{text}"
        );
        let x = String::from_utf8(r.junit().unwrap()).unwrap();
        assert!(x.contains("outlier: threshold 9"), "{x}");
        assert!(!x.contains("threshold 0"), "{x}");
    }

    #[test]
    fn files_are_written() {
        let dir = std::env::temp_dir().join(format!("nvpeer-fleet-report-{}", std::process::id()));
        let files = sample().write(&dir).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "fleet.json",
                "fleet.xml",
                "matrix-integrity.svg",
                "matrix-write_bw.svg"
            ]
        );
        let svg = std::fs::read_to_string(dir.join("matrix-write_bw.svg")).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("n2"), "{svg}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
