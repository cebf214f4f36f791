//! The sweep chart (SVG, plotters): latency and throughput against cluster size, log-log.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

/// One line of a panel.
#[derive(Clone, Debug)]
pub struct Line {
    /// Legend.
    pub label: String,
    /// (nodes, value) points.
    pub points: Vec<(f64, f64)>,
    /// Colour index.
    pub color: usize,
    /// Dashed-looking (drawn with markers only between points) for p99.
    pub dashed: bool,
}

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

fn bounds(lines: &[Line]) -> (f64, f64, f64, f64) {
    let pts = lines.iter().flat_map(|l| l.points.iter().copied());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in pts.filter(|(x, y)| *x > 0.0 && *y > 0.0) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        return (1.0, 10.0, 1.0, 10.0);
    }
    (x0 / 1.5, x1 * 1.5, y0 / 2.0, y1 * 2.0)
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_desc: &str,
    lines: &[Line],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let (x0, x1, y0, y1) = bounds(lines);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
        .map_err(|e| anyhow!("chart: {e}"))?;
    chart
        .configure_mesh()
        .x_desc("nodes in the request (8 cards each)")
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| {
            if *y >= 100.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.1}")
            }
        })
        .draw()
        .map_err(|e| anyhow!("chart mesh: {e}"))?;
    for line in lines {
        let color = COLORS[line.color % COLORS.len()];
        let style = if line.dashed {
            ShapeStyle::from(color.mix(0.6)).stroke_width(1)
        } else {
            ShapeStyle::from(color).stroke_width(2)
        };
        let legend_style = style;
        chart
            .draw_series(LineSeries::new(line.points.iter().copied(), style))
            .map_err(|e| anyhow!("chart series: {e}"))?
            .label(line.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], legend_style));
        chart
            .draw_series(line.points.iter().map(|&(x, y)| {
                if line.dashed {
                    Cross::new((x, y), 4, ShapeStyle::from(color).stroke_width(1)).into_dyn()
                } else {
                    Circle::new((x, y), 3, ShapeStyle::from(color).filled()).into_dyn()
                }
            }))
            .map_err(|e| anyhow!("chart points: {e}"))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("chart legend: {e}"))?;
    Ok(())
}

/// Writes a two-panel SVG: latency (left) and throughput (right).
pub fn write_svg(
    path: &Path,
    title: &str,
    latency: &[Line],
    throughput: &[Line],
) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (1280, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("chart: {e}"))?;
    let root = root
        .titled(title, ("sans-serif", 20))
        .map_err(|e| anyhow!("chart title: {e}"))?;
    let (left, right) = root.split_horizontally(640);
    panel(&left, "latency per decision", "µs (log)", latency)?;
    panel(&right, "throughput", "decisions/s (log)", throughput)?;
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn writes_an_svg() {
        let dir = std::env::temp_dir().join(format!("gpusched-lt-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.svg");
        let l = |label: &str, c, k: f64| Line {
            label: label.into(),
            points: vec![(10.0, k), (100.0, k * 8.0), (1000.0, k * 90.0)],
            color: c,
            dashed: false,
        };
        write_svg(
            &path,
            "t",
            &[l("a", 0, 1.0), l("b", 1, 3.0)],
            &[l("c", 2, 1e5)],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("</svg>"));
        assert!(svg.contains("throughput"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
