//! A [`Figure`] as inline SVG, drawn by plotters' SVG backend (no fonts, no bitmaps): message
//! size on a logarithmic x axis (log2, ticks at powers of two), one coloured line with its points per series, a legend.

use super::series::Figure;
use super::ReportError;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

const WIDTH: u32 = 960;
const HEIGHT: u32 = 460;

/// Colours a reader can tell apart on white.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// `4096` → `4K`, `1048576` → `1M`.
pub fn size_label(bytes: f64) -> String {
    let b = bytes.round();
    for (unit, div) in [("G", 1u64 << 30), ("M", 1 << 20), ("K", 1 << 10)] {
        let d = div as f64;
        if b >= d {
            let v = b / d;
            return if (v - v.round()).abs() < 1e-9 {
                format!("{}{unit}", v.round())
            } else {
                format!("{v:.1}{unit}")
            };
        }
    }
    format!("{b}")
}

/// The SVG of `fig`, to be placed in the page as it is (without the namespace attribute, which an
/// HTML parser does not need).
pub fn svg(fig: &Figure) -> Result<String, ReportError> {
    let err = |e: String| ReportError::Plot {
        title: fig.title.clone(),
        msg: e,
    };
    let pts = || fig.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1) = (f64::INFINITY, 0f64);
    let (mut y0, mut y1) = (f64::INFINITY, 0f64);
    for &(x, y) in pts() {
        x0 = x0.min(x.max(1) as f64);
        x1 = x1.max(x.max(1) as f64);
        if y.is_finite() && y > 0.0 {
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    if !x0.is_finite() || !y0.is_finite() {
        return Err(err("no positive figure to plot".into()));
    }
    // Sizes as powers of two on a linear axis of log2(bytes), so that the ticks fall on 1, 4,
    // 16, 64 ... 1K ... (a decimal log axis ticks at 10000 bytes); a margin around the points,
    // so that a single size (validate) is not a degenerate axis.
    let xs = (x0.log2() - 1.0)..(x1.log2() + 1.0);
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        if fig.log_y {
            draw(&root, fig, xs, ((y0 / 1.5)..(y1 * 1.5)).log_scale()).map_err(err)?;
        } else {
            draw(&root, fig, xs, 0.0..(y1 * 1.15)).map_err(err)?;
        }
        root.present().map_err(|e| err(e.to_string()))?;
    }
    Ok(buf.replacen(r#" xmlns="http://www.w3.org/2000/svg""#, "", 1))
}

fn draw<DB, Y>(
    root: &DrawingArea<DB, Shift>,
    fig: &Figure,
    xs: std::ops::Range<f64>,
    ys: Y,
) -> Result<(), String>
where
    DB: DrawingBackend,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut chart = ChartBuilder::on(root)
        .caption(&fig.title, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(xs, ys)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_labels(12)
        .x_desc("message size [bytes]")
        .y_desc(&fig.y_label)
        .x_label_formatter(&|v| {
            if (v - v.round()).abs() < 1e-6 {
                size_label(v.round().exp2())
            } else {
                String::new()
            }
        })
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(e)?;
    for (i, s) in fig.series.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let points: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|(_, y)| y.is_finite() && *y > 0.0)
            .map(|&(x, y)| ((x.max(1) as f64).log2(), y))
            .collect();
        chart
            .draw_series(std::iter::once(PathElement::new(
                points.clone(),
                colour.stroke_width(2),
            )))
            .map_err(e)?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(3))
            });
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 4, colour.filled())))
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(e)?;
    Ok(())
}
