//! The report as text (the answer first), JUnit XML and the files of `--report-dir`.

use super::analysis::*;
use super::*;

/// The most nodes whose matrix the text report prints as a table (a wider one fills a terminal
/// with N² cells; the outliers above it name the bad links and nodes either way).
pub const TEXT_MAX_NODES: usize = 32;

impl Matrix {
    /// Whether the report draws this matrix's picture (up to [`crate::heatmap::MAX_NODES`]).
    pub fn pictured(&self) -> bool {
        self.nodes.len() <= crate::heatmap::MAX_NODES
    }

    /// The matrix as text: its title line (median, threshold) and its table (up to
    /// [`TEXT_MAX_NODES`] nodes).
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
        if self.nodes.len() > TEXT_MAX_NODES {
            return format!(
                "{title}\n({n} x {n} links: not printed above {TEXT_MAX_NODES} nodes; fleet.json has \
                 every measured link{})",
                if self.pictured() {
                    format!(", matrix-{}.svg the picture", file_safe(&self.test))
                } else {
                    String::new()
                },
                n = self.nodes.len()
            );
        }
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

impl FleetReport {
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
                "NOT READY  {}: {}{} — {}{}",
                c.nodes.join(", "),
                tag(c.code),
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
                "LOST       {}: {}{kind}{round} ({}); its pairs were skipped",
                l.node,
                tag(l.code),
                l.why
            ));
        }
        for x in &self.outliers {
            o.push(match x {
                Outlier::Link {
                    code,
                    test,
                    a,
                    b,
                    value,
                    threshold,
                    median,
                    unit,
                } => format!(
                    "SLOW LINK  {a} <-> {b}: {}{test} {} {}, {} {} (fleet median {})",
                    tag(*code),
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
                    code,
                    test,
                    node,
                    values,
                    threshold,
                    median,
                    unit,
                } => {
                    format!(
                    "SUSPECT    {node}: {}all {} of its {test} links {} {} {} (theirs: {}; fleet \
                     median {})",
                    tag(*code),
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
                Failure::Link {
                    code,
                    test,
                    a,
                    b,
                    detail,
                } => {
                    format!("FAIL       {a} <-> {b}: {}{test}: {detail}", tag(*code))
                }
                Failure::Node {
                    code,
                    test,
                    node,
                    links,
                    detail,
                } => format!(
                    "FAIL       {node}: {}{test} failed on all {links} of its links ({detail})",
                    tag(*code)
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
                (_, Some(l)) if l.kind == LostKind::NeverJoined => cases.push(coded(
                    CaseResult::fail(&name, "never joined", l.why.clone()),
                    nvpeer_verdict::codes::fleet(l.kind.finding()),
                )),
                (Some(r), _) if r.ready => cases.push(CaseResult::pass(&name, "ready")),
                (Some(r), _) => cases.push(coded(
                    CaseResult::fail(
                        &name,
                        r.verdict.clone(),
                        r.causes
                            .iter()
                            .map(|c| format!("{}: {}", c.check, c.summary))
                            .collect::<Vec<_>>()
                            .join("; "),
                    ),
                    r.causes
                        .first()
                        .and_then(|c| nvpeer_verdict::codes::doctor(&c.check)),
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
                        } => cases.push(coded(
                            CaseResult::fail(
                                &name,
                                format!("{} {}", fmt(*value), m.unit.symbol()),
                                format!(
                                    "outlier: {} (fleet median {})",
                                    threshold.map_or("below its node's threshold".into(), |t| {
                                        format!("threshold {} {}", fmt(t), m.unit.symbol())
                                    }),
                                    fmt(m.median.unwrap_or(0.0))
                                ),
                            ),
                            nvpeer_verdict::codes::fleet("outlier.link"),
                        )),
                        Cell::Fail { detail } => cases.push(coded(
                            CaseResult::fail(&name, detail.clone(), detail.clone()),
                            nvpeer_verdict::codes::fleet("failure.link"),
                        )),
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
        for m in self.matrices.iter().filter(|m| m.pictured()) {
            let f = dir.join(format!("matrix-{}.svg", file_safe(&m.test)));
            crate::heatmap::render(m, &f)?;
            out.push(f);
        }
        Ok(out)
    }
}

pub(super) fn file_safe(s: &str) -> String {
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

pub(super) fn cell_text(c: &Cell) -> String {
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

/// `[CODE] ` before a finding's text, or nothing.
fn tag(code: Option<&str>) -> String {
    code.map(|c| format!("[{c}] ")).unwrap_or_default()
}

/// A JUnit case of the fleet with the fault code of its finding.
fn coded(
    mut c: nvpeer_harness::report::CaseResult,
    code: Option<&str>,
) -> nvpeer_harness::report::CaseResult {
    c.code = code.map(str::to_string);
    c
}
