//! What the report plots, against message size: the one message each `xfer.*` case of validate
//! timed (per operation, direction and registration path), and the sweeps of `nvpeer bench`
//! documents (bandwidth, latency and registration cost per test, memory and device). Nothing
//! here is estimated: a figure is a value a run wrote.

use crate::bench::{to_mib, BenchDoc, Row};
use crate::report::ValidateReport;

/// One line of a plot: (message size in bytes, value) points in size order.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(u64, f64)>,
}

/// One plot.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub title: String,
    pub y_label: String,
    /// Latency spans orders of magnitude: a logarithmic axis.
    pub log_y: bool,
    pub series: Vec<Series>,
}

impl Figure {
    /// Whether any point can be drawn: a finite figure above zero (the plots' axes are of
    /// positive values; a run whose every figure is zero has a note instead of a plot).
    pub fn has_positive(&self) -> bool {
        self.series
            .iter()
            .flat_map(|s| s.points.iter())
            .any(|&(_, y)| y.is_finite() && y > 0.0)
    }
}

const MIB: f64 = 1_048_576.0;

/// Validate's figures: bandwidth and time of the one timed message of every `xfer.*` case that
/// passed. Empty when no case timed a transfer.
pub fn from_validate(doc: &ValidateReport) -> Vec<Figure> {
    let timed: Vec<_> = doc
        .cases
        .iter()
        .filter_map(|c| c.transfer.as_deref())
        .filter(|t| t.micros > 0.0)
        .collect();
    if timed.is_empty() {
        return Vec::new();
    }
    let label = |t: &crate::report::Transfer| format!("{} {}->{} [{}]", t.op, t.from, t.to, t.path);
    let bw = timed
        .iter()
        .map(|t| Series {
            label: label(t),
            points: vec![(t.bytes, t.bytes as f64 / t.micros * 1e6 / MIB)],
        })
        .collect();
    let lat = timed
        .iter()
        .map(|t| Series {
            label: label(t),
            points: vec![(t.bytes, t.micros)],
        })
        .collect();
    vec![
        Figure {
            title: "validate: one message per case, bandwidth".into(),
            y_label: "MiB/s (bytes / time of one message)".into(),
            log_y: false,
            series: bw,
        },
        Figure {
            title: "validate: one message per case, post to completion".into(),
            y_label: "microseconds".into(),
            log_y: true,
            series: lat,
        },
    ]
}

/// One bench document with the name the report gives it.
pub struct NamedBench<'a> {
    pub name: &'a str,
    pub doc: &'a BenchDoc,
}

/// The bench documents' figures: bandwidth (`BW_average`, MiB/s), latency (`t_typical`, the
/// median) and registration cost (`reg` and `dereg` medians), one series per test, memory,
/// device (and document, when several are given). A figure without a series is left out.
pub fn from_bench(benches: &[NamedBench]) -> Vec<Figure> {
    let mut bw = Vec::new();
    let mut lat = Vec::new();
    let mut reg = Vec::new();
    for b in benches {
        for t in &b.doc.tests {
            if t.results.is_empty() {
                continue;
            }
            let info = t.info();
            let mem = if info.memory.is_empty() {
                b.doc.mem.clone()
            } else {
                info.memory.clone()
            };
            let device = if info.device.is_empty() {
                b.doc.device.clone().unwrap_or_default()
            } else {
                info.device.clone()
            };
            let mut label = format!("{} {mem}", t.test);
            if !device.is_empty() {
                label.push_str(&format!(" {device}"));
            }
            if benches.len() > 1 {
                label.push_str(&format!(" ({})", b.name));
            }
            let mut rows: Vec<&Row> = t.results.iter().collect();
            rows.sort_by_key(|r| r.msg_size());
            let (mut b_pts, mut l_pts, mut r_pts, mut d_pts) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for r in rows {
                match r {
                    Row::Bandwidth(r) => {
                        b_pts.push((r.msg_size, to_mib(r.bw_average, info.bw_unit.as_deref())))
                    }
                    Row::Latency(r) => l_pts.push((r.msg_size, r.t_typical)),
                    Row::Registration(r) => {
                        r_pts.push((r.msg_size, r.reg.t_typical));
                        d_pts.push((r.msg_size, r.dereg.t_typical));
                    }
                }
            }
            let path = info
                .registration_path
                .map_or_else(String::new, |p| format!(" [{p}]"));
            let add = |into: &mut Vec<Series>, points: Vec<(u64, f64)>, label: String| {
                if !points.is_empty() {
                    into.push(Series { label, points });
                }
            };
            add(&mut bw, b_pts, label.clone());
            add(&mut lat, l_pts, label.clone());
            add(&mut reg, r_pts, format!("{label}{path} reg"));
            add(&mut reg, d_pts, format!("{label}{path} dereg"));
        }
    }
    let figures = [
        ("bench: bandwidth (BW average)", "MiB/s", false, bw),
        (
            "bench: latency (t_typical, the median)",
            "microseconds",
            true,
            lat,
        ),
        (
            "bench: registration cost (median)",
            "microseconds",
            true,
            reg,
        ),
    ];
    figures
        .into_iter()
        .filter(|(_, _, _, s)| !s.is_empty())
        .map(|(title, y, log_y, series)| Figure {
            title: title.into(),
            y_label: y.into(),
            log_y,
            series,
        })
        .collect()
}
