//! What the measurements say: the fleet median and thresholds of each test, the slow links and
//! the suspect nodes, the failed links, the nodes not ready or lost, each link's cell.

use super::*;

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

/// The fleet median: the one definition of every tool's (nvpeer-figures).
pub use nvpeer_figures::stats::median;

/// The fewest measured links of a test for which the fleet median says what a link should
/// reach. With two, the median is their mean and any spread over `2 (1 - f) / (1 + f)` names
/// the lower one (about 22 % at the default 0.8): that is the noise of the measurement, not a
/// verdict; with three, the median is a link the others are compared with.
pub const MIN_LINKS_FOR_MEDIAN: usize = 3;

/// The threshold of a test: a fraction of the median when `links` are enough for one
/// ([`MIN_LINKS_FOR_MEDIAN`]), and `--min-bw` for bandwidth; none when neither applies.
pub(super) fn threshold(unit: Unit, median: f64, links: usize, th: &Thresholds) -> Option<f64> {
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

pub(super) fn slow(unit: Unit, v: f64, limit: f64) -> bool {
    match unit {
        Unit::Micros => v > limit,
        _ => v < limit,
    }
}

/// The threshold link `l` is held to: the fleet's (`limit`), raised to its port's line-rate
/// minimum for bandwidth; none when neither applies.
pub(super) fn link_limit(l: &LinkValue, unit: Unit, limit: Option<f64>) -> Option<f64> {
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
pub(super) fn all_bad_nodes(links: &[(u32, u32)], bad: &[(u32, u32)]) -> BTreeSet<u32> {
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
pub(super) fn not_ready(run: &FleetRun, label: &[String]) -> Vec<NotReady> {
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
        .map(|(cause, nodes)| NotReady {
            code: nvpeer_verdict::codes::doctor(&cause.check),
            cause,
            nodes,
        })
        .collect()
}

/// The nodes lost during the run.
pub(super) fn lost(run: &FleetRun, label: &[String]) -> Vec<LostNode> {
    run.nodes
        .iter()
        .filter_map(|node| {
            node.lost.as_ref().map(|l| LostNode {
                code: nvpeer_verdict::codes::fleet(l.kind.finding()),
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
pub(super) struct TestLinks {
    pub(super) cells: Vec<Vec<Cell>>,
    pub(super) values: Vec<LinkValue>,
    pub(super) measured: Vec<(u32, u32)>,
    pub(super) failed: Vec<(u32, u32, String)>,
}

impl TestLinks {
    pub(super) fn of(run: &FleetRun, test: &str, unit: Unit) -> Self {
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
pub(super) fn name_outliers(
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
                    code: nvpeer_verdict::codes::fleet("outlier.link"),
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
                    code: nvpeer_verdict::codes::fleet("outlier.node"),
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
pub(super) fn name_failures(t: &TestLinks, test: &str, label: &[String]) -> Vec<Failure> {
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
            code: nvpeer_verdict::codes::fleet("failure.node"),
            test: test.to_string(),
            node: label[*node as usize].clone(),
            links,
            detail,
        });
    }
    for (a, b, detail) in failed {
        if !nodes.contains(a) && !nodes.contains(b) {
            failures.push(Failure::Link {
                code: nvpeer_verdict::codes::fleet("failure.link"),
                test: test.to_string(),
                a: label[*a as usize].clone(),
                b: label[*b as usize].clone(),
                detail: detail.clone(),
            });
        }
    }
    failures
}
