//! Line charts as SVG: named series of (x, y) points, named axes, an optional log2 x axis and
//! a marker on each series' knee point.
//!
//! Owns: the drawing (through `plotters`' SVG backend, whose text is laid out by its built-in
//! font metrics: no font files or system libraries are needed). Must not know what is
//! plotted: callers (e.g. `perf sweep`) pick the series, labels and knee indices
//! (`crate::perf::knee` finds those).
//!
//! Output is one self-contained SVG document (a string, or a file with [`write_svg`]).

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// How x values map onto the axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XScale {
    /// Evenly spaced values.
    Linear,
    /// Powers of two evenly spaced (every x must be positive).
    Log2,
}

/// How x tick labels are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TickFormat {
    /// The number itself (`16`, `2048`).
    Plain,
    /// A byte count with binary suffixes (`512`, `4K`, `1M`).
    Bytes,
}

/// One curve.
#[derive(Clone, Debug)]
pub struct Series {
    /// The legend entry.
    pub name: String,
    /// The points, drawn in x order.
    pub points: Vec<(f64, f64)>,
    /// The index in `points` to mark as the knee, if any.
    pub knee: Option<usize>,
}

/// A chart: title, axis names and curves.
#[derive(Clone, Debug)]
pub struct Chart {
    /// The caption above the plot.
    pub title: String,
    /// The x axis name (e.g. "queue depth (WRs outstanding)").
    pub x_label: String,
    /// The y axis name (e.g. "bandwidth (Gb/s)").
    pub y_label: String,
    /// The x axis mapping.
    pub x_scale: XScale,
    /// The x tick labels' form.
    pub x_ticks: TickFormat,
    /// The curves.
    pub series: Vec<Series>,
}

/// Why a chart could not be drawn or written.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    /// Nothing to draw.
    #[error(
        "chart {title:?} has no finite points to draw (every measurement failed or was skipped: check the rows of the run)"
    )]
    Empty {
        /// The chart's title.
        title: String,
    },
    /// A log2 axis was asked for with x values that are not positive.
    #[error(
        "chart {title:?}: x = {x} cannot be drawn on a log2 axis (only positive values can; use XScale::Linear)"
    )]
    NotPositive {
        /// The chart's title.
        title: String,
        /// The bad value.
        x: f64,
    },
    /// plotters refused to draw.
    #[error("chart {title:?} could not be drawn: {reason}")]
    Draw {
        /// The chart's title.
        title: String,
        /// plotters' error.
        reason: String,
    },
    /// The file could not be written.
    #[error("cannot write chart {path}: {source} (check that the folder exists and is writable)")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The SVG canvas size in pixels.
const SIZE: (u32, u32) = (760, 460);

/// Renders `chart` as an SVG document.
pub fn render_svg(chart: &Chart) -> Result<String, ChartError> {
    let map = |x: f64| match chart.x_scale {
        XScale::Linear => x,
        XScale::Log2 => x.log2(),
    };
    let mut xs = Vec::new();
    let mut y_max = 0f64;
    for &(x, y) in chart.series.iter().flat_map(|s| &s.points) {
        if chart.x_scale == XScale::Log2 && x <= 0.0 {
            return Err(ChartError::NotPositive {
                title: chart.title.clone(),
                x,
            });
        }
        if x.is_finite() && y.is_finite() {
            xs.push(map(x));
            y_max = y_max.max(y);
        }
    }
    let (Some(x_lo), Some(x_hi)) = (
        xs.iter().copied().reduce(f64::min),
        xs.iter().copied().reduce(f64::max),
    ) else {
        return Err(ChartError::Empty {
            title: chart.title.clone(),
        });
    };
    let pad = ((x_hi - x_lo) * 0.04).max(0.25);
    let y_top = if y_max > 0.0 { y_max * 1.18 } else { 1.0 };
    let mut svg = String::new();
    draw(chart, &mut svg, (x_lo - pad)..(x_hi + pad), y_top, map).map_err(|reason| {
        ChartError::Draw {
            title: chart.title.clone(),
            reason,
        }
    })?;
    Ok(svg)
}

/// Renders `chart` into the file `path`.
pub fn write_svg(chart: &Chart, path: &Path) -> Result<(), ChartError> {
    let svg = render_svg(chart)?;
    std::fs::write(path, svg).map_err(|source| ChartError::Io {
        path: path.to_owned(),
        source,
    })
}

/// Writes a byte count with a binary suffix when it is a whole number of KiB or MiB.
pub fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}M", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}K", n >> 10),
        n => n.to_string(),
    }
}

/// The tick label at axis position `v`: empty between powers of two on a log2 axis.
fn tick_label(chart: &Chart, v: f64) -> String {
    let x = match chart.x_scale {
        XScale::Linear => v,
        XScale::Log2 => {
            let k = v.round();
            if (v - k).abs() > 1e-6 || !(0.0..63.0).contains(&k) {
                return String::new();
            }
            2f64.powi(k as i32)
        }
    };
    value_label(chart, x)
}

/// The plotters calls; errors come back as their text.
fn draw(
    chart: &Chart,
    svg: &mut String,
    x_range: std::ops::Range<f64>,
    y_top: f64,
    map: impl Fn(f64) -> f64,
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    // A log2 axis gets one label per power of two (plotters picks "nice" steps of 1 then).
    let x_labels = match chart.x_scale {
        XScale::Log2 => ((x_range.end - x_range.start).ceil() as usize + 1).min(24),
        XScale::Linear => 10,
    };
    let mut ctx = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(x_range, 0f64..y_top)
        .map_err(|x| e(&x))?;
    ctx.configure_mesh()
        .x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .x_labels(x_labels)
        .x_label_formatter(&|v| tick_label(chart, *v))
        .light_line_style(WHITE.mix(0.0))
        .axis_desc_style(("sans-serif", 15))
        .draw()
        .map_err(|x| e(&x))?;
    for (i, s) in chart.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let mut pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|&(x, y)| (map(x), y))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        ctx.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(&s.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        ctx.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|x| e(&x))?;
        if let Some(&(kx, ky)) = s.knee.and_then(|k| s.points.get(k)) {
            let p = (map(kx), ky);
            let label = format!("knee: {}", value_label(chart, kx));
            ctx.draw_series([Circle::new(p, 8, color.stroke_width(2))])
                .map_err(|x| e(&x))?;
            let style = TextStyle::from(("sans-serif", 13).into_font())
                .color(&color)
                .pos(Pos::new(HPos::Center, VPos::Top));
            // Labels sit in the empty band above the curves (y_top leaves 18 % headroom),
            // one row per series, with a thin line down to the marked point: no label can
            // cover a curve, and knees of several curves at one x stay readable.
            let down = 4 + 15 * i32::try_from(i).unwrap_or(0).min(2);
            let top = (p.0, y_top);
            let rows = chart.series.len().min(3) as f64;
            let height = f64::from(ctx.plotting_area().dim_in_pixel().1.max(1));
            let below_labels = (p.0, y_top * (1.0 - (6.0 + 15.0 * rows) / height));
            ctx.draw_series([PathElement::new(vec![below_labels, p], color.mix(0.5))])
                .map_err(|x| e(&x))?;
            ctx.draw_series([EmptyElement::at(top) + Text::new(label, (0, down), style)])
                .map_err(|x| e(&x))?;
        }
    }
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// The label of a data x value (not an axis position), as the ticks write it.
fn value_label(chart: &Chart, x: f64) -> String {
    match chart.x_ticks {
        TickFormat::Bytes if x >= 0.0 && x.fract() == 0.0 => human_bytes(x as u64),
        _ if x.fract() == 0.0 => format!("{x:.0}"),
        _ => format!("{x:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of every `<text>` element, trimmed (also checks the SVG is well-formed XML).
    fn texts(svg: &str) -> Vec<String> {
        let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("{e}:\n{svg}"));
        doc.descendants()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| n.text().unwrap_or("").trim().to_owned())
            .collect()
    }

    fn chart(scale: XScale, points: Vec<(f64, f64)>, knee: Option<usize>) -> Chart {
        Chart {
            title: "depth sweep".into(),
            x_label: "queue depth (WRs outstanding)".into(),
            y_label: "bandwidth (Gb/s)".into(),
            x_scale: scale,
            x_ticks: TickFormat::Plain,
            series: vec![Series {
                name: "spin".into(),
                points,
                knee,
            }],
        }
    }

    #[test]
    fn a_chart_names_its_axes_series_and_knee() {
        let pts = vec![(1.0, 1.0), (4.0, 6.0), (16.0, 9.8), (64.0, 10.0)];
        let svg = render_svg(&chart(XScale::Log2, pts, Some(2))).unwrap();
        let texts = texts(&svg);
        for text in [
            "depth sweep",
            "queue depth (WRs outstanding)",
            "bandwidth (Gb/s)",
            "spin",
            "knee: 16",
        ] {
            assert!(texts.iter().any(|t| t == text), "{text:?} not in {texts:?}");
        }
        // One tick label per power of two on the log2 axis, none between.
        for tick in ["1", "2", "4", "8", "16", "32", "64"] {
            assert!(
                texts.iter().any(|t| t == tick),
                "tick {tick} not in {texts:?}"
            );
        }
        assert!(!texts.iter().any(|t| t == "3" || t == "5.66"), "{texts:?}");
    }

    #[test]
    fn knees_of_several_curves_at_one_point_are_stacked_not_overlaid() {
        let mut c = chart(XScale::Log2, vec![(1.0, 1.0), (2.0, 2.0)], Some(1));
        c.series.push(Series {
            name: "event".into(),
            ..c.series[0].clone()
        });
        let svg = render_svg(&c).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let ys: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text") && n.text().is_some_and(|t| t.contains("knee")))
            .filter_map(|n| n.attribute("y"))
            .collect();
        assert_eq!(ys.len(), 2, "{svg}");
        assert_ne!(ys[0], ys[1], "{svg}");
    }

    #[test]
    fn no_knee_means_no_marker_and_a_linear_axis_takes_zero() {
        let pts = vec![(0.0, 1.0), (5.0, 2.0)];
        let svg = render_svg(&chart(XScale::Linear, pts, None)).unwrap();
        assert!(!svg.contains("knee"), "{svg}");
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let c = chart(XScale::Log2, vec![(0.0, 1.0)], None);
        assert!(matches!(
            render_svg(&c),
            Err(ChartError::NotPositive { .. })
        ));
        let c = chart(XScale::Linear, vec![(1.0, f64::NAN)], None);
        assert!(matches!(render_svg(&c), Err(ChartError::Empty { .. })));
        let c = chart(XScale::Linear, vec![(1.0, 1.0)], None);
        let e = write_svg(&c, Path::new("/nonexistent-dir/x.svg")).unwrap_err();
        assert!(matches!(e, ChartError::Io { .. }), "{e}");
    }

    #[test]
    fn byte_ticks_use_binary_suffixes() {
        assert_eq!(human_bytes(8), "8");
        assert_eq!(human_bytes(4096), "4K");
        assert_eq!(human_bytes(1 << 20), "1M");
        assert_eq!(human_bytes(1536), "1536");
        let mut c = chart(XScale::Log2, vec![(8.0, 1.0), (1048576.0, 2.0)], Some(1));
        c.x_ticks = TickFormat::Bytes;
        let texts = texts(&render_svg(&c).unwrap());
        for text in ["knee: 1M", "8", "64K", "512K"] {
            assert!(texts.iter().any(|t| t == text), "{text:?} not in {texts:?}");
        }
    }
}
