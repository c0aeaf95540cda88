//! Charts as inline SVG, drawn with `plotters`' SVG backend: bars (single,
//! grouped or stacked, vertical or horizontal, with optional 95% intervals
//! and a reference line) and a line chart over rounds. Every label passes
//! through plotters' own SVG escaping.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::ReportError;
use super::html::esc;

/// The report's palette (colour-blind-friendly Tableau 10).
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xba, 0xb0, 0xac),
];

const FONT: &str = "sans-serif";
const INK: RGBColor = RGBColor(0x33, 0x33, 0x33);

/// The `i`-th colour of the report's palette (cycling), so a method or series
/// keeps its colour across charts.
pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// One series of a bar chart: a value per category.
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Fill colour.
    pub color: RGBColor,
    /// One value per category, in category order.
    pub values: Vec<f64>,
}

/// A bar chart over categories.
pub struct Bars {
    /// Chart title.
    pub title: String,
    /// Category labels, in drawing order.
    pub categories: Vec<String>,
    /// The series drawn, the first one carrying `intervals`.
    pub series: Vec<Series>,
    /// Stack the series (else side by side).
    pub stacked: bool,
    /// Categories on the vertical axis, bars growing to the right (long
    /// category names read better this way).
    pub horizontal: bool,
    /// The value axis' description.
    pub axis: String,
    /// Upper end of the value axis (default: the largest bar, padded).
    pub max: Option<f64>,
    /// 95% intervals of the first series, per category.
    pub intervals: Vec<Option<(f64, f64)>>,
    /// A labelled reference value drawn across the chart.
    pub reference: Option<(String, f64)>,
    /// Width and height in pixels.
    pub size: (u32, u32),
    /// Decimals of the value axis' labels.
    pub decimals: usize,
}

impl Bars {
    /// An empty bar chart of `categories`: vertical, side by side, 560 × 300
    /// px, two decimals.
    pub fn new(title: impl Into<String>, categories: Vec<String>) -> Bars {
        Bars {
            title: title.into(),
            categories,
            series: Vec::new(),
            stacked: false,
            horizontal: false,
            axis: String::new(),
            max: None,
            intervals: Vec::new(),
            reference: None,
            size: (560, 300),
            decimals: 2,
        }
    }

    /// Add a series (one value per category).
    pub fn series(mut self, name: impl Into<String>, color: RGBColor, values: Vec<f64>) -> Bars {
        self.series.push(Series {
            name: name.into(),
            color,
            values,
        });
        self
    }
}

fn chart_err<E: std::fmt::Debug>(e: E) -> ReportError {
    ReportError::Chart(format!("{e:?}"))
}

/// How a legend entry is drawn.
#[derive(Clone, Copy)]
enum Mark {
    Box,
    Rule,
    Dot,
    Ring,
}

fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// Wrap an SVG in a figure with an accessible name and an HTML legend
/// under it (a legend inside the plot would cover bars).
fn figure(title: &str, svg: &str, legend: &[(String, RGBColor, Mark)]) -> String {
    let mut items = String::new();
    for (name, c, mark) in legend {
        let (class, glyph) = match mark {
            Mark::Box => ("sw box", ""),
            Mark::Rule => ("sw rule", ""),
            Mark::Dot => ("sw dot", "●"),
            Mark::Ring => ("sw dot", "○"),
        };
        items += &format!(
            "<span class=\"li\"><span class=\"{class}\" style=\"--c:{}\">{glyph}</span>{}</span>",
            hex(*c),
            esc(name)
        );
    }
    let caption = if items.is_empty() {
        String::new()
    } else {
        format!("<figcaption class=\"chart-legend\">{items}</figcaption>")
    };
    format!(
        "<figure class=\"chart\" role=\"img\" aria-label=\"{}\">{svg}{caption}</figure>",
        esc(title)
    )
}

fn top(b: &Bars) -> f64 {
    let mut m: f64 = 0.0;
    for i in 0..b.categories.len() {
        let vals = b
            .series
            .iter()
            .map(|s| s.values.get(i).copied().unwrap_or(0.0));
        let v = if b.stacked {
            vals.sum()
        } else {
            vals.fold(0.0, f64::max)
        };
        m = m.max(v);
    }
    for (_, hi) in b.intervals.iter().flatten() {
        m = m.max(*hi);
    }
    if let Some((_, r)) = &b.reference {
        m = m.max(*r);
    }
    if m <= 0.0 { 1.0 } else { m * 1.08 }
}

// plotters' discrete ranges include their end: `0..n - 1` has n segments.

/// The boundary after segment `i - 1`: the axis' end after the last one
/// (`Exact(n)` lies outside a `0..n - 1` axis).
fn edge(i: usize, n: usize) -> SegmentValue<usize> {
    if i >= n {
        SegmentValue::Last
    } else {
        SegmentValue::Exact(i)
    }
}

/// How many labels the value axis gets: counts (no decimals) get at most
/// one per integer, so no label repeats.
fn value_labels(max: f64, decimals: usize) -> usize {
    if decimals == 0 {
        (max.floor() as usize + 1).clamp(2, 10)
    } else {
        10
    }
}

/// Where bar `j` of `m` sits inside a category band `px` pixels wide:
/// the (before, after) margins in pixels.
fn band(px: u32, j: usize, m: usize, stacked: bool) -> (u32, u32) {
    let px = px as f64;
    let pad = (px * 0.15).max(2.0);
    let inner = (px - 2.0 * pad).max(1.0);
    if stacked || m <= 1 {
        return (pad as u32, pad as u32);
    }
    let w = inner / m as f64;
    let before = pad + w * j as f64;
    let after = px - before - w;
    (before.max(0.0) as u32, after.max(0.0) as u32)
}

/// Render a bar chart as an inline SVG figure.
pub fn bars(b: &Bars) -> Result<String, ReportError> {
    // A one-segment axis (`0..0`) maps every key to one pixel in plotters:
    // give a single category an empty neighbour.
    let padded;
    let b = if b.categories.len() == 1 {
        let mut categories = b.categories.clone();
        categories.push(String::new());
        padded = Bars {
            title: b.title.clone(),
            categories,
            series: b
                .series
                .iter()
                .map(|s| Series {
                    name: s.name.clone(),
                    color: s.color,
                    values: s.values.clone(),
                })
                .collect(),
            stacked: b.stacked,
            horizontal: b.horizontal,
            axis: b.axis.clone(),
            max: b.max,
            intervals: b.intervals.clone(),
            reference: b.reference.clone(),
            size: b.size,
            decimals: b.decimals,
        };
        &padded
    } else {
        b
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, b.size).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        if b.horizontal {
            draw_horizontal(&root, b)?;
        } else {
            draw_vertical(&root, b)?;
        }
        root.present().map_err(chart_err)?;
    }
    let mut legend: Vec<(String, RGBColor, Mark)> = Vec::new();
    if b.series.len() > 1 {
        legend.extend(
            b.series
                .iter()
                .map(|s| (s.name.clone(), s.color, Mark::Box)),
        );
    }
    if let Some((name, _)) = &b.reference {
        legend.push((name.clone(), PALETTE[2], Mark::Rule));
    }
    if !b.intervals.is_empty() {
        legend.push(("95% interval".into(), INK, Mark::Rule));
    }
    Ok(figure(&b.title, &svg, &legend))
}

fn label_width(labels: &[String]) -> u32 {
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(4);
    (longest as u32 * 7 + 12).clamp(40, 260)
}

fn draw_vertical(root: &DrawingArea<SVGBackend, Shift>, b: &Bars) -> Result<(), ReportError> {
    let n = b.categories.len().max(1);
    let max = b.max.unwrap_or_else(|| top(b));
    let mut chart = ChartBuilder::on(root)
        .caption(&b.title, (FONT, 15).into_font().color(&INK))
        .margin(8)
        .x_label_area_size(34)
        .y_label_area_size(52)
        .build_cartesian_2d((0..n - 1).into_segmented(), 0f64..max)
        .map_err(chart_err)?;
    let labels = &b.categories;
    let decimals = b.decimals;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .x_labels(n)
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_labels(value_labels(max, decimals))
        .y_label_formatter(&|v| format!("{v:.decimals$}"))
        .y_desc(b.axis.as_str())
        .label_style((FONT, 12).into_font().color(&INK))
        .axis_desc_style((FONT, 12).into_font().color(&INK))
        .draw()
        .map_err(chart_err)?;
    let band_px = chart.plotting_area().dim_in_pixel().0 / n as u32;
    let m = b.series.len();
    let mut base = vec![0.0; n];
    for (j, s) in b.series.iter().enumerate() {
        let (l, r) = band(band_px, j, m, b.stacked);
        let rects: Vec<Rectangle<(SegmentValue<usize>, f64)>> = (0..n)
            .map(|i| {
                let v = s.values.get(i).copied().unwrap_or(0.0);
                let y0 = if b.stacked { base[i] } else { 0.0 };
                if b.stacked {
                    base[i] += v;
                }
                let mut rect = Rectangle::new(
                    [(SegmentValue::Exact(i), y0), (edge(i + 1, n), y0 + v)],
                    s.color.filled(),
                );
                rect.set_margin(0, 0, l, r);
                rect
            })
            .collect();
        chart.draw_series(rects).map_err(chart_err)?;
    }
    if !b.intervals.is_empty() {
        chart
            .draw_series(b.intervals.iter().enumerate().filter_map(|(i, iv)| {
                let v = b.series.first()?.values.get(i).copied()?;
                iv.map(|(lo, hi)| {
                    ErrorBar::new_vertical(
                        SegmentValue::CenterOf(i),
                        lo,
                        v,
                        hi,
                        INK.stroke_width(2),
                        10,
                    )
                })
            }))
            .map_err(chart_err)?;
    }
    if let Some((_, r)) = &b.reference {
        let red = PALETTE[2];
        chart
            .draw_series(LineSeries::new(
                vec![(SegmentValue::Exact(0), *r), (SegmentValue::Last, *r)],
                red.stroke_width(2),
            ))
            .map_err(chart_err)?;
    }
    Ok(())
}

fn draw_horizontal(root: &DrawingArea<SVGBackend, Shift>, b: &Bars) -> Result<(), ReportError> {
    let n = b.categories.len().max(1);
    let max = b.max.unwrap_or_else(|| top(b));
    // Category 0 at the top: the segmented axis counts from the bottom.
    let at = |i: usize| n - 1 - i;
    let labels = &b.categories;
    let mut chart = ChartBuilder::on(root)
        .caption(&b.title, (FONT, 15).into_font().color(&INK))
        .margin(8)
        .x_label_area_size(34)
        .y_label_area_size(label_width(labels))
        .build_cartesian_2d(0f64..max, (0..n - 1).into_segmented())
        .map_err(chart_err)?;
    let decimals = b.decimals;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .y_labels(n)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) if *i < n => {
                labels.get(n - 1 - *i).cloned().unwrap_or_default()
            }
            _ => String::new(),
        })
        .x_labels(value_labels(max, decimals))
        .x_label_formatter(&|v| format!("{v:.decimals$}"))
        .x_desc(b.axis.as_str())
        .label_style((FONT, 12).into_font().color(&INK))
        .axis_desc_style((FONT, 12).into_font().color(&INK))
        .draw()
        .map_err(chart_err)?;
    let band_px = chart.plotting_area().dim_in_pixel().1 / n as u32;
    let m = b.series.len();
    let mut base = vec![0.0; n];
    for (j, s) in b.series.iter().enumerate() {
        let (t, bo) = band(band_px, j, m, b.stacked);
        let rects: Vec<Rectangle<(f64, SegmentValue<usize>)>> = (0..n)
            .map(|i| {
                let v = s.values.get(i).copied().unwrap_or(0.0);
                let x0 = if b.stacked { base[i] } else { 0.0 };
                if b.stacked {
                    base[i] += v;
                }
                let mut rect = Rectangle::new(
                    [
                        (x0, edge(at(i) + 1, n)),
                        (x0 + v, SegmentValue::Exact(at(i))),
                    ],
                    s.color.filled(),
                );
                rect.set_margin(t, bo, 0, 0);
                rect
            })
            .collect();
        chart.draw_series(rects).map_err(chart_err)?;
    }
    Ok(())
}

/// A line over rounds (`points[r]`, `None` where there is no value).
pub struct Line {
    /// Legend label.
    pub name: String,
    /// Line and marker colour.
    pub color: RGBColor,
    /// The value at each round, `None` where there is none (a gap).
    pub points: Vec<Option<f64>>,
    /// Draw markers only (no connecting line).
    pub markers_only: bool,
    /// Hollow markers (e.g. rejected candidates).
    pub hollow: bool,
}

/// A chart of values per round (x = round labels), e.g. training scores.
pub fn rounds_chart(
    title: &str,
    rounds: &[String],
    lines: &[Line],
    axis: &str,
    max: f64,
    size: (u32, u32),
) -> Result<String, ReportError> {
    let n = rounds.len().max(1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(chart_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 15).into_font().color(&INK))
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(52)
            .build_cartesian_2d((0..n - 1).into_segmented(), 0f64..max)
            .map_err(chart_err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            .x_labels(n)
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => rounds.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .y_label_formatter(&|v| format!("{v:.2}"))
            .y_desc(axis)
            .label_style((FONT, 12).into_font().color(&INK))
            .axis_desc_style((FONT, 12).into_font().color(&INK))
            .draw()
            .map_err(chart_err)?;
        for line in lines {
            let pts: Vec<(SegmentValue<usize>, f64)> = line
                .points
                .iter()
                .enumerate()
                .filter_map(|(i, v)| v.map(|v| (SegmentValue::CenterOf(i), v)))
                .collect();
            let c = line.color;
            if !line.markers_only && pts.len() > 1 {
                chart
                    .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                    .map_err(chart_err)?;
            }
            let style = if line.hollow {
                c.stroke_width(2)
            } else {
                c.filled()
            };
            chart
                .draw_series(pts.iter().map(|p| Circle::new(p.clone(), 5, style)))
                .map_err(chart_err)?;
        }
        root.present().map_err(chart_err)?;
    }
    let legend: Vec<(String, RGBColor, Mark)> = lines
        .iter()
        .map(|l| {
            (
                l.name.clone(),
                l.color,
                if l.hollow { Mark::Ring } else { Mark::Dot },
            )
        })
        .collect();
    Ok(figure(title, &svg, &legend))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_charts_are_svg_with_escaped_labels() {
        let b = Bars::new("t <x>", vec!["<script>".into(), "b".into()]).series(
            "s",
            color(0),
            vec![0.5, 1.0],
        );
        let svg = bars(&b).unwrap();
        assert!(svg.contains("<svg"), "{svg}");
        assert!(svg.contains("&lt;script&gt;"));
        assert!(!svg.contains("<script>"));
        let h = bars(&Bars {
            horizontal: true,
            stacked: true,
            ..Bars::new("h", vec!["a".into()])
                .series("x", color(1), vec![1.0])
                .series("y", color(2), vec![2.0])
        })
        .unwrap();
        assert!(h.matches("<rect").count() >= 2);
        let one = bars(&Bars {
            horizontal: true,
            ..Bars::new("one", vec!["only".into()]).series("x", color(0), vec![3.0])
        })
        .unwrap();
        assert!(!one.contains("height=\"-"), "{one}");
    }
}
