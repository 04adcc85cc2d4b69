//! The matrix as a picture: an SVG heat map per test (plotters' SVG backend), for people who
//! would rather look than read. Bandwidth runs from red (slowest) to green (fastest), latency the
//! other way; pass is green, a failure or an outlier red with a bold border, a skipped pair grey,
//! a link not measured (the diagonal, `--pairs ring`) white. Each cell carries its figure.

use crate::report::{fmt, Cell, Matrix};
use crate::runner::Unit;
use plotters::prelude::*;
use std::path::Path;

const CELL: u32 = 64;
/// The most nodes a picture is drawn for: 256 nodes are a 16,500-pixel square of 65,536 cells
/// (about 30 MB of SVG); beyond, the report writes no picture (fleet.json lists the links).
pub const MAX_NODES: usize = 256;
const MARGIN: u32 = 120;

/// The colour of a figure `v` between `lo` and `hi` (`better_high`: bandwidth).
fn shade(v: f64, lo: f64, hi: f64, better_high: bool) -> RGBColor {
    let t = if hi > lo {
        ((v - lo) / (hi - lo)).clamp(0.0, 1.0)
    } else {
        1.0
    };
    let t = if better_high { t } else { 1.0 - t };
    // red (t = 0) → yellow → green (t = 1)
    let (r, g) = if t < 0.5 {
        (230.0, 60.0 + 340.0 * t)
    } else {
        (230.0 - 380.0 * (t - 0.5), 230.0)
    };
    RGBColor(r as u8, g as u8, 80)
}

/// Draws `m` into the SVG file `path` (written whole, never through a link: nvpeer-files).
pub fn render(m: &Matrix, path: &Path) -> std::io::Result<()> {
    let mut svg = String::new();
    draw(m, path, &mut svg)?;
    nvpeer_files::write_file(path, svg.as_bytes()).map_err(nvpeer_files::Error::into_io)
}

/// Draws `m` as SVG into `svg` (`path` names it in errors).
fn draw(m: &Matrix, path: &Path, svg: &mut String) -> std::io::Result<()> {
    let n = m.nodes.len() as u32;
    let side = MARGIN + n.max(1) * CELL + 20;
    let io = |e: String| std::io::Error::other(format!("{}: {e}", path.display()));
    let root = SVGBackend::with_string(svg, (side, side + 40)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| io(e.to_string()))?;
    let title = format!(
        "{} [{}]{}",
        m.test,
        m.unit.symbol(),
        m.median
            .map_or_else(String::new, |md| format!(" — fleet median {}", fmt(md)))
    );
    root.draw(&Text::new(title, (10, 12), ("sans-serif", 18).into_font()))
        .map_err(|e| io(e.to_string()))?;
    let values: Vec<f64> = m
        .cells
        .iter()
        .flatten()
        .filter_map(|c| match c {
            Cell::Value { value, .. } => Some(*value),
            _ => None,
        })
        .collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    // The scale starts at nothing (bandwidth: 0 to the best link) or ends at twice the best
    // (latency), so that links within noise of each other share a colour rather than span the
    // whole scale.
    let (lo, hi) = if m.unit == Unit::Micros {
        (lo, hi.max(2.0 * lo))
    } else {
        (0.0, hi)
    };
    let label = ("sans-serif", 13).into_font();
    let top = MARGIN - 60 + 40;
    for (i, name) in m.nodes.iter().enumerate() {
        let x = MARGIN + i as u32 * CELL;
        let y = top + i as u32 * CELL;
        root.draw(&Text::new(
            name.clone(),
            (x as i32 + 4, top as i32 - 16),
            label.clone(),
        ))
        .map_err(|e| io(e.to_string()))?;
        root.draw(&Text::new(
            name.clone(),
            (8, y as i32 + CELL as i32 / 2 - 6),
            label.clone(),
        ))
        .map_err(|e| io(e.to_string()))?;
    }
    for (i, row) in m.cells.iter().enumerate() {
        for (j, c) in row.iter().enumerate() {
            let x0 = (MARGIN + j as u32 * CELL) as i32;
            let y0 = (top + i as u32 * CELL) as i32;
            let x1 = x0 + CELL as i32 - 2;
            let y1 = y0 + CELL as i32 - 2;
            let (fill, text, bad) = match c {
                Cell::None => (WHITE, String::new(), false),
                Cell::Pass => (RGBColor(80, 200, 100), "pass".into(), false),
                Cell::Fail { .. } => (RGBColor(220, 50, 50), "FAIL".into(), true),
                Cell::Skipped { .. } => (RGBColor(190, 190, 190), "skip".into(), false),
                Cell::Value { value, slow, .. } => (
                    shade(*value, lo, hi, m.unit != Unit::Micros),
                    fmt(*value),
                    *slow,
                ),
            };
            root.draw(&Rectangle::new([(x0, y0), (x1, y1)], fill.filled()))
                .map_err(|e| io(e.to_string()))?;
            let border = if bad {
                BLACK.stroke_width(3)
            } else {
                RGBColor(160, 160, 160).stroke_width(1)
            };
            root.draw(&Rectangle::new([(x0, y0), (x1, y1)], border))
                .map_err(|e| io(e.to_string()))?;
            if !text.is_empty() {
                root.draw(&Text::new(
                    text,
                    (x0 + 6, y0 + CELL as i32 / 2 - 6),
                    label.clone(),
                ))
                .map_err(|e| io(e.to_string()))?;
            }
        }
    }
    root.present().map_err(|e| io(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shades_run_from_red_to_green() {
        assert_eq!(shade(0.0, 0.0, 10.0, true), RGBColor(230, 60, 80));
        assert_eq!(shade(10.0, 0.0, 10.0, true), RGBColor(40, 230, 80));
        assert_eq!(shade(10.0, 0.0, 10.0, false), RGBColor(230, 60, 80));
        assert_eq!(shade(5.0, 5.0, 5.0, true), RGBColor(40, 230, 80));
    }
}
