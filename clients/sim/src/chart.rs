//! Charts (plotters): the set-ups side by side, against arrived demand or against time, as SVG
//! and PNG. PNG goes through a small pixel backend with a built-in 8x8 bitmap font, so that it
//! needs no system fonts (plotters' own bitmap text needs a font library).

use std::error::Error as _;
use std::path::Path;

use anyhow::anyhow;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters_backend::{
    BackendColor, BackendCoord, BackendTextStyle, DrawingErrorKind, FontTransform,
    text_anchor::{HPos, VPos},
};

use crate::replay::{Sample, SetupResult};

/// The x axis of a chart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XAxis {
    /// Arrived GPU demand, % of the cluster's GPUs.
    Demand,
    /// Trace time, hours.
    Time,
}

impl XAxis {
    fn value(self, s: &Sample) -> f64 {
        match self {
            XAxis::Demand => s.arrived_demand_pct,
            XAxis::Time => s.time_s / 3600.0,
        }
    }

    fn desc(self) -> &'static str {
        match self {
            XAxis::Demand => "arrived GPU demand, % of cluster GPUs",
            XAxis::Time => "trace time, hours",
        }
    }
}

/// The series colours (shared with the priorities chart).
pub const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

type Metric = (&'static str, fn(&Sample) -> f64);

const PANELS: [Metric; 6] = [
    ("GPU allocation, % of compute", |s| s.allocation_pct),
    ("fragmentation, % of free compute", |s| s.fragmentation_pct),
    ("cards fully idle", |s| s.cards.idle as f64),
    ("cards partly used", |s| s.cards.partial as f64),
    ("cards full", |s| s.cards.full as f64),
    ("workloads unplaced (cumulative)", |s| s.unplaced as f64),
];

/// A chart error naming the part being drawn.
pub fn err<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> anyhow::Error {
    move |e| anyhow!("chart {what}: {e}")
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (title, metric): Metric,
    results: &[SetupResult],
    x: XAxis,
    legend: bool,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let pts = || {
        results
            .iter()
            .flat_map(|r| r.samples.iter().map(|s| (x.value(s), metric(s))))
    };
    let x1 = pts().map(|p| p.0).fold(0.0f64, f64::max).max(1e-9);
    let y1 = pts().map(|p| p.1).fold(0.0f64, f64::max).max(1.0) * 1.05;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 14))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(52)
        .build_cartesian_2d(0.0..x1, 0.0..y1)
        .map_err(err("axes"))?;
    chart
        .configure_mesh()
        .x_desc(x.desc())
        .x_labels(6)
        .y_labels(6)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| {
            if y1 < 10.0 {
                format!("{v:.1}")
            } else {
                format!("{v:.0}")
            }
        })
        .draw()
        .map_err(err("mesh"))?;
    for (i, r) in results.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let series = chart
            .draw_series(LineSeries::new(
                r.samples.iter().map(|s| (x.value(s), metric(s))),
                ShapeStyle::from(color).stroke_width(2),
            ))
            .map_err(err("series"))?;
        if legend {
            series
                .label(r.setup.name.clone())
                .legend(legend_mark(color));
        }
    }
    if legend {
        draw_legend(&mut chart)?;
    }
    Ok(())
}

/// A line series' mark in the legend.
fn legend_mark(color: RGBColor) -> impl Fn(BackendCoord) -> PathElement<BackendCoord> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
}

/// The legend of a line chart: upper left, on a light box.
fn draw_legend<'a, DB: DrawingBackend + 'a>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err("legend"))
}

/// Fills `root` white and writes the chart's title; the area below it.
pub fn titled<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
) -> anyhow::Result<DrawingArea<DB, Shift>>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err("background"))?;
    root.titled(title, ("sans-serif", 20)).map_err(err("title"))
}

/// Draws the six panels (two rows of three) on `root`.
pub fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    results: &[SetupResult],
    x: XAxis,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let root = titled(root, title)?;
    for (i, (area, metric)) in root
        .split_evenly((2, 3))
        .iter()
        .zip(PANELS.iter())
        .enumerate()
    {
        panel(area, *metric, results, x, i == 0)?;
    }
    Ok(())
}

/// One line of a chart by arrived demand: a name and a value per whole percent.
pub type Line<'a> = (&'a str, &'a crate::bins::Bins);

/// A panel of lines by arrived demand (the paper's experiment).
fn demand_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    y_desc: &str,
    lines: &[Line<'_>],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let pts = |b: &crate::bins::Bins| {
        b.iter()
            .enumerate()
            .filter_map(|(k, v)| v.map(|v| (k as f64, v)))
            .collect::<Vec<_>>()
    };
    let y1 = lines
        .iter()
        .flat_map(|(_, b)| pts(b))
        .map(|p| p.1)
        .fold(1.0f64, f64::max)
        * 1.05;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(52)
        .build_cartesian_2d(0.0..crate::bins::MAX_BIN as f64, 0.0..y1)
        .map_err(err("axes"))?;
    chart
        .configure_mesh()
        .x_desc("arrived GPU demand, % of cluster GPUs")
        .y_desc(y_desc)
        .x_labels(14)
        .y_labels(10)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(err("mesh"))?;
    for (i, (name, b)) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                pts(b),
                ShapeStyle::from(color).stroke_width(2),
            ))
            .map_err(err("series"))?
            .label((*name).to_owned())
            .legend(legend_mark(color));
    }
    draw_legend(&mut chart)?;
    Ok(())
}

/// The paper's two charts side by side: allocation and fragmentation against arrived demand,
/// one line per set-up (median over seeds).
pub fn draw_demand<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    allocation: &[Line<'_>],
    fragmentation: &[Line<'_>],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err("background"))?;
    let root = root
        .titled(title, ("sans-serif", 20))
        .map_err(err("title"))?;
    let areas = root.split_evenly((1, 2));
    if let [a, f] = areas.as_slice() {
        demand_panel(
            a,
            "GPU allocation",
            "% of the cluster's GPU compute",
            allocation,
        )?;
        demand_panel(
            f,
            "fragmentation (the artifact's measure)",
            "% of the cluster's GPU compute",
            fragmentation,
        )?;
    }
    Ok(())
}

/// Size of the paper's charts in pixels.
pub const DEMAND_SIZE: (u32, u32) = (1500, 620);

/// Writes the paper's charts as SVG and, with `png`, PNG (`stem.svg`, `stem.png`).
pub fn write_demand(
    dir: &Path,
    stem: &str,
    title: &str,
    allocation: &[Line<'_>],
    fragmentation: &[Line<'_>],
    png: bool,
) -> anyhow::Result<Vec<String>> {
    let svg = dir.join(format!("{stem}.svg"));
    {
        let root = SVGBackend::new(&svg, DEMAND_SIZE).into_drawing_area();
        draw_demand(&root, title, allocation, fragmentation)?;
        root.present()
            .map_err(|e| anyhow!("writing {}: {e}", svg.display()))?;
    }
    let mut out = vec![format!("{stem}.svg")];
    if png {
        let mut px = Pixels::new(DEMAND_SIZE);
        {
            let root = (&mut px).into_drawing_area();
            draw_demand(&root, title, allocation, fragmentation)?;
        }
        px.write_png(&dir.join(format!("{stem}.png")))?;
        out.push(format!("{stem}.png"));
    }
    Ok(out)
}

/// Chart size in pixels.
pub const SIZE: (u32, u32) = (1500, 860);

/// Writes the chart as SVG.
pub fn write_svg(
    path: &Path,
    title: &str,
    results: &[SetupResult],
    x: XAxis,
) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    draw(&root, title, results, x)?;
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))
}

/// Writes the chart as PNG.
pub fn write_png(
    path: &Path,
    title: &str,
    results: &[SetupResult],
    x: XAxis,
) -> anyhow::Result<()> {
    let mut px = Pixels::new(SIZE);
    {
        let root = (&mut px).into_drawing_area();
        draw(&root, title, results, x)?;
    }
    px.write_png(path)
}

/// An RGB pixel buffer implementing plotters' backend, with an 8x8 bitmap font.
#[derive(Debug)]
pub struct Pixels {
    size: (u32, u32),
    rgb: Vec<u8>,
}

/// The pixel backend never fails.
#[derive(Debug)]
pub struct NoError;

impl std::fmt::Display for NoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no error")
    }
}

impl std::error::Error for NoError {}

impl Pixels {
    /// A white image.
    pub fn new(size: (u32, u32)) -> Pixels {
        Pixels {
            size,
            rgb: vec![255; size.0 as usize * size.1 as usize * 3],
        }
    }

    fn scale(size: f64) -> i32 {
        if size >= 15.0 { 2 } else { 1 }
    }

    /// Encodes the image as PNG.
    pub fn write_png(&self, path: &Path) -> anyhow::Result<()> {
        let f = std::fs::File::create(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        let mut enc = png::Encoder::new(std::io::BufWriter::new(f), self.size.0, self.size.1);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Best);
        let mut w = enc
            .write_header()
            .map_err(|e| anyhow!("{}: {e}", path.display()))?;
        w.write_image_data(&self.rgb)
            .map_err(|e| anyhow!("{}: {e}", path.display()))?;
        w.finish()
            .map_err(|e| anyhow!("{}: {e} ({:?})", path.display(), e.source()))?;
        Ok(())
    }
}

impl DrawingBackend for &mut Pixels {
    type ErrorType = NoError;

    fn get_size(&self) -> (u32, u32) {
        self.size
    }

    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<NoError>> {
        Ok(())
    }

    fn present(&mut self) -> Result<(), DrawingErrorKind<NoError>> {
        Ok(())
    }

    fn draw_pixel(
        &mut self,
        (x, y): BackendCoord,
        c: BackendColor,
    ) -> Result<(), DrawingErrorKind<NoError>> {
        if x < 0 || y < 0 || x as u32 >= self.size.0 || y as u32 >= self.size.1 {
            return Ok(());
        }
        let i = (y as usize * self.size.0 as usize + x as usize) * 3;
        let a = c.alpha.clamp(0.0, 1.0);
        for (k, v) in [c.rgb.0, c.rgb.1, c.rgb.2].into_iter().enumerate() {
            let old = f64::from(self.rgb[i + k]);
            self.rgb[i + k] = (old * (1.0 - a) + f64::from(v) * a).round() as u8;
        }
        Ok(())
    }

    fn estimate_text_size<T: BackendTextStyle>(
        &self,
        text: &str,
        style: &T,
    ) -> Result<(u32, u32), DrawingErrorKind<NoError>> {
        let s = Pixels::scale(style.size()) as u32;
        Ok((text.chars().count() as u32 * 8 * s, 8 * s))
    }

    fn draw_text<T: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &T,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<NoError>> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let s = Pixels::scale(style.size());
        let width = text.chars().count() as i32 * 8 * s;
        let height = 8 * s;
        let anchor = style.anchor();
        let dx = match anchor.h_pos {
            HPos::Left => 0,
            HPos::Right => -width,
            HPos::Center => -width / 2,
        };
        let dy = match anchor.v_pos {
            VPos::Top => 0,
            VPos::Center => -height / 2,
            VPos::Bottom => -height,
        };
        let trans: FontTransform = style.transform();
        for (ci, ch) in text.chars().enumerate() {
            let code = if ch.is_ascii() {
                ch as usize
            } else {
                b'?' as usize
            };
            let glyph = font8x8::legacy::BASIC_LEGACY[code];
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..8 {
                    if bits & (1 << col) == 0 {
                        continue;
                    }
                    for sy in 0..s {
                        for sx in 0..s {
                            let lx = ci as i32 * 8 * s + col * s + sx + dx;
                            let ly = row as i32 * s + sy + dy;
                            let (tx, ty) = trans.transform(lx, ly);
                            self.draw_pixel((pos.0 + tx, pos.1 + ty), color)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
