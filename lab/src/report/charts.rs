//! The report's per-case and per-sweep charts, as SVG drawn with plotters: latency against
//! segments (a dot per strategy, labelled beside it by [`super::labels`]), latency CDFs and
//! latency against RTT, whose legends sit beside the plot, off the curves.

use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::labels::{self, Rect, Want};
use super::{fmt_us, rtt_of, Sweep};
use crate::{Row, Strategy, Table};

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
/// One measure of a row.
type Pick = fn(&Row) -> f64;

const COLORS: [RGBColor; Strategy::ALL.len()] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(44, 160, 44),
    RGBColor(23, 190, 207),
];

/// Text that names more than one strategy.
const INK: RGBColor = RGBColor(60, 60, 60);

/// A strategy's colour, the same in every chart.
pub(crate) fn color(s: Strategy) -> RGBColor {
    COLORS[Strategy::ALL.iter().position(|x| *x == s).unwrap_or(0)]
}

/// A log axis over `lo..hi`, about `px` pixels long, labelled at [`labels::log_ticks`] at
/// least `gap` pixels apart, with a light grid line at each of 1..9 times a power of ten.
fn log_axis(lo: f64, hi: f64, px: f64, gap: f64) -> WithKeyPoints<LogCoord<f64>> {
    let (bold, light) = labels::log_ticks(lo, hi, px, gap);
    (lo..hi)
        .log_scale()
        .with_key_points(bold)
        .with_light_points(light)
}

/// The least distance between two tick labels of a log axis, pixels: across ("100.0 ms"
/// takes about 45) and up.
const X_GAP: f64 = 60.0;
const Y_GAP: f64 = 18.0;

/// Width of the legend beside a plot, pixels.
const LEGEND_W: u32 = 105;

/// A legend in `area` (beside the plot, so it covers no curve): per entry a line of its
/// colour and width, and its name.
fn side_legend(area: &Area<'_>, entries: &[(&str, RGBColor, u32)]) -> Result<(), String> {
    for (i, (name, c, width)) in entries.iter().enumerate() {
        let y = 40 + 18 * i as i32;
        area.draw(&PathElement::new(
            vec![(6, y), (24, y)],
            c.stroke_width(*width),
        ))
        .map_err(|e| e.to_string())?;
        area.draw(&Text::new(
            name.to_string(),
            (30, y - 6),
            ("sans-serif", 14).into_font().color(&BLACK),
        ))
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// p50 (thick) and p99 (thin) against RTT per strategy, log-log.
pub(crate) fn sweep_svg(sw: &Sweep<'_>) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (640 + LEGEND_W, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (plot, side) = root.split_horizontally(640);
        let xs: Vec<f64> = sw.tables.iter().map(|t| rtt_of(t).max(1.0)).collect();
        let all = sw
            .tables
            .iter()
            .flat_map(|t| t.rows.iter().filter(|r| r.runs > 0));
        let (mut lo, mut hi) = (f64::INFINITY, 1.0f64);
        for r in all {
            lo = lo.min(r.p50_us.median.max(1.0));
            hi = hi.max(r.p99_us.median);
        }
        let xlo = xs.iter().cloned().fold(f64::INFINITY, f64::min);
        let xhi = xs.iter().cloned().fold(1.0, f64::max);
        let mut chart = ChartBuilder::on(&plot)
            .caption(
                "latency against round-trip time (p50 thick, p99 thin)",
                ("sans-serif", 15),
            )
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(
                log_axis(xlo / 1.3, xhi * 1.3, 560.0, X_GAP),
                log_axis(lo / 1.5, hi * 1.5, 300.0, Y_GAP),
            )
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("round-trip time of the path")
            .y_desc("latency per exchange")
            .x_label_formatter(&|v| fmt_us(*v))
            .y_label_formatter(&|v| fmt_us(*v))
            .draw()
            .map_err(|e| e.to_string())?;
        let mut legend = Vec::new();
        for r0 in sw.tables[0].rows.iter() {
            let c = color(r0.strategy);
            let series = |pick: fn(&Row) -> f64| -> Vec<(f64, f64)> {
                sw.tables
                    .iter()
                    .filter_map(|t| {
                        t.rows
                            .iter()
                            .find(|r| r.strategy == r0.strategy && r.runs > 0)
                            .map(|r| (rtt_of(t).max(1.0), pick(r).max(1.0)))
                    })
                    .collect()
            };
            let picks: [(Pick, u32); 2] = [(|r| r.p50_us.median, 3), (|r| r.p99_us.median, 1)];
            for (pick, width) in picks {
                chart
                    .draw_series(LineSeries::new(series(pick), c.stroke_width(width)))
                    .map_err(|e| e.to_string())?;
            }
            legend.push((r0.strategy.name(), c, 3));
        }
        side_legend(&side, &legend)?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// Dot radius of the scatter chart, pixels.
const DOT: i32 = 5;
/// Label font of the scatter chart (plotters size; the SVG says size / 1.24 px) and the
/// width and height it is assumed to take per character and per line, pixels.
const LABEL_FONT: f64 = 14.0;
const CHAR_W: f64 = 6.6;
const LINE_H: f64 = 15.0;
/// Where the text's top is drawn below its box's top: a browser draws the glyphs of a text
/// at y (dy 0.76em) from about y - 2 to y + 12, so the box keeps 2 px free above and 1 below.
const TEXT_DY: f64 = 3.0;

/// Latency (p50, log scale) against data segments per exchange: one dot per strategy, and
/// one label per place (strategies on the same spot share it: "cork, msgmore").
pub(crate) fn scatter_svg(t: &Table) -> Result<String, String> {
    let rows: Vec<&Row> = t.rows.iter().filter(|r| r.runs > 0).collect();
    if rows.is_empty() {
        return Ok(String::new());
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (480, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let xmax = rows
            .iter()
            .map(|r| r.segs_per_exchange.median)
            .fold(1.0, f64::max)
            * 1.15;
        let ymin = rows
            .iter()
            .map(|r| r.p50_us.median)
            .fold(f64::INFINITY, f64::min)
            .max(1.0)
            / 2.0;
        let ymax = rows.iter().map(|r| r.p50_us.median).fold(1.0, f64::max) * 2.0;
        let mut chart = ChartBuilder::on(&root)
            .caption("p50 latency vs data segments", ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, log_axis(ymin, ymax, 240.0, Y_GAP))
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("data segments per exchange")
            .y_desc("p50 latency")
            .y_label_formatter(&|v| fmt_us(*v))
            .draw()
            .map_err(|e| e.to_string())?;
        let points: Vec<(f64, f64)> = rows
            .iter()
            .map(|r| (r.segs_per_exchange.median, r.p50_us.median.max(1.0)))
            .collect();
        chart
            .draw_series(
                rows.iter()
                    .zip(&points)
                    .map(|(r, p)| Circle::new(*p, DOT, color(r.strategy).filled())),
            )
            .map_err(|e| e.to_string())?;
        let px: Vec<(f64, f64)> = points
            .iter()
            .map(|p| {
                let (x, y) = chart.backend_coord(p);
                (f64::from(x), f64::from(y))
            })
            .collect();
        // Dots closer than a radius cover each other: one label names them all.
        let groups = labels::group(&px, f64::from(DOT) - 1.0);
        let names: Vec<String> = groups
            .iter()
            .map(|g| {
                g.iter()
                    .map(|&i| rows[i].strategy.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .collect();
        let wants: Vec<Want> = groups
            .iter()
            .zip(&names)
            .map(|(g, name)| Want {
                dot: px[g[0]],
                w: name.len() as f64 * CHAR_W,
                h: LINE_H,
            })
            .collect();
        let (xr, yr) = chart.plotting_area().get_pixel_range();
        let area = Rect {
            x: f64::from(xr.start),
            y: f64::from(yr.start),
            w: f64::from(xr.end - xr.start),
            h: f64::from(yr.end - yr.start),
        };
        let placed = labels::place(&wants, &px, f64::from(DOT), area);
        for ((g, name), (want, p)) in groups.iter().zip(&names).zip(wants.iter().zip(&placed)) {
            let c = if g.len() == 1 {
                color(rows[g[0]].strategy)
            } else {
                INK
            };
            let r = p.rect;
            if p.far {
                let end = (
                    want.dot.0.clamp(r.x, r.x + r.w),
                    want.dot.1.clamp(r.y, r.y + r.h),
                );
                root.draw(&PathElement::new(
                    vec![
                        (want.dot.0 as i32, want.dot.1 as i32),
                        (end.0 as i32, end.1 as i32),
                    ],
                    c.mix(0.6).stroke_width(1),
                ))
                .map_err(|e| e.to_string())?;
            }
            root.draw(&Text::new(
                name.clone(),
                (r.x as i32, (r.y + TEXT_DY) as i32),
                ("sans-serif", LABEL_FONT).into_font().color(&c),
            ))
            .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// Latency CDFs, one line per strategy, log latency axis; the legend beside the plot.
pub(crate) fn cdf_svg(t: &Table) -> Result<String, String> {
    let rows: Vec<&Row> = t.rows.iter().filter(|r| !r.cdf.is_empty()).collect();
    if rows.is_empty() {
        return Ok(String::new());
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (400 + LEGEND_W, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (plot, side) = root.split_horizontally(400);
        let lo = rows
            .iter()
            .flat_map(|r| r.cdf.first())
            .map(|p| p.0)
            .min()
            .unwrap_or(1)
            .max(1);
        let hi = rows
            .iter()
            .flat_map(|r| r.cdf.last())
            .map(|p| p.0)
            .max()
            .unwrap_or(10)
            .max(lo * 10);
        let mut chart = ChartBuilder::on(&plot)
            .caption("latency CDF", ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(45)
            .build_cartesian_2d(
                log_axis(lo as f64 / 1.5, hi as f64 * 1.5, 335.0, X_GAP),
                0.0..1.0,
            )
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("latency per exchange")
            .y_desc("fraction of exchanges")
            .x_label_formatter(&|v| fmt_us(*v))
            .draw()
            .map_err(|e| e.to_string())?;
        let mut legend = Vec::new();
        for r in &rows {
            let c = color(r.strategy);
            chart
                .draw_series(LineSeries::new(
                    r.cdf.iter().map(|&(us, q)| (us.max(1) as f64, q)),
                    c.stroke_width(2),
                ))
                .map_err(|e| e.to_string())?;
            legend.push((r.strategy.name(), c, 2));
        }
        side_legend(&side, &legend)?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}
